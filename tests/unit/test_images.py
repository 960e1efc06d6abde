"""Unit tests for images/build.py: reproducible layers, OCI layout shape, push-skip logic.

Pure: no registry and no network (the HTTP test talks to a stub on 127.0.0.1). The tests that
need /bin/busybox or a static-capable gcc are skipped where those are missing.
"""

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


def test_image_table():
    refs = {i.ref: i for i in b.IMAGES}
    assert set(refs) >= {"pause:3.10.1", "library/busybox:1.36"}
    pause = refs["pause:3.10.1"]
    assert pause.config["Entrypoint"] == ["/pause"] and pause.config["User"] == "65535:65535"
    assert refs["library/busybox:1.36"].config["Cmd"] == ["sh"]
    for image in b.IMAGES:
        assert set(image.config) <= {"Cmd", "Entrypoint", "User", "Env", "WorkingDir", "ExposedPorts"}


def test_select_by_alias():
    assert [i.ref for i in b.select(["busybox"])] == ["library/busybox:1.36"]
    assert [i.ref for i in b.select(["library/busybox:1.36", "pause", "busybox"])] == [
        "library/busybox:1.36",
        "pause:3.10.1",
    ]
    assert b.select([]) == b.IMAGES
    with pytest.raises(SystemExit):
        b.select(["nope"])


@pytest.mark.skipif(not b.BUSYBOX.is_file(), reason="busybox-static is not installed")
def test_busybox_files():
    entries = {e.path: e for e in b.busybox_files(b.Context(cache=Path("/nonexistent")))}
    assert entries["bin/busybox"].kind == "file" and entries["bin/busybox"].mode == 0o755
    for applet in ("sh", "sleep", "echo", "cat", "id", "nc", "wget", "httpd", "true", "false"):
        links = [e for p, e in entries.items() if p.rsplit("/", 1)[-1] == applet]
        assert links and all(e.kind == "symlink" and e.target == "/bin/busybox" for e in links), applet
    assert entries["tmp"].mode == 0o1777
    assert entries["root"].kind == entries["home"].kind == "dir"
    passwd = entries["etc/passwd"].data.decode()
    users = {line.split(":")[0]: line.split(":")[2] for line in passwd.splitlines()}
    assert users["root"] == "0" and users["nobody"] == "65534" and users["user"] == "1000"
    groups = entries["etc/group"].data.decode()
    assert "root:x:0:" in groups and "nobody:x:65534:" in groups
    labels = b.busybox_labels()
    assert labels["org.opencontainers.image.version"].startswith("1.")


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
