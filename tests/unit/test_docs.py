"""The documentation and the release files against the code: docs/configuration.md is what
docs/gen_config_reference.py makes of kopflet/config/settings.py, the operations guide quotes messages the code really
prints, links resolve, and requirements.lock pins exactly the runtime dependencies of the development venv."""

from __future__ import annotations

import configparser
import importlib.util
import re
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kopflet.config import settings

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
LOCK = REPO / "requirements.lock"
# requirements.lock's build tools (pyproject.toml's build-system.requires, and wheel's packaging).
BUILD_TOOLS = {"setuptools", "wheel", "packaging"}

# Messages docs/operations.md quotes: each must be in the guide and still printed by the code.
QUOTED_MESSAGES = (
    "did you mean ",
    "Run 'kopflet --help' for usage.",
    "is not supported by kopflet (it would have no effect); remove it",
    "unknown flag: ",
    ": no such file",
    "no credentials for the apiserver (--kubeconfig, KUBECONFIG or in-cluster)",
    "is not a valid node name (a lowercase RFC 1123 subdomain of at most 253 characters)",
    "container runtime not reachable: ",
    "is unreachable",
    "container runtime unusable: ",
    "kopflet needs ",
    "cannot serve the kubelet API on ",
    "openssl could not make the serving certificate: ",
    "must be given together, or neither for a self-signed certificate in --cert-dir",
    "unable to acquire file lock on ",
    "is locked by another process",
    "cannot exit on lock file contention: no lock file specified",
    "Inotify event: ",
    "node heartbeat failed: ",
    "could not post event ",
    "Unable to authenticate a bearer token: the TokenReview failed: ",
    "Authorization error (user=",
    "Forbidden (user=",
    "subresource(s)=[",
    "MountVolume.SetUp failed for volume ",
    "unsupported volume type ",
    ": kopflet has no plugin for it",
    "failed to fetch token: ",
    "Unable to attach or mount volumes: ",
    "error processing PVC ",
    "PVC is not bound",
    "failed to get Plugin from volumeSpec for volume ",
    "no volume plugin matched",
    "kopflet does not mount CSI volumes yet",
    "MountVolume.NodeAffinity check failed",
    "no matching NodeSelectorTerms",
    "MountVolume.NewMounter initialization failed",
    "kopflet does not map raw block volumes yet (volumeMode: Block)",
    "kopflet does not format and mount local volumes on block devices yet",
    "couldn't find key ",
    "Failed to pull image ",
    "failed to pull and unpack image ",
    "Back-off pulling image ",
    "Unable to retrieve some image pull secrets (",
    "is not present with pull policy of Never",
    "Failed to create pod sandbox: ",
    "restarting failed container=",
    "Pod was rejected: ",
    "removing orphaned pod ",
    "relisting the container runtime failed: ",
    "container runtime is reachable again",
    "sync crashed, retrying in ",
    "registered node ",
    "already registered; adopted it",
    "serving the kubelet API on ",
    "watching pods with ",
    "kopflet-runtime: ",
    "cannot mount the cgroup v1 hierarchy ",
    "cannot create the cgroup ",
    "/kopflet: is the container privileged?",
    "iptables backend: ",
    "can't get final child's PID from pipe: EOF",
    "SyncLoop ",
    "cannot notify systemd at ",
    "does not have the pattern=N format",
    "with a grace period of ",
)
# Where the agent's messages come from (the manifests hold the runtime container's start script).
SOURCES = ("handlers", "kopflet", "cri_client", "devstack", "manifests")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_reference", DOCS / "gen_config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_reference_is_generated_from_the_settings_table() -> None:
    expected = _generator().render()
    current = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert current == expected, "docs/configuration.md is out of date: run docs/gen_config_reference.py"


def test_configuration_reference_names_every_flag_and_field() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for setting in settings.SETTINGS:
        if setting.flag and setting.flag != "v":
            assert f"`--{setting.flag}`" in text, setting.flag
        if setting.field:
            assert f"`{setting.field}`" in text, setting.field
    for variable in settings.LEGACY_ENV:
        assert f"`{variable}`" in text, variable


def test_the_reference_example_is_a_valid_config_file() -> None:
    values = settings.parse_config_file("example.yaml", _generator().EXAMPLE)
    assert values["max_pods"] == 50


def _source_text() -> str:
    """The sources, with string literals continued on the next line joined (``"a "\\n    f"b"`` is ``"a b"``)."""
    parts = []
    for top in SOURCES:
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix in (".py", ".yaml") and "proto" not in path.parts:
                parts.append(path.read_text(encoding="utf-8"))
    return re.sub(r'"\s*\n\s*[rbf]*"', "", "\n".join(parts))


def test_the_operations_guide_quotes_messages_the_code_prints() -> None:
    guide = (DOCS / "operations.md").read_text(encoding="utf-8")
    code = _source_text()
    missing_in_guide = [m for m in QUOTED_MESSAGES if m.strip(" :(") not in guide]
    missing_in_code = [m for m in QUOTED_MESSAGES if m not in code]
    assert not missing_in_guide, f"docs/operations.md no longer quotes: {missing_in_guide}"
    assert not missing_in_code, f"the code no longer prints what docs/operations.md quotes: {missing_in_code}"


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md", "docs/configuration.md", "docs/operations.md",
                                 "docs/extending.md"])
def test_relative_links_resolve(doc: str) -> None:
    path = REPO / doc
    text = path.read_text(encoding="utf-8")
    headings = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        if file:
            assert (path.parent / file).exists(), f"{doc}: broken link {target}"
        elif anchor:
            assert anchor in headings, f"{doc}: no heading for #{anchor}"


def test_the_docs_name_modules_that_exist() -> None:
    for doc in ("docs/architecture.md", "docs/operations.md", "docs/extending.md"):
        text = (REPO / doc).read_text(encoding="utf-8")
        for module in set(re.findall(r"\b((?:kopflet|handlers|cri_client|devstack|examples)(?:/[a-z_]+)*\.py)\b",
                                     text)):
            assert (REPO / module).exists(), f"{doc} names {module}, which does not exist"


# ------------------------------------------------------------------------------------------- requirements.lock


def _lock() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"requirements.lock: {line!r} is not name==version"
        key = canonicalize_name(name)
        assert key not in pins, f"requirements.lock pins {name} twice"
        pins[key] = version
    return pins


def _install_requires() -> list[Requirement]:
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    return [Requirement(line) for line in parser["options"]["install_requires"].strip().splitlines() if line.strip()]


def test_the_lock_pins_every_direct_dependency_within_setup_cfg() -> None:
    pins = _lock()
    for requirement in _install_requires():
        key = canonicalize_name(requirement.name)
        assert key in pins, f"requirements.lock does not pin {requirement.name}"
        assert requirement.specifier.contains(pins[key], prereleases=True), \
            f"requirements.lock pins {requirement.name}=={pins[key]}, outside setup.cfg's {requirement}"
    assert BUILD_TOOLS <= set(pins)


def _runtime_closure() -> dict[str, str]:
    """kopflet's dependencies as installed, transitively (no extras), with their installed versions."""
    found: dict[str, str] = {}
    todo = [requirement for requirement in _install_requires()]
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(requirement.name)
        if key in found:
            continue
        dist = metadata.distribution(requirement.name)
        found[key] = dist.version
        todo += [Requirement(r) for r in dist.requires or ()]
    return found


def test_the_lock_is_the_runtime_dependency_set_of_the_venv() -> None:
    try:
        closure = _runtime_closure()
    except metadata.PackageNotFoundError as exc:
        pytest.skip(f"a runtime dependency is not installed here: {exc}")
    pins = {k: v for k, v in _lock().items() if k not in BUILD_TOOLS}
    expected = "\n".join(f"{name}=={version}" for name, version in sorted(closure.items()))
    assert pins == closure, f"requirements.lock is out of step with the venv; its runtime part should be:\n{expected}"


def test_the_containerfile_installs_with_the_lock() -> None:
    text = (REPO / "Containerfile").read_text()
    # Debian's own base (images/build-agent-image.sh makes it with debootstrap where there is no Docker Hub).
    assert re.search(r"^FROM \S*debian:bookworm-slim$", text, flags=re.MULTILINE)
    assert "pip install --no-build-isolation --constraint requirements.lock ." in text
    assert "pip install --constraint requirements.lock setuptools wheel" in text
    for package in ("containerd", "runc", "containernetworking-plugins", "iptables", "openssl", "mount", "tini"):
        assert re.search(rf"\s{re.escape(package)}(\s|$)", text), package
    for copied in ("cri_client/", "handlers/", "kopflet/"):
        assert f"COPY {copied} {copied}" in text
