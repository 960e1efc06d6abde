"""Projected ``clusterTrustBundle`` sources: Go's PEM decoding and encoding, label selectors, upstream's
clustertrustbundle manager (by name, by signer and labels, merged anchors, optional, errors), the projected volume's
files, the API's paths and which pods a changed bundle concerns (the manager's cache and wakes:
test_trust_bundle_manager.py).

The PEM and selector tables were checked against Go (encoding/pem of go1.26, apimachinery v0.37.1's
LabelSelectorAsSelector) on the same inputs; the manager's cases follow upstream's clustertrustbundle_manager_test.go
and the e2e spec test/e2e/auth/projected_clustertrustbundle.go (v1.37.1).
"""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.paths import Layout
from kopflet.volumes import manager, plugins
from kopflet.volumes import trust_bundles as ctb
from kopflet.volumes.plugins import FileEntry, VolumeError
from kopflet.volumes.trust_bundles import Bundles, ClusterTrustBundle, PemBlock, TrustAnchorsError

SEED = b"fixed seed"


def pem(data: bytes, block_type: str = "CERTIFICATE") -> str:
    """A block as Go's pem.EncodeToMemory writes it."""
    text = base64.b64encode(data).decode()
    lines = "".join(text[i:i + 64] + "\n" for i in range(0, len(text), 64))
    return f"-----BEGIN {block_type}-----\n{lines}-----END {block_type}-----\n"


def blocks_of(data: bytes) -> list[bytes]:
    """The decoded blocks of a merged file, in order."""
    found = []
    while True:
        block, data = ctb.pem_decode(data)
        if block is None:
            return found
        assert block.type == "CERTIFICATE" and not block.headers
        found.append(block.data)


# ------------------------------------------------------------------------------------------------ PEM

A = b"first certificate"
B = b"second one, a bit longer than the first, to wrap past sixty-four characters of base64"
A64 = base64.b64encode(A).decode()
B64 = base64.b64encode(B).decode()
B64_LINES = B64[:64] + "\n" + B64[64:]


def block(kind: str, body: str, headers: str = "") -> str:
    return f"-----BEGIN {kind}-----\n{headers}{body}\n-----END {kind}-----\n"


CERT = "CERTIFICATE"
# (name, input, the blocks Go's pem.Decode loop returns: type, headers, bytes)
DECODE_CASES: list[tuple[str, str, list[tuple[str, dict[str, str], bytes]]]] = [
    ("empty", "", []),
    ("no PEM", "no pem here", []),
    ("one block", block(CERT, A64), [(CERT, {}, A)]),
    ("two blocks, wrapped lines", block(CERT, A64) + block(CERT, B64_LINES), [(CERT, {}, A), (CERT, {}, B)]),
    ("text around and between, any type", "junk before\n" + block(CERT, A64) + "junk between\n"
     + block("PRIVATE KEY", B64_LINES) + "junk after", [(CERT, {}, A), ("PRIVATE KEY", {}, B)]),
    ("BEGIN not at a line start", "junk before " + block(CERT, A64), []),
    ("CRLF line ends", block(CERT, A64).replace("\n", "\r\n"), [(CERT, {}, A)]),
    ("headers", block(CERT, A64, "Proc-Type: 4,ENCRYPTED\nDEK-Info: x\n\n"),
     [(CERT, {"Proc-Type": "4,ENCRYPTED", "DEK-Info": "x"}, A)]),
    ("a repeated BEGIN is skipped", f"-----BEGIN {CERT}-----\n" + block(CERT, A64), [(CERT, {}, A)]),
    ("bad base64 skipped, the next block taken", block(CERT, "not base64!!") + block(CERT, A64), [(CERT, {}, A)]),
    ("no final newline", block(CERT, A64)[:-1], [(CERT, {}, A)]),
    ("END of another type", f"-----BEGIN {CERT}-----\n{A64}\n-----END OTHER-----\n" + block("X", A64),
     [("X", {}, A)]),
    ("text after END", f"-----BEGIN {CERT}-----\n{A64}\n-----END {CERT}----- trailing\n", []),
    ("blanks after END", f"-----BEGIN {CERT}-----\n{A64}\n-----END {CERT}-----   \n", [(CERT, {}, A)]),
    ("empty block", f"-----BEGIN {CERT}-----\n-----END {CERT}-----\n", [(CERT, {}, b"")]),
    ("blanks in the body", f"-----BEGIN {CERT}-----\n \t{A64[:8]} {A64[8:]}\t\n-----END {CERT}-----\n",
     [(CERT, {}, A)]),
    ("padding missing", block(CERT, A64[:-2]), []),
    ("a stray '=' after a whole quantum", block(CERT, "QUJD="), []),
    ("a colon in the type", block("a:b", A64), [("a:b", {}, A)]),
    ("headers without a body line", "-----BEGIN X-----\nk: v\n-----END X-----\n", []),
    ("BEGIN line without its dashes", f"-----BEGIN {CERT}\n{A64}\n-----END {CERT}-----\n", []),
    ("empty block, no final newline", "-----BEGIN X-----\n-----END X-----", [("X", {}, b"")]),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in DECODE_CASES], ids=[c[0] for c in DECODE_CASES])
def test_pem_decode_as_go(text: str, expected: list[tuple[str, dict[str, str], bytes]]) -> None:
    rest, found = text.encode(), []
    while True:
        got, rest = ctb.pem_decode(rest)
        if got is None:
            break
        found.append((got.type, dict(got.headers), got.data))
    assert found == expected


def test_pem_decode_returns_the_rest_and_the_whole_input_when_none() -> None:
    text = (block(CERT, A64) + "tail").encode()
    assert ctb.pem_decode(text) == (PemBlock(CERT, (), A), b"tail")
    assert ctb.pem_decode(b"nothing") == (None, b"nothing")


@pytest.mark.parametrize("size", [0, 1, 2, 3, 47, 48, 49, 100])
def test_pem_encode_as_go(size: int) -> None:
    data = bytes((i * 7 + 3) % 256 for i in range(size))
    assert ctb.pem_encode(CERT, data) == pem(data).encode()
    assert ctb.pem_encode(CERT, data).decode().count("\n") == 2 + (len(base64.b64encode(data)) + 63) // 64


# -------------------------------------------------------------------------------------------- normalizing


def bundle(name: str, signer: str, trust: str, **labels: str) -> ClusterTrustBundle:
    return ClusterTrustBundle(name, signer, trust, tuple(sorted(labels.items())))


def test_anchors_are_deduplicated_reencoded_and_in_a_seeded_order() -> None:
    certs = [bytes([i]) * 40 for i in range(8)]
    one = bundle("one", "", pem(certs[0]) + "comment\n" + pem(certs[1]) + pem(certs[0]))
    two = bundle("two", "", pem(certs[1], "TRUSTED CERTIFICATE") + "".join(pem(c) for c in certs[2:]))
    merged = ctb.normalize_trust_anchors([one, two], SEED)
    assert sorted(blocks_of(merged)) == certs  # each once, every block written as CERTIFICATE
    assert merged == b"".join(pem(c).encode() for c in blocks_of(merged))  # Go's encoding, nothing between
    assert ctb.normalize_trust_anchors([two, one], SEED) == merged  # the bundles' order does not matter
    orders = {tuple(blocks_of(ctb.normalize_trust_anchors([one, two], bytes([s])))) for s in range(20)}
    assert len(orders) > 1  # another seed (another agent process), another order


def test_no_blocks_no_anchors() -> None:
    assert ctb.normalize_trust_anchors([bundle("x", "", "not PEM")], SEED) == b""
    assert ctb.normalize_trust_anchors([], SEED) == b""


# ----------------------------------------------------------------------------------------- label selectors

LABELS = {"signer.alive": "true", "tier": "web", "n": "3"}
# (label selector, its String(), whether it matches LABELS): as Go's LabelSelectorAsSelector gives them
SELECTOR_CASES: list[tuple[dict[str, Any] | None, str, bool]] = [
    (None, "", False),  # nil: nothing
    ({}, "", True),  # empty: everything
    ({"matchLabels": {}}, "", True),
    ({"matchLabels": {"signer.alive": "true"}}, "signer.alive=true", True),
    ({"matchLabels": {"signer.alive": "false"}}, "signer.alive=false", False),
    ({"matchLabels": {"tier": "web", "signer.alive": "true"}}, "signer.alive=true,tier=web", True),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]}, "tier in (api,web)", True),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web", "api"]}]}, "tier notin (api,web)",
     False),
    ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b", "a"]}]}, "zone notin (a,b)", True),
    ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, "zone", False),
    ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, "!zone", True),
    ({"matchExpressions": [{"key": "n", "operator": "Exists"}], "matchLabels": {"a": "b"}}, "a=b,n", False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}],
      "matchLabels": {"signer.alive": "true"}}, "signer.alive=true,tier in (web)", True),
]


@pytest.mark.parametrize(("selector", "text", "matches"), SELECTOR_CASES, ids=[c[1] or repr(c[0]) for c in
                                                                              SELECTOR_CASES])
def test_label_selector_as_go(selector: dict[str, Any] | None, text: str, matches: bool) -> None:
    parsed = ctb.label_selector_as_selector(selector)
    assert str(parsed) == text
    assert parsed.matches(LABELS) is matches


@pytest.mark.parametrize("operator", ["Gt", "in", ""])
def test_label_selector_unknown_operator(operator: str) -> None:
    with pytest.raises(TrustAnchorsError, match=f'^"{operator}" is not a valid label selector operator$'):
        ctb.label_selector_as_selector({"matchExpressions": [{"key": "n", "operator": operator, "values": ["2"]}]})


# ----------------------------------------------------------------------------------------------- manager

ROOTS = {i: bytes([i + 1]) * 50 for i in range(10)}


def _e2e_bundles() -> Bundles:
    """initCTBData of the e2e spec: signer one (1-3 alive, 6-7 dead, 0, 8, 9 unlabelled), 4 with no signer,
    5 of signer two."""
    items = []
    for i, root in ROOTS.items():
        if i in (1, 2, 3):
            items.append(bundle(f"test.test:signer-one:{i}", "test.test/signer-one", pem(root),
                                **{"signer.alive": "true"}))
        elif i == 4:
            items.append(bundle(f"test.test.signer-one.{i}", "", pem(root), **{"signer.alive": "true"}))
        elif i == 5:
            items.append(bundle(f"test.test:signer-two:{i}", "test.test/signer-two", pem(root),
                                **{"signer.alive": "true"}))
        elif i in (6, 7):
            items.append(bundle(f"test.test:signer-one:{i}", "test.test/signer-one", pem(root),
                                **{"signer.alive": "false"}))
        else:
            items.append(bundle(f"test.test:signer-one:{i}", "test.test/signer-one", pem(root)))
    items.append(bundle("test.test:signer-one:dup", "test.test/signer-one", pem(ROOTS[1]), **{"signer.alive": "true"}))
    return Bundles(tuple(items), order_seed=SEED)


BUNDLES = _e2e_bundles()
ONE = "test.test/signer-one"
NOT_FOUND = 'while getting ClusterTrustBundle: clustertrustbundle.certificates.k8s.io "does-not-exist" not found'
# (name, projection, the roots merged into the file, or the error)
ANCHOR_CASES: list[tuple[str, dict[str, Any], set[int] | str]] = [
    ("by name", {"name": "test.test.signer-one.4", "path": "a.pem"}, {4}),
    ("by name, missing, optional", {"name": "does-not-exist", "optional": True, "path": "a.pem"}, set()),
    ("by name, missing", {"name": "does-not-exist", "path": "a.pem"}, NOT_FOUND),
    ("by name, missing, optional false", {"name": "does-not-exist", "optional": False, "path": "a.pem"}, NOT_FOUND),
    ("by name, labelSelector ignored", {"name": "test.test:signer-one:6", "labelSelector": {}, "path": "a"}, {6}),
    ("signer and labels (a duplicate once)", {"signerName": ONE, "labelSelector": {
        "matchLabels": {"signer.alive": "true"}}, "path": "a"}, {1, 2, 3}),
    ("signer and dead labels", {"signerName": ONE, "labelSelector": {
        "matchLabels": {"signer.alive": "false"}}, "path": "a"}, {6, 7}),
    ("signer, empty selector: all of the signer", {"signerName": ONE, "labelSelector": {}, "path": "a"},
     {0, 1, 2, 3, 6, 7, 8, 9}),
    ("signer, nil selector: none, optional", {"signerName": ONE, "optional": True, "path": "a"}, set()),
    ("signer, nil selector: none", {"signerName": ONE, "path": "a"}, ctb.NO_MATCH),
    ("signer, selector matching nothing, optional", {"signerName": ONE, "labelSelector": {
        "matchLabels": {"thismatches": "nothing"}}, "optional": True, "path": "a"}, set()),
    ("signer, selector matching nothing", {"signerName": ONE, "labelSelector": {
        "matchLabels": {"signer.alive": "unknown"}}, "optional": False, "path": "a"}, ctb.NO_MATCH),
    ("signer two", {"signerName": "test.test/signer-two", "labelSelector": {}, "path": "a"}, {5}),
    ("no signer is not the empty signer's", {"signerName": "other", "labelSelector": {}, "path": "a"},
     ctb.NO_MATCH),
    ("neither name nor signer", {"path": "a"}, ctb.NAME_OR_SIGNER_REQUIRED),
    ("bad operator", {"signerName": ONE, "labelSelector": {"matchExpressions": [
        {"key": "k", "operator": "Gt", "values": ["1"]}]}, "path": "a"},
     'while parsing label selector: "Gt" is not a valid label selector operator'),
]


@pytest.mark.parametrize(("source", "expected"), [c[1:] for c in ANCHOR_CASES], ids=[c[0] for c in ANCHOR_CASES])
def test_trust_anchors(source: dict[str, Any], expected: set[int] | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(TrustAnchorsError) as info:
            ctb.trust_anchors(source, BUNDLES)
        assert str(info.value) == expected
    else:
        assert sorted(blocks_of(ctb.trust_anchors(source, BUNDLES))) == sorted(ROOTS[i] for i in expected)


@pytest.mark.parametrize("error", [ctb.NOT_SYNCED, ctb.NOT_SUPPORTED])
@pytest.mark.parametrize("source", [{"name": "x", "optional": True}, {"signerName": ONE, "optional": True}])
def test_no_bundles_fail_every_source_even_optional(source: dict[str, Any], error: str) -> None:
    with pytest.raises(TrustAnchorsError, match=f"^{error}$"):
        ctb.trust_anchors(source, Bundles(error=error))


def test_a_label_selector_too_long() -> None:
    """Upstream's test: 1626 labels of 63 characters."""
    labels = {f"key-{i}": "v" * 63 for i in range(100 * 1024 // 63 + 1)}
    with pytest.raises(TrustAnchorsError, match=r"^label selector length \(\d+\) is larger than 102400$"):
        ctb.anchors_by_signer(BUNDLES, ONE, {"matchLabels": labels}, False)


def test_bundles_from_a_list_answer() -> None:
    answer = {"kind": "ClusterTrustBundleList", "items": [
        {"metadata": {"name": "a", "labels": {"z": "1", "a": "2"}}, "spec": {"signerName": "s/x", "trustBundle": "T"}},
        {"metadata": {"name": "b"}, "spec": {"trustBundle": "U"}},
    ]}
    assert Bundles.from_list(answer, SEED) == Bundles((
        ClusterTrustBundle("a", "s/x", "T", (("a", "2"), ("z", "1"))), ClusterTrustBundle("b", "", "U")),
        order_seed=SEED)
    assert Bundles.from_list({}, SEED) == Bundles(order_seed=SEED)


# ------------------------------------------------------------------------------------------ the volume

ROOT = "/var/lib/kopflet"
LAYOUT = Layout(ROOT)


def make_pod(volumes: list[dict[str, Any]], *, pod_context: dict[str, Any] | None = None,
             container_context: dict[str, Any] | None = None, init_context: dict[str, Any] | None = None) -> Pod:
    containers = [{"name": "app", "image": "agnhost", **({"securityContext": container_context}
                                                        if container_context is not None else {})}]
    init = [{"name": "init", "image": "agnhost", "securityContext": init_context}] if init_context is not None else []
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                          "spec": {"volumes": volumes, "containers": containers, "initContainers": init,
                                   "securityContext": pod_context or {}}})


def projected(*sources: dict[str, Any], default_mode: int | None = None, name: str = "ctb-volume-0") -> dict[str, Any]:
    body: dict[str, Any] = {"sources": [{"clusterTrustBundle": s} for s in sources]}
    if default_mode is not None:
        body["defaultMode"] = default_mode
    return {"name": name, "projected": body}


def plan_files(pod: Pod, bundles: Bundles | None = BUNDLES) -> dict[str, tuple[FileEntry, ...] | None]:
    plans = plugins.plan_volumes(pod, layout=LAYOUT, config_maps={}, secrets={}, tokens={}, trust_bundles=bundles)
    return {name: plan.files for name, plan in plans.items()}


def test_a_trust_bundle_file_in_a_projected_volume() -> None:
    pod = make_pod([projected({"name": "test.test.signer-one.4", "path": "trust-anchors.pem"})])
    plans = plugins.plan_volumes(pod, layout=LAYOUT, config_maps={}, secrets={}, tokens={}, trust_bundles=BUNDLES)
    plan = plans["ctb-volume-0"]
    assert plan.kind == "projected" and plan.tmpfs and plan.read_only
    assert plan.files == (FileEntry("trust-anchors.pem", pem(ROOTS[4]).encode(), 0o644),)


def test_optional_and_missing_is_an_empty_file() -> None:
    pod = make_pod([projected({"name": "does-not-exist.at.all", "optional": True, "path": "trust-anchors.pem"})])
    assert plan_files(pod) == {"ctb-volume-0": (FileEntry("trust-anchors.pem", b"", 0o644),)}


# (name, pod security contexts: pod, container, init container; the file's mode and owner)
OWNERSHIP_CASES: list[tuple[str, dict[str, Any], int, int | None]] = [
    ("defaultMode", {"default_mode": 0o440}, 0o440, None),
    ("fsGroup: 0600, the group added by SetVolumeOwnership", {"pod_context": {"fsGroup": 123}}, 0o600, None),
    ("every container runs as 1000: owned by it", {"pod_context": {"runAsUser": 1000}}, 0o600, 1000),
    ("the container's user over the pod's", {"pod_context": {"runAsUser": 1000},
                                             "container_context": {"runAsUser": 2000}}, 0o600, 2000),
    ("two users: no owner", {"container_context": {"runAsUser": 2000}, "init_context": {"runAsUser": 3000}},
     0o644, None),
    ("a container without a user: no owner", {"container_context": {"runAsUser": 2000}, "init_context": {}},
     0o644, None),
    ("the same user in init and regular containers", {"container_context": {"runAsUser": 0},
                                                     "init_context": {"runAsUser": 0}}, 0o600, 0),
]


@pytest.mark.parametrize(("contexts", "mode", "owner"), [c[1:] for c in OWNERSHIP_CASES],
                         ids=[c[0] for c in OWNERSHIP_CASES])
def test_file_mode_and_owner(contexts: dict[str, Any], mode: int, owner: int | None) -> None:
    default_mode = contexts.pop("default_mode", None)
    pod = make_pod([projected({"name": "test.test.signer-one.4", "path": "ca.pem"}, default_mode=default_mode)],
                   **contexts)
    assert plan_files(pod)["ctb-volume-0"] == (FileEntry("ca.pem", pem(ROOTS[4]).encode(), mode, owner),)


def test_sources_combine_with_the_others_and_fail_together() -> None:
    volume = {"name": "v", "projected": {"sources": [
        {"clusterTrustBundle": {"name": "does-not-exist", "path": "a.pem"}},
        {"configMap": {"name": "missing"}},
        {"clusterTrustBundle": {"signerName": ONE, "path": "b.pem"}}]}}
    with pytest.raises(VolumeError) as info:
        plugins.plan_volumes(make_pod([volume]), layout=LAYOUT, config_maps={"missing": None}, secrets={}, tokens={},
                             trust_bundles=BUNDLES)
    assert str(info.value) == (f'MountVolume.SetUp failed for volume "v" : [{NOT_FOUND}, configmap "missing" not '
                               f"found, {ctb.NO_MATCH}]")
    assert info.value.volume == "v"


def test_a_list_failure_is_one_error_per_volume() -> None:
    pod = make_pod([projected({"name": "a", "path": "a"}, {"signerName": ONE, "path": "b"})])
    with pytest.raises(VolumeError, match=f'^MountVolume.SetUp failed for volume "ctb-volume-0" : {ctb.NOT_SYNCED}$'):
        plan_files(pod, Bundles(error=ctb.NOT_SYNCED))


def test_unfetched_bundles_are_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="not fetched"):
        plan_files(make_pod([projected({"name": "a", "path": "a"})]), None)


def test_many_bundles_in_one_volume_and_in_many() -> None:
    """The e2e spec's 150 bundles: as one projection of 150 sources, as 150 volumes, and joined by signer."""
    many = Bundles(tuple(bundle(f"test.test:signer-hundreds:{i}", "test.test/signer-hundreds",
                                pem(i.to_bytes(2, "big") * 30)) for i in range(150)), order_seed=SEED)
    sources = [{"name": f"test.test:signer-hundreds:{i}", "path": f"trust-anchors-{i}.pem"} for i in range(150)]
    one = plan_files(make_pod([projected(*sources)]), many)["ctb-volume-0"]
    assert one is not None and len(one) == 150
    assert dict((f.path, f.data) for f in one)["trust-anchors-77.pem"] == pem((77).to_bytes(2, "big") * 30).encode()
    separate = plan_files(make_pod([projected(s, name=f"ctb-volume-{i}") for i, s in enumerate(sources)]), many)
    assert len(separate) == 150 and separate["ctb-volume-149"] == (
        FileEntry("trust-anchors-149.pem", pem((149).to_bytes(2, "big") * 30).encode(), 0o644),)
    joined = plan_files(make_pod([projected({"signerName": "test.test/signer-hundreds", "labelSelector": {},
                                              "path": "trust-anchors.pem"})]), many)["ctb-volume-0"]
    assert joined is not None and len(blocks_of(joined[0].data)) == 150


def test_wanted() -> None:
    assert ctb.wanted(make_pod([projected({"name": "a", "path": "a"})]))
    assert not ctb.wanted(make_pod([{"name": "v", "projected": {"sources": [{"configMap": {"name": "c"}}]}},
                                    {"name": "e", "emptyDir": {}}]))


# ------------------------------------------------------------------------------ the API, who is concerned


def test_the_api_paths() -> None:
    assert ctb.discovery_path("v1beta1") == "/apis/certificates.k8s.io/v1beta1"
    assert ctb.list_path("v1") == "/apis/certificates.k8s.io/v1/clustertrustbundles"


@pytest.mark.parametrize(("discovery", "served"), [
    ({"resources": [{"name": "certificatesigningrequests"}, {"name": "clustertrustbundles"}]}, True),
    ({"resources": [{"name": "certificatesigningrequests"}, {"name": "certificatesigningrequests/status"}]}, False),
    ({"resources": [{"name": "clustertrustbundles/status"}]}, False),
    ({}, False),
    ({"resources": None}, False),
])
def test_serves_bundles(discovery: dict[str, Any], served: bool) -> None:
    assert ctb.serves_bundles(discovery) is served


def test_references() -> None:
    pod = make_pod([projected({"name": "a", "path": "a"}, {"signerName": "s/x", "labelSelector": {}, "path": "b"},
                              {"path": "neither"}),
                    {"name": "other", "projected": {"sources": [{"configMap": {"name": "c"}},
                                                                {"clusterTrustBundle": {"name": "b", "path": "c"}}]}},
                    {"name": "e", "emptyDir": {}}])
    assert ctb.references(pod) == {("name", "a"), ("signer", "s/x"), ("name", "b")}
    assert ctb.references(make_pod([{"name": "e", "emptyDir": {}}])) == frozenset()


PODS = {"by-name": frozenset({("name", "a")}), "by-signer": frozenset({("signer", "s/x")}),
        "both": frozenset({("name", "z"), ("signer", "s/y")}), "none": frozenset()}


@pytest.mark.parametrize(("changed", "woken"), [
    ([bundle("a", "", "")], {"by-name"}),
    ([bundle("a", "s/x", "")], {"by-name", "by-signer"}),  # by name, whatever its signer; and its signer's
    ([bundle("b", "s/x", "")], {"by-signer"}),
    ([bundle("b", "s/y", ""), bundle("z", "", "")], {"both"}),
    ([bundle("q", "s/q", "")], set()),
    ([], set()),
])
def test_affected(changed: list[ClusterTrustBundle], woken: set[str]) -> None:
    assert ctb.affected(PODS, changed) == woken


# ---------------------------------------------------------------------------------- the atomic writer


def test_owned_files_and_their_links_are_chowned(tmp_path: Path) -> None:
    files = (FileEntry("ca.pem", b"CA", 0o600, 4321), FileEntry("dir/x", b"X", 0o644))
    assert manager.write_atomically(tmp_path, files)
    assert os.stat(tmp_path / "ca.pem").st_uid == 4321 and os.lstat(tmp_path / "ca.pem").st_uid == 4321
    assert stat.S_IMODE(os.stat(tmp_path / "ca.pem").st_mode) == 0o600
    assert os.stat(tmp_path / "dir" / "x").st_uid == os.getuid()
    assert not manager.write_atomically(tmp_path, files)  # unchanged: nothing written
    os.chown(tmp_path / "ca.pem", 1, -1)
    assert manager.write_atomically(tmp_path, files)  # the owner changed: written again
    assert os.stat(tmp_path / "ca.pem").st_uid == 4321


def test_an_unchanged_payload_under_an_fs_group_is_not_written_again(tmp_path: Path) -> None:
    """A 0600 trust bundle is 0640 once set_volume_ownership has run: that is the payload already there."""
    files = (FileEntry("ca.pem", b"CA", 0o600),)
    assert manager.write_atomically(tmp_path, files, 123)
    manager.set_volume_ownership(tmp_path, 123, read_only=True)
    assert stat.S_IMODE(os.stat(tmp_path / "ca.pem").st_mode) == 0o640
    assert not manager.write_atomically(tmp_path, files, 123)
    assert manager.write_atomically(tmp_path, files)  # without the fsGroup, 0640 is not the mode asked for
