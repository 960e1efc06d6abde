"""kopflet.images.imageref: upstream applyDefaultImageTag over distribution/reference v0.6.0 and go-digest v1.0.0.

Each case gives an image as a pod would name it and what the upstream kubelet makes of it: the image the runtime
gets (``:latest`` added when there is neither tag nor digest), or the innermost parse error of the
``InvalidImageName`` message. The expectations were checked against the Go packages themselves.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kopflet import gotext
from kopflet.api.spec import Pod, pod_from_body
from kopflet.backoff import Backoff
from kopflet.images import imageref
from kopflet.images.imageref import InvalidImageNameError, Reference, apply_default_tag
from kopflet.images.manager import ImageError, ImageManager

HEX64 = "0123456789abcdef" * 4
DIGEST = f"sha256:{HEX64}"

VALID: list[tuple[str, str]] = [
    ("busybox", "busybox:latest"),  # not qualified as docker.io/library/busybox: the runtime sees the pod's name
    ("busybox:1.36", "busybox:1.36"),
    ("busybox:latest", "busybox:latest"),
    ("docker.io/library/busybox:1.36", "docker.io/library/busybox:1.36"),
    ("library/busybox", "library/busybox:latest"),
    ("index.docker.io/library/busybox", "index.docker.io/library/busybox:latest"),
    ("localhost:5000/a/b:tag", "localhost:5000/a/b:tag"),
    ("localhost/app", "localhost/app:latest"),
    ("127.0.0.1:5000/x", "127.0.0.1:5000/x:latest"),
    ("[::1]:5000/foo/bar:v1", "[::1]:5000/foo/bar:v1"),
    ("registry.k8s.io/pause:3.10.1", "registry.k8s.io/pause:3.10.1"),
    ("registry.k8s.io/e2e-test-images/agnhost:2.66.1", "registry.k8s.io/e2e-test-images/agnhost:2.66.1"),
    (f"quay.io/org/app@{DIGEST}", f"quay.io/org/app@{DIGEST}"),  # a digest: no default tag
    (f"busybox:1.36@{DIGEST}", f"busybox:1.36@{DIGEST}"),
    ("busybox@sha384:" + "a" * 96, "busybox@sha384:" + "a" * 96),
    ("busybox@sha512:" + "b" * 128, "busybox@sha512:" + "b" * 128),
    ("a_b__c-d--e.f/g", "a_b__c-d--e.f/g:latest"),  # every separator: _, __, runs of -, .
    ("foo/latest", "foo/latest:latest"),  # "latest" as a path component is not a tag
    ("foo/bar:Tag", "foo/bar:Tag"),  # tags may have upper case
    ("foo:" + "t" * 128, "foo:" + "t" * 128),  # the longest tag
    ("a/" + "b" * 253, "a/" + "b" * 253 + ":latest"),  # a 255-character path
    ("a" * 247, "a" * 247 + ":latest"),  # library/ + 247 = 255: the Docker Hub prefix counts
    # Upper case is fine in a domain: the first component is then taken as the registry (upstream
    # splitDockerDomain), so "UPPER/case" parses and fails later, at the pull.
    ("UPPER/case", "UPPER/case:latest"),
    ("My.Registry/app", "My.Registry/app:latest"),
]


@pytest.mark.parametrize(("image", "expected"), VALID, ids=[c[0][:40] for c in VALID])
def test_valid_references_get_the_default_tag_only_when_untagged(image: str, expected: str) -> None:
    assert apply_default_tag(image) == expected


INVALID: list[tuple[str, str]] = [
    ("Bad:Image:Name", "invalid reference format: repository name (library/Bad) must be lowercase"),
    ("foo/Bar:tag", "invalid reference format: repository name (foo/Bar) must be lowercase"),
    ("localhost:5000/Foo", "invalid reference format: repository name (Foo) must be lowercase"),
    ("docker.io/Library/x", "invalid reference format: repository name (Library/x) must be lowercase"),
    ("docker.io__X.io/app", "repository name must be lowercase"),  # only its lower-case form parses
    ("a:\u212a", "repository name must be lowercase"),  # the Kelvin sign lower-cases to an ASCII k
    ("", "invalid reference format"),
    ("busybox:", "invalid reference format"),  # trailing colon
    (":tag", "invalid reference format"),
    ("a//b", "invalid reference format"),  # double slash
    ("/busybox", "invalid reference format"),
    ("busybox/", "invalid reference format"),
    ("a__-b", "invalid reference format"),  # one separator at a time
    ("registry:abc/x", "invalid reference format"),  # a port is digits
    ("busybox\n", "invalid reference format"),  # Go's $ is the end of the text, not before a newline
    (" busybox", "invalid reference format"),
    ('bus"box', "invalid reference format"),
    ("café", "invalid reference format"),
    ("foo:" + "t" * 129, "invalid reference format"),  # tags have at most 128 characters
    ("foo:-x", "invalid reference format"),
    ("a@sha256:short", "invalid reference format"),  # fewer than 32 hex digits fails the grammar
    ("a@sha256:" + "0" * 32, "invalid checksum digest length"),
    ("a@sha256:" + "0" * 63, "invalid checksum digest length"),
    ("a@sha256:" + "A" * 64, "invalid checksum digest format"),  # upper-case hex
    ("a@md5:" + "0" * 32, "unsupported digest algorithm"),
    ("a@sha256+b64:" + "0" * 32, "unsupported digest algorithm"),
    (HEX64, f"invalid repository name ({HEX64}), cannot specify 64-byte hexadecimal strings"),
    ("a" * 248, "repository name must not be more than 255 characters"),  # library/ + 248
    ("a/" + "b" * 254, "repository name must not be more than 255 characters"),
]


@pytest.mark.parametrize(("image", "cause"), INVALID, ids=[repr(c[0][:40]) for c in INVALID])
def test_invalid_references_carry_upstreams_message(image: str, cause: str) -> None:
    with pytest.raises(InvalidImageNameError) as caught:
        apply_default_tag(image)
    quoted = gotext.go_quote(image)
    assert caught.value.cause == cause
    assert caught.value.message == str(caught.value) == \
        f"Failed to apply default image tag {quoted}: couldn't parse image name {quoted}: {cause}"
    assert isinstance(caught.value, ValueError)


def test_the_message_quotes_the_image_as_go_does() -> None:
    with pytest.raises(InvalidImageNameError) as caught:
        apply_default_tag('tab\tand "quote"')
    assert caught.value.message == ('Failed to apply default image tag "tab\\tand \\"quote\\"": '
                                    'couldn\'t parse image name "tab\\tand \\"quote\\"": invalid reference format')


@pytest.mark.parametrize(("image", "expected"), [
    ("busybox", Reference("docker.io", "library/busybox")),
    ("index.docker.io/foo/bar:1", Reference("docker.io", "foo/bar", tag="1")),
    ("localhost/app", Reference("localhost", "app")),
    ("localhost:5000/a/b:tag", Reference("localhost:5000", "a/b", tag="tag")),
    ("user/app", Reference("docker.io", "user/app")),
    (f"registry.k8s.io/pause:3.10.1@{DIGEST}", Reference("registry.k8s.io", "pause", tag="3.10.1", digest=DIGEST)),
])
def test_normalized_names(image: str, expected: Reference) -> None:
    ref = imageref.parse_normalized_named(image)
    assert ref == expected
    assert str(ref) == f"{ref.name}{':' + ref.tag if ref.tag else ''}{'@' + ref.digest if ref.digest else ''}"


def test_digest_validation_in_isolation() -> None:
    assert imageref.validate_digest(DIGEST) is None
    assert imageref.validate_digest("sha256") == imageref.ERR_DIGEST_INVALID_FORMAT  # no colon
    assert imageref.validate_digest(":abc") == imageref.ERR_DIGEST_INVALID_FORMAT
    assert imageref.validate_digest("sha256:") == imageref.ERR_DIGEST_INVALID_FORMAT
    assert imageref.validate_digest("Foo:abc") == imageref.ERR_DIGEST_INVALID_FORMAT  # not go-digest's grammar
    assert imageref.validate_digest("foo:abc") == imageref.ERR_DIGEST_UNSUPPORTED


# ------------------------------------------------------------------- wiring: kopflet.images.manager.ImageManager


class _Images:
    """A CRI image service that records what it was asked and has every image already."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def status(self, image: str) -> Any:
        self.asked.append(image)
        return SimpleNamespace(id="sha256:present", size=1)

    async def pull(self, image: str, **_: Any) -> str:
        self.asked.append(f"pull {image}")
        return "sha256:pulled"


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str | None]] = []

    def pod_event(self, pod: Any, type_: str, reason: str, message: str, container: str | None = None,
                  init: bool = False) -> None:
        self.events.append((type_, reason, message, container))


def _manager() -> tuple[ImageManager, _Images, _Recorder]:
    images, recorder = _Images(), _Recorder()
    manager = ImageManager(SimpleNamespace(images=images), recorder, Backoff())  # type: ignore[arg-type]
    return manager, images, recorder


SANDBOX: Any = SimpleNamespace()  # only handed on to a pull


def _pod(image: str) -> Pod:
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                          "spec": {"containers": [{"name": "app", "image": image}]}})


async def test_an_invalid_image_never_reaches_the_runtime() -> None:
    manager, images, recorder = _manager()
    pod = _pod("Bad:Image:Name")
    with pytest.raises(ImageError) as caught:
        await manager.ensure(pod, pod.spec.containers[0], SANDBOX)
    message = ('Failed to apply default image tag "Bad:Image:Name": couldn\'t parse image name "Bad:Image:Name": '
               "invalid reference format: repository name (library/Bad) must be lowercase")
    assert (caught.value.reason, caught.value.message) == ("InvalidImageName", message)
    assert recorder.events == [("Warning", "InspectFailed", message, "app")]
    assert images.asked == []


async def test_the_runtime_gets_the_default_tag_and_events_name_the_pods_image() -> None:
    manager, images, recorder = _manager()
    pod = _pod("busybox")  # untagged: the pull policy defaults to Always
    assert await manager.ensure(pod, pod.spec.containers[0], SANDBOX) == "sha256:present"
    assert images.asked == ["busybox:latest", "pull busybox:latest", "sha256:pulled"]
    assert [e[:3] for e in recorder.events[:1]] == [("Normal", "Pulling", 'Pulling image "busybox"')]
    assert recorder.events[1][2].startswith('Successfully pulled image "busybox" in ')


async def test_the_image_a_start_ensured_is_not_asked_for_again() -> None:
    # The runAsNonRoot check reads the image's user: the status ensure read names the same content by its ID.
    manager, images, _ = _manager()
    pod = _pod("busybox:1.36")
    ref = await manager.ensure(pod, pod.spec.containers[0], SANDBOX)
    assert ref == "sha256:present" and images.asked == ["busybox:1.36"]
    image = await manager.image_status(ref)
    assert image is not None and image.id == ref and images.asked == ["busybox:1.36"]
    await manager.image_status("sha256:other")  # not one ensure returned: the runtime is asked
    await manager.image_status("busybox:1.36")  # a name, not an ID: it may name other content tomorrow
    assert images.asked == ["busybox:1.36", "sha256:other", "busybox:1.36"]
