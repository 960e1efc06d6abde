"""kopflet.images.credentials: the pull-secret keyring (upstream credentialprovider: BasicDockerKeyring,
MakeDockerKeyring).

Cases give the secrets' docker configs and state, per image, which credentials come back and in what order.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from cri_client import types as cri
from kopflet.images import credentials
from kopflet.images.credentials import Keyring, PullSecret, make_keyring

JSON_TYPE, CFG_TYPE = credentials.SECRET_TYPE_DOCKER_CONFIG_JSON, credentials.SECRET_TYPE_DOCKERCFG


def b64(text: str, *, pad: bool = True) -> str:
    encoded = base64.b64encode(text.encode()).decode()
    return encoded if pad else encoded.rstrip("=")


def json_secret(auths: dict[str, Any], name: str = "regcred") -> PullSecret:
    return PullSecret(name=name, type=JSON_TYPE, data={".dockerconfigjson": json.dumps({"auths": auths}).encode()})


def cfg_secret(auths: dict[str, Any], name: str = "legacy") -> PullSecret:
    return PullSecret(name=name, type=CFG_TYPE, data={".dockercfg": json.dumps(auths).encode()})


def user(name: str) -> dict[str, str]:
    return {"username": name, "password": f"{name}-pw"}


def users(keyring: Keyring, image: str) -> list[str]:
    return [auth.username for auth in keyring.lookup(image)]


# --------------------------------------------------------------------------------------------- parsing


def test_dockerconfigjson_entry_becomes_cri_auth() -> None:
    keyring, warnings = make_keyring([json_secret({"quay.io": {"username": "u", "password": "p", "email": "e@x",
                                                               "identitytoken": "id", "registrytoken": "rt"}})])
    assert warnings == []
    # as upstream: only username and password; tokens, email and server address are not taken
    assert keyring.lookup("quay.io/org/app:1") == [cri.AuthConfig(username="u", password="p")]


def test_dockercfg_is_the_map_without_auths() -> None:
    keyring, warnings = make_keyring([cfg_secret({"https://quay.io": user("legacy")})])
    assert (users(keyring, "quay.io/app"), warnings) == (["legacy"], [])


AUTH_CASES: list[tuple[str, dict[str, Any], tuple[str, str]]] = [
    ("plain fields", {"username": "u", "password": "p"}, ("u", "p")),
    ("auth, padded", {"auth": b64("alice:s3cret")}, ("alice", "s3cret")),
    ("auth, unpadded", {"auth": b64("alice:s3cret", pad=False)}, ("alice", "s3cret")),
    ("auth wins over the fields", {"username": "u", "password": "p", "auth": b64("a:b")}, ("a", "b")),
    ("auth password keeps its colons", {"auth": b64("a:b:c")}, ("a", "b:c")),
    ("empty auth is ignored", {"username": "u", "password": "p", "auth": ""}, ("u", "p")),
    ("auth with a line break", {"auth": b64("a:b") + "\n"}, ("a", "b")),
    ("empty user and password", {"auth": b64(":")}, ("", "")),
    ("field names match case-insensitively, as Go's json", {"Username": "U", "PASSWORD": "P"}, ("U", "P")),
    ("null fields are unset", {"username": None, "password": "p"}, ("", "p")),
    ("unknown fields are ignored", {"username": "u", "password": "p", "serveraddress": "x"}, ("u", "p")),
]


@pytest.mark.parametrize(("entry", "expected"), [c[1:] for c in AUTH_CASES], ids=[c[0] for c in AUTH_CASES])
def test_entry_credentials(entry: dict[str, Any], expected: tuple[str, str]) -> None:
    keyring, warnings = make_keyring([json_secret({"quay.io": entry})])
    assert warnings == []
    assert [(a.username, a.password) for a in keyring.lookup("quay.io/app")] == [expected]


MALFORMED: list[tuple[str, str, bytes, str]] = [
    ("not JSON", JSON_TYPE, b"{auths", "not JSON"),
    ("not UTF-8", JSON_TYPE, b'{"auths": {"q.io": {"username": "\xff"}}}', "not JSON"),
    ("NaN is not JSON", JSON_TYPE, b'{"auths": {}, "x": NaN}', "invalid character 'N'"),
    ("top level is an array", JSON_TYPE, b"[]", "expected an object, got an array"),
    ("auths is a string", JSON_TYPE, b'{"auths": "x"}', "auths: expected an object, got a string"),
    ("entry is a list", JSON_TYPE, b'{"auths": {"q.io": [1]}}', "entry 'q.io': expected an object, got an array"),
    ("username is a number", JSON_TYPE, b'{"auths": {"q.io": {"username": 1}}}',
     "entry 'q.io': username must be a string, got a number"),
    ("auth is not base64", JSON_TYPE, b'{"auths": {"q.io": {"auth": "!!!"}}}',
     "entry 'q.io': illegal base64 data in auth field"),
    ("auth has padding in the middle", JSON_TYPE, b'{"auths": {"q.io": {"auth": "YQ=b"}}}',
     "entry 'q.io': illegal base64 data in auth field"),
    ("auth without a colon", JSON_TYPE, json.dumps({"auths": {"q.io": {"auth": b64("nocolon")}}}).encode(),
     "entry 'q.io': unable to parse auth field, must be formatted as base64(username:password)"),
    ("HttpHeaders not strings", JSON_TYPE, b'{"auths": {}, "HttpHeaders": {"a": 1}}',
     "HttpHeaders must map strings to strings"),
    ("dockercfg is a string", CFG_TYPE, b'"x"', "expected an object, got a string"),
]


@pytest.mark.parametrize(("secret_type", "raw", "reason"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_secret_is_skipped_with_a_warning(secret_type: str, raw: bytes, reason: str) -> None:
    key = ".dockerconfigjson" if secret_type == JSON_TYPE else ".dockercfg"
    bad = PullSecret(name="bad", type=secret_type, data={key: raw})
    keyring, warnings = make_keyring([bad, json_secret({"q.io": user("good")})])
    assert users(keyring, "q.io/app") == ["good"]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"secret 'bad' has an invalid {key} (")
    assert reason in warnings[0]


@pytest.mark.parametrize(("secret", "warning"), [
    (PullSecret(name="s", type="Opaque", data={".dockerconfigjson": b"{}"}),
     "secret 's' has type 'Opaque', not 'kubernetes.io/dockerconfigjson' or 'kubernetes.io/dockercfg': "
     "ignored for image pulls"),
    (PullSecret(name="s", type=JSON_TYPE, data={".dockercfg": b"{}"}),
     "secret 's' of type 'kubernetes.io/dockerconfigjson' has no .dockerconfigjson data: ignored for image pulls"),
    (PullSecret(name="s", type=CFG_TYPE, data={".dockercfg": b""}),
     "secret 's' of type 'kubernetes.io/dockercfg' has no .dockercfg data: ignored for image pulls"),
], ids=["other type", "wrong key", "empty data"])
def test_unusable_secret_is_skipped_with_a_warning(secret: PullSecret, warning: str) -> None:
    keyring, warnings = make_keyring([secret])
    assert (keyring, warnings) == (Keyring(), [warning])


def test_null_documents_and_entries_are_empty_not_errors() -> None:
    secrets = [PullSecret(name="a", type=JSON_TYPE, data={".dockerconfigjson": b"null"}),
               PullSecret(name="b", type=JSON_TYPE, data={".dockerconfigjson": b'{"auths": null}'}),
               PullSecret(name="c", type=CFG_TYPE, data={".dockercfg": b'{"q.io": null}'})]
    keyring, warnings = make_keyring(secrets)
    assert warnings == []
    assert keyring.lookup("q.io/app") == [cri.AuthConfig()]  # Go decodes a null entry as an empty one


def test_invalid_registry_entry_is_skipped_alone() -> None:
    keyring, warnings = make_keyring([json_secret({"host:abc": user("bad"), "q.io": user("good")})])
    assert users(keyring, "q.io/app") == ["good"]
    assert warnings == ["secret 'regcred': entry 'host:abc' in .dockerconfigjson invalid "
                        "(invalid port ':abc' after host), ignoring"]


def test_pull_secret_repr_hides_the_data() -> None:
    assert "s3cret" not in repr(json_secret({"q.io": {"auth": b64("a:s3cret")}}))
    assert "s3cret" not in repr(make_keyring([json_secret({"q.io": {"password": "s3cret"}})])[0])


# -------------------------------------------------------------------------------------------- matching

# (description, registries in the secret, in order, image, usernames returned)
LOOKUP_CASES: list[tuple[str, list[str], str, list[str]]] = [
    ("exact host", ["quay.io"], "quay.io/org/app:1", ["quay.io"]),
    ("scheme stripped", ["https://quay.io"], "quay.io/org/app", ["https://quay.io"]),
    ("http scheme too", ["http://quay.io"], "quay.io/org/app", ["http://quay.io"]),
    ("other host", ["quay.io"], "gcr.io/org/app", []),
    ("subdomain is another host", ["quay.io"], "eu.quay.io/app", []),
    ("/v1/ and /v2/ suffixes mean the host", ["quay.io/v1/", "gcr.io/v2/"], "quay.io/app", ["quay.io/v1/"]),
    ("path prefix", ["quay.io/org"], "quay.io/org/app", ["quay.io/org"]),
    ("path prefix is a string prefix", ["quay.io/org"], "quay.io/organisation/app", ["quay.io/org"]),
    ("path mismatch", ["quay.io/org"], "quay.io/other/app", []),
    ("most specific path first", ["quay.io", "quay.io/org", "quay.io/org/app"], "quay.io/org/app",
     ["quay.io/org/app", "quay.io/org", "quay.io"]),
    ("reverse-sorted keys, not specificity by length", ["quay.io/b", "quay.io/a"], "quay.io/ab",
     ["quay.io/a"]),
    ("port must match", ["registry.local:5000"], "registry.local:5000/app", ["registry.local:5000"]),
    ("no port in the key, a port in the image", ["registry.local"], "registry.local:5000/app", []),
    ("a port in the key, none in the image", ["registry.local:5000"], "registry.local/app", []),
    ("glob label", ["*.example.com"], "eu.example.com/app", ["*.example.com"]),
    ("glob needs the same number of labels", ["*.example.com"], "a.b.example.com/app", []),
    ("glob does not match the bare domain", ["*.example.com"], "example.com/app", []),
    ("glob with a port", ["*.local:5000"], "x.local:5000/app", ["*.local:5000"]),
    ("star matches a whole label", ["*.*"], "eu.example/app", ["*.*"]),
    ("star within a label", ["registry-*.example.com"], "registry-eu.example.com/app", ["registry-*.example.com"]),
    ("'?' starts the URL's query: the key is only 'q'", ["q?ay.io"], "quay.io/app", []),
    ("glob and exact both match, sorted", ["*.gcr.io", "us.gcr.io"], "us.gcr.io/p/app", ["us.gcr.io", "*.gcr.io"]),
    ("IPv4 with port", ["127.0.0.1:5000"], "127.0.0.1:5000/x/y", ["127.0.0.1:5000"]),
    ("localhost with port", ["localhost:5000"], "localhost:5000/app", ["localhost:5000"]),
    # Docker Hub
    ("docker.io key, short image", ["docker.io"], "busybox:1.36", ["docker.io"]),
    ("docker.io key, user image", ["docker.io"], "someone/app", ["docker.io"]),
    ("index.docker.io key by fallback", ["index.docker.io"], "busybox", ["index.docker.io"]),
    ("legacy v1 URL by fallback", ["https://index.docker.io/v1/"], "docker.io/library/busybox",
     ["https://index.docker.io/v1/"]),
    ("image named on index.docker.io", ["https://index.docker.io/v1/"], "index.docker.io/library/busybox",
     ["https://index.docker.io/v1/"]),
    ("fallback only when nothing matched", ["docker.io/someone", "index.docker.io"], "someone/app",
     ["docker.io/someone"]),
    ("docker.io path key", ["docker.io/library"], "busybox", ["docker.io/library"]),
    ("registry-1.docker.io is not an alias upstream", ["registry-1.docker.io"], "busybox", []),
    ("registry-1.docker.io matches its own images", ["registry-1.docker.io"], "registry-1.docker.io/x/app",
     ["registry-1.docker.io"]),
    ("Docker Hub key does not serve other registries", ["index.docker.io", "docker.io"], "quay.io/app", []),
    ("digest and tag are dropped", ["quay.io/org/app"], "quay.io/org/app:1@sha256:" + "0" * 64,
     ["quay.io/org/app"]),
]


@pytest.mark.parametrize(("registries", "image", "expected"), [c[1:] for c in LOOKUP_CASES],
                         ids=[c[0] for c in LOOKUP_CASES])
def test_lookup(registries: list[str], image: str, expected: list[str]) -> None:
    keyring, warnings = make_keyring([cfg_secret({registry: user(registry) for registry in registries})])
    assert warnings == []
    assert users(keyring, image) == expected


def test_credentials_under_one_key_keep_the_secrets_order() -> None:
    secrets = [json_secret({"quay.io": user("first")}, name="a"), cfg_secret({"https://quay.io/v1/": user("second")}),
               json_secret({"quay.io/org": user("specific")}, name="c")]
    keyring, warnings = make_keyring(secrets)
    assert warnings == []
    assert users(keyring, "quay.io/org/app") == ["specific", "first", "second"]


def test_no_secrets_pull_anonymously() -> None:
    keyring, warnings = make_keyring([])
    assert (keyring.lookup("busybox"), warnings) == ([], [])


@pytest.mark.parametrize(("image", "expected"), [
    ("busybox", "docker.io/library/busybox"),
    ("busybox:1.36", "docker.io/library/busybox"),
    ("busybox@sha256:abc", "docker.io/library/busybox"),
    ("someone/app:v1", "docker.io/someone/app"),
    ("docker.io/busybox", "docker.io/library/busybox"),
    ("index.docker.io/someone/app", "docker.io/someone/app"),
    ("quay.io/org/app:1", "quay.io/org/app"),
    ("localhost/app", "localhost/app"),
    ("localhost:5000/app:1", "localhost:5000/app"),
    ("registry.k8s.io/pause:3.10.1", "registry.k8s.io/pause"),
    ("Upper/app", "Upper/app"),  # an uppercase first component is a host
])
def test_repository_to_pull(image: str, expected: str) -> None:
    assert credentials.repository_to_pull(image) == expected


@pytest.mark.parametrize(("image", "expected"), [
    ("docker.io/library/busybox", True),
    ("index.docker.io/x/y", True),
    ("busybox", True),
    ("someone/app", True),
    ("localhost/app", True),  # upstream's rule: no '.' or ':' in the first component
    ("quay.io/app", False),
    ("localhost:5000/app", False),
    ("/app", False),
])
def test_is_default_registry_match(image: str, expected: bool) -> None:
    assert credentials.is_default_registry_match(image) is expected


@pytest.mark.parametrize(("registry", "expected"), [
    ("quay.io", "quay.io"),
    ("https://quay.io/", "quay.io"),
    ("https://index.docker.io/v1/", "index.docker.io"),
    ("quay.io/v2/org", "quay.io/org"),
    ("quay.io/v1", "quay.io/v1"),  # only "/v1/" with its slash is dropped
    ("http://user:pw@quay.io:443/org?x=1#f", "quay.io:443/org"),
    ("quay.io/a%20b", "quay.io/a b"),
    ("[::1]:5000", "[::1]:5000"),
    ("q?ay.io/x", "q"),
    ("ftp://quay.io", "ftp://quay.io"),  # not a stripped scheme: host "ftp:", path "//quay.io"
])
def test_registry_key(registry: str, expected: str) -> None:
    assert credentials.registry_key(registry) == expected


@pytest.mark.parametrize("registry", [
    "host:abc", "ex ample.com", "quay.io/%zz", "[::1", "a\x00b",
    "g[a-c]r.io",  # Go 1.26's url.Parse: '[' only opens an IPv6 literal, so no glob classes in a key
    "[a-c]cr.io",
    "[1.2.3.4]:5000",  # brackets hold IPv6 only
    "a:b:5000",  # the first colon starts the port (urlstrictcolons)
    "\\*.io",  # '\' is not allowed in a host name, so no escaped glob either
])
def test_registry_key_rejects_what_url_parse_rejects(registry: str) -> None:
    with pytest.raises(ValueError):
        credentials.registry_key(registry)


@pytest.mark.parametrize(("pattern", "name", "expected"), [
    ("*", "anything", True),
    ("*", "", True),
    ("a*z", "abcz", True),
    ("a*z", "abcy", False),
    ("?", "a", True),
    ("?", "ab", False),
    ("[a-c]", "b", True),
    ("[^a-c]", "b", False),
    ("[\\]]x", "]x", True),
    ("\\*", "*", True),
    ("\\*", "a", False),
    ("[]", "a", False),
    ("[a-", "a", False),
    ("\\", "\\", False),
    ("*/", "a/", True),
    ("*", "a/b", False),
])
def test_glob_match_is_go_filepath_match(pattern: str, name: str, expected: bool) -> None:
    assert credentials.glob_match(pattern, name) is expected
