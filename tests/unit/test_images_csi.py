"""Unit tests for images/build.py's CSI sidecar images and build-binaries.sh --csi: the table against the tags
upstream's e2e manifests name and each sidecar's Dockerfile, the layer, the images being added only when their
binaries are there, and the go.mod replace directives build-binaries.sh carries over.

Pure: fake binaries and packages; the checks against upstream read the pinned modules when they are in the Go module
cache (skipped otherwise); the replace test runs `go mod edit` on a file of its own.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.test_images import ROOT, b, e2e_bin_dir, read_layout
from tests.unit.test_images_cluster import cluster_build  # noqa: F401 (a fixture)

SIDECARS = {  # command -> the versions.env variable pinning it
    "csi-provisioner": "CSI_PROVISIONER_VERSION",
    "csi-attacher": "CSI_ATTACHER_VERSION",
    "csi-resizer": "CSI_RESIZER_VERSION",
    "csi-snapshotter": "CSI_SNAPSHOTTER_VERSION",
    "csi-snapshot-metadata": "CSI_SNAPSHOT_METADATA_VERSION",
}
# The images of upstream's hostpath deployment the Go module proxy serves no module of: pinned, never built.
NOT_BUILT = {
    "hostpathplugin": "CSI_HOSTPATH_VERSION",
    "csi-node-driver-registrar": "CSI_NODE_DRIVER_REGISTRAR_VERSION",
    "livenessprobe": "CSI_LIVENESSPROBE_VERSION",
    "csi-external-health-monitor-controller": "CSI_HEALTH_MONITOR_VERSION",
}


def csi_bin_dir(tmp_path, names=tuple(SIDECARS)):
    """What build-binaries.sh --csi leaves beside the e2e images' binaries (fakes), at the pinned tags."""
    d = e2e_bin_dir(tmp_path)
    (d / "csi").mkdir(parents=True)
    versions = b.versions_env()
    for name in names:
        (d / "csi" / name).write_bytes(f"{name} binary".encode())
        (d / "csi" / f"{name}.version").write_text(versions[SIDECARS[name]] + "\n")
    return d


def _pinned(name):
    return b.versions_env()[SIDECARS[name]]


# --- the table -------------------------------------------------------------------------------


def test_csi_image_table(tmp_path):
    images = {i.ref: i for i in b.csi_images(csi_bin_dir(tmp_path))}
    assert set(images) == {f"sig-storage/{n}:{_pinned(n)}" for n in SIDECARS}
    assert set(b.CSI_SIDECARS) == set(SIDECARS)
    for name in SIDECARS:
        image = images[f"sig-storage/{name}:{_pinned(name)}"]
        # distroless static's config (root) with the Dockerfile's ENTRYPOINT, nothing else
        assert image.config == {"Entrypoint": [f"/{name}"], "Env": b.DISTROLESS_ENV, "User": "0", "WorkingDir": "/"}
        labels = image.labels()
        assert labels["maintainers"] == "Kubernetes Authors" and labels["revision"] == _pinned(name)
        assert labels["description"] == b.CSI_SIDECARS[name][1]
        assert labels["org.opencontainers.image.version"] == _pinned(name)
        assert b.CSI_SIDECARS[name][0] in labels["org.opencontainers.image.description"]
        assert "kopflet" in labels["org.opencontainers.image.description"]
        assert image.key is not None
        assert image.aliases >= {name, f"{name}:{_pinned(name)}", f"sig-storage/{name}"}


def test_the_tag_is_the_release_the_binary_was_built_from(tmp_path):
    bin_dir = csi_bin_dir(tmp_path)
    (bin_dir / "csi" / "csi-resizer.version").write_text("v2.3.0\n")
    refs = {i.ref for i in b.csi_images(bin_dir)}
    assert "sig-storage/csi-resizer:v2.3.0" in refs and f"sig-storage/csi-resizer:{_pinned('csi-resizer')}" not in refs


def test_only_the_sidecars_built_are_imaged(tmp_path, capsys):
    assert b.csi_images(tmp_path / "nothing") == []
    bin_dir = csi_bin_dir(tmp_path, ("csi-attacher", "csi-provisioner"))
    (bin_dir / "csi" / "csi-snapshotter").write_bytes(b"no version file beside it")
    assert [i.ref for i in b.csi_images(bin_dir)] == [
        f"sig-storage/csi-provisioner:{_pinned('csi-provisioner')}",  # table order
        f"sig-storage/csi-attacher:{_pinned('csi-attacher')}",
    ]
    assert b.main(["--list", "--bin-dir", str(bin_dir)]) == 0
    listed = set(capsys.readouterr().out.split())
    assert f"sig-storage/csi-attacher:{_pinned('csi-attacher')}" in listed
    assert {i.ref for i in b.IMAGES} <= listed and not any("csi-snapshotter" in r for r in listed)
    assert [i.ref for i in b.select(["csi-provisioner"], b.csi_images(bin_dir))] == [
        f"sig-storage/csi-provisioner:{_pinned('csi-provisioner')}"
    ]


def test_the_csi_flag_wants_the_binaries(tmp_path):
    with pytest.raises(SystemExit):
        b.main(["--list", "--csi"])
    with pytest.raises(SystemExit):
        b.main(["--list", "--csi", "--bin-dir", str(e2e_bin_dir(tmp_path / "e2e-only"))])
    assert b.main(["--list", "--csi", "--bin-dir", str(csi_bin_dir(tmp_path))]) == 0


# --- contents --------------------------------------------------------------------------------


def test_the_binary_is_at_the_root_on_distroless_static(cluster_build, tmp_path):  # noqa: F811
    for image in b.csi_images(csi_bin_dir(tmp_path)):
        name = image.repo.removeprefix("sig-storage/")
        files = {e.path: e for e in image.files(cluster_build)}
        assert files[name] == b.file_(name, f"{name} binary".encode(), 0o755)  # root-owned, as COPY leaves it
        assert not files[name].xattrs
        assert files["etc/passwd"].data.decode() == b.DISTROLESS_PASSWD
        assert "etc/ssl/certs/ca-certificates.crt" in files and files["tmp"].mode == 0o1777
        assert not any(p.startswith(("usr/local/bin/", "go-runner")) for p in files)


def test_csi_images_build_reproducibly(cluster_build, tmp_path):  # noqa: F811
    for image in b.csi_images(csi_bin_dir(tmp_path)):
        first = b.build(image, tmp_path / "one" / image.repo / image.tag, cache=tmp_path / "c1")
        second = b.build(image, tmp_path / "two" / image.repo / image.tag, cache=tmp_path / "c2")
        assert first.manifest_digest == second.manifest_digest, image.ref
        _, manifest, config = read_layout(first.layout)
        assert config["config"]["Entrypoint"] == image.config["Entrypoint"]
        assert config["config"]["Labels"]["revision"] == image.tag
        assert manifest["annotations"]["org.opencontainers.image.version"] == image.tag


# --- against upstream ------------------------------------------------------------------------


def _modcache():
    if shutil.which("go") is None:
        return None
    return Path(subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip())


def _module_dir(module, version):
    """A module's directory in the Go module cache (its path with capitals escaped), or None."""
    cache = _modcache()
    if cache is None:
        return None
    escaped = re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), module)
    path = cache / f"{escaped}@{version}"
    return path if path.is_dir() else None


def _e2e_manifest():
    k8s = _module_dir("k8s.io/kubernetes", b.versions_env()["KUBERNETES_VERSION"])
    path = (k8s / "test/e2e/testing-manifests/storage-csi/hostpath/hostpath/csi-hostpath-plugin.yaml") if k8s else None
    return path if path is not None and path.is_file() else None


def test_versions_env_pins_every_sidecar():
    versions = b.versions_env()
    for var in [*SIDECARS.values(), *NOT_BUILT.values()]:
        assert re.fullmatch(r"v\d+\.\d+\.\d+", versions[var]), var


@pytest.mark.skipif(_e2e_manifest() is None, reason="the pinned k8s.io/kubernetes module is not in the module cache")
def test_the_pins_are_the_tags_upstreams_e2e_hostpath_deployment_names():
    """Every image of csi-hostpath-plugin.yaml is pinned in versions.env at the manifest's tag."""
    images = {}
    for obj in yaml.safe_load_all(_e2e_manifest().read_text()):
        if obj and obj["kind"] == "StatefulSet":
            for c in obj["spec"]["template"]["spec"]["containers"]:
                repo, tag = c["image"].rsplit(":", 1)
                images[repo] = tag
    versions = b.versions_env()
    pinned = {f"registry.k8s.io/sig-storage/{n}": versions[v] for n, v in {**SIDECARS, **NOT_BUILT}.items()}
    assert images == pinned


def _dockerfile(name):
    module, _ = b.CSI_SIDECARS[name]
    d = _module_dir(module, _pinned(name))
    if d is None:
        return None
    for path in (d / "cmd" / name / "Dockerfile", d / "Dockerfile"):
        if path.is_file():
            return path.read_text()
    return None


@pytest.mark.parametrize("name", list(SIDECARS))
def test_the_image_is_its_dockerfiles(name, tmp_path):
    """FROM distroless static (root), the two LABELs, COPY the binary to /<name>, ENTRYPOINT: nothing else."""
    dockerfile = _dockerfile(name)
    if dockerfile is None:
        pytest.skip(f"{name}'s module is not in the Go module cache")
    lines = [line for line in dockerfile.splitlines() if line and not line.startswith("#")]
    assert lines[0] == "FROM gcr.io/distroless/static:latest"
    labels = dict(re.findall(r'^LABEL (\w+)="([^"]*)"$', dockerfile, re.M))
    copy = re.search(r"^COPY \$\{binary\} (\S+)$", dockerfile, re.M).group(1)
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", dockerfile, re.M).group(1))
    assert not re.search(r"^(RUN|USER|WORKDIR|EXPOSE|CMD|ENV|VOLUME) ", dockerfile, re.M)
    assert "/" + copy.lstrip("/") == entrypoint[0] == f"/{name}"  # COPY to a relative path lands at / (no WORKDIR)
    image = {i.repo: i for i in b.csi_images(csi_bin_dir(tmp_path))}[f"sig-storage/{name}"]
    assert image.config["Entrypoint"] == entrypoint
    assert {k: image.labels()[k] for k in labels} == labels


# --- build-binaries.sh --csi -----------------------------------------------------------------


def test_build_binaries_csi_table():
    script = (ROOT / "devstack" / "build-binaries.sh").read_text()
    rows = re.search(r"^csi_sidecars=\(\n(.*?)\n\)$", script, re.M | re.S).group(1)
    table = {}
    for row in rows.splitlines():
        name, module, var = row.strip().strip('"').split()
        table[name] = (module, var)
    assert table == {n: (b.CSI_SIDECARS[n][0], f"${v}") for n, v in SIDECARS.items()}
    assert "--csi) csi=1 ;;" in script
    # release-tools/build.make's ldflags, the tag as REV (the release build's), CGO off
    assert '-ldflags "-X main.version=$version -extldflags \\"-static\\""' in script
    assert '"$module/cmd/$name"' in script and 'echo "$version" > "$out/csi/$name.version"' in script
    assert re.search(r"^export .*\bCGO_ENABLED=0\b", script, re.M)


def _carried_replaces():
    """build-binaries.sh's carried_replaces function, as bash source."""
    script = (ROOT / "devstack" / "build-binaries.sh").read_text()
    return re.search(r"^carried_replaces\(\) \{\n.*?^\}$", script, re.M | re.S).group(0)


@pytest.mark.skipif(shutil.which("go") is None or shutil.which("bash") is None, reason="no go or bash")
def test_carried_replaces_keeps_versions_and_makes_directories_releases(tmp_path):
    gomod = tmp_path / "upstream.mod"
    gomod.write_text(
        "module example.com/sidecar/v8\n\ngo 1.26.0\n\n"
        "require example.com/sidecar/client/v8 v8.4.0\n\n"
        "replace example.com/sidecar/client/v8 => ./client\n\n"
        "replace k8s.io/api => k8s.io/api v0.36.1\n\n"
        "replace (\n\tk8s.io/client-go => k8s.io/client-go v0.36.1\n\n"
        "\texample.com/other v1.0.0 => ../other\n\texample.com/fork => example.com/fork2 v1.2.3\n)\n"
    )
    out = subprocess.run(
        ["bash", "-c", f'{_carried_replaces()}\ncarried_replaces "$1" v8.6.0', "bash", str(gomod)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert sorted(out.splitlines()) == [  # go mod edit -print regroups them: their order is not the file's
        "\texample.com/fork => example.com/fork2 v1.2.3",
        "\texample.com/other v1.0.0 => example.com/other v8.6.0",
        "\texample.com/sidecar/client/v8 => example.com/sidecar/client/v8 v8.6.0",
        "\tk8s.io/api => k8s.io/api v0.36.1",
        "\tk8s.io/client-go => k8s.io/client-go v0.36.1",
    ]
    # the lines make a valid replace block
    (tmp_path / "go.mod").write_text(f"module kopflet.local/x\n\ngo 1.26\n\nreplace (\n{out})\n")
    printed = subprocess.run(["go", "mod", "edit", "-json", str(tmp_path / "go.mod")], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
    assert len(json.loads(printed)["Replace"]) == 5
