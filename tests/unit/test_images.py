"""Unit tests for images/build.py: reproducible layers, OCI layout shape, push-skip logic.

Pure: no registry and no network (the HTTP test talks to a stub on 127.0.0.1). The tests that
need /bin/busybox or a static-capable gcc are skipped where those are missing.
"""

import dataclasses
import gzip
import hashlib
import http.server
import importlib.util
import io
import json
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("kopflet_images_build", ROOT / "images" / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


b = _load()

PLATFORM = ("amd64", None)


def fake_files(ctx):
    return [
        b.file_("usr/share/hello.txt", b"hello\n"),
        b.file_("bin/tool", b"#!/bin/sh\necho tool\n", 0o755),
        b.symlink("bin/alias", "/bin/tool"),
        b.dir_("tmp", 0o1777),
        b.dir_("home/user", 0o750, uid=1000, gid=1000),
    ]


FAKE = b.Image(
    repo="test/fake",
    tag="1.0",
    files=fake_files,
    config={"Cmd": ["tool"], "User": "1000:1000", "Env": ["PATH=/bin"], "WorkingDir": "/"},
    labels=lambda: {"org.opencontainers.image.version": "1.0.0"},
)


def blob(layout, digest):
    return (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()


def read_layout(layout):
    index = json.loads((layout / "index.json").read_text())
    desc = index["manifests"][0]
    manifest = json.loads(blob(layout, desc["digest"]))
    config = json.loads(blob(layout, manifest["config"]["digest"]))
    return index, manifest, config


# --- determinism -----------------------------------------------------------------------------


def test_layer_tar_is_byte_identical_across_builds_and_input_order():
    entries = fake_files(None)
    first = b.layer_tar(entries, 0)
    assert b.layer_tar(list(reversed(entries)), 0) == first
    assert b.layer_tar(entries, 0) == first
    assert b.gzip_bytes(first) == b.gzip_bytes(first)


def test_layer_tar_entries_are_sorted_with_parents_fixed_times_and_owners():
    with tarfile.open(fileobj=io.BytesIO(b.layer_tar(fake_files(None), 1234))) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    # Parents that the entries did not list are added as root-owned 0755 directories.
    assert {"usr", "usr/share", "bin", "home"} <= set(names)
    for m in members:
        assert m.mtime == 1234
        assert m.uname == "" and m.gname == ""
        assert (m.uid, m.gid) == ((1000, 1000) if m.name == "home/user" else (0, 0))
    by_name = {m.name: m for m in members}
    assert by_name["tmp"].isdir() and by_name["tmp"].mode == 0o1777
    assert by_name["bin/alias"].issym() and by_name["bin/alias"].linkname == "/bin/tool"
    assert by_name["bin/tool"].mode == 0o755 and by_name["usr/share/hello.txt"].mode == 0o644
    assert by_name["usr"].isdir() and by_name["usr"].mode == 0o755


def test_gzip_header_has_no_mtime_and_no_name():
    gz = b.gzip_bytes(b"data")
    assert gz[:2] == b"\x1f\x8b"
    assert gz[3] & 0x08 == 0  # FNAME flag unset
    assert gz[4:8] == b"\0\0\0\0"  # MTIME
    assert gzip.decompress(gz) == b"data"


def test_two_builds_give_the_same_digests(tmp_path):
    one = b.build(FAKE, tmp_path / "one", platform_=PLATFORM, epoch=0)
    two = b.build(FAKE, tmp_path / "two", platform_=PLATFORM, epoch=0)
    assert one.manifest_digest == two.manifest_digest
    assert one.config_digest == two.config_digest
    assert one.layer_digests == two.layer_digests
    for name in ("index.json", "oci-layout"):
        assert (one.layout / name).read_bytes() == (two.layout / name).read_bytes()
    blobs_one = sorted(p.name for p in (one.layout / "blobs" / "sha256").iterdir())
    assert blobs_one == sorted(p.name for p in (two.layout / "blobs" / "sha256").iterdir())


def test_gzip_cache_gives_the_same_digest(tmp_path):
    plain = b.build(FAKE, tmp_path / "plain", platform_=PLATFORM, epoch=0)
    cold = b.build(FAKE, tmp_path / "c" / "x", cache=tmp_path / "c", platform_=PLATFORM, epoch=0)
    warm = b.build(FAKE, tmp_path / "c" / "x", cache=tmp_path / "c", platform_=PLATFORM, epoch=0)
    assert plain.manifest_digest == cold.manifest_digest == warm.manifest_digest
    assert len(list((tmp_path / "c" / "layers").iterdir())) == 1


def test_inputs_change_the_digest(tmp_path):
    base = b.build(FAKE, tmp_path / "a", platform_=PLATFORM, epoch=0)
    later = b.build(FAKE, tmp_path / "b", platform_=PLATFORM, epoch=1)
    arm = b.build(FAKE, tmp_path / "c", platform_=("arm64", "v8"), epoch=0)
    assert len({base.manifest_digest, later.manifest_digest, arm.manifest_digest}) == 3
    assert base.layer_digests != later.layer_digests  # mtimes are in the tar
    assert base.layer_digests == arm.layer_digests


def test_source_date_epoch_is_honoured(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "86400")
    assert b.source_date_epoch() == 86400
    assert b.rfc3339(86400) == "1970-01-02T00:00:00Z"


# --- layout shape ----------------------------------------------------------------------------


def test_layout_json_shape_and_media_types(tmp_path):
    built = b.build(FAKE, tmp_path / "l", platform_=PLATFORM, epoch=0)
    layout = built.layout
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index, manifest, config = read_layout(layout)

    assert index["schemaVersion"] == 2 and index["mediaType"] == b.MT_INDEX
    [desc] = index["manifests"]
    assert desc["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert desc["digest"] == built.manifest_digest
    assert desc["annotations"] == {"org.opencontainers.image.ref.name": "1.0"}
    assert desc["platform"] == {"architecture": "amd64", "os": "linux"}

    assert manifest["schemaVersion"] == 2
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert [layer["mediaType"] for layer in manifest["layers"]] == [
        "application/vnd.oci.image.layer.v1.tar+gzip"
    ]
    assert manifest["annotations"] == {"org.opencontainers.image.version": "1.0.0"}

    assert config["architecture"] == "amd64" and config["os"] == "linux"
    assert config["created"] == "1970-01-01T00:00:00Z"
    assert config["rootfs"]["type"] == "layers"
    assert config["config"] == {
        "Cmd": ["tool"],
        "User": "1000:1000",
        "Env": ["PATH=/bin"],
        "WorkingDir": "/",
        "Labels": {"org.opencontainers.image.version": "1.0.0"},
    }
    assert len(config["history"]) == len(manifest["layers"])


def test_digests_and_sizes_match_blob_contents(tmp_path):
    built = b.build(FAKE, tmp_path / "l", platform_=PLATFORM, epoch=0)
    layout = built.layout
    for path in (layout / "blobs" / "sha256").iterdir():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name
    index, manifest, config = read_layout(layout)
    descriptors = [index["manifests"][0], manifest["config"], *manifest["layers"]]
    for d in descriptors:
        assert len(blob(layout, d["digest"])) == d["size"]
    # diff_ids are the digests of the uncompressed layers.
    diff_ids = [b.sha256(gzip.decompress(blob(layout, d["digest"]))) for d in manifest["layers"]]
    assert config["rootfs"]["diff_ids"] == diff_ids == built.diff_ids
    assert b.sha256(built.manifest) == built.manifest_digest


def test_rebuild_removes_stale_blobs(tmp_path):
    out = tmp_path / "l"
    b.build(FAKE, out, platform_=PLATFORM, epoch=5)
    built = b.build(FAKE, out, platform_=PLATFORM, epoch=0)
    _, manifest, _ = read_layout(out)
    wanted = {built.manifest_digest, manifest["config"]["digest"], *built.layer_digests}
    assert {"sha256:" + p.name for p in (out / "blobs" / "sha256").iterdir()} == wanted


# --- the image table -------------------------------------------------------------------------


E2E_REFS = {
    "e2e-test-images/agnhost:2.66.1",
    "e2e-test-images/agnhost:2.55",
    "e2e-test-images/kitten:1.8",
    "e2e-test-images/nautilus:1.8",
    "e2e-test-images/nonewprivs:1.4",
    "e2e-test-images/sample-apiserver:1.29.2",
}
CONFIG_KEYS = {"Cmd", "Entrypoint", "User", "Env", "WorkingDir", "ExposedPorts", "StopSignal"}


def e2e_bin_dir(tmp_path):
    """What build-binaries.sh leaves: agnhost, nnp, sample-apiserver, their version files and e2e-images/ (fakes)."""
    d = tmp_path / "bin"
    (d / "e2e-images" / "agnhost" / "porter").mkdir(parents=True)
    (d / "agnhost").write_bytes(b"agnhost binary")
    (d / "agnhost.version").write_text("2.66.1\n")
    (d / "nnp").write_bytes(b"nnp binary")
    (d / "sample-apiserver").write_bytes(b"sample-apiserver binary")
    (d / "sample-apiserver.version").write_text("v0.29.2\n")
    for name in ("localhost.crt", "localhost.key"):
        (d / "e2e-images" / "agnhost" / "porter" / name).write_bytes(name.encode())
    for pic in ("kitten", "nautilus"):
        (d / "e2e-images" / pic / "html").mkdir(parents=True)
        (d / "e2e-images" / pic / "html" / f"{pic}.jpg").write_bytes(f"{pic} picture".encode())
        (d / "e2e-images" / pic / "html" / "data.json").write_text(f'{{"image": "{pic}.jpg"}}\n')
    return d


def test_image_table(tmp_path):
    refs = {i.ref: i for i in b.IMAGES}
    assert set(refs) == {
        "pause:3.10.1",
        "pause:3.10.2",
        "library/busybox:1.36",
        "e2e-test-images/busybox:1.37.0-2",
        "e2e-test-images/nginx:1.27.0-2",
        "e2e-test-images/nginx:1.28.0-2",
        "e2e-test-images/glibc-dns-testing:2.1.1",
        "e2e-test-images/nonroot:1.5",
    }
    for tag in ("3.10.1", "3.10.2"):
        pause = refs[f"pause:{tag}"]
        assert pause.config["Entrypoint"] == ["/pause"] and pause.config["User"] == "65535:65535"
        assert pause.labels()["org.opencontainers.image.version"] == tag
    assert refs["library/busybox:1.36"].config["Cmd"] == ["sh"]
    assert refs["e2e-test-images/busybox:1.37.0-2"].config["Cmd"] == ["sh"]
    assert refs["e2e-test-images/nonroot:1.5"].config["User"] == "1234"
    assert refs["e2e-test-images/glibc-dns-testing:2.1.1"].config["Cmd"] == ["bash"]
    for tag in ("1.27.0-2", "1.28.0-2"):
        nginx = refs[f"e2e-test-images/nginx:{tag}"].config
        assert nginx["Entrypoint"] == ["/docker-entrypoint.sh"] and nginx["Cmd"] == ["nginx", "-g", "daemon off;"]
        assert nginx["ExposedPorts"] == {"80/tcp": {}} and nginx["StopSignal"] == "SIGQUIT"

    e2e = {i.ref: i for i in b.e2e_images(e2e_bin_dir(tmp_path))}
    assert set(e2e) == E2E_REFS
    ports = {"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}
    for ref in ("e2e-test-images/agnhost:2.66.1", "e2e-test-images/agnhost:2.55"):
        config = e2e[ref].config
        assert config["Entrypoint"] == ["/agnhost"] and config["Cmd"] == ["pause"] and config["ExposedPorts"] == ports
        # the real version, whatever the tag
        assert e2e[ref].labels()["org.opencontainers.image.version"] == "2.66.1"
    assert "tagged 2.55" in e2e["e2e-test-images/agnhost:2.55"].labels()["org.opencontainers.image.description"]
    assert "tagged" not in e2e["e2e-test-images/agnhost:2.66.1"].labels()["org.opencontainers.image.description"]
    for pic in ("kitten", "nautilus"):
        config = e2e[f"e2e-test-images/{pic}:1.8"].config
        assert config["Entrypoint"] == ["/agnhost"] and config["Cmd"] == ["test-webserver"]
    assert e2e["e2e-test-images/nonewprivs:1.4"].config["Cmd"] == ["nnp"]
    # upstream's Dockerfile: ENTRYPOINT ["/sample-apiserver"] alone (it clears alpine's CMD), no EXPOSE
    assert e2e["e2e-test-images/sample-apiserver:1.29.2"].config == {
        "Entrypoint": ["/sample-apiserver"], "Env": [f"PATH={b.DEFAULT_PATH}"], "WorkingDir": "/"}  # fmt: skip
    assert "k8s.io/sample-apiserver v0.29.2" in (
        e2e["e2e-test-images/sample-apiserver:1.29.2"].labels()["org.opencontainers.image.description"])
    for image in [*b.IMAGES, *e2e.values()]:
        assert set(image.config) <= CONFIG_KEYS, image.ref
        assert "PATH=" + b.DEFAULT_PATH in image.config["Env"]
        # everything built from packages or big binaries declares what it is made of
        assert (image.key is None) == image.repo.startswith("pause"), image.ref


def _manifest_go():
    """test/utils/image/manifest.go of the pinned Kubernetes module, when it is in the Go module cache."""
    versions = dict(
        line.split("=", 1) for line in (ROOT / "devstack" / "versions.env").read_text().splitlines() if "=" in line
    )
    if shutil.which("go") is None:
        return None
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    path = Path(modcache) / f"k8s.io/kubernetes@{versions['KUBERNETES_VERSION']}" / "test/utils/image/manifest.go"
    return path.read_text() if path.is_file() else None


@pytest.mark.skipif(_manifest_go() is None, reason="the pinned k8s.io/kubernetes module is not in the Go module cache")
def test_the_table_has_every_image_the_node_specs_name(tmp_path):
    """Each image the node conformance specs use, under the name and tag upstream's manifest gives it."""
    import re

    configs = {
        m[0]: (m[1], m[2], m[3])
        for m in re.findall(r'configs\[(\w+)\] = Config\{list\.(\w+), "([^"]+)", "([^"]+)"\}', _manifest_go())
    }
    used = ("AgnhostPrev", "Agnhost", "APIServer", "BusyBox", "GlibcDnsTesting", "Kitten", "Nautilus", "Nginx",
            "NginxNew", "Nonewprivs", "NonRoot", "Pause")  # fmt: skip
    prefixes = {"PromoterE2eRegistry": "e2e-test-images/", "GcRegistry": ""}
    ours = {i.ref for i in [*b.IMAGES, *b.e2e_images(e2e_bin_dir(tmp_path))]}
    for image_id in used:
        registry, name, tag = configs[image_id]
        assert f"{prefixes[registry]}{name}:{tag}" in ours, image_id


def test_select_by_alias():
    assert [i.ref for i in b.select(["library/busybox"])] == ["library/busybox:1.36"]
    # a short name selects every image of that name
    assert [i.ref for i in b.select(["busybox"])] == ["library/busybox:1.36", "e2e-test-images/busybox:1.37.0-2"]
    assert [i.ref for i in b.select(["library/busybox:1.36", "pause:3.10.1", "busybox:1.36"])] == [
        "library/busybox:1.36",
        "pause:3.10.1",
    ]
    assert [i.ref for i in b.select(["pause"])] == ["pause:3.10.1", "pause:3.10.2"]
    assert b.select([]) == b.IMAGES
    with pytest.raises(SystemExit):
        b.select(["nope"])


# --- reusing a layout built from the same inputs ---------------------------------------------


def test_unchanged_inputs_reuse_the_layout_and_changed_ones_rebuild(tmp_path):
    calls = []
    key = ["packages v1"]

    def files(ctx):
        calls.append(ctx.cache)
        return fake_files(ctx)

    image = b.Image(repo="test/keyed", tag="1", files=files, config=dict(FAKE.config), key=lambda ctx: list(key))
    out = tmp_path / "l"
    first = b.build(image, out, platform_=PLATFORM, epoch=0)
    again = b.build(image, out, platform_=PLATFORM, epoch=0)
    assert len(calls) == 1 and again == first

    key[0] = "packages v2"
    b.build(image, out, platform_=PLATFORM, epoch=0)
    assert len(calls) == 2
    b.build(image, out, platform_=PLATFORM, epoch=1)  # everything the layout follows from counts
    assert len(calls) == 3
    b.build(image, out, platform_=PLATFORM, epoch=0)
    assert len(calls) == 4

    # a damaged layout is never reused
    layer = out / "blobs" / "sha256" / first.layer_digests[0].removeprefix("sha256:")
    layer.write_bytes(layer.read_bytes()[:-1])
    rebuilt = b.build(image, out, platform_=PLATFORM, epoch=0)
    assert len(calls) == 5 and rebuilt.manifest_digest == first.manifest_digest
    (out / "index.json").write_text("{}")
    b.build(image, out, platform_=PLATFORM, epoch=0)
    assert len(calls) == 6


def test_images_without_a_key_are_always_assembled(tmp_path):
    calls = []

    def files(ctx):
        calls.append(1)
        return fake_files(ctx)

    image = b.Image(repo="test/unkeyed", tag="1", files=files, config=dict(FAKE.config))
    b.build(image, tmp_path / "l", platform_=PLATFORM, epoch=0)
    b.build(image, tmp_path / "l", platform_=PLATFORM, epoch=0)
    assert len(calls) == 2 and not (tmp_path / "l" / b.INPUTS_FILE).exists()


# --- Debian packages -------------------------------------------------------------------------

PRINT_URIS = """\
Reading package lists...
Building dependency tree...
The following NEW packages will be installed:
  curl libc6
'http://deb.debian.org/debian/pool/main/c/curl/curl_7.88.1-10%2bdeb12u15_amd64.deb' curl_7.88.1-10+deb12u15_amd64.deb 315312 SHA256:aa11
'http://deb.debian.org/debian/pool/main/b/bind9/bind9-host_1%3a9.18.49-1~deb12u3_amd64.deb' bind9-host_1%3a9.18.49-1~deb12u3_amd64.deb 1234 SHA256:bb22
"""  # noqa: E501


def test_parse_print_uris():
    debs = b.parse_print_uris(PRINT_URIS)
    assert debs == [
        b.Deb("bind9-host", "1:9.18.49-1~deb12u3", "bind9-host_1%3a9.18.49-1~deb12u3_amd64.deb", 1234, "SHA256:bb22"),
        b.Deb("curl", "7.88.1-10+deb12u15", "curl_7.88.1-10+deb12u15_amd64.deb", 315312, "SHA256:aa11"),
    ]
    with pytest.raises(ValueError):
        b.parse_print_uris("'http://x/a_1_amd64.deb' a_1_amd64.deb 10 nohash\n")


def test_parse_required():
    dumpavail = (
        "Package: dash\nPriority: required\nArchitecture: amd64\nDescription: x\n continued: yes\n\n"
        "Package: tzdata\nPriority: required\nArchitecture: all\n\n"
        "Package: adduser\nPriority: important\nArchitecture: all\n\n"
        "Package: foreign\nPriority: required\nArchitecture: arm64\n"
    )
    assert b.parse_required(dumpavail, {"amd64", "all"}) == ["dash", "tzdata"]


def _tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, extra in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, extra
                tar.addfile(info)
            elif kind == "file":
                data, mode = extra
                info.size, info.mode, info.uid, info.gid = len(data), mode, 0, 43
                tar.addfile(info, io.BytesIO(data))
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, extra
                tar.addfile(info)
            else:
                info.type, info.linkname = tarfile.LNKTYPE, extra
                tar.addfile(info)
    return buf.getvalue()


def test_tar_entries_keep_modes_and_owners_and_copy_hard_links():
    data = _tar([
        ("./", "dir", 0o755),
        ("./bin/", "dir", 0o755),
        ("./bin/su", "file", (b"su", 0o4755)),
        ("./bin/chsh", "link", "./bin/su"),
        ("./bin/sh", "sym", "dash"),
        ("./var/mail/", "dir", 0o2775),
    ])  # fmt: skip
    entries = {e.path: e for e in b.tar_entries(data)}
    assert set(entries) == {"bin", "bin/su", "bin/chsh", "bin/sh", "var/mail"}
    assert entries["bin/su"].mode == 0o4755 and entries["bin/su"].gid == 43
    assert entries["bin/chsh"] == b.file_("bin/chsh", b"su", 0o4755, 0, 43)
    assert entries["bin/sh"] == b.symlink("bin/sh", "dash")
    assert entries["var/mail"].kind == "dir" and entries["var/mail"].mode == 0o2775


def test_slim_usrmerge_and_unpack():
    assert not b.slim("usr/share/doc/curl/changelog.gz") and b.slim("usr/share/doc/curl/copyright")
    assert not b.slim("usr/share/man/man1/curl.1.gz") and not b.slim("usr/share/locale/de/LC_MESSAGES/x.mo")
    assert b.slim("usr/share/locale/locale.alias") and b.slim("usr/bin/curl")
    assert b.usrmerge("bin/bash") == "usr/bin/bash" and b.usrmerge("lib64/ld.so") == "usr/lib64/ld.so"
    assert b.usrmerge("bin") == "usr/bin" and b.usrmerge("usr/bin/x") == "usr/bin/x"
    assert b.usrmerge("binx/y") == "binx/y"
    one = _deb("one", [b.file_("bin/tool", b"1"), b.file_("usr/share/doc/one/README", b"r")])
    two = _deb("two", [b.file_("bin/tool", b"2")])
    assert {p: e.data for p, e in b.unpack([one, two]).items()} == {"bin/tool": b"2"}
    assert set(b.unpack([one], merged_usr=True)) == {"usr/bin/tool"}


def test_resolve_link():
    root = b.merge([
        b.symlink("bin", "usr/bin"),
        b.file_("usr/bin/dash", b"dash"),
        b.symlink("usr/bin/sh", "dash"),
        b.symlink("etc/alternatives/awk", "/usr/bin/mawk"),
        b.symlink("usr/bin/awk", "/etc/alternatives/awk"),
        b.file_("usr/bin/mawk", b"mawk"),
        b.symlink("loop/a", "b"),
        b.symlink("loop/b", "a"),
        b.symlink("lib64", "lib"),
        b.symlink("lib/ld.so", "../usr/lib/ld.so"),
        b.file_("usr/lib/ld.so", b"ld"),
    ])  # fmt: skip
    assert b.resolve_link(root, "bin/sh").data == b"dash"  # through a directory symlink, then a relative one
    assert b.resolve_link(root, "/usr/bin/awk").data == b"mawk"  # chained absolute links
    assert b.resolve_link(root, "lib64/ld.so").data == b"ld"
    assert b.resolve_link(root, "bin/missing") is None
    assert b.resolve_link(root, "loop/a") is None


def test_accounts():
    passwd = "root:*:0:0:root:/root:/bin/bash\ndaemon:*:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    fixed = b.with_shells(passwd, lambda p: p != "/bin/bash")
    assert fixed == "root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    assert b.with_shells(passwd, lambda p: True).startswith("root:x:0:0:root:/root:/bin/bash\n")
    assert b.group_shadowed("root:*:0:\nshadow:*:42:\n") == "root:x:0:\nshadow:x:42:\n"
    assert b.shadow_of(fixed, 7) == "root:*:7:0:99999:7:::\ndaemon:*:7:0:99999:7:::\n"
    assert b.gshadow_of("root:x:0:\nwheel:x:10:root,adm\n") == "root:*::\nwheel:*::root,adm\n"
    p, g = b.agnhost_accounts("root:x:0:0:root:/root:/bin/sh\n", "root:x:0:\n")
    assert "user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh\n" in p
    assert g.splitlines()[1:] == [
        "user-defined-in-image:x:1000:",
        "group-defined-in-image:x:50000:user-defined-in-image",
    ]
    p, g = b.nginx_accounts("", "")
    assert p == "nginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin\n" and g == "nginx:x:101:\n"


def test_busybox_config():
    defconfig = "CONFIG_AR=n\n# CONFIG_INOTIFYD is not set\nCONFIG_SHA1_HWACCEL=y\nCONFIG_ASH=y\n# comment\n"
    out = b.busybox_config(defconfig, {"CONFIG_AR": "y", "CONFIG_INOTIFYD": "y", "CONFIG_SHA1_HWACCEL": None})
    lines = out.splitlines()
    assert "CONFIG_ASH=y" in lines and "# comment" in lines
    assert "CONFIG_AR=y" in lines and "CONFIG_AR=n" not in lines
    assert "CONFIG_INOTIFYD=y" in lines and "# CONFIG_INOTIFYD is not set" not in lines
    assert "# CONFIG_SHA1_HWACCEL is not set" in lines and "CONFIG_SHA1_HWACCEL=y" not in lines
    # docker-library's changes; the SHA acceleration off
    assert b.BUSYBOX_CONFIG["CONFIG_INOTIFYD"] == "y" and b.BUSYBOX_CONFIG["CONFIG_FEATURE_SYNC_FANCY"] is None


def test_ldd_names():
    out = (
        "\tlinux-vdso.so.1 (0x00007ffd)\n"
        "\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f)\n"
        "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n"
        "\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n"
        "\tlibmissing.so.1 => not found\n"
    )
    assert b.ldd_names(out) == {"libm.so.6", "libc.so.6", "ld-linux-x86-64.so.2"}
    assert b.ldd_names("\tstatically linked\n") == set()


@pytest.mark.skipif(shutil.which("ldd") is None or not Path("/bin/true").is_file(), reason="no ldd")
def test_library_closure_follows_ldd_transitively():
    libs = {}
    for line in subprocess.run(["ldd", "/bin/true"], capture_output=True, text=True).stdout.splitlines():
        path = line.split("=>")[-1].split("(")[0].strip()
        if path.startswith("/"):
            libs[Path(path).name] = b.file_(f"lib/{Path(path).name}", Path(path).read_bytes())
    assert "libc.so.6" in libs
    assert b.library_closure([Path("/bin/true").read_bytes()], libs) == set(libs)
    with pytest.raises(RuntimeError):
        b.library_closure([Path("/bin/true").read_bytes()], {})


# --- assembled roots (fake packages and a fake busybox) -----------------------------------------

FAKE_APPLETS = ["bin/sh", "bin/cat", "bin/sleep", "bin/echo", "bin/id", "bin/true", "bin/false", "bin/ping", "bin/env",
                "sbin/ip", "usr/bin/nc", "usr/bin/wget", "usr/bin/awk", "usr/sbin/httpd", "linuxrc"]  # fmt: skip


def _deb(name, entries, multi=False):
    control = f"Package: {name}\nVersion: 1.0\nArchitecture: amd64\n"
    control += "Multi-Arch: same\n" if multi else ""
    return b.DebContents(name, control + "Description: fake\n", tuple(entries))


FAKE_DEBS = {
    d.name: d
    for d in [
        _deb("libc6", [
            b.file_("lib/x86_64-linux-gnu/libc.so.6", b"libc", 0o755),
            b.file_("lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", b"ld", 0o755),
            b.symlink("lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
            b.file_("lib/x86_64-linux-gnu/libnss_files.so.2", b"nss"),
            b.file_("lib/x86_64-linux-gnu/libpthread.so.0", b"pthread"),
            b.file_("lib/x86_64-linux-gnu/libm.so.6", b"libm"),
        ], multi=True),
        _deb("libc-bin", [
            b.file_("usr/bin/getconf", b"getconf", 0o755),
            b.file_("usr/bin/getent", b"getent", 0o755),
            b.file_("usr/share/libc-bin/nsswitch.conf", b"hosts: files dns\n"),
        ]),
        _deb("tzdata", [
            b.file_("usr/share/zoneinfo/Etc/UTC", b"TZif"),
            b.symlink("usr/share/zoneinfo/UTC", "Etc/UTC"),
        ]),
        _deb("base-files", [
            b.dir_("tmp", 0o1777),
            b.dir_("root", 0o700),
            b.file_("usr/lib/os-release", b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n'),
            b.symlink("etc/os-release", "../usr/lib/os-release"),
            b.file_("usr/share/base-files/profile", b"# profile\n"),
            b.file_("usr/share/base-files/dot.profile", b"# dot.profile\n"),
            b.file_("usr/share/base-files/dot.bashrc", b"# dot.bashrc\n"),
            b.file_("usr/share/doc/base-files/README", b"docs"),
        ]),
        _deb("base-passwd", [
            b.file_("usr/share/base-passwd/passwd.master",
                    b"root:*:0:0:root:/root:/bin/bash\nnobody:*:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"),
            b.file_("usr/share/base-passwd/group.master", b"root:*:0:\nshadow:*:42:\nnogroup:*:65534:\n"),
        ]),
        _deb("netbase", [b.file_("etc/services", b"http 80/tcp\n")]),
        _deb("ca-certificates", [
            b.file_("usr/share/ca-certificates/mozilla/B.crt", b"B-cert"),
            b.file_("usr/share/ca-certificates/mozilla/A.crt", b"A-cert\n"),
        ]),
        _deb("netcat-openbsd", [b.file_("bin/nc.openbsd", b"nc", 0o755)]),
        _deb("iproute2", [b.file_("bin/ip", b"ip", 0o755)]),
        _deb("bash", [b.file_("bin/bash", b"bash", 0o755)]),
        _deb("curl", [b.file_("usr/bin/curl", b"curl", 0o755)]),
        _deb("mawk", [b.file_("usr/bin/mawk", b"mawk", 0o755)]),
        _deb("dash", [b.file_("bin/dash", b"dash", 0o755), b.symlink("bin/sh", "dash")]),
        _deb("apt", [b.file_("usr/bin/apt-get", b"apt", 0o755)]),
        _deb("nginx", [b.file_("usr/sbin/nginx", b"nginx", 0o755)]),
        _deb("nginx-common", [
            b.file_("etc/nginx/nginx.conf", b"debian's"),
            b.file_("usr/share/nginx/html/index.html", b"<title>Welcome to nginx!</title>"),
            b.dir_("var/lib/nginx"),
            b.dir_("var/log/nginx"),
            b.symlink("etc/nginx/sites-enabled/default", "/etc/nginx/sites-available/default"),
        ]),
    ]
}  # fmt: skip


@pytest.fixture
def fake_build(tmp_path, monkeypatch):
    """busybox_binary and debs_for replaced: a script answering --list-full, and FAKE_DEBS."""
    busybox = tmp_path / "busybox"
    busybox.write_text("#!/bin/sh\necho " + " ".join(FAKE_APPLETS) + "\n")
    busybox.chmod(0o755)
    asked = []

    def debs_for(packages, ctx):
        asked.append(tuple(packages))
        names = {*packages, "nginx-common"} if "nginx" in packages else set(packages)
        return [FAKE_DEBS[n] for n in sorted(names) if n in FAKE_DEBS]

    monkeypatch.setattr(b, "busybox_binary", lambda ctx: busybox)
    monkeypatch.setattr(b, "debs_for", debs_for)
    monkeypatch.setattr(b, "source_date_epoch", lambda: 0)
    monkeypatch.setattr(b, "compile_static", fake_compile_static)
    monkeypatch.setattr(b, "host_platform", lambda: PLATFORM)
    b.busybox_applets.cache_clear()
    b._fake_registry_builds.cache_clear()
    yield b.Context(cache=tmp_path / "cache"), asked
    b.busybox_applets.cache_clear()
    b._fake_registry_builds.cache_clear()


def fake_compile_static(source, ctx, defines=None):
    """The pause binary without gcc: its source name and version."""
    return f"static {source.name} {sorted((defines or {}).items())}".encode()


def test_e2e_busybox_is_laid_out_like_the_official_image(fake_build):
    ctx, _ = fake_build
    entries = {e.path: e for e in b.e2e_busybox_files(ctx)}
    for applet in ("sh", "cat", "env", "ip", "nc", "wget", "httpd", "awk"):  # every applet in /bin
        assert entries[f"bin/{applet}"] == b.symlink(f"bin/{applet}", "busybox"), applet
    assert "bin/linuxrc" not in entries and "linuxrc" not in entries
    assert entries["bin/busybox"].mode == 0o755 and entries["bin/getconf"].data == b"getconf"
    assert entries["usr/bin/env"] == b.symlink("usr/bin/env", "../../bin/env")
    assert entries["lib64"] == b.symlink("lib64", "lib")
    assert entries["lib/libnss_files.so.2"].data == b"nss" and entries["lib/libpthread.so.0"].data == b"pthread"
    assert entries["etc/localtime"].data == b"TZif" and entries["etc/nsswitch.conf"].data == b"hosts: files dns\n"
    assert entries["etc/passwd"].data.decode() == b.BUILDROOT_PASSWD
    assert entries["etc/shadow"].mode == 0o600 and entries["etc/shadow"].data.startswith(b"root:*:0:")
    assert "wheel:x:10:root\n" in entries["etc/group"].data.decode()
    assert entries["root"].mode == 0o700 and entries["tmp"].mode == 0o1777
    assert (entries["var/www"].uid, entries["var/spool/mail"].uid) == (33, 8)


def test_library_busybox_keeps_its_layout_with_the_busybox_from_source(fake_build):
    ctx, _ = fake_build
    entries = {e.path: e for e in b.busybox_files(ctx)}
    for path in ("bin/sh", "bin/sleep", "usr/bin/nc", "usr/bin/wget", "usr/sbin/httpd", "bin/true", "bin/false"):
        assert entries[path] == b.symlink(path, "/bin/busybox"), path
    assert entries["bin/busybox"].kind == "file" and entries["bin/busybox"].mode == 0o755
    assert entries["lib64"] == b.symlink("lib64", "lib") and "lib/libnss_files.so.2" in entries
    assert entries["tmp"].mode == 0o1777 and entries["root"].kind == entries["home"].kind == "dir"
    users = {line.split(":")[0]: line.split(":")[2] for line in entries["etc/passwd"].data.decode().splitlines()}
    assert users["root"] == "0" and users["nobody"] == "65534" and users["user"] == "1000"
    groups = entries["etc/group"].data.decode()
    assert "root:x:0:" in groups and "nobody:x:65534:" in groups
    assert b.busybox_labels()["org.opencontainers.image.version"] == b.BUSYBOX_VERSION == "1.37.0"


def test_alpine_like_root_packages_replace_applets_and_are_configured(fake_build):
    ctx, asked = fake_build
    root = b.alpine_like(ctx, ("netcat-openbsd", "iproute2", "bash", "curl", "mawk"))
    assert set(asked[-1]) >= {"libc6", "base-passwd", "ca-certificates", "netbase", "curl"}
    # a package's command wins over busybox's applet of that name, wherever either is on PATH
    assert "sbin/ip" not in root and root["bin/ip"].data == b"ip"
    assert "usr/bin/nc" not in root and root["bin/nc"] == b.symlink("bin/nc", "/etc/alternatives/nc")
    assert root["etc/alternatives/nc"] == b.symlink("etc/alternatives/nc", "/bin/nc.openbsd")
    assert root["usr/bin/awk"] == b.symlink("usr/bin/awk", "/etc/alternatives/awk")
    assert b.resolve_link(root, "bin/netcat").data == b"nc"
    # the rest of the userland is busybox
    assert root["bin/sh"] == b.symlink("bin/sh", "/bin/busybox") and root["usr/bin/wget"].target == "/bin/busybox"
    assert "usr/share/doc/base-files/README" not in root  # slim
    passwd = root["etc/passwd"].data.decode()
    assert passwd.startswith("root:x:0:0:root:/root:/bin/bash\n")  # bash is there
    assert root["etc/shadow"].gid == 42 and root["etc/shadow"].mode == 0o640
    assert root["etc/group"].data.decode() == "root:x:0:\nshadow:x:42:\nnogroup:x:65534:\n"
    assert root["etc/nsswitch.conf"].data == b"hosts: files dns\n"
    assert root["etc/ca-certificates.conf"].data == b"mozilla/A.crt\nmozilla/B.crt\n"
    assert root["etc/ssl/certs/ca-certificates.crt"].data == b"A-cert\nB-cert\n"
    assert root["etc/ssl/certs/A.pem"] == b.symlink("etc/ssl/certs/A.pem", "/usr/share/ca-certificates/mozilla/A.crt")
    assert root["etc/profile"].data == b"# profile\n" and root["root/.bashrc"].data == b"# dot.bashrc\n"
    for d in ("dev", "proc", "sys", "run"):
        assert root[d].kind == "dir"
    assert root["tmp"].mode == 0o1777 and root["root"].mode == 0o700
    # without bash, root's shell is busybox's
    plain = b.alpine_like(ctx, ())
    assert plain["etc/passwd"].data.decode().startswith("root:x:0:0:root:/root:/bin/sh\n")
    assert plain["usr/bin/nc"].target == "/bin/busybox" and "root/.bashrc" not in plain


def test_agnhost_and_picture_images(fake_build, tmp_path):
    ctx, _ = fake_build
    bin_dir = e2e_bin_dir(tmp_path)
    images = {i.ref: i for i in b.e2e_images(bin_dir)}
    root = {e.path: e for e in images["e2e-test-images/agnhost:2.66.1"].files(ctx)}
    assert root["agnhost"] == b.file_("agnhost", b"agnhost binary", 0o755)
    assert root["agnhost-2"] == b.symlink("agnhost-2", "agnhost")
    assert root["localhost.crt"].data == b"localhost.crt" and root["localhost.key"].data == b"localhost.key"
    assert root["uploads"].kind == "dir" and root["usr/local/bin/iperf"].target == "/usr/bin/iperf"
    assert root["home/user-defined-in-image"].uid == 1000
    assert "group-defined-in-image:x:50000:user-defined-in-image\n" in root["etc/group"].data.decode()
    assert root["bin/nc"].target == "/etc/alternatives/nc" and root["bin/bash"].data == b"bash"
    kitten = {e.path: e for e in images["e2e-test-images/kitten:1.8"].files(ctx)}
    assert kitten["kitten.jpg"].data == b"kitten picture" and b"kitten.jpg" in kitten["data.json"].data
    assert kitten["agnhost"] == root["agnhost"] and "nautilus.jpg" not in kitten
    nnp = {e.path: e for e in images["e2e-test-images/nonewprivs:1.4"].files(ctx)}
    assert nnp["usr/local/bin/nnp"] == b.file_("usr/local/bin/nnp", b"nnp binary", 0o6755)  # chmod +s
    assert not any(p.startswith("var/registry") for p in nnp)  # FROM alpine, not FROM agnhost
    # the fake registry's content is in agnhost and in what upstream builds FROM agnhost
    assert kitten["var/registry/pause/manifests/testing"] == root["var/registry/pause/manifests/testing"]
    assert root["var/registry/pause/manifests/testing"].data.startswith(b"sha256:")


SAMPLE_APISERVER = "e2e-test-images/sample-apiserver:1.29.2"


def test_sample_apiserver_image_is_its_binary_on_the_alpine_like_base(fake_build, tmp_path):
    ctx, asked = fake_build
    image = {i.ref: i for i in b.e2e_images(e2e_bin_dir(tmp_path))}[SAMPLE_APISERVER]
    root = {e.path: e for e in image.files(ctx)}
    # ADD sample-apiserver /sample-apiserver: the binary as built (0755, root's)
    assert root["sample-apiserver"] == b.file_("sample-apiserver", b"sample-apiserver binary", 0o755)
    # FROM alpine: busybox's userland and the base files, no tools of agnhost's, not FROM agnhost
    assert set(asked[-1]) == set(b.ALPINE_LIKE_BASE)
    assert root["bin/sh"] == b.symlink("bin/sh", "/bin/busybox") and root["tmp"].mode == 0o1777
    assert root["etc/passwd"].data.decode().startswith("root:x:0:0:root:/root:/bin/sh\n")
    assert root["etc/ssl/certs/ca-certificates.crt"].kind == "file"
    assert not any(p.startswith("var/registry") or p == "agnhost" for p in root)
    assert image.labels()["org.opencontainers.image.version"] == "1.29.2"


def test_sample_apiserver_image_builds_reproducibly(fake_build, tmp_path):
    bin_dir = e2e_bin_dir(tmp_path)
    image = {i.ref: i for i in b.e2e_images(bin_dir)}[SAMPLE_APISERVER]
    one = b.build(image, tmp_path / "one", cache=tmp_path / "c1")
    two = b.build(image, tmp_path / "two", cache=tmp_path / "c2")
    assert one.manifest_digest == two.manifest_digest
    _, _, config = read_layout(one.layout)
    assert config["config"]["Entrypoint"] == ["/sample-apiserver"] and "Cmd" not in config["config"]
    # another binary is another image
    (bin_dir / "sample-apiserver").write_bytes(b"another build")
    rebuilt = {i.ref: i for i in b.e2e_images(bin_dir)}[SAMPLE_APISERVER]
    other = b.build(rebuilt, tmp_path / "one", cache=tmp_path / "c1")
    assert other.manifest_digest != one.manifest_digest


def test_sample_apiserver_image_refuses_a_binary_of_another_release(fake_build, tmp_path, monkeypatch):
    ctx, _ = fake_build
    bin_dir = e2e_bin_dir(tmp_path)
    (bin_dir / "sample-apiserver.version").write_text("v0.33.7\n")
    image = {i.ref: i for i in b.e2e_images(bin_dir)}[SAMPLE_APISERVER]
    with pytest.raises(RuntimeError, match=r"v0\.33\.7, not the pinned v0\.29\.2"):
        image.files(ctx)
    # a pinned release whose upstream tag is not known names no image
    monkeypatch.setattr(b, "versions_env", lambda: {"SAMPLE_APISERVER_VERSION": "v0.99.0"})
    with pytest.raises(SystemExit, match=r"v0\.99\.0"):
        b.sample_apiserver_image(bin_dir)


def test_the_pinned_sample_apiserver_release_is_the_one_its_tag_was_built_from():
    """versions.env's release has the tag upstream's manifest names (test/images/sample-apiserver/Makefile at
    VERSION 1.29.2 checks out tags/v0.29.2)."""
    pinned = b.versions_env()["SAMPLE_APISERVER_VERSION"]
    assert pinned == "v0.29.2" and b.SAMPLE_APISERVER_TAGS[pinned] == "1.29.2"


def _pinned_kubernetes_file(rel):
    """A file of the pinned k8s.io/kubernetes module, when the Go module cache has it."""
    if shutil.which("go") is None:
        return None
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    path = Path(modcache) / f"k8s.io/kubernetes@{b.versions_env()['KUBERNETES_VERSION']}" / rel
    return path.read_text() if path.is_file() else None


@pytest.mark.skipif(_pinned_kubernetes_file("test/images/sample-apiserver/Dockerfile") is None,
                    reason="the pinned k8s.io/kubernetes module is not in the Go module cache")
def test_the_sample_apiserver_image_is_its_dockerfiles(tmp_path):
    """test/images/sample-apiserver: FROM $BASEIMAGE (alpine on linux), the binary ADDed at /, its ENTRYPOINT."""
    import re

    dockerfile = _pinned_kubernetes_file("test/images/sample-apiserver/Dockerfile")
    baseimage = _pinned_kubernetes_file("test/images/sample-apiserver/BASEIMAGE")
    assert re.search(r"^linux/amd64=alpine:", baseimage, re.M) and re.search(r"^FROM \$BASEIMAGE$", dockerfile, re.M)
    assert re.findall(r"^(?:ADD|COPY) (.+)$", dockerfile, re.M) == ["sample-apiserver /sample-apiserver"]
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", dockerfile, re.M).group(1))
    assert not re.search(r"^(WORKDIR|EXPOSE|CMD|ENV|USER) ", dockerfile, re.M)
    image = {i.ref: i for i in b.e2e_images(e2e_bin_dir(tmp_path))}[SAMPLE_APISERVER]
    assert image.config["Entrypoint"] == entrypoint == ["/sample-apiserver"]
    assert set(image.config) == {"Entrypoint", "Env", "WorkingDir"}  # alpine's Env; root's WorkingDir


def test_build_binaries_builds_the_pinned_sample_apiserver():
    """With --e2e (the conformance targets; no test of `make test` needs it): a module of its own requiring the
    pinned release, its root package built with CGO off, the version noted."""
    import re

    script = (ROOT / "devstack" / "build-binaries.sh").read_text()
    assert "sample-apiserver" not in re.search(r"^test_bins=\((.*)\)$", script, re.M).group(1).split()
    assert "sample-apiserver" in re.search(r"--e2e\) e2e_bins=\((.*)\) ;;$", script, re.M).group(1).split()
    assert "require k8s.io/sample-apiserver $SAMPLE_APISERVER_VERSION" in script
    assert '_ "k8s.io/sample-apiserver"' in script and "k8s.io/sample-apiserver >&2" in script
    assert re.search(r"^export .*\bCGO_ENABLED=0\b", script, re.M)
    assert 'echo "$SAMPLE_APISERVER_VERSION" > "$out/sample-apiserver.version"' in script
    assert "SAMPLE_APISERVER_VERSION" in b.versions_env()


def test_agnhost_serves_the_stacks_own_pause_3_10_2_as_pause_testing(fake_build, tmp_path, monkeypatch):
    """/var/registry holds the very pause:3.10.2 build the stack's registry serves, and agnhost's key follows it."""
    ctx, _ = fake_build
    image = {i.ref: i for i in b.e2e_images(e2e_bin_dir(tmp_path))}["e2e-test-images/agnhost:2.66.1"]
    root = {e.path: e for e in image.files(ctx)}
    pause = b.build({i.ref: i for i in b.IMAGES}["pause:3.10.2"], tmp_path / "elsewhere", cache=ctx.cache)
    index_digest = root["var/registry/pause/manifests/testing"].data.decode().strip()
    index = json.loads(root[b.digest_path("var/registry/pause/manifests", index_digest)].data)
    assert [m["digest"] for m in index["manifests"]] == [pause.manifest_digest]
    assert root[b.digest_path("var/registry/pause/manifests", pause.manifest_digest)].data == pause.manifest
    layer = root[b.digest_path("var/registry/pause/blobs", pause.layer_digests[0])].data
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as tar:
        assert tar.extractfile("pause").read() == b"static pause.c [('PAUSE_VERSION', '3.10.2')]"
    key = image.key(ctx)
    assert f"registry pause:testing {pause.manifest_digest}" in key

    # another pause build: another key, so the cached agnhost layout is not reused
    b._fake_registry_builds.cache_clear()
    monkeypatch.setattr(b, "compile_static", lambda source, ctx, defines=None: b"another pause")
    assert image.key(ctx) != key


# --- the fake registry's content (agnhost's /var/registry) ------------------------------------


def _registry_tree(tmp_path, entries):
    """The entries extracted from the layer they make, as the runtime unpacks the image: var/registry."""
    root = tmp_path / "rootfs"
    with tarfile.open(fileobj=io.BytesIO(b.layer_tar(entries, 0))) as tar:
        tar.extractall(root, filter="data")
    return root / "var" / "registry"


def _serve(registry, path):
    """What registryserver.go answers for a GET (with --private, once logged in): status, headers, body."""
    parts = path.removeprefix("/v2/").split("/")
    if len(parts) < 3:
        return 404, {}, b""
    name, kind, ref = parts[:3]
    if kind == "manifests" and not ref.startswith("sha256:"):
        tag_file = registry / name / "manifests" / ref
        if not tag_file.is_file():
            return 404, {}, b""
        return 307, {"Location": path.replace(ref, tag_file.read_text().strip(), 1)}, b""
    algo, _, hexdigest = ref.partition(":")
    data = registry / name / kind / algo / hexdigest[:2] / hexdigest / "data"
    if kind not in ("manifests", "blobs") or not data.is_file():
        return 404, {}, b""
    body = data.read_bytes()
    if kind == "blobs":
        return 200, {"Content-Type": "application/octet-stream"}, body
    media_type = json.loads(body).get("mediaType")
    return 200, {"Content-Type": media_type} if media_type else {}, body


def _get(registry, path):
    status, headers, body = _serve(registry, path)
    if status == 307:
        status, headers, body = _serve(registry, headers["Location"])
    assert status == 200, path
    return headers, body


def test_fake_registry_tree_is_laid_out_where_registryserver_reads_it(tmp_path):
    built = b.build(FAKE, tmp_path / "layout", platform_=("arm64", "v8"), epoch=0)
    tree = _registry_tree(tmp_path, b.fake_registry_entries("pause", "testing", [built]))

    # every content file sits at the path of its own digest: <kind>/sha256/<first two>/<hex>/data
    files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    for rel in files:
        if rel == "pause/manifests/testing":
            continue
        _name, _kind, algo, prefix, hexdigest, leaf = rel.split("/")
        assert (algo, leaf, prefix) == ("sha256", "data", hexdigest[:2]), rel
        assert hashlib.sha256((tree / rel).read_bytes()).hexdigest() == hexdigest, rel
    # readable by the spec's registry container (uid 5123)
    for p in [tree, *tree.rglob("*")]:
        assert p.stat().st_mode & 0o777 == (0o755 if p.is_dir() else 0o644), p
    assert (tree / "pause" / "blobs").is_dir()

    # a client's pull of pause:testing: tag -> 307 -> index -> manifest -> config and layer, each its digest
    tag_digest = (tree / "pause" / "manifests" / "testing").read_text()
    assert tag_digest.endswith("\n") and tag_digest.startswith("sha256:")  # as `echo $digest` writes it
    headers, index_body = _get(tree, "/v2/pause/manifests/testing")
    assert headers["Content-Type"] == b.MT_INDEX and b.sha256(index_body) == tag_digest.strip()
    index = json.loads(index_body)
    assert index["schemaVersion"] == 2 and index["mediaType"] == b.MT_INDEX
    [entry] = index["manifests"]
    assert entry == {"mediaType": b.MT_MANIFEST, "digest": built.manifest_digest, "size": len(built.manifest),
                     "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}}
    headers, manifest_body = _get(tree, f"/v2/pause/manifests/{entry['digest']}")
    assert headers["Content-Type"] == b.MT_MANIFEST and manifest_body == built.manifest
    manifest = json.loads(manifest_body)
    blobs = [manifest["config"], *manifest["layers"]]
    for desc in blobs:
        headers, data = _get(tree, f"/v2/pause/blobs/{desc['digest']}")
        assert headers["Content-Type"] == "application/octet-stream"
        assert b.sha256(data) == desc["digest"] and len(data) == desc["size"]
    assert blobs[0]["digest"] == built.config_digest and [d["digest"] for d in blobs[1:]] == built.layer_digests
    # nothing else is there: the tag, the index, the manifest, the config and the layer
    assert len(files) == 5
    assert _serve(tree, "/v2/pause/manifests/latest")[0] == 404


def test_fake_registry_leaves_windows_out_and_is_deterministic(tmp_path):
    linux = b.build(FAKE, tmp_path / "linux", platform_=PLATFORM, epoch=0)
    windows = b.build(FAKE, tmp_path / "windows", platform_=PLATFORM, epoch=0)
    config = json.loads(b.blob_bytes(windows, windows.config_digest))
    config["os"] = "windows"
    data = b.canonical_json(config)
    (windows.layout / "blobs" / "sha256" / b.sha256(data).removeprefix("sha256:")).write_bytes(data)
    windows = dataclasses.replace(windows, config_digest=b.sha256(data), manifest_digest="sha256:" + "e" * 64,
                                  manifest=b'{"mediaType":"%s","windows":true}' % b.MT_MANIFEST.encode())
    entries = b.fake_registry_entries("pause", "testing", [linux, windows])
    assert entries == b.fake_registry_entries("pause", "testing", [linux, windows])  # same bytes every time
    tree = _registry_tree(tmp_path, entries)
    _, index_body = _get(tree, "/v2/pause/manifests/testing")
    assert [m["digest"] for m in json.loads(index_body)["manifests"]] == [linux.manifest_digest]
    everything = b"".join(p.read_bytes() for p in tree.rglob("*") if p.is_file())
    assert b'"windows"' not in everything and data not in everything


def test_nginx_image_files(fake_build):
    ctx, _ = fake_build
    image = {i.ref: i for i in b.IMAGES}["e2e-test-images/nginx:1.27.0-2"]
    root = {e.path: e for e in image.files(ctx)}
    assert root["etc/nginx/nginx.conf"].data.decode().startswith("user  nginx;\n")
    assert "listen       80;" in root["etc/nginx/conf.d/default.conf"].data.decode()
    assert "include /etc/nginx/conf.d/*.conf;" in root["etc/nginx/nginx.conf"].data.decode()
    assert root["docker-entrypoint.sh"].mode == 0o755 and root["docker-entrypoint.sh"].data.startswith(b"#!/bin/sh\n")
    assert root["var/log/nginx/access.log"].target == "/dev/stdout"
    assert root["var/log/nginx/error.log"].target == "/dev/stderr"
    assert "etc/nginx/sites-enabled/default" not in root and root["usr/share/nginx/html/50x.html"].kind == "file"
    assert "nginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin\n" in root["etc/passwd"].data.decode()


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="not a Debian system")
def test_debian_root_is_merged_usr_configured_with_a_dpkg_database(fake_build):
    ctx, _ = fake_build
    root = b.debian_root(ctx, ["apt", "base-files", "base-passwd", "dash", "libc6", "mawk"])
    assert root["bin"] == b.symlink("bin", "usr/bin") and root["lib64"] == b.symlink("lib64", "usr/lib64")
    assert root["usr/bin/dash"].data == b"dash" and "bin/dash" not in root
    assert b.resolve_link(root, "bin/sh").data == b"dash"
    assert b.resolve_link(root, "usr/bin/awk").data == b"mawk"
    assert b.resolve_link(root, "lib64/ld-linux-x86-64.so.2").data == b"ld"
    assert "_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n" in root["etc/passwd"].data.decode()
    status = root["var/lib/dpkg/status"].data.decode()
    stanzas = status.strip().split("\n\n")
    assert [s.splitlines()[0] for s in stanzas] == [f"Package: {n}" for n in sorted(
        ["apt", "base-files", "base-passwd", "dash", "libc6", "mawk"])]  # fmt: skip
    assert all(s.splitlines()[1] == "Status: install ok installed" for s in stanzas)
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip()
    assert root[f"var/lib/dpkg/info/libc6:{arch}.list"].data.decode().splitlines()[:2] == [
        "/.", "/lib/x86_64-linux-gnu/libc.so.6"]  # fmt: skip
    assert root["var/lib/dpkg/info/dash.list"].data == b"/.\n/bin/dash\n/bin/sh\n"


def _built_busybox():
    found = sorted((b.DEFAULT_CACHE / "bin").glob(f"busybox-{b.BUSYBOX_VERSION}-*"))
    return found[-1] if found else None


@pytest.mark.skipif(_built_busybox() is None, reason="busybox has not been built into the default cache yet")
def test_built_busybox_keeps_environment_names_that_are_not_identifiers(tmp_path):
    """The ConfigMap env specs print `sh -c env` and look for data-1=value-1 (Debian's busybox drops it)."""
    busybox = _built_busybox()
    (tmp_path / "env").symlink_to(busybox)  # as the image links the applet
    out = subprocess.run(
        [busybox, "sh", "-c", "env"], env={"data-1": "value-1", "p-data-1": "value-1", "PATH": str(tmp_path)},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "data-1=value-1" in out.splitlines() and "p-data-1=value-1" in out.splitlines()
    applets = {p.rsplit("/", 1)[-1] for p in b.busybox_applets(busybox)}
    assert {"sh", "sleep", "echo", "cat", "id", "nc", "wget", "httpd", "true", "false", "env", "ip"} <= applets
    assert subprocess.run([busybox], capture_output=True, text=True).stdout.startswith("BusyBox v1.37.0 ")


def _static_gcc():
    if shutil.which("gcc") is None:
        return False
    out = subprocess.run(["gcc", "-print-file-name=libc.a"], capture_output=True, text=True).stdout.strip()
    return Path(out).is_file()


@pytest.mark.skipif(not _static_gcc(), reason="gcc with a static libc is not installed")
def test_pause_binary(tmp_path):
    ctx = b.Context(cache=tmp_path)
    [entry] = b.pause_files(ctx)
    assert entry.path == "pause" and entry.mode == 0o755
    assert b.pause_files(ctx)[0].data == entry.data  # cached and stable
    exe = tmp_path / "pause"
    exe.write_bytes(entry.data)
    exe.chmod(0o755)

    version = subprocess.run([exe, "-v"], capture_output=True, text=True, timeout=10)
    assert version.returncode == 0 and "3.10.1" in version.stdout

    proc = subprocess.Popen([exe], stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)
        assert proc.poll() is None  # not PID 1 here: warns, keeps running
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert "not as pid 1" in proc.stderr.read()
    finally:
        proc.kill()


# --- registry check and push skip ------------------------------------------------------------


class _Registry(http.server.BaseHTTPRequestHandler):
    manifests: ClassVar[dict[str, bytes]] = {}

    def do_GET(self):
        body = self.manifests.get(self.path)
        if body is None or b.MT_MANIFEST not in self.headers.get("Accept", ""):
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", b.MT_MANIFEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub_registry():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", _Registry.manifests
    server.shutdown()
    server.server_close()
    _Registry.manifests.clear()


def test_remote_digest(stub_registry):
    registry, manifests = stub_registry
    manifests["/v2/library/busybox/manifests/1.36"] = b'{"schemaVersion":2}'
    assert b.remote_digest(registry, "library/busybox", "1.36") == b.sha256(b'{"schemaVersion":2}')
    assert b.remote_digest(registry, "pause", "3.10.1") is None


def test_main_skips_push_when_registry_has_the_digest(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(b, "IMAGES", [FAKE])
    monkeypatch.setattr(b, "host_platform", lambda: PLATFORM)
    monkeypatch.setattr(b.shutil, "which", lambda name: "/usr/bin/" + name)
    pushed = []
    monkeypatch.setattr(b, "push", lambda built, registry: pushed.append(built.manifest_digest))
    remote = {}
    monkeypatch.setattr(b, "remote_digest", lambda registry, repo, tag: remote.get(f"{repo}:{tag}"))
    args = ["--registry", "127.0.0.1:1", "--cache", str(tmp_path)]

    assert b.main(args) == 0
    assert len(pushed) == 1 and "pushed" in capsys.readouterr().out
    assert (tmp_path / "oci" / "test" / "fake" / "1.0" / "index.json").is_file()

    remote["test/fake:1.0"] = pushed[0]
    assert b.main(args) == 0
    assert len(pushed) == 1 and "up to date" in capsys.readouterr().out

    remote["test/fake:1.0"] = "sha256:" + "0" * 64
    assert b.main([*args, "fake"]) == 0
    assert len(pushed) == 2


def test_main_no_push(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(b, "IMAGES", [FAKE])
    monkeypatch.setattr(b, "push", lambda *a: pytest.fail("pushed with --no-push"))
    assert b.main(["--no-push", "--cache", str(tmp_path)]) == 0
    assert "built" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        b.main(["--cache", str(tmp_path)])  # neither --registry nor --no-push
