#!/usr/bin/env python3
"""Build the stack's container images from local binaries and push them to a local registry.

Nothing can be pulled from the internet here, so the images the tests need are assembled into OCI image
layouts and pushed with skopeo to the local registry that containerd mirrors docker.io and registry.k8s.io
to: the pod sandbox's pause image from our own C source, and every image upstream's node e2e specs name
(test/utils/image/manifest.go at the pinned release) built the way upstream builds it, from the same
sources (busybox from its release tarball, agnhost and nnp from the pinned Kubernetes module, kitten and
nautilus from that module's test/images, sample-apiserver from the k8s.io/sample-apiserver release its tag was
built from) and Debian's packages of the tools where upstream installs Alpine's (curl, nc, dig, ip, socat, bash,
nginx, ...). When --bin-dir holds build-binaries.sh --cluster's output,
the images `kubeadm init` pulls are added (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
etcd, coredns/coredns) with metrics-server/metrics-server (for `kubectl top`, manifests/cluster/metrics-server.yaml):
upstream's binaries on upstream's distroless bases, made of Debian's packages. When it holds build-binaries.sh --csi's
output, the hostpath CSI driver's sidecars (registry.k8s.io/sig-storage/csi-provisioner, csi-attacher, ...) are added.

Builds are reproducible (fixed mtimes and owners, sorted tar entries, gzip mtime 0, canonical
JSON), so an unchanged input gives the same manifest digest, and the push is skipped when the
registry already serves that digest. An image whose inputs (packages, binaries, this file) are
unchanged is not even re-assembled: its layout is reused.

Usage: python images/build.py --registry 127.0.0.1:5050 [--cache DIR] [IMAGE ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import functools
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path("/var/cache/kopflet/images")

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GZIP_LEVEL = 9


def source_date_epoch() -> int:
    """Every timestamp in an image; SOURCE_DATE_EPOCH overrides the default of 0 (1970)."""
    return int(os.environ.get("SOURCE_DATE_EPOCH", "0"))


def rfc3339(epoch: int) -> str:
    """The config's `created` field, derived from the fixed epoch so it never varies."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# --- layer entries ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One file system object of a layer; owner and mode are explicit, never taken from the host."""

    path: str  # relative, no leading slash: "bin/sh"
    kind: str  # "file", "dir" or "symlink"
    mode: int = 0o755
    data: bytes = b""
    target: str = ""  # symlink target
    uid: int = 0
    gid: int = 0
    xattrs: tuple[tuple[str, bytes], ...] = ()  # extended attributes, e.g. file capabilities


def file_(
    path: str, data: bytes, mode: int = 0o644, uid: int = 0, gid: int = 0, xattrs: dict[str, bytes] | None = None
) -> Entry:
    """A regular file."""
    return Entry(
        path.strip("/"), "file", mode, data=data, uid=uid, gid=gid, xattrs=tuple(sorted((xattrs or {}).items()))
    )


CAP_NET_BIND_SERVICE = 10


def file_capabilities(*caps: int) -> dict[str, bytes]:
    """The security.capability xattr `setcap <caps>=+ep` writes: a VFS_CAP_REVISION_2 record with the
    effective flag, the capabilities permitted, none inheritable (linux/capability.h's vfs_cap_data)."""
    permitted = sum(1 << c for c in caps)
    words = [0x02000000 | 0x000001, permitted & 0xFFFFFFFF, 0, permitted >> 32, 0]
    return {"security.capability": b"".join(w.to_bytes(4, "little") for w in words)}


def dir_(path: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> Entry:
    """A directory."""
    return Entry(path.strip("/"), "dir", mode, uid=uid, gid=gid)


def symlink(path: str, target: str) -> Entry:
    """A symbolic link (mode is ignored by Linux; 0777 as every tool writes it)."""
    return Entry(path.strip("/"), "symlink", 0o777, target=target)


def with_parents(entries: Iterable[Entry]) -> list[Entry]:
    """Add a 0755 root-owned directory for every missing parent, so extraction never guesses."""
    by_path = {e.path: e for e in entries}
    for path in list(by_path):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            by_path.setdefault("/".join(parts[:i]), dir_("/".join(parts[:i])))
    return [by_path[p] for p in sorted(by_path)]


def layer_tar(entries: Iterable[Entry], epoch: int | None = None) -> bytes:
    """The uncompressed layer: sorted paths, fixed mtime, numeric owners only, no host metadata."""
    mtime = source_date_epoch() if epoch is None else epoch
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in with_parents(entries):
            info = tarfile.TarInfo(e.path)
            info.mode, info.uid, info.gid, info.mtime = e.mode, e.uid, e.gid, mtime
            info.uname = info.gname = ""
            if e.xattrs:
                # PAX records as GNU tar, Go's archive/tar and containerd's unpacker read them; a value that is not
                # UTF-8 round-trips through surrogate escapes (tarfile marks the header hdrcharset=BINARY).
                info.pax_headers = {f"SCHILY.xattr.{k}": v.decode("utf-8", "surrogateescape") for k, v in e.xattrs}
            if e.kind == "file":
                info.type, info.size = tarfile.REGTYPE, len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
            elif e.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif e.kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, e.target
                tar.addfile(info)
            else:
                raise ValueError(f"unknown entry kind {e.kind!r} for {e.path}")
    return buf.getvalue()


def gzip_bytes(data: bytes) -> bytes:
    """Gzip with mtime 0 and no file name in the header, so the output depends on data alone."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=GZIP_LEVEL) as gz:
        gz.write(data)
    return buf.getvalue()


def sha256(data: bytes) -> str:
    """An OCI digest string."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(obj: object) -> bytes:
    """Sorted keys and no whitespace: the same object always serialises to the same bytes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# --- images ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What a files() function may use: where to cache expensive steps (compiles)."""

    cache: Path


@dataclass(frozen=True)
class Image:
    """One image: a row of IMAGES. files() returns the single layer; config is the OCI config."""

    repo: str  # as the registry serves it: "library/busybox" for docker.io/library/busybox
    tag: str
    files: Callable[[Context], list[Entry]]
    config: dict[str, object]  # Cmd, Entrypoint, User, Env, WorkingDir, ...
    labels: Callable[[], dict[str, str]] = field(default=lambda: {})
    # What the layer is made of (package and binary digests), when files() is costly: an unchanged
    # key reuses the layout already built instead of assembling the layer again.
    key: Callable[[Context], list[str]] | None = None

    @property
    def ref(self) -> str:
        """repo:tag, the name used on the command line and in output."""
        return f"{self.repo}:{self.tag}"

    @property
    def aliases(self) -> set[str]:
        """Names that select this image on the command line: busybox, library/busybox:1.36, ..."""
        short = self.repo.rsplit("/", 1)[-1]
        return {self.repo, self.ref, short, f"{short}:{self.tag}"}


@dataclass(frozen=True)
class Built:
    """A built image: its layout on disk and the digests that identify it."""

    image: Image
    layout: Path
    manifest_digest: str
    manifest: bytes
    config_digest: str
    layer_digests: list[str]
    diff_ids: list[str]


def host_platform() -> tuple[str, str | None]:
    """The OCI architecture (and variant) of this host, from dpkg when there is one."""
    dpkg_to_oci = {
        "amd64": ("amd64", None),
        "arm64": ("arm64", "v8"),
        "armhf": ("arm", "v7"),
        "armel": ("arm", "v5"),
        "i386": ("386", None),
        "ppc64el": ("ppc64le", None),
        "s390x": ("s390x", None),
        "riscv64": ("riscv64", None),
    }
    try:
        out = subprocess.run(
            ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if out in dpkg_to_oci:
            return dpkg_to_oci[out]
    except (OSError, subprocess.CalledProcessError):
        pass
    machine_to_oci = {"x86_64": "amd64", "aarch64": "arm64", "i686": "386", "ppc64le": "ppc64le"}
    machine = platform.machine()
    return machine_to_oci.get(machine, machine), None


def image_config(
    image: Image, diff_ids: list[str], arch: str, variant: str | None, epoch: int
) -> dict[str, object]:
    """The OCI image config: platform, runtime config, labels and the layer diff_ids."""
    runtime = dict(image.config)
    labels = image.labels()
    if labels:
        runtime["Labels"] = labels
    cfg: dict[str, object] = {
        "created": rfc3339(epoch),
        "architecture": arch,
        "os": "linux",
        "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": rfc3339(epoch), "created_by": f"kopflet images/build.py {image.ref}"}],
    }
    if variant:
        cfg["variant"] = variant
    return cfg


def cached_gzip(tar: bytes, cache: Path | None) -> bytes:
    """Gzip a layer, reusing the result stored under its uncompressed digest (diff_id)."""
    if cache is None:
        return gzip_bytes(tar)
    path = cache / "layers" / (hashlib.sha256(tar).hexdigest() + ".tar.gz")
    if path.is_file():
        return path.read_bytes()
    gz = gzip_bytes(tar)
    write_atomic(path, gz)
    return gz


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a temp file and rename, so an interrupted run never leaves a torn blob."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_layout(layout: Path, blobs: dict[str, bytes], index: dict[str, object]) -> None:
    """Write an OCI image layout holding one tag; blobs already there are kept, stale ones removed."""
    blob_dir = layout / "blobs" / "sha256"
    blob_dir.mkdir(parents=True, exist_ok=True)
    for digest, data in blobs.items():
        path = blob_dir / digest.removeprefix("sha256:")
        if not (path.is_file() and path.stat().st_size == len(data)):
            write_atomic(path, data)
    wanted = {d.removeprefix("sha256:") for d in blobs}
    for path in blob_dir.iterdir():
        if path.name not in wanted:
            path.unlink()
    write_atomic(layout / "oci-layout", canonical_json({"imageLayoutVersion": "1.0.0"}))
    write_atomic(layout / "index.json", canonical_json(index))


INPUTS_FILE = "kopflet-inputs"  # in a layout: the fingerprint of the inputs it was built from


@functools.cache
def builder_digest() -> str:
    """This file's digest: a change to how images are assembled invalidates every reused layout."""
    return sha256(Path(__file__).read_bytes())


def inputs_fingerprint(image: Image, key: list[str], arch: str, variant: str | None, epoch: int) -> str:
    """Everything an image's layout follows from, when its files() declares a key."""
    return sha256(
        canonical_json(
            {
                "ref": image.ref,
                "key": key,
                "config": image.config,
                "labels": image.labels(),
                "platform": [arch, variant],
                "epoch": epoch,
                "builder": builder_digest(),
            }
        )
    )


def load_layout(image: Image, layout: Path, fingerprint: str) -> Built | None:
    """The image already in `layout` if it was built from the same inputs and is whole, else None."""
    blob_dir = layout / "blobs" / "sha256"
    try:
        if (layout / INPUTS_FILE).read_text() != fingerprint:
            return None
        [desc] = json.loads((layout / "index.json").read_bytes())["manifests"]
        manifest = (blob_dir / desc["digest"].removeprefix("sha256:")).read_bytes()
        if sha256(manifest) != desc["digest"]:
            return None
        parsed = json.loads(manifest)
        for d in [parsed["config"], *parsed["layers"]]:
            if (blob_dir / d["digest"].removeprefix("sha256:")).stat().st_size != d["size"]:
                return None
        config = json.loads((blob_dir / parsed["config"]["digest"].removeprefix("sha256:")).read_bytes())
        return Built(
            image,
            layout,
            desc["digest"],
            manifest,
            parsed["config"]["digest"],
            [d["digest"] for d in parsed["layers"]],
            list(config["rootfs"]["diff_ids"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def build(
    image: Image,
    out: Path,
    *,
    cache: Path | None = None,
    platform_: tuple[str, str | None] | None = None,
    epoch: int | None = None,
) -> Built:
    """Build one image into the OCI layout at `out` and return its digests."""
    epoch = source_date_epoch() if epoch is None else epoch
    arch, variant = platform_ or host_platform()
    ctx = Context(cache=cache or out.parent)
    fingerprint = None
    if image.key is not None:
        fingerprint = inputs_fingerprint(image, image.key(ctx), arch, variant, epoch)
        reused = load_layout(image, out, fingerprint)
        if reused is not None:
            return reused
    entries = image.files(ctx)
    tar = layer_tar(entries, epoch)
    gz = cached_gzip(tar, cache)
    diff_id, layer_digest = sha256(tar), sha256(gz)

    config = canonical_json(image_config(image, [diff_id], arch, variant, epoch))
    config_digest = sha256(config)
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {"mediaType": MT_CONFIG, "digest": config_digest, "size": len(config)},
            "layers": [{"mediaType": MT_LAYER, "digest": layer_digest, "size": len(gz)}],
            "annotations": image.labels(),
        }
    )
    manifest_digest = sha256(manifest)
    plat: dict[str, str] = {"architecture": arch, "os": "linux"}
    if variant:
        plat["variant"] = variant
    index = {
        "schemaVersion": 2,
        "mediaType": MT_INDEX,
        "manifests": [
            {
                "mediaType": MT_MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest),
                "platform": plat,
                "annotations": {"org.opencontainers.image.ref.name": image.tag},
            }
        ],
    }
    (out / INPUTS_FILE).unlink(missing_ok=True)
    write_layout(out, {layer_digest: gz, config_digest: config, manifest_digest: manifest}, index)
    if fingerprint is not None:
        write_atomic(out / INPUTS_FILE, fingerprint.encode())
    return Built(image, out, manifest_digest, manifest, config_digest, [layer_digest], [diff_id])


# --- image contents --------------------------------------------------------------------------


def compile_static(source: Path, ctx: Context, defines: dict[str, str] | None = None) -> bytes:
    """Compile a C file into a static, stripped binary; cached by source, flags and toolchain."""
    flags = ["-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror"]
    flags += [f'-D{k}="{v}"' for k, v in sorted((defines or {}).items())]
    gcc_version = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True).stdout
    libc_a = subprocess.run(
        ["gcc", "-print-file-name=libc.a"], capture_output=True, text=True, check=True
    ).stdout.strip()
    key = hashlib.sha256()
    for part in (source.read_bytes(), "\0".join(flags).encode(), gcc_version.encode()):
        key.update(hashlib.sha256(part).digest())
    if os.path.isfile(libc_a):
        key.update(hashlib.sha256(Path(libc_a).read_bytes()).digest())
    cached = ctx.cache / "bin" / f"{source.stem}-{key.hexdigest()[:32]}"
    if cached.is_file():
        return cached.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / source.stem
        subprocess.run(["gcc", *flags, "-o", str(out), str(source)], check=True, cwd=tmp)
        data = out.read_bytes()
    write_atomic(cached, data)
    return data


PAUSE_VERSION = "3.10.1"  # the sandbox_image tag containerd asks for
E2E_PAUSE_VERSION = "3.10.2"  # imageutils.Pause / GetPauseImageName() at the pinned release


def pause_image(version: str) -> Image:
    """Only /pause, as upstream's sandbox image has (3.10.1 and 3.10.2 differ only on Windows)."""

    def files(ctx: Context) -> list[Entry]:
        binary = compile_static(HERE / "pause" / "pause.c", ctx, {"PAUSE_VERSION": version})
        return [file_("pause", binary, 0o755)]

    return Image(
        repo="pause",  # registry.k8s.io/pause
        tag=version,
        files=files,
        config={"Entrypoint": ["/pause"], "User": "65535:65535", "Env": [f"PATH={DEFAULT_PATH}"], "WorkingDir": "/"},
        labels=lambda: {"org.opencontainers.image.title": "pause", "org.opencontainers.image.version": version},
    )


def pause_files(ctx: Context) -> list[Entry]:
    """The sandbox image's single file, for the tag containerd asks for."""
    return pause_image(PAUSE_VERSION).files(ctx)


# --- Debian packages -------------------------------------------------------------------------
# Upstream's images install Alpine packages; ours take Debian's packages of the same tools. apt resolves
# each package set's dependency closure as if nothing were installed (an empty dpkg status) and downloads
# the .debs into the cache; their data is unpacked into the layer (maintainer scripts do not run: what
# they would do that matters in an image is done explicitly, in configure()).

DEBIAN_MIRROR = os.environ.get("KOPFLET_DEBIAN_MIRROR", "http://deb.debian.org/debian")
APT_LISTS = Path("/var/lib/apt/lists")
# No lock on the system's dpkg (nothing is installed), no _apt sandbox for private directories, no
# recommends (as Alpine's apk and upstream's Dockerfiles install), SHA-256 as the hash apt reports.
APT_OPTIONS = ["-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root", "-o", "APT::Install-Recommends=false",
               "-o", "Acquire::ForceHash=SHA256"]  # fmt: skip
PATH_DIRS = ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "usr/local/sbin")


@dataclass(frozen=True)
class Deb:
    """One .deb of a resolved closure, as apt names it."""

    name: str
    version: str
    filename: str
    size: int
    digest: str  # "SHA256:<hex>", as apt prints it


@dataclass(frozen=True)
class DebContents:
    """A .deb's control stanza and its data as layer entries."""

    name: str
    control: str
    entries: tuple[Entry, ...]


def parse_print_uris(text: str) -> list[Deb]:
    """The .debs in `apt-get --print-uris` output: lines of 'URI' file size HASH."""
    debs = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4 or not parts[0].startswith("'") or not parts[1].endswith(".deb"):
            continue
        filename, size, digest = parts[1:]
        name, version = filename.split("_")[:2]
        if ":" not in digest:
            raise ValueError(f"no hash for {filename} in apt's output: {line!r}")
        debs.append(Deb(name, urllib.parse.unquote(version), filename, int(size), digest))
    return sorted(debs, key=lambda d: d.name)


def parse_required(dumpavail: str, archs: set[str]) -> list[str]:
    """Packages of Priority required (what debootstrap's minbase installs, with apt) in `apt-cache dumpavail`."""
    names = set()
    for stanza in dumpavail.split("\n\n"):
        fields = dict(
            line.split(":", 1) for line in stanza.splitlines() if line and not line[0].isspace() and ":" in line
        )
        if fields.get("Priority", "").strip() == "required" and fields.get("Architecture", "").strip() in archs:
            names.add(fields["Package"].strip())
    return sorted(names)


def apt_lists_state() -> str:
    """Changes whenever `apt-get update` brings new package lists (and so new versions)."""
    state = [
        (p.name, p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(APT_LISTS.glob("*"))
        if p.is_file() and ("Packages" in p.name or p.name.endswith("Release"))
    ]
    return sha256(canonical_json([dpkg_architecture(), state]))


@functools.cache
def dpkg_architecture() -> str:
    """This system's Debian architecture (amd64, arm64, ...)."""
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()


def _apt_with_update(cmd: list[str]) -> str:
    """Run an apt command; on failure (lists missing or stale), `apt-get update` once and retry."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])} ... failed:\n{proc.stderr.strip()}")
    return proc.stdout


def required_packages(ctx: Context) -> list[str]:
    """Debian's Priority: required packages for this architecture, memoized per state of the lists."""
    memo = ctx.cache / "debs" / "closures" / f"required-{apt_lists_state()[7:39]}.json"
    if memo.is_file():
        return list(json.loads(memo.read_text()))
    names = parse_required(_apt_with_update(["apt-cache", "dumpavail"]), {dpkg_architecture(), "all"})
    write_atomic(memo, canonical_json(names))
    return names


def _closure_memo(ctx: Context, wanted: list[str]) -> Path:
    return ctx.cache / "debs" / "closures" / f"{sha256(canonical_json([wanted, apt_lists_state()]))[7:39]}.json"


def resolve_debs(packages: Iterable[str], ctx: Context) -> list[Deb]:
    """The dependency closure of `packages` (no recommends), as apt would install it on an empty system;
    memoized per state of the package lists."""
    wanted = sorted(set(packages))
    memo = _closure_memo(ctx, wanted)
    if memo.is_file():
        return [Deb(**d) for d in json.loads(memo.read_text())]
    with tempfile.TemporaryDirectory() as tmp:
        status, archives = Path(tmp) / "status", Path(tmp) / "archives"
        status.write_bytes(b"")
        (archives / "partial").mkdir(parents=True)
        cmd = ["apt-get", "-q", "-y", *APT_OPTIONS, "-o", f"Dir::State::status={status}"]
        cmd += ["-o", f"Dir::Cache::archives={archives}", "--print-uris", "install", *wanted]
        debs = parse_print_uris(_apt_with_update(cmd))
    if not debs:
        raise RuntimeError(f"apt resolved nothing for {wanted}")
    write_atomic(_closure_memo(ctx, wanted), canonical_json([dataclasses.asdict(d) for d in debs]))
    return debs


def _digest_matches(data: bytes, digest: str) -> bool:
    """apt's ``ALGO:hex`` for a download. apt-get download has checked it against the signed index already; this
    repeats the check where this Python's OpenSSL offers the algorithm (some builds refuse MD5 outright)."""
    algo, _, want = digest.partition(":")
    try:
        hasher = hashlib.new(algo.lower().replace("-", "").replace("sum", ""), usedforsecurity=False)
    except ValueError:
        return True
    hasher.update(data)
    return hasher.hexdigest() == want.lower()


def fetch_debs(debs: list[Deb], ctx: Context) -> list[Path]:
    """The .deb files, downloaded once into the cache's pool and checked against apt's hashes."""
    pool = ctx.cache / "debs" / "pool"
    pool.mkdir(parents=True, exist_ok=True)
    missing = [d for d in debs if not ((pool / d.filename).is_file() and (pool / d.filename).stat().st_size == d.size)]
    if missing:
        with tempfile.TemporaryDirectory(dir=pool) as tmp:
            cmd = ["apt-get", "-q", *APT_OPTIONS, "download", *[f"{d.name}={d.version}" for d in missing]]
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"apt-get download failed:\n{proc.stderr.strip()}")
            for d in missing:
                data = (Path(tmp) / d.filename).read_bytes()
                if not _digest_matches(data, d.digest) or len(data) != d.size:
                    raise RuntimeError(f"{d.filename}: checksum mismatch")
                os.replace(Path(tmp) / d.filename, pool / d.filename)
    return [pool / d.filename for d in debs]


def tar_entries(data: bytes) -> list[Entry]:
    """A package's data.tar as entries: modes and numeric owners kept, hard links made copies of their
    target (the same inode: its data, mode and owner)."""
    entries: list[Entry] = []
    files: dict[str, Entry] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar:
            path = os.path.normpath(m.name).lstrip("/")
            if path in (".", ""):
                continue
            mode = m.mode & 0o7777
            if m.isdir():
                entries.append(dir_(path, mode, m.uid, m.gid))
            elif m.issym():
                entries.append(symlink(path, m.linkname))
            elif m.islnk():
                entries.append(dataclasses.replace(files[os.path.normpath(m.linkname).lstrip("/")], path=path))
            elif m.isfile():
                f = tar.extractfile(m)
                files[path] = file_(path, f.read() if f else b"", mode, m.uid, m.gid)
                entries.append(files[path])
    return entries


@functools.cache
def read_deb(path: Path) -> DebContents:
    """A .deb's control stanza and data (memoized: images share packages)."""
    control = subprocess.run(["dpkg-deb", "-f", str(path)], capture_output=True, text=True, check=True).stdout
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(path)], capture_output=True, check=True).stdout
    name = path.name.split("_", 1)[0]
    return DebContents(name, control, tuple(tar_entries(data)))


def debs_for(packages: Iterable[str], ctx: Context) -> list[DebContents]:
    """Resolve, fetch and read the closure of `packages`."""
    return [read_deb(p) for p in fetch_debs(resolve_debs(packages, ctx), ctx)]


def debs_key(packages: Iterable[str], ctx: Context) -> list[str]:
    """The closure's files and hashes: what a layout built from these packages depends on."""
    return [f"{d.filename} {d.digest}" for d in resolve_debs(packages, ctx)]


# The documentation, manuals and translations Debian's slim images leave out (as their dpkg path-excludes).
SLIM_EXCLUDE = ("usr/share/doc/*", "usr/share/man/*", "usr/share/groff/*", "usr/share/info/*",
                "usr/share/lintian/*", "usr/share/linda/*", "usr/share/locale/*")  # fmt: skip
SLIM_INCLUDE = ("usr/share/doc/*/copyright", "usr/share/locale/locale.alias")


def slim(path: str, exclude: Iterable[str] = SLIM_EXCLUDE, include: Iterable[str] = SLIM_INCLUDE) -> bool:
    """Whether a path stays in a slim image."""
    return not any(fnmatch.fnmatchcase(path, p) for p in exclude) or any(fnmatch.fnmatchcase(path, p) for p in include)


def usrmerge(path: str) -> str:
    """Where a package's path lands on a merged-/usr system (Debian's images since bookworm): /bin is /usr/bin."""
    top, _, rest = path.partition("/")
    if top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        return f"usr/{top}/{rest}".rstrip("/")
    return path


def merge(*groups: Iterable[Entry]) -> dict[str, Entry]:
    """Entries by path; a later group's entry replaces an earlier one at the same path."""
    root: dict[str, Entry] = {}
    for group in groups:
        for e in group:
            root[e.path] = e
    return root


def unpack(
    debs: Iterable[DebContents], *, merged_usr: bool = False, keep: Callable[[str], bool] = slim
) -> dict[str, Entry]:
    """The packages' files as one tree, as dpkg would unpack them (later packages win a shared path)."""
    root: dict[str, Entry] = {}
    for deb in debs:
        for e in deb.entries:
            if not keep(e.path):
                continue
            path = usrmerge(e.path) if merged_usr else e.path
            root[path] = dataclasses.replace(e, path=path)
    return root


def resolve_link(root: dict[str, Entry], path: str, hops: int = 32) -> Entry | None:
    """The entry a path leads to inside the tree, following symlinks in every component (absolute and
    relative targets), or None when it leads nowhere."""
    todo = [p for p in path.split("/") if p]
    done: list[str] = []
    while todo:
        done.append(todo.pop(0))
        entry = root.get("/".join(done))
        if entry is not None and entry.kind == "symlink":
            hops -= 1
            if hops < 0:
                return None
            base = "/" if entry.target.startswith("/") else "/" + "/".join(done[:-1])
            todo = [p for p in os.path.normpath(os.path.join(base, entry.target)).split("/") if p] + todo
            done = []
    return root.get("/".join(done))


# --- what maintainer scripts would have done -------------------------------------------------

# update-alternatives links the postinst scripts register; with one provider, that provider is chosen.
ALTERNATIVES: dict[str, list[tuple[str, str]]] = {
    "mawk": [("usr/bin/awk", "/usr/bin/mawk"), ("usr/bin/nawk", "/usr/bin/mawk")],
    "netcat-openbsd": [("bin/nc", "/bin/nc.openbsd"), ("bin/netcat", "/bin/nc.openbsd")],
    "debianutils": [("usr/bin/which", "/usr/bin/which.debianutils")],
}


def shadow_of(passwd: str, days: int) -> str:
    """/etc/shadow for a passwd file: every account locked ('*'), as Debian's shadowconfig writes it."""
    names = [line.split(":", 1)[0] for line in passwd.splitlines() if line]
    return "".join(f"{n}:*:{days}:0:99999:7:::\n" for n in names)


def gshadow_of(group: str) -> str:
    """/etc/gshadow for a group file, members kept."""
    rows = [line.split(":") for line in group.splitlines() if line]
    return "".join(f"{r[0]}:*::{r[3] if len(r) > 3 else ''}\n" for r in rows)


def with_shells(passwd: str, present: Callable[[str], bool], fallback: str = "/bin/sh") -> str:
    """Passwords moved to the shadow file ('x', as pwconv leaves them) and login shells the image lacks
    (Debian's root has /bin/bash) replaced by one it has; nologin and false stay as they are."""
    out = []
    for line in passwd.splitlines():
        f = line.split(":")
        if len(f) == 7:
            f[1] = "x"
            if f[6].endswith("sh") and not present(f[6]):
                f[6] = fallback
        out.append(":".join(f))
    return "\n".join(out) + "\n"


def group_shadowed(group: str) -> str:
    """Group passwords moved to gshadow ('x', as grpconv leaves them)."""
    rows = [line.split(":") for line in group.splitlines() if line]
    return "".join(":".join([r[0], "x", *r[2:]]) + "\n" if len(r) > 2 else ":".join(r) + "\n" for r in rows)


def add_account(
    passwd: str,
    group: str,
    user: str,
    uid: int,
    gid: int,
    *,
    home: str,
    shell: str = "/bin/sh",
    gecos: str = "",
    member_of: Iterable[tuple[str, int]] = (),
) -> tuple[str, str]:
    """Append a user with its own group the way adduser does, and the extra groups it belongs to."""
    group += f"{user}:x:{gid}:\n"
    passwd += f"{user}:x:{uid}:{gid}:{gecos}:{home}:{shell}\n"
    for name, extra_gid in member_of:
        group += f"{name}:x:{extra_gid}:{user}\n"
    return passwd, group


def configure(
    root: dict[str, Entry], packages: set[str], *, passwd: str | None = None, group: str | None = None
) -> None:
    """Do in `root` what the packages' maintainer scripts would do that an image relies on."""

    def text(path: str) -> str | None:
        e = resolve_link(root, path)
        return e.data.decode() if e is not None and e.kind == "file" else None

    def present(path: str) -> bool:
        return resolve_link(root, path.lstrip("/")) is not None

    # base-passwd: the master files become /etc/passwd and /etc/group; the shadow suite adds shadow files.
    passwd = passwd or text("usr/share/base-passwd/passwd.master") or "root:x:0:0:root:/root:/bin/sh\n"
    group = group or text("usr/share/base-passwd/group.master") or "root:x:0:\n"
    if "apt" in packages and "\n_apt:" not in "\n" + passwd:  # apt's postinst: its sandbox user
        passwd += "_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n"
    passwd = with_shells(passwd, present)
    days = source_date_epoch() // 86400
    root["etc/passwd"] = file_("etc/passwd", passwd.encode())
    group = group_shadowed(group)
    root["etc/group"] = file_("etc/group", group.encode())
    shadow_gid = next((int(r.split(":")[2]) for r in group.splitlines() if r.startswith("shadow:")), 0)
    root["etc/shadow"] = file_("etc/shadow", shadow_of(passwd, days).encode(), 0o640, gid=shadow_gid)
    root["etc/gshadow"] = file_("etc/gshadow", gshadow_of(group).encode(), 0o640, gid=shadow_gid)
    # libc-bin: the default name service switch.
    nsswitch = text("usr/share/libc-bin/nsswitch.conf")
    if nsswitch is not None and "etc/nsswitch.conf" not in root:
        root["etc/nsswitch.conf"] = file_("etc/nsswitch.conf", nsswitch.encode())
    # debianutils' update-shells: the shells packages declare, with their /usr paths on merged /usr.
    shells = text("usr/share/debianutils/shells")
    if shells is not None:
        lines = shells.splitlines()
        merged = root.get("bin") is not None and root["bin"].kind == "symlink"
        for p in sorted(p for p in root if p.startswith("usr/share/debianutils/shells.d/")):
            for line in (text(p) or "").splitlines():
                for shell in (line, "/usr" + line) if merged and line.startswith("/bin/") else (line,):
                    if shell.startswith("/") and shell not in lines:
                        lines.append(shell)
        root["etc/shells"] = file_("etc/shells", ("\n".join(lines) + "\n").encode())
    # update-alternatives.
    for pkg, links in ALTERNATIVES.items():
        if pkg in packages:
            for link, target in links:
                name = os.path.basename(link)
                root[f"etc/alternatives/{name}"] = symlink(f"etc/alternatives/{name}", target)
                root[link] = symlink(link, f"/etc/alternatives/{name}")
    # base-files: the shell profile and root's dot files.
    for src, dst in (("profile", "etc/profile"), ("dot.profile", "root/.profile"), ("dot.bashrc", "root/.bashrc")):
        data = text(f"usr/share/base-files/{src}")
        if data is not None and dst not in root and (dst != "root/.bashrc" or "bash" in packages):
            root[dst] = file_(dst, data.encode())
    # tzdata: UTC, debconf's default.
    if "tzdata" in packages:
        root["etc/localtime"] = symlink("etc/localtime", "/usr/share/zoneinfo/Etc/UTC")
        root["etc/timezone"] = file_("etc/timezone", b"Etc/UTC\n")
    # ca-certificates: every certificate enabled (the debconf default) and update-ca-certificates' bundle.
    certs = sorted(p for p in root if p.startswith("usr/share/ca-certificates/") and p.endswith(".crt"))
    if certs:
        names = [p.removeprefix("usr/share/ca-certificates/") for p in certs]
        root["etc/ca-certificates.conf"] = file_("etc/ca-certificates.conf", "".join(f"{n}\n" for n in names).encode())
        bundle = b"".join(d if d.endswith(b"\n") else d + b"\n" for d in (root[p].data for p in certs))
        root["etc/ssl/certs/ca-certificates.crt"] = file_("etc/ssl/certs/ca-certificates.crt", bundle)
        for p, n in zip(certs, names, strict=True):
            pem = f"etc/ssl/certs/{os.path.basename(n)[:-4]}.pem"
            root[pem] = symlink(pem, f"/{p}")


def dpkg_database(debs: Iterable[DebContents], root: dict[str, Entry], arch: str) -> list[Entry]:
    """/var/lib/dpkg as dpkg leaves it after installing the packages: status and each package's file list."""
    stanzas, entries = [], []
    for deb in sorted(debs, key=lambda d: d.name):
        lines = deb.control.rstrip("\n").splitlines()
        stanzas.append("\n".join([lines[0], "Status: install ok installed", *lines[1:]]))
        multi = any(line == "Multi-Arch: same" for line in lines)
        listed = ["/."] + [f"/{e.path}" for e in deb.entries if e.path in root or usrmerge(e.path) in root]
        name = f"{deb.name}:{arch}" if multi else deb.name
        entries.append(file_(f"var/lib/dpkg/info/{name}.list", "".join(f"{p}\n" for p in listed).encode()))
    entries.append(file_("var/lib/dpkg/status", ("\n\n".join(stanzas) + "\n").encode()))
    entries.append(file_("var/lib/dpkg/available", b""))
    return entries


# --- busybox, from its release tarball ---------------------------------------------------------
# Upstream's e2e busybox image is docker.io/library/busybox (glibc variant): busybox built from the
# release tarball with `make defconfig` and a few options (docker-library/busybox), linked against glibc,
# with glibc's libraries and Debian's getconf beside it. Debian's own busybox packages cannot stand in:
# Debian reverts upstream's commit 9c143ce5, so their ash drops environment variables whose names are not
# shell identifiers ("data-1", which the ConfigMap env specs print with `sh -c env`); upstream keeps them.
# Debian ships the release tarball unchanged as its orig tarball, so the source comes from Debian's
# archive (apt-get source), checked against the release's SHA-256.

BUSYBOX_VERSION = "1.37.0"
BUSYBOX_SHA256 = "3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4"
BUSYBOX_SUITE = "trixie"  # the Debian release whose busybox source package is 1.37.0
# docker-library/busybox's changes to defconfig; the SHA hardware acceleration is off instead of patched
# (1.37.0 uses SHA-NI without checking the CPU; upstream's image carries a patch for that).
BUSYBOX_CONFIG: dict[str, str | None] = {
    "CONFIG_AR": "y",
    "CONFIG_FEATURE_AR_CREATE": "y",
    "CONFIG_FEATURE_AR_LONG_FILENAMES": "y",
    "CONFIG_LAST_SUPPORTED_WCHAR": "0",
    "CONFIG_INOTIFYD": "y",
    "CONFIG_FEATURE_SYNC_FANCY": None,
    "CONFIG_SHA1_HWACCEL": None,
    "CONFIG_SHA256_HWACCEL": None,
}


def busybox_config(defconfig: str, changes: dict[str, str | None]) -> str:
    """A busybox .config with options set (value) or unset (None), as docker-library's sed does."""
    lines = []
    for line in defconfig.splitlines():
        name = line.split("=", 1)[0] if line.startswith("CONFIG_") else line.removeprefix("# ").split(" ", 1)[0]
        if name not in changes:
            lines.append(line)
    for name, value in changes.items():
        lines.append(f"{name}={value}" if value is not None else f"# {name} is not set")
    return "\n".join(lines) + "\n"


def busybox_source(ctx: Context) -> Path:
    """The busybox release tarball, from Debian's archive once, then from the cache."""
    dest = ctx.cache / "src" / f"busybox-{BUSYBOX_VERSION}.tar.bz2"
    if dest.is_file() and sha256(dest.read_bytes()) == f"sha256:{BUSYBOX_SHA256}":
        return dest
    apt = ctx.cache / "src" / "apt"  # a private apt state holding only the source index of that suite
    (apt / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (apt / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    sources = apt / "sources.list"
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    sources.write_text(f"deb-src [signed-by={keyring}] {DEBIAN_MIRROR} {BUSYBOX_SUITE} main\n")
    opts = [*APT_OPTIONS, "-o", f"Dir::Etc::sourcelist={sources}", "-o", "Dir::Etc::sourceparts=-"]
    opts += ["-o", f"Dir::State::lists={apt / 'lists'}", "-o", f"Dir::Cache={apt / 'cache'}"]
    subprocess.run(["apt-get", "-qq", *opts, "update"], check=True)
    with tempfile.TemporaryDirectory(dir=apt) as tmp:
        subprocess.run(["apt-get", "-qq", *opts, "source", "--download-only", "busybox"], cwd=tmp, check=True)
        orig = Path(tmp) / f"busybox_{BUSYBOX_VERSION}.orig.tar.bz2"
        if not orig.is_file():
            found = ", ".join(sorted(p.name for p in Path(tmp).iterdir()))
            raise RuntimeError(f"Debian {BUSYBOX_SUITE}'s busybox source is not {BUSYBOX_VERSION} any more: {found}")
        data = orig.read_bytes()
    if sha256(data) != f"sha256:{BUSYBOX_SHA256}":
        raise RuntimeError(f"busybox {BUSYBOX_VERSION} tarball from Debian does not match the release's SHA-256")
    write_atomic(dest, data)
    shutil.rmtree(apt, ignore_errors=True)  # the source index is not needed again
    return dest


def _toolchain_key() -> list[str]:
    """What a compiled binary depends on besides its source: compiler and C library headers."""
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True).stdout
    libc = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libc6-dev"], capture_output=True, text=True).stdout
    return [gcc.splitlines()[0], libc]


@functools.cache
def _busybox_binary(cache: Path) -> Path:
    ctx = Context(cache=cache)
    source = busybox_source(ctx)
    key = sha256(canonical_json([BUSYBOX_SHA256, BUSYBOX_CONFIG, _toolchain_key()]))[7:39]
    cached = cache / "bin" / f"busybox-{BUSYBOX_VERSION}-{key}"
    if cached.is_file():
        return cached
    print(f"building busybox {BUSYBOX_VERSION} from source ...", file=sys.stderr)
    (cache / "build").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache / "build") as tmp, tarfile.open(source, "r:bz2") as tar:
        top = tar.getmember(f"busybox-{BUSYBOX_VERSION}")
        kwargs: dict[str, object] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(tmp, **kwargs)  # type: ignore[arg-type]
        src = Path(tmp) / f"busybox-{BUSYBOX_VERSION}"
        # The build date embedded in the binary: the tarball's, as docker-library does, for reproducibility.
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(int(top.mtime)), "LC_ALL": "C"}

        def run(cmd: list[str], stdin: bytes = b"") -> None:
            proc = subprocess.run(cmd, cwd=src, env=env, input=stdin, capture_output=True)
            if proc.returncode != 0:
                tail = proc.stderr.decode(errors="replace")[-4000:]
                raise RuntimeError(f"busybox build: {' '.join(cmd)} failed:\n{tail}")

        run(["make", "defconfig"])
        (src / ".config").write_text(busybox_config((src / ".config").read_text(), BUSYBOX_CONFIG))
        run(["make", "oldconfig"], b"\n" * 2000)
        config = (src / ".config").read_text()
        for name, value in BUSYBOX_CONFIG.items():
            want = f"{name}={value}" if value is not None else f"# {name} is not set"
            if want not in config.splitlines():
                raise RuntimeError(f"busybox config: {want!r} did not stick")
        run(["make", f"-j{os.cpu_count() or 1}", "busybox"])
        write_atomic(cached, (src / "busybox").read_bytes())
    cached.chmod(0o755)
    return cached


def busybox_binary(ctx: Context) -> Path:
    """busybox built from the release tarball with upstream image's configuration (cached)."""
    return _busybox_binary(ctx.cache)


@functools.cache
def busybox_applets(binary: Path) -> tuple[str, ...]:
    """Applet install paths ("bin/sh", "usr/bin/wget", ...) of a busybox binary."""
    out = subprocess.run([str(binary), "--list-full"], capture_output=True, text=True, check=True).stdout
    # "linuxrc" (top level) is an initrd entry point, and bin/busybox is the binary itself.
    return tuple(sorted({p for p in out.split() if "/" in p and p != "bin/busybox"}))


def busybox_key(ctx: Context) -> str:
    """The busybox binary's digest, for image keys."""
    return f"busybox {sha256(busybox_binary(ctx).read_bytes())}"


def ldd_names(text: str) -> set[str]:
    """Library file names in `ldd` output (the vDSO, which has no file, left out)."""
    names = set()
    for line in text.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) > parts.index("=>") + 1 and parts[parts.index("=>") + 1].startswith("/"):
            names.add(os.path.basename(parts[parts.index("=>") + 1]))
        elif parts and parts[0].startswith("/"):
            names.add(os.path.basename(parts[0]))
    return names


def library_closure(first: Iterable[bytes], libs: dict[str, Entry]) -> set[str]:
    """The shared libraries (by file name) the given binaries need, transitively, among `libs`."""
    needed: set[str] = set()
    todo = list(first)
    with tempfile.TemporaryDirectory() as tmp:
        while todo:
            exe = Path(tmp) / "x"
            exe.write_bytes(todo.pop())
            exe.chmod(0o755)
            out = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
            for name in sorted(ldd_names(out) - needed):
                if name not in libs:
                    raise RuntimeError(f"{name} is needed but not in libc6")
                needed.add(name)
                todo.append(libs[name].data)
    return needed


# --- users -----------------------------------------------------------------------------------

PASSWD = """\
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
"""
GROUP = """\
root:x:0:
daemon:x:1:
www-data:x:33:
user:x:1000:
nobody:x:65534:
nogroup:x:65534:
"""
SHADOW = "".join(f"{line.split(':')[0]}:*:0:0:99999:7:::\n" for line in PASSWD.splitlines())
NSSWITCH = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"

# The accounts of docker.io/library/busybox (buildroot's skeleton, which docker-library's build copies).
BUILDROOT_PASSWD = """\
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
"""
BUILDROOT_GROUP = "".join(
    f"{name}:x:{gid}:{members}\n"
    for name, gid, members in [
        ("root", 0, ""), ("daemon", 1, ""), ("bin", 2, ""), ("sys", 3, ""), ("adm", 4, ""), ("tty", 5, ""),
        ("disk", 6, ""), ("lp", 7, ""), ("mail", 8, ""), ("kmem", 9, ""), ("wheel", 10, "root"),
        ("cdrom", 11, ""), ("dialout", 18, ""), ("floppy", 19, ""), ("video", 28, ""), ("audio", 29, ""),
        ("tape", 32, ""), ("www-data", 33, ""), ("operator", 37, ""), ("utmp", 43, ""), ("plugdev", 46, ""),
        ("staff", 50, ""), ("lock", 54, ""), ("netdev", 82, ""), ("users", 100, ""), ("nogroup", 65534, ""),
    ]
)  # fmt: skip


# --- busybox images --------------------------------------------------------------------------


def glibc_for(binaries: Iterable[bytes], debs: dict[str, DebContents]) -> list[Entry]:
    """glibc's libraries a binary needs, plus the NSS modules and libpthread, flat in /lib (lib64 -> lib),
    as docker-library's glibc busybox image carries them."""
    libs: dict[str, Entry] = {}
    tree = {e.path: e for e in debs["libc6"].entries}
    for path in sorted(tree):
        if path.startswith(("lib/", "lib64/", "usr/lib/")) and ".so" in path:
            target = resolve_link(tree, path)
            if target is not None and target.kind == "file":
                libs.setdefault(os.path.basename(path), target)
    extra = {n for n in libs if fnmatch.fnmatchcase(n, "libnss*.so.*") or fnmatch.fnmatchcase(n, "libpthread*.so.*")}
    needed = library_closure([*binaries, *(libs[n].data for n in sorted(extra))], libs) | extra
    entries = [file_(f"lib/{n}", libs[n].data, libs[n].mode) for n in sorted(needed)]
    return [*entries, symlink("lib64", "lib")]


def e2e_busybox_files(ctx: Context) -> list[Entry]:
    """registry.k8s.io/e2e-test-images/busybox: upstream's Dockerfile is FROM busybox:<version> (the glibc
    variant): every applet linked in /bin, Debian's getconf, glibc's libraries, buildroot's accounts."""
    binary = busybox_binary(ctx)
    debs = {d.name: d for d in debs_for(("libc6", "libc-bin", "tzdata"), ctx)}
    libc_bin = {e.path: e for e in debs["libc-bin"].entries}
    tz = {e.path: e for e in debs["tzdata"].entries}
    getconf = libc_bin["usr/bin/getconf"].data
    utc = resolve_link(tz, "usr/share/zoneinfo/UTC")
    if utc is None:
        raise RuntimeError("tzdata has no usr/share/zoneinfo/UTC")
    entries = [file_("bin/busybox", binary.read_bytes(), 0o755), file_("bin/getconf", getconf, 0o755)]
    entries += [symlink(f"bin/{os.path.basename(p)}", "busybox") for p in busybox_applets(binary)]
    entries += glibc_for([binary.read_bytes(), getconf], debs)
    nsswitch = libc_bin["usr/share/libc-bin/nsswitch.conf"].data
    entries += [
        file_("etc/passwd", BUILDROOT_PASSWD.encode()),
        file_("etc/group", BUILDROOT_GROUP.encode()),
        file_("etc/shadow", shadow_of(BUILDROOT_PASSWD, source_date_epoch() // 86400).encode(), 0o600),
        file_("etc/nsswitch.conf", nsswitch),
        file_("etc/localtime", utc.data),
        symlink("usr/bin/env", "../../bin/env"),
        dir_("dev"),
        dir_("home"),
        dir_("root", 0o700),
        dir_("tmp", 0o1777),
        dir_("usr/sbin", 0o755, uid=1, gid=1),
        dir_("var/spool/mail", 0o755, uid=8, gid=8),
        dir_("var/www", 0o755, uid=33, gid=33),
    ]
    return entries


def e2e_busybox_key(ctx: Context) -> list[str]:
    """The busybox binary and the glibc packages the image takes files from."""
    return [busybox_key(ctx), *debs_key(("libc6", "libc-bin", "tzdata"), ctx)]


def busybox_labels() -> dict[str, str]:
    """Say what is really inside: busybox 1.37.0 from source, whatever the tag claims."""
    return {
        "org.opencontainers.image.title": "busybox",
        "org.opencontainers.image.version": BUSYBOX_VERSION,
        "org.opencontainers.image.description": (
            f"BusyBox {BUSYBOX_VERSION} built from its release tarball with docker-library's configuration "
            "(glibc, dynamically linked), with Debian's glibc, by kopflet"
        ),
    }


def busybox_files(ctx: Context) -> list[Entry]:
    """docker.io/library/busybox:1.36 for kopflet's own tests: the busybox from source (with upstream's
    env handling, unlike Debian's), a symlink per applet, glibc's libraries and a minimal /etc."""
    binary = busybox_binary(ctx)
    debs = {d.name: d for d in debs_for(("libc6",), ctx)}
    entries = [file_("bin/busybox", binary.read_bytes(), 0o755)]
    entries += [symlink(p, "/bin/busybox") for p in busybox_applets(binary)]
    entries += glibc_for([binary.read_bytes()], debs)
    entries += [
        file_("etc/passwd", PASSWD.encode()),
        file_("etc/group", GROUP.encode()),
        file_("etc/shadow", SHADOW.encode(), 0o640),
        file_("etc/nsswitch.conf", NSSWITCH.encode()),
        dir_("tmp", 0o1777),
        dir_("var/tmp", 0o1777),
        dir_("root", 0o700),
        dir_("home", 0o755),
        dir_("home/user", 0o755, uid=1000, gid=1000),
        dir_("var/www", 0o755),
        dir_("dev"),
        dir_("proc"),
        dir_("sys"),
    ]
    return entries


def busybox_image_key(ctx: Context) -> list[str]:
    """The busybox binary and glibc."""
    return [busybox_key(ctx), *debs_key(("libc6",), ctx)]


# --- Alpine-based upstream images, on Debian ---------------------------------------------------
# Upstream builds agnhost, nginx and nonewprivs FROM alpine (busybox as the userland, apk packages for the
# tools). Here: the same busybox as the userland, Debian's packages of the same tools, and the base
# files Alpine's base carries (accounts, CA certificates, /etc/services).

ALPINE_LIKE_BASE = ("libc6", "libc-bin", "base-files", "base-passwd", "netbase", "ca-certificates")


Accounts = Callable[[str, str], tuple[str, str]]  # (passwd, group) -> (passwd, group) with the image's users


def alpine_like(ctx: Context, packages: Iterable[str], *, accounts: Accounts | None = None) -> dict[str, Entry]:
    """busybox's applets plus Debian packages; a package's command replaces the applet of that name (as an
    apk package's file replaces busybox's link)."""
    binary = busybox_binary(ctx)
    names = (*ALPINE_LIKE_BASE, *packages)
    debs = debs_for(names, ctx)
    applets = [symlink(p, "/bin/busybox") for p in busybox_applets(binary)]
    root = merge([file_("bin/busybox", binary.read_bytes(), 0o755), *applets], unpack(debs).values())
    installed = {d.name for d in debs}
    passwd, group = None, None
    if accounts is not None:
        tree = {e.path: e for d in debs if d.name == "base-passwd" for e in d.entries}
        passwd, group = accounts(
            tree["usr/share/base-passwd/passwd.master"].data.decode(),
            tree["usr/share/base-passwd/group.master"].data.decode(),
        )
    configure(root, installed, passwd=passwd, group=group)
    drop_shadowed_applets(root)
    for d in (dir_("dev"), dir_("proc"), dir_("sys"), dir_("run"), dir_("tmp", 0o1777)):
        root.setdefault(d.path, d)
    return root


def drop_shadowed_applets(root: dict[str, Entry]) -> None:
    """Remove busybox's links for commands a package provides anywhere on PATH (its file or alternative),
    so the package's command is the one found whatever the PATH order."""
    applets = {p for p, e in root.items() if e.kind == "symlink" and e.target == "/bin/busybox"}
    tools = {
        os.path.basename(p)
        for p, e in root.items()
        if os.path.dirname(p) in PATH_DIRS and e.kind != "dir" and p not in applets and p != "bin/busybox"
    }
    for p in applets:
        if os.path.basename(p) in tools:
            del root[p]


def alpine_like_key(ctx: Context, packages: Iterable[str]) -> list[str]:
    """busybox and the package closure."""
    return [busybox_key(ctx), *debs_key((*ALPINE_LIKE_BASE, *packages), ctx)]


def file_key(*paths: Path) -> list[str]:
    """Digests of input files."""
    return [f"{p.name} {sha256(p.read_bytes())}" for p in paths]


# agnhost's Dockerfile: `apk add bind-tools curl netcat-openbsd iproute2 iperf bash util-linux-misc socat`.
AGNHOST_PACKAGES = ("bind9-dnsutils", "curl", "netcat-openbsd", "iproute2", "iperf", "bash", "util-linux", "socat")
AGNHOST_PORTS = ("80/tcp", "8080/tcp", "8081/tcp", "9376/tcp", "5000/tcp")


def agnhost_accounts(passwd: str, group: str) -> tuple[str, str]:
    """`adduser -u 1000 -D user-defined-in-image && addgroup -g 50000 group-defined-in-image &&
    addgroup user-defined-in-image group-defined-in-image` (the SupplementalGroupsPolicy specs read them)."""
    return add_account(
        passwd,
        group,
        "user-defined-in-image",
        1000,
        1000,
        home="/home/user-defined-in-image",
        gecos="Linux User,,,",
        member_of=[("group-defined-in-image", 50000)],
    )


@dataclass(frozen=True)
class E2EAssets:
    """What build-binaries.sh leaves for the e2e images: binaries and files from the pinned module."""

    bin_dir: Path

    @property
    def agnhost(self) -> Path:
        return self.bin_dir / "agnhost"

    @property
    def agnhost_version(self) -> str:
        return (self.bin_dir / "agnhost.version").read_text().strip()

    @property
    def nnp(self) -> Path:
        return self.bin_dir / "nnp"

    @property
    def sample_apiserver(self) -> Path:
        return self.bin_dir / "sample-apiserver"

    @property
    def sample_apiserver_version(self) -> str:
        """The k8s.io/sample-apiserver release the binary was built from (build-binaries.sh writes it)."""
        return (self.bin_dir / "sample-apiserver.version").read_text().strip()

    def file(self, *parts: str) -> Path:
        """A file of the module's test/images directory, as copied by build-binaries.sh."""
        return self.bin_dir.joinpath("e2e-images", *parts)


# --- the fake registry's content: agnhost's /var/registry ---------------------------------------
# Upstream's agnhost Dockerfile runs fakeregistryserver/prepare_registry.sh for each line of images.txt
# ("pause 3.10.2 testing"): registry.k8s.io/pause:3.10.2's manifest list with its windows entries dropped,
# every manifest it lists, and their config and layer blobs, where `agnhost fake-registry-server`
# (registryserver.go) reads them. The image-pull specs pull localhost:5000/pause:testing from it, through
# the runtime as any image. Here the content is our own pause 3.10.2, the very build the stack serves as
# registry.k8s.io/pause:3.10.2, under an OCI index of its (linux) platforms.

FAKE_REGISTRY_DIR = "var/registry"
FAKE_REGISTRY_IMAGES = (("pause", E2E_PAUSE_VERSION, "testing"),)  # images.txt: name, tag, the tag served


def digest_path(base: str, digest: str) -> str:
    """Where the fake registry keeps a digest's content: `<base>/sha256/ab/abcd.../data` (its digestToPath)."""
    algo, _, hexdigest = digest.partition(":")
    return f"{base}/{algo}/{hexdigest[:2]}/{hexdigest}/data"


def blob_bytes(built: Built, digest: str) -> bytes:
    """A blob of a built image, from its layout."""
    return (built.layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()


def built_platform(built: Built) -> dict[str, str]:
    """The OCI platform of a built image, from its config."""
    config = json.loads(blob_bytes(built, built.config_digest))
    plat = {"architecture": config["architecture"], "os": config["os"]}
    if config.get("variant"):
        plat["variant"] = config["variant"]
    return plat


def registry_index(builds: Iterable[Built]) -> bytes:
    """The manifest list the fake registry serves for a tag: each build's manifest with its platform.
    registryserver.go sends a manifest's `mediaType` as its Content-Type, so the index says what it is."""
    manifests = [
        {"mediaType": json.loads(b.manifest)["mediaType"], "digest": b.manifest_digest, "size": len(b.manifest),
         "platform": built_platform(b)}
        for b in builds
    ]  # fmt: skip
    return canonical_json({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": manifests})


def fake_registry_entries(name: str, tag: str, builds: Iterable[Built]) -> list[Entry]:
    """One image of /var/registry: `<name>/manifests/<tag>` holding the index's digest (the server redirects a
    tag to it), the index and each manifest under `<name>/manifests/`, configs and layers under `<name>/blobs/`,
    each file at the path of its own digest; world-readable (the specs run the server as uid 5123). Windows
    images are left out, index entry and content, as prepare_registry.sh's jq filter leaves them out."""
    kept = [b for b in builds if built_platform(b)["os"] != "windows"]
    index = registry_index(kept)
    base = f"{FAKE_REGISTRY_DIR}/{name}"
    entries = {f"{base}/manifests/{tag}": file_(f"{base}/manifests/{tag}", f"{sha256(index)}\n".encode())}
    contents = [(f"{base}/manifests", index)]
    for built in kept:
        contents.append((f"{base}/manifests", built.manifest))
        contents += [(f"{base}/blobs", blob_bytes(built, d)) for d in [built.config_digest, *built.layer_digests]]
    for where, data in contents:
        path = digest_path(where, sha256(data))
        entries[path] = file_(path, data)
    return [dir_(f"{base}/blobs"), *entries.values()]


@functools.cache
def _fake_registry_builds(cache: Path) -> tuple[tuple[str, str, tuple[Built, ...]], ...]:
    """Memoized per cache: every agnhost-based image and its key ask for the same builds."""
    images = {i.ref: i for i in IMAGES}
    found = []
    for name, tag, served in FAKE_REGISTRY_IMAGES:
        image = images[f"{name}:{tag}"]
        found.append((name, served, (build(image, cache / "oci" / image.repo / image.tag, cache=cache),)))
    return tuple(found)


def fake_registry_builds(ctx: Context) -> tuple[tuple[str, str, tuple[Built, ...]], ...]:
    """images.txt's images as (name, served tag, builds): built into the layouts the registry push takes them
    from (the same bytes whichever builds first), once per run."""
    return _fake_registry_builds(ctx.cache)


def fake_registry_files(ctx: Context) -> list[Entry]:
    """Everything under /var/registry."""
    return [e for name, tag, builds in fake_registry_builds(ctx) for e in fake_registry_entries(name, tag, builds)]


def fake_registry_key(ctx: Context) -> list[str]:
    """What /var/registry follows from: the manifest digests of its images (this file's code does the rest)."""
    return [f"registry {name}:{tag} {b.manifest_digest}" for name, tag, builds in fake_registry_builds(ctx)
            for b in builds]


def agnhost_root(ctx: Context, assets: E2EAssets) -> dict[str, Entry]:
    """agnhost's image contents: the tools, /agnhost and its second copy /agnhost-2, the porter
    certificate, /uploads, the users and the fake registry's /var/registry; upstream's /coredns is not here."""
    root = alpine_like(ctx, AGNHOST_PACKAGES, accounts=agnhost_accounts)
    for e in fake_registry_files(ctx):
        root[e.path] = e
    for e in (
        symlink("usr/local/bin/iperf", "/usr/bin/iperf"),
        dir_("uploads"),
        dir_("home/user-defined-in-image", 0o755, uid=1000, gid=1000),
        file_("localhost.crt", assets.file("agnhost", "porter", "localhost.crt").read_bytes()),
        file_("localhost.key", assets.file("agnhost", "porter", "localhost.key").read_bytes()),
        file_("agnhost", assets.agnhost.read_bytes(), 0o755),
        symlink("agnhost-2", "agnhost"),
    ):
        root[e.path] = e
    return root


def agnhost_key(ctx: Context, assets: E2EAssets) -> list[str]:
    """Packages, busybox, the agnhost binary, the porter certificate and the fake registry's images."""
    porter = [assets.file("agnhost", "porter", n) for n in ("localhost.crt", "localhost.key")]
    return [*alpine_like_key(ctx, AGNHOST_PACKAGES), *file_key(assets.agnhost, *porter), *fake_registry_key(ctx)]


def agnhost_config(cmd: list[str]) -> dict[str, object]:
    """ENTRYPOINT ["/agnhost"], the given CMD, EXPOSE 80 8080 8081 9376 5000."""
    return {
        "Entrypoint": ["/agnhost"],
        "Cmd": cmd,
        "Env": [f"PATH={DEFAULT_PATH}"],
        "WorkingDir": "/",
        "ExposedPorts": {p: {} for p in AGNHOST_PORTS},
    }


def agnhost_image(bin_dir: Path, tag: str | None = None) -> Image:
    """registry.k8s.io/e2e-test-images/agnhost: the agnhost binary built from the pinned Kubernetes module
    by build-binaries.sh (tagged with the version upstream publishes for that source) on the Alpine-like
    base with the tools upstream's Dockerfile installs. `tag` names another tag for the same build."""
    assets = E2EAssets(bin_dir)
    version = assets.agnhost_version
    source = f"agnhost {version} from k8s.io/kubernetes"
    # AgnhostPrev (2.55) was built upstream from a commit between releases, which the module proxy serves
    # under no version: that tag carries this build, and its labels say so.
    note = "" if tag in (None, version) else f"; tagged {tag}, whose own source is in no module release"
    return Image(
        repo="e2e-test-images/agnhost",  # registry.k8s.io/e2e-test-images/agnhost
        tag=tag or version,
        files=lambda ctx: list(agnhost_root(ctx, assets).values()),
        config=agnhost_config(["pause"]),
        labels=lambda: {
            "org.opencontainers.image.title": "agnhost",
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.description": (
                f"{source}{note}, with Debian's {', '.join(AGNHOST_PACKAGES)} and busybox "
                f"{BUSYBOX_VERSION}, by kopflet"
            ),
        },
        key=lambda ctx: agnhost_key(ctx, assets),
    )


def picture_image(bin_dir: Path, name: str, tag: str) -> Image:
    """kitten and nautilus: upstream's Dockerfile is FROM agnhost, COPY html/<name>.jpg and html/data.json
    (into /), CMD ["test-webserver"]."""
    assets = E2EAssets(bin_dir)
    pictures = [assets.file(name, "html", f"{name}.jpg"), assets.file(name, "html", "data.json")]

    def files(ctx: Context) -> list[Entry]:
        root = agnhost_root(ctx, assets)
        for p in pictures:
            root[p.name] = file_(p.name, p.read_bytes())
        return list(root.values())

    return Image(
        repo=f"e2e-test-images/{name}",
        tag=tag,
        files=files,
        config=agnhost_config(["test-webserver"]),
        labels=lambda: {
            "org.opencontainers.image.title": name,
            "org.opencontainers.image.version": tag,
            "org.opencontainers.image.description": (
                f"{name}.jpg and data.json from k8s.io/kubernetes test/images/{name} on the agnhost "
                f"{assets.agnhost_version} image, by kopflet"
            ),
        },
        key=lambda ctx: [*agnhost_key(ctx, assets), *file_key(*pictures)],
    )


def nonewprivs_image(bin_dir: Path) -> Image:
    """nonewprivs: FROM alpine, nnp (built from the module's test/images/nonewprivs) setuid and setgid
    (`chmod +s`), CMD ["nnp"]."""
    assets = E2EAssets(bin_dir)

    def files(ctx: Context) -> list[Entry]:
        root = alpine_like(ctx, ())
        root["usr/local/bin/nnp"] = file_("usr/local/bin/nnp", assets.nnp.read_bytes(), 0o6755)
        return list(root.values())

    return Image(
        repo="e2e-test-images/nonewprivs",
        tag="1.4",
        files=files,
        config={"Cmd": ["nnp"], "Env": [f"PATH={DEFAULT_PATH}"], "WorkingDir": "/"},
        labels=lambda: {
            "org.opencontainers.image.title": "nonewprivs",
            "org.opencontainers.image.version": "1.4",
            "org.opencontainers.image.description": (
                f"nnp from k8s.io/kubernetes test/images/nonewprivs on busybox {BUSYBOX_VERSION} and "
                "Debian's glibc, by kopflet"
            ),
        },
        key=lambda ctx: [*alpine_like_key(ctx, ()), *file_key(assets.nnp)],
    )


# imageutils.APIServer, which the [Conformance] Aggregator spec runs (with the etcd image as its sidecar): upstream's
# test/images/sample-apiserver. Its Dockerfile is FROM alpine (BASEIMAGE), `ADD sample-apiserver /sample-apiserver`,
# ENTRYPOINT ["/sample-apiserver"] (which clears alpine's CMD); its Makefile builds the binary from a
# k8s.io/sample-apiserver release, CGO off. The tag upstream published each release's build under, by the release
# (test/images/sample-apiserver at VERSION 1.29.2: `git checkout tags/v0.29.2`); versions.env pins the release.
SAMPLE_APISERVER_TAGS = {"v0.29.2": "1.29.2"}


def sample_apiserver_image(bin_dir: Path) -> Image:
    """registry.k8s.io/e2e-test-images/sample-apiserver: the binary build-binaries.sh built from the pinned
    k8s.io/sample-apiserver release at /sample-apiserver, its entrypoint, on the Alpine-like base."""
    assets = E2EAssets(bin_dir)
    release = versions_env()["SAMPLE_APISERVER_VERSION"]
    if release not in SAMPLE_APISERVER_TAGS:
        raise SystemExit(f"SAMPLE_APISERVER_VERSION {release}: no upstream sample-apiserver image tag is known for it "
                         f"(known: {', '.join(SAMPLE_APISERVER_TAGS)})")
    tag = SAMPLE_APISERVER_TAGS[release]

    def files(ctx: Context) -> list[Entry]:
        built = assets.sample_apiserver_version
        if built != release:
            raise RuntimeError(f"{assets.sample_apiserver} is k8s.io/sample-apiserver {built}, not the pinned "
                               f"{release}: run devstack/build-binaries.sh")
        root = alpine_like(ctx, ())
        root["sample-apiserver"] = file_("sample-apiserver", assets.sample_apiserver.read_bytes(), 0o755)
        return list(root.values())

    return Image(
        repo="e2e-test-images/sample-apiserver",
        tag=tag,
        files=files,
        config={"Entrypoint": ["/sample-apiserver"], "Env": [f"PATH={DEFAULT_PATH}"], "WorkingDir": "/"},
        labels=lambda: {
            "org.opencontainers.image.title": "sample-apiserver",
            "org.opencontainers.image.version": tag,
            "org.opencontainers.image.description": (
                f"sample-apiserver from k8s.io/sample-apiserver {release} on busybox {BUSYBOX_VERSION} and "
                "Debian's glibc, by kopflet"
            ),
        },
        key=lambda ctx: [*alpine_like_key(ctx, ()), *file_key(assets.sample_apiserver)],
    )


# nginx:<version>-alpine, which upstream's nginx images are: nginx (with curl, tzdata and envsubst),
# its configuration serving /usr/share/nginx/html on port 80, logs to the container's stdout and stderr,
# user nginx (101), an entrypoint that prepares the configuration and runs nginx in the foreground.
NGINX_PACKAGES = ("nginx", "curl", "gettext-base", "tzdata")
NGINX_CONF = """\
user  nginx;
worker_processes  auto;

error_log  /var/log/nginx/error.log notice;
pid        /run/nginx.pid;


events {
    worker_connections  1024;
}


http {
    include       /etc/nginx/mime.types;
    default_type  application/octet-stream;

    log_format  main  '$remote_addr - $remote_user [$time_local] "$request" '
                      '$status $body_bytes_sent "$http_referer" '
                      '"$http_user_agent" "$http_x_forwarded_for"';

    access_log  /var/log/nginx/access.log  main;

    sendfile        on;

    keepalive_timeout  65;

    include /etc/nginx/conf.d/*.conf;
}
"""
NGINX_DEFAULT_SITE = """\
server {
    listen       80;
    server_name  localhost;

    location / {
        root   /usr/share/nginx/html;
        index  index.html index.htm;
    }

    error_page   500 502 503 504  /50x.html;
    location = /50x.html {
        root   /usr/share/nginx/html;
    }
}
"""
NGINX_50X = """\
<!DOCTYPE html>
<html>
<head>
<title>Error</title>
</head>
<body>
<h1>An error occurred.</h1>
<p>Sorry, the page you are looking for is currently unavailable.<br/>
Please try again later.</p>
</body>
</html>
"""
# The official image's entrypoint runs its /docker-entrypoint.d scripts before nginx; the one that changes
# a default setup adds an IPv6 listener when the container has IPv6. This does that, then runs the command.
NGINX_ENTRYPOINT = """\
#!/bin/sh
# Entrypoint of kopflet's build of the e2e nginx image (the official nginx image's semantics).
set -e
if [ "$1" = nginx ] || [ "$1" = nginx-debug ]; then
    conf=/etc/nginx/conf.d/default.conf
    if [ -f /proc/net/if_inet6 ] && [ -w "$conf" ] && ! grep -q 'listen  \\[::\\]:80;' "$conf"; then
        sed -i 's/^    listen       80;$/&\\n    listen  [::]:80;/' "$conf"
        echo "$0: enabled listen on IPv6 in $conf"
    fi
    echo "$0: Configuration complete; ready for start up"
fi
exec "$@"
"""


def nginx_accounts(passwd: str, group: str) -> tuple[str, str]:
    """`addgroup -g 101 -S nginx && adduser -S -D -H -u 101 -h /var/cache/nginx -s /sbin/nologin -G nginx
    -g nginx nginx`."""
    return add_account(passwd, group, "nginx", 101, 101, home="/var/cache/nginx", shell="/sbin/nologin", gecos="nginx")


def nginx_image(tag: str, upstream: str) -> Image:
    """registry.k8s.io/e2e-test-images/nginx (upstream: FROM nginx:<upstream>-alpine), with Debian's nginx."""

    def files(ctx: Context) -> list[Entry]:
        root = alpine_like(ctx, NGINX_PACKAGES, accounts=nginx_accounts)
        for e in (
            file_("etc/nginx/nginx.conf", NGINX_CONF.encode()),
            file_("etc/nginx/conf.d/default.conf", NGINX_DEFAULT_SITE.encode()),
            file_("usr/share/nginx/html/50x.html", NGINX_50X.encode()),
            file_("docker-entrypoint.sh", NGINX_ENTRYPOINT.encode(), 0o755),
            dir_("docker-entrypoint.d"),
            dir_("var/cache/nginx"),
            symlink("var/log/nginx/access.log", "/dev/stdout"),
            symlink("var/log/nginx/error.log", "/dev/stderr"),
        ):
            root[e.path] = e
        root.pop("etc/nginx/sites-enabled/default", None)
        return list(root.values())

    return Image(
        repo="e2e-test-images/nginx",
        tag=tag,
        files=files,
        config={
            "Entrypoint": ["/docker-entrypoint.sh"],
            "Cmd": ["nginx", "-g", "daemon off;"],
            "Env": [f"PATH={DEFAULT_PATH}"],
            "WorkingDir": "/",
            "ExposedPorts": {"80/tcp": {}},
            "StopSignal": "SIGQUIT",
        },
        labels=lambda: {
            "org.opencontainers.image.title": "nginx",
            "org.opencontainers.image.version": tag,
            "org.opencontainers.image.description": (
                f"Debian's nginx (upstream's image is nginx:{upstream}-alpine) with the official image's "
                f"configuration, on busybox {BUSYBOX_VERSION}, by kopflet"
            ),
        },
        key=lambda ctx: alpine_like_key(ctx, NGINX_PACKAGES),
    )


# --- Debian-based upstream images --------------------------------------------------------------
# glibc-dns-testing is FROM debian:bookworm-slim (+ dnsutils); nonroot is FROM debian-base (Kubernetes'
# build-image: bookworm-slim without bash, e2fsprogs, ncurses and tzdata, documentation removed, no-op
# init stubs). debian:bookworm-slim is what debootstrap's minbase variant installs (the packages of
# Priority required, and apt), slimmed; here the same packages, unpacked on merged /usr, configured as
# their maintainer scripts would, with dpkg's database.

DEBIAN_BASE_REMOVED = ("bash", "e2fsprogs", "libss2", "libcom-err2", "libext2fs2", "logsave", "ncurses-base",
                       "ncurses-bin", "tzdata")  # fmt: skip
DEBIAN_BASE_EXCLUDE = (*SLIM_EXCLUDE, "usr/share/doc/*", "usr/share/bash-completion/*", "etc/systemd/*",
                       "lib/lsb/*", "lib/udev/*", "usr/lib/*/gconv/IBM*", "usr/lib/*/gconv/EBC*")  # fmt: skip


def debian_slim_packages(ctx: Context, extra: Iterable[str] = (), removed: Iterable[str] = ()) -> list[str]:
    """minbase's package set (required + apt) with `extra`, without `removed` and what only they need."""
    # usr-is-merged: debootstrap merges /usr itself, so init-system-helpers' "usrmerge | usr-is-merged" is
    # satisfied by the marker package, not by usrmerge (and perl).
    wanted = {*required_packages(ctx), "apt", "usr-is-merged", *extra} - set(removed)
    names = [d.name for d in resolve_debs(wanted, ctx)]
    return sorted(set(names) - set(removed))


def debian_root(ctx: Context, packages: list[str], *, keep: Callable[[str], bool] = slim) -> dict[str, Entry]:
    """The packages unpacked on merged /usr and configured, with dpkg's database."""
    debs = [d for d in debs_for(packages, ctx) if d.name in packages]
    root = unpack(debs, merged_usr=True, keep=keep)
    for top in ("bin", "sbin", "lib", "lib64"):
        root[top] = symlink(top, f"usr/{top}")
    configure(root, {d.name for d in debs})
    for e in dpkg_database(debs, root, dpkg_architecture()):
        root[e.path] = e
    return root


def debian_key(ctx: Context, packages: list[str]) -> list[str]:
    """The package files and hashes."""
    return [d for d in debs_key(packages, ctx) if d.split("_", 1)[0] in packages]


def glibc_dns_testing_image() -> Image:
    """glibc-dns-testing: FROM debian:bookworm-slim, apt-get install dnsutils (CMD bash, the base's)."""
    tag = "2.1.1"

    def files(ctx: Context) -> list[Entry]:
        return list(debian_root(ctx, debian_slim_packages(ctx, ["dnsutils"])).values())

    return Image(
        repo="e2e-test-images/glibc-dns-testing",
        tag=tag,
        files=files,
        config={"Cmd": ["bash"], "Env": [f"PATH={DEFAULT_PATH}"], "WorkingDir": "/"},
        labels=lambda: {
            "org.opencontainers.image.title": "glibc-dns-testing",
            "org.opencontainers.image.version": tag,
            "org.opencontainers.image.description": "Debian bookworm (slim) with dnsutils, by kopflet",
        },
        key=lambda ctx: debian_key(ctx, debian_slim_packages(ctx, ["dnsutils"])),
    )


def nonroot_image() -> Image:
    """nonroot: FROM debian-base, USER 1234 (the runAsNonRoot specs check the image's user)."""
    tag = "1.5"

    def packages(ctx: Context) -> list[str]:
        return debian_slim_packages(ctx, removed=DEBIAN_BASE_REMOVED)

    def files(ctx: Context) -> list[Entry]:
        root = debian_root(ctx, packages(ctx), keep=lambda p: slim(p, DEBIAN_BASE_EXCLUDE, ()))
        noop = [file_("usr/local/bin/noop", b"", 0o555)]
        noop += [symlink(f"usr/local/bin/{n}", "noop") for n in ("runlevel", "invoke-rc.d", "update-rc.d")]
        noop += [symlink(f"usr/sbin/{n}", f"/usr/bin/{n}") for n in ("dpkg-split", "dpkg-deb", "tar", "rm")]
        noop += [dir_(f"usr/share/man/man{i}") for i in range(1, 9)]
        return list(merge(root.values(), noop).values())

    return Image(
        repo="e2e-test-images/nonroot",
        tag=tag,
        files=files,
        config={"Cmd": ["/bin/sh"], "User": "1234", "Env": [f"PATH={DEFAULT_PATH}"], "WorkingDir": "/"},
        labels=lambda: {
            "org.opencontainers.image.title": "nonroot",
            "org.opencontainers.image.version": tag,
            "org.opencontainers.image.description": "Kubernetes' debian-base (bookworm) as user 1234, by kopflet",
        },
        key=lambda ctx: debian_key(ctx, packages(ctx)),
    )


# --- the kubeadm cluster's images --------------------------------------------------------------
# `kubeadm init` (v1.37.1) pulls registry.k8s.io/kube-apiserver, kube-controller-manager, kube-scheduler and
# kube-proxy at its own version, etcd:3.7.0-0 (constants.DefaultEtcdVersion), coredns/coredns:v1.14.6
# (constants.CoreDNSVersion) and pause:3.10.2 (above). Each is built here the way its Dockerfile builds it, from
# build-binaries.sh --cluster's binaries, on the base its Dockerfile names, that base made of the same Debian
# packages:
#   - kube-apiserver, kube-controller-manager, kube-scheduler: build/server-image/Dockerfile (kube-apiserver: its
#     own Dockerfile, which setcaps cap_net_bind_service=+ep on the binary) on go-runner (images/build/go-runner
#     of kubernetes/release: distroless static-debian12, /go-runner, ENTRYPOINT ["/go-runner"]); the server image
#     puts the binary in /usr/local/bin and kube-log-runner over /go-runner.
#   - kube-proxy: the same Dockerfile on distroless-iptables (distroless-bookworm: distroless base-debian12 with
#     ipset, iptables, kmod and nft, and the tools iptables-wrapper-installer.sh's wrapper runs; FROM scratch, so
#     no inherited config).
#   - etcd: etcd's own Dockerfile (what registry.k8s.io/etcd carries since Kubernetes' cluster/images/etcd, with
#     its migrate tool and migrate-if-needed.sh, was removed): static-debian12, etcd, etcdctl and etcdutl in
#     /usr/local/bin, WORKDIR /var/lib/etcd/, EXPOSE 2379 2380, CMD ["/usr/local/bin/etcd"].
#   - coredns: CoreDNS's Dockerfile: static-debian12:nonroot, /coredns setcap cap_net_bind_service=+ep,
#     USER nonroot:nonroot, WORKDIR /, EXPOSE 53 53/udp, ENTRYPOINT ["/coredns"].
#   - metrics-server (not kubeadm's: manifests/cluster/metrics-server.yaml deploys it): the Dockerfile of its
#     module (sigs.k8s.io/metrics-server), FROM gcr.io/distroless/static (root), /metrics-server, USER 65534,
#     ENTRYPOINT ["/metrics-server"]; tagged as registry.k8s.io/metrics-server/metrics-server serves it.
# Distroless static is base-files, netbase, tzdata and media-types unpacked whole (no maintainer scripts run)
# with each one's control stanza in /var/lib/dpkg/status.d, ca-certificates' bundle, its own passwd, group,
# nsswitch.conf and os-release, /tmp, and home directories (GoogleContainerTools/distroless static/static.bzl,
# common/BUILD.bazel).


def versions_env() -> dict[str, str]:
    """devstack/versions.env: the pinned releases (KEY=value lines)."""
    path = HERE.parent / "devstack" / "versions.env"
    return dict(
        line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#")
    )


NONROOT_UID = 65532
DISTROLESS_PACKAGES = ("base-files", "netbase", "tzdata", "media-types")
SSL_CERT_FILE = "/etc/ssl/certs/ca-certificates.crt"
DISTROLESS_ENV = [f"PATH={DEFAULT_PATH}", f"SSL_CERT_FILE={SSL_CERT_FILE}"]
DISTROLESS_PASSWD = """\
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
"""
DISTROLESS_GROUP = "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"
DISTROLESS_NSSWITCH = """\
# /etc/nsswitch.conf
#
# Example configuration of GNU Name Service Switch functionality.
# If you have the `glibc-doc-reference' and `info' packages installed, try:
# `info libc "Name Service Switch"' for information about this file.

passwd:         compat
group:          compat
shadow:         compat
gshadow:        files

hosts:          files dns
networks:       files

protocols:      db files
services:       db files
ethers:         db files
rpc:            db files

netgroup:       nis
"""


def distroless_os_release(version_id: str, codename: str) -> str:
    """/usr/lib/os-release (where base-files' /etc/os-release points) as distroless writes it."""
    fields = {
        "PRETTY_NAME": "Distroless",
        "NAME": "Debian GNU/Linux",
        "ID": "debian",
        "VERSION_ID": version_id,
        "VERSION": f"Debian GNU/Linux {version_id} ({codename})",
        "HOME_URL": "https://github.com/GoogleContainerTools/distroless",
        "SUPPORT_URL": "https://github.com/GoogleContainerTools/distroless/blob/master/README.md",
        "BUG_REPORT_URL": "https://github.com/GoogleContainerTools/distroless/issues/new",
    }
    return "".join(f'{k}="{v}"\n' for k, v in fields.items())


def os_release_fields(text: str) -> dict[str, str]:
    """KEY=value lines of an os-release file, quotes removed."""
    return {k: v.strip().strip('"') for k, _, v in (line.partition("=") for line in text.splitlines()) if v}


def status_stanza(deb: DebContents) -> str:
    """The package's dpkg status stanza (its control fields with `Status: install ok installed` second)."""
    lines = deb.control.rstrip("\n").splitlines()
    return "\n".join([lines[0], "Status: install ok installed", *lines[1:]]) + "\n"


def status_d(deb: DebContents) -> Entry:
    """/var/lib/dpkg/status.d/<package>, where distroless images record what they hold (scanners read it)."""
    return file_(f"var/lib/dpkg/status.d/{deb.name}", status_stanza(deb).encode())


def named_debs(packages: Iterable[str], ctx: Context) -> dict[str, DebContents]:
    """The named packages only (not their dependency closure), by name."""
    names = set(packages)
    return {d.name: d for d in debs_for(sorted(names), ctx) if d.name in names}


def ca_bundle(deb: DebContents) -> bytes:
    """update-ca-certificates' bundle of every certificate the ca-certificates package ships, in name order."""
    certs = sorted(
        (e for e in deb.entries if e.kind == "file" and e.path.startswith("usr/share/ca-certificates/")
         and e.path.endswith(".crt")),
        key=lambda e: e.path,
    )  # fmt: skip
    return b"".join(e.data if e.data.endswith(b"\n") else e.data + b"\n" for e in certs)


DISTROLESS_STATIC_NAMES = (*DISTROLESS_PACKAGES, "ca-certificates")


def distroless_static(ctx: Context) -> dict[str, Entry]:
    """gcr.io/distroless/static-debian<N>'s files, from this system's Debian release."""
    debs = named_debs(DISTROLESS_STATIC_NAMES, ctx)
    root = unpack([debs[n] for n in DISTROLESS_PACKAGES], keep=lambda p: True)
    for name in DISTROLESS_PACKAGES:
        root[status_d(debs[name]).path] = status_d(debs[name])
    # cacerts: the bundle and the package's copyright, nothing else of the package.
    copyright_ = {e.path: e for e in debs["ca-certificates"].entries}["usr/share/doc/ca-certificates/copyright"]
    release = os_release_fields(
        (resolve_link(root, "usr/lib/os-release") or file_("x", b"VERSION_ID=12\nVERSION_CODENAME=bookworm\n")).data
        .decode()
    )  # fmt: skip
    for e in (
        file_(SSL_CERT_FILE, ca_bundle(debs["ca-certificates"])),
        copyright_,
        file_("etc/passwd", DISTROLESS_PASSWD.encode()),
        file_("etc/group", DISTROLESS_GROUP.encode()),
        file_("etc/nsswitch.conf", DISTROLESS_NSSWITCH.encode()),
        file_("usr/lib/os-release", distroless_os_release(release["VERSION_ID"], release["VERSION_CODENAME"]).encode()),
        dir_("tmp", 0o1777),
        dir_("root", 0o700),
        dir_("home", 0o755),
        dir_("home/nonroot", 0o700, uid=NONROOT_UID, gid=NONROOT_UID),
    ):
        root[e.path] = e
    return root


def distroless_static_key(ctx: Context) -> list[str]:
    """The packages distroless static is made of."""
    return [k for k in debs_key(DISTROLESS_STATIC_NAMES, ctx) if k.split("_", 1)[0] in DISTROLESS_STATIC_NAMES]


@dataclass(frozen=True)
class ClusterAssets:
    """What build-binaries.sh --cluster leaves: the Kubernetes binaries beside the others, etcd, CoreDNS (of
    other releases than the stack's own etcd) and metrics-server under cluster/."""

    bin_dir: Path

    def k8s(self, name: str) -> Path:
        return self.bin_dir / name

    def cluster(self, name: str) -> Path:
        return self.bin_dir / "cluster" / name

    def version(self, name: str) -> str:
        return self.cluster(f"{name}.version").read_text().strip()

    @property
    def complete(self) -> bool:
        """Whether every binary the cluster images need is there."""
        paths = [self.k8s(n) for n in (*SERVER_IMAGES, "kube-proxy", "kube-log-runner")]
        paths += [self.cluster(n) for n in (*ETCD_BINARIES, "coredns", "metrics-server")]
        paths += [self.cluster(f"{n}.version") for n in ("etcd", "coredns", "metrics-server")]
        return all(p.is_file() for p in paths)


SERVER_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
ETCD_BINARIES = ("etcd", "etcdctl", "etcdutl")
GO_RUNNER_LABELS = {"maintainers": "Kubernetes Authors", "description": "go based runner for distroless scenarios"}


def server_image_files(binary: str, assets: ClusterAssets, base: dict[str, Entry]) -> list[Entry]:
    """build/server-image: the binary in /usr/local/bin (kube-apiserver's with cap_net_bind_service, which its own
    Dockerfile sets so it can serve on ports below 1024 as non-root) and kube-log-runner as /go-runner."""
    caps = file_capabilities(CAP_NET_BIND_SERVICE) if binary == "kube-apiserver" else None
    root = dict(base)
    for e in (
        file_(f"usr/local/bin/{binary}", assets.k8s(binary).read_bytes(), 0o755, xattrs=caps),
        file_("go-runner", assets.k8s("kube-log-runner").read_bytes(), 0o755),
    ):
        root[e.path] = e
    return list(root.values())


def server_labels(binary: str, version: str, base: str) -> dict[str, str]:
    """The base image's labels and what this image really is."""
    labels = dict(GO_RUNNER_LABELS) if base == "go-runner" else {}
    return {
        **labels,
        "org.opencontainers.image.title": binary,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.description": (
            f"{binary} {version} from k8s.io/kubernetes with kube-log-runner as /go-runner, on {base} made of "
            "Debian's packages, by kopflet"
        ),
    }


def go_runner_image(binary: str, assets: ClusterAssets, version: str) -> Image:
    """registry.k8s.io/kube-apiserver, kube-controller-manager or kube-scheduler."""
    return Image(
        repo=binary,
        tag=version,
        files=lambda ctx: server_image_files(binary, assets, distroless_static(ctx)),
        config={"Entrypoint": ["/go-runner"], "Env": DISTROLESS_ENV, "User": "0", "WorkingDir": "/"},
        labels=lambda: server_labels(binary, version, "go-runner"),
        key=lambda ctx: [*distroless_static_key(ctx), *file_key(assets.k8s(binary), assets.k8s("kube-log-runner"))],
    )


# distroless base-debian<N>: static with glibc, libssl and openssl, and the C.utf8 locale.
DISTROLESS_BASE_PACKAGES = ("libc6", "libssl3", "openssl")
# distroless-iptables (distroless-bookworm/Dockerfile): stage-binaries-from-package.sh's packages, each with its
# direct dependencies' files; stage-binary-and-deps.sh's binaries with their libraries: nft (upstream builds
# nftables 1.1.3 from source, static, with patches; here Debian's nft, dynamically linked), dash and the commands
# iptables-wrapper runs.
IPTABLES_PACKAGES = ("ipset", "iptables", "kmod")
IPTABLES_TOOLS = {"nft": "nftables", "dash": "dash", "cat": "coreutils", "chmod": "coreutils", "grep": "grep",
                  "ln": "coreutils", "rm": "coreutils", "sleep": "coreutils", "wc": "coreutils"}  # fmt: skip
# clean-distroless.sh.
DISTROLESS_IPTABLES_REMOVED = ("usr/share/base-files", "usr/share/base-files/*", "usr/share/man", "usr/share/man/*",
                               "usr/lib/*-linux-gnu/gconv", "usr/lib/*-linux-gnu/gconv/*", "usr/bin/c_rehash",
                               "usr/bin/openssl")  # fmt: skip
IPTABLES_WRAPPED = ("iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore")
# What iptables-wrapper-installer.sh (kubernetes-sigs/iptables-wrappers, branch v2) writes as /usr/sbin/iptables-wrapper
# in an image with iptables >= 1.8.4 in /usr/sbin and no alternatives system: on first use it picks the mode whose
# rules the host has more of (legacy on a tie), points the six commands at that xtables-*-multi, and re-runs.
IPTABLES_WRAPPER = """\
#!/bin/sh

# Copyright 2020 The Kubernetes Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

# NOTE: This can only use POSIX /bin/sh features; the container image
# might not contain bash.

set -eu

# Detect whether the base system is using iptables-legacy or
# iptables-nft. This assumes that some non-containerized process (eg
# kubelet) has already created some iptables rules.
num_legacy_lines=$( (iptables-legacy-save || true; ip6tables-legacy-save || true) 2>/dev/null | grep '^-' | wc -l)
num_nft_lines=$( (iptables-nft-save || true; ip6tables-nft-save || true) 2>/dev/null | grep '^-' | wc -l)
if [ "${num_legacy_lines}" -ge "${num_nft_lines}" ]; then
    mode=legacy
else
    mode=nft
fi
# Update links to point to the selected binaries
for cmd in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    rm -f "/usr/sbin/${cmd}"
    ln -s "/usr/sbin/xtables-${mode}-multi" "/usr/sbin/${cmd}"
done 2>/dev/null || failed=1
if [ "${failed:-0}" = 1 ]; then
    echo "Unable to redirect iptables binaries. (Are you running in an unprivileged pod?)" 1>&2
    # fake it, though this will probably also fail if they aren't root
    exec "/usr/sbin/xtables-${mode}-multi" "$0" "$@"
fi

# Now re-exec the original command with the newly-selected alternative
exec "$0" "$@"
"""


def direct_depends(control: str) -> list[str]:
    """The packages a control stanza's Depends and Pre-Depends name (every alternative, no versions), as
    `apt-cache depends | grep Depends` lists them."""
    fields: dict[str, str] = {}
    key = ""
    for line in control.splitlines():
        if line[:1].isspace() and key:
            fields[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    names: list[str] = []
    for field_ in ("Pre-Depends", "Depends"):
        for alternative in fields.get(field_, "").replace("|", ",").split(","):
            name = alternative.split("(")[0].strip().split(":")[0]
            if name and name not in names:
                names.append(name)
    return names


def elf_needed(data: bytes) -> list[str]:
    """The DT_NEEDED names of an ELF file's dynamic section (what `ldd` resolves, read without running the loader,
    so libraries this system lacks are named too); [] for anything else or a static binary."""
    if data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return []
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"

    def u(fmt: str, at: int) -> tuple[int, ...]:
        return struct.unpack_from(order + fmt, data, at)

    if wide:
        shoff, (shentsize, shnum) = u("Q", 0x28)[0], u("HH", 0x3A)
    else:
        shoff, (shentsize, shnum) = u("I", 0x20)[0], u("HH", 0x2E)
    sections = []
    for i in range(shnum):
        at = shoff + i * shentsize
        if wide:
            _, kind, _, _, offset, size, link, _, _, _ = u("IIQQQQIIQQ", at)
        else:
            _, kind, _, _, offset, size, link, _, _, _ = u("IIIIIIIIII", at)
        sections.append((kind, offset, size, link))
    names: list[str] = []
    for kind, offset, size, link in sections:
        if kind != 6:  # SHT_DYNAMIC
            continue
        strtab = sections[link][1]
        fmt, step = ("qQ", 16) if wide else ("iI", 8)
        for at in range(offset, offset + size, step):
            tag, value = u(fmt, at)
            if tag == 0:  # DT_NULL
                break
            if tag == 1:  # DT_NEEDED
                names.append(data[strtab + value : data.index(b"\0", strtab + value)].decode())
    return names


class Stager:
    """stage-binaries-from-package.sh and stage-binary-and-deps.sh over unpacked packages: a staged path brings the
    file a symlink points to, the owning package's copyright and its status.d stanza; a binary brings the shared
    libraries `ldd` says it needs."""

    def __init__(self, debs: Iterable[DebContents]) -> None:
        self.debs = {d.name: d for d in debs}
        self.tree: dict[str, Entry] = {}
        self.owner: dict[str, str] = {}
        for deb in self.debs.values():
            for e in deb.entries:
                self.tree.setdefault(e.path, e)
                self.owner.setdefault(e.path, deb.name)
        self.libs: dict[str, str] = {}  # shared object file name -> its path
        for path in sorted(self.tree):
            if path.startswith(("lib/", "lib64/", "usr/lib/")) and ".so" in os.path.basename(path):
                self.libs.setdefault(os.path.basename(path), path)
        self.root: dict[str, Entry] = {}

    def stage_file(self, path: str) -> None:
        """cp -a --parents, following a symlink to what it names; the package's copyright and status."""
        hops = 0
        while path and hops < 32 and path not in self.root:
            e = self.tree.get(path)
            if e is None:
                return
            self.root[path] = e
            package = self.owner.get(path)
            if package is not None:
                copyright_ = f"usr/share/doc/{package}/copyright"
                found = resolve_link(self.tree, copyright_)
                if found is not None and found.kind == "file":
                    self.root[copyright_] = dataclasses.replace(found, path=copyright_)
                self.root[status_d(self.debs[package]).path] = status_d(self.debs[package])
            if e.kind != "symlink":
                return
            base = "" if e.target.startswith("/") else os.path.dirname(path)
            path = os.path.normpath(os.path.join("/", base, e.target)).lstrip("/")
            hops += 1

    def stage_binary(self, path: str) -> None:
        """The binary and its libraries."""
        self.stage_file(path)
        target = resolve_link(self.tree, path)
        todo = [target.data] if target is not None and target.kind == "file" else []
        seen: set[str] = set()
        while todo:
            for name in elf_needed(todo.pop()):
                if name in seen:
                    continue
                seen.add(name)
                if name not in self.libs:
                    raise RuntimeError(f"{path} needs {name}, which none of the packages has")
                self.stage_file(self.libs[name])
                lib = resolve_link(self.tree, self.libs[name])
                if lib is not None and lib.kind == "file":
                    todo.append(lib.data)

    def stage_package(self, name: str) -> None:
        """stage_file_list: every file but documentation, manuals, completions and hidden ones; binaries with
        their libraries."""
        deb = self.debs.get(name)
        if deb is None:
            return
        for e in deb.entries:
            path = "/" + e.path
            if "/s" + "bin/" in path or "/bin/" in path:
                if e.kind != "dir":
                    self.stage_binary(e.path)
            elif "/." in path or path.startswith(("/usr/share/man/", "/usr/share/doc/")) or (
                path.startswith("/usr/share/") and "-completion" in path.split("/")[3]
            ):
                continue
            elif e.kind == "file" or (e.kind == "symlink" and (resolve_link(self.tree, e.path) or e).kind == "file"):
                self.stage_file(e.path)

    def find_binary(self, name: str, package: str) -> str | None:
        """Where a package puts a command (bin/cat on Debian 12, usr/bin/cat on later releases)."""
        for d in PATH_DIRS:
            if f"{d}/{name}" in self.tree and self.owner.get(f"{d}/{name}") == package:
                return f"{d}/{name}"
        return None


def removed(path: str, patterns: Iterable[str]) -> bool:
    """Whether clean-distroless.sh's `rm -rf` takes a path."""
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def distroless_iptables(ctx: Context) -> dict[str, Entry]:
    """registry.k8s.io/build-image/distroless-iptables' files (its /go-runner is left to the image above it)."""
    root = distroless_static(ctx)
    base = named_debs((*DISTROLESS_BASE_PACKAGES, "libc-bin"), ctx)
    for e in unpack([base[n] for n in DISTROLESS_BASE_PACKAGES], keep=lambda p: True).values():
        root[e.path] = e
    for e in base["libc-bin"].entries:  # the locale rule: C.utf8 only
        if e.path.startswith("usr/lib/locale/C.utf8"):
            root[e.path] = e
    for name in DISTROLESS_BASE_PACKAGES:
        root[status_d(base[name]).path] = status_d(base[name])
    stager = Stager(debs_for((*IPTABLES_PACKAGES, *sorted(set(IPTABLES_TOOLS.values()))), ctx))
    for package in IPTABLES_PACKAGES:
        stager.stage_package(package)
        for dep in direct_depends(stager.debs[package].control):
            stager.stage_package(dep)
    for tool, package in IPTABLES_TOOLS.items():
        path = stager.find_binary(tool, package)
        if path is None:
            raise RuntimeError(f"{package} has no {tool}")
        stager.stage_binary(path)
    root.update(stager.root)
    dash = stager.find_binary("dash", "dash")
    sbin = "usr/sbin" if "usr/sbin/xtables-nft-multi" in root else "sbin"
    for e in (
        symlink("bin/sh", f"/{dash}"),
        file_(f"{sbin}/iptables-wrapper", IPTABLES_WRAPPER.replace("/usr/sbin/", f"/{sbin}/").encode(), 0o755),
        *(symlink(f"{sbin}/{cmd}", f"/{sbin}/iptables-wrapper") for cmd in IPTABLES_WRAPPED),
    ):
        root[e.path] = e
    return {p: e for p, e in root.items() if not removed(p, DISTROLESS_IPTABLES_REMOVED)}


def distroless_iptables_key(ctx: Context) -> list[str]:
    """Every package distroless-iptables takes files from."""
    names = (*DISTROLESS_BASE_PACKAGES, "libc-bin", *IPTABLES_PACKAGES, *sorted(set(IPTABLES_TOOLS.values())))
    return [*distroless_static_key(ctx), *debs_key(names, ctx)]


def kube_proxy_image(assets: ClusterAssets, version: str) -> Image:
    """registry.k8s.io/kube-proxy: build/server-image/Dockerfile on distroless-iptables (FROM scratch: the config
    is the server image's alone)."""
    return Image(
        repo="kube-proxy",
        tag=version,
        files=lambda ctx: server_image_files("kube-proxy", assets, distroless_iptables(ctx)),
        config={"Entrypoint": ["/go-runner"], "Env": [f"PATH={DEFAULT_PATH}"], "WorkingDir": "/"},
        labels=lambda: server_labels("kube-proxy", version, "distroless-iptables"),
        key=lambda ctx: [
            *distroless_iptables_key(ctx),
            *file_key(assets.k8s("kube-proxy"), assets.k8s("kube-log-runner")),
        ],
    )


def etcd_image(assets: ClusterAssets, tag: str) -> Image:
    """registry.k8s.io/etcd: etcd's Dockerfile on distroless static (root)."""
    version = assets.version("etcd")

    def files(ctx: Context) -> list[Entry]:
        root = distroless_static(ctx)
        for name in ETCD_BINARIES:
            root[f"usr/local/bin/{name}"] = file_(f"usr/local/bin/{name}", assets.cluster(name).read_bytes(), 0o755)
        root["var/etcd"] = dir_("var/etcd")
        root["var/lib/etcd"] = dir_("var/lib/etcd")
        return list(root.values())

    return Image(
        repo="etcd",
        tag=tag,
        files=files,
        config={
            "Cmd": ["/usr/local/bin/etcd"],
            "Env": DISTROLESS_ENV,
            "User": "0",
            "WorkingDir": "/var/lib/etcd",
            "ExposedPorts": {"2379/tcp": {}, "2380/tcp": {}},
        },
        labels=lambda: {
            "org.opencontainers.image.title": "etcd",
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.description": (
                f"etcd, etcdctl and etcdutl {version} from go.etcd.io/etcd on distroless static made of Debian's "
                "packages, by kopflet"
            ),
        },
        key=lambda ctx: [*distroless_static_key(ctx), *file_key(*(assets.cluster(n) for n in ETCD_BINARIES))],
    )


def coredns_image(assets: ClusterAssets, tag: str) -> Image:
    """registry.k8s.io/coredns/coredns: CoreDNS's Dockerfile on distroless static (nonroot)."""
    version = assets.version("coredns")

    def files(ctx: Context) -> list[Entry]:
        root = distroless_static(ctx)
        caps = file_capabilities(CAP_NET_BIND_SERVICE)
        root["coredns"] = file_("coredns", assets.cluster("coredns").read_bytes(), 0o755, xattrs=caps)
        return list(root.values())

    return Image(
        repo="coredns/coredns",
        tag=tag,
        files=files,
        config={
            "Entrypoint": ["/coredns"],
            "Env": DISTROLESS_ENV,
            "User": "nonroot:nonroot",
            "WorkingDir": "/",
            "ExposedPorts": {"53/tcp": {}, "53/udp": {}},
        },
        labels=lambda: {
            "org.opencontainers.image.title": "coredns",
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.description": (
                f"CoreDNS {version} from github.com/coredns/coredns on distroless static (nonroot) made of "
                "Debian's packages, by kopflet"
            ),
        },
        key=lambda ctx: [*distroless_static_key(ctx), *file_key(assets.cluster("coredns"))],
    )


METRICS_SERVER_UID = 65534  # the Dockerfile's USER: distroless' nobody


def metrics_server_image(assets: ClusterAssets, tag: str) -> Image:
    """registry.k8s.io/metrics-server/metrics-server: its Dockerfile's final stage on distroless static (root), the
    binary at /metrics-server, run as nobody."""
    version = assets.version("metrics-server")

    def files(ctx: Context) -> list[Entry]:
        root = distroless_static(ctx)
        root["metrics-server"] = file_("metrics-server", assets.cluster("metrics-server").read_bytes(), 0o755)
        return list(root.values())

    return Image(
        repo="metrics-server/metrics-server",
        tag=tag,
        files=files,
        # distroless static's config (its Env, root's WorkingDir /) with the Dockerfile's USER and ENTRYPOINT.
        config={
            "Entrypoint": ["/metrics-server"],
            "Env": DISTROLESS_ENV,
            "User": str(METRICS_SERVER_UID),
            "WorkingDir": "/",
        },
        labels=lambda: {
            "org.opencontainers.image.title": "metrics-server",
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.description": (
                f"metrics-server {version} from sigs.k8s.io/metrics-server on distroless static made of Debian's "
                "packages, by kopflet"
            ),
        },
        key=lambda ctx: [*distroless_static_key(ctx), *file_key(assets.cluster("metrics-server"))],
    )


# --- the hostpath CSI driver's sidecars --------------------------------------------------------
# The CSI sidecars of the hostpath driver deployment upstream's e2e suite runs (k8s.io/kubernetes v1.37.1's
# test/e2e/testing-manifests/storage-csi/hostpath/hostpath/csi-hostpath-plugin.yaml), under the names and tags it
# gives them: registry.k8s.io/sig-storage/<command>:<version>. Each repository's Dockerfile (the module's root one, or
# cmd/<command>/Dockerfile where it has one) is the same four lines: FROM gcr.io/distroless/static:latest (root: its
# config's User 0, WorkingDir /, PATH and SSL_CERT_FILE), LABEL maintainers and description, COPY the binary to
# /<command>, ENTRYPOINT ["/<command>"]; release-tools' build.make adds `--label revision=$(REV)`, the tag in the
# release build. The binaries are build-binaries.sh --csi's, each with the tag it was built from beside it.
# Not here: hostpathplugin (FROM alpine, with Alpine's tools), csi-node-driver-registrar, livenessprobe and
# csi-external-health-monitor-controller: the Go module proxy serves no version of their modules (versions.env).

CSI_REGISTRY = "sig-storage"  # registry.k8s.io/sig-storage/...
# command -> (its Go module, its Dockerfile's LABEL description)
CSI_SIDECARS: dict[str, tuple[str, str]] = {
    "csi-provisioner": ("github.com/kubernetes-csi/external-provisioner/v6", "CSI External Provisioner"),
    "csi-attacher": ("github.com/kubernetes-csi/external-attacher/v4", "CSI External Attacher"),
    "csi-resizer": ("github.com/kubernetes-csi/external-resizer/v2", "CSI External Resizer"),
    "csi-snapshotter": ("github.com/kubernetes-csi/external-snapshotter/v8", "CSI External Snapshotter Sidecar"),
    "csi-snapshot-metadata": ("github.com/kubernetes-csi/external-snapshot-metadata",
                              "CSI External Snapshot Metadata Sidecar"),
}  # fmt: skip
CSI_LABELS = {"maintainers": "Kubernetes Authors"}


@dataclass(frozen=True)
class CsiAssets:
    """What build-binaries.sh --csi leaves: csi/<command> and csi/<command>.version (the tag it was built from)."""

    bin_dir: Path

    def binary(self, name: str) -> Path:
        return self.bin_dir / "csi" / name

    def version_file(self, name: str) -> Path:
        return self.bin_dir / "csi" / f"{name}.version"

    def version(self, name: str) -> str:
        return self.version_file(name).read_text().strip()

    @property
    def built(self) -> list[str]:
        """The sidecars whose binary and version file are there, in table order."""
        return [n for n in CSI_SIDECARS if self.binary(n).is_file() and self.version_file(n).is_file()]


def csi_sidecar_labels(name: str, version: str) -> dict[str, str]:
    """The Dockerfile's labels and build.make's revision, and what this image really is."""
    module, description = CSI_SIDECARS[name]
    return {
        **CSI_LABELS,
        "description": description,
        "revision": version,
        "org.opencontainers.image.title": name,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.description": (
            f"{name} {version} from {module} on distroless static made of Debian's packages, by kopflet"
        ),
    }


def csi_sidecar_image(assets: CsiAssets, name: str) -> Image:
    """registry.k8s.io/sig-storage/<name>:<the tag its binary was built from>: the binary at /<name>, its entrypoint,
    on distroless static (root)."""
    version = assets.version(name)

    def files(ctx: Context) -> list[Entry]:
        root = distroless_static(ctx)
        root[name] = file_(name, assets.binary(name).read_bytes(), 0o755)
        return list(root.values())

    return Image(
        repo=f"{CSI_REGISTRY}/{name}",
        tag=version,
        files=files,
        # distroless static's config (root) with the Dockerfile's ENTRYPOINT.
        config={"Entrypoint": [f"/{name}"], "Env": DISTROLESS_ENV, "User": "0", "WorkingDir": "/"},
        labels=lambda: csi_sidecar_labels(name, version),
        key=lambda ctx: [*distroless_static_key(ctx), *file_key(assets.binary(name))],
    )


def csi_images(bin_dir: Path) -> list[Image]:
    """The sidecar images of the binaries build-binaries.sh --csi built."""
    assets = CsiAssets(bin_dir)
    return [csi_sidecar_image(assets, name) for name in assets.built]


# --- the image table -------------------------------------------------------------------------

E2E_REGISTRY_IMAGES = "e2e-test-images"  # registry.k8s.io/e2e-test-images/...

IMAGES: list[Image] = [
    pause_image(PAUSE_VERSION),
    pause_image(E2E_PAUSE_VERSION),
    Image(
        repo="library/busybox",  # docker.io/library/busybox
        tag="1.36",
        files=busybox_files,
        config={"Cmd": ["sh"], "Env": [f"PATH={DEFAULT_PATH}"], "WorkingDir": "/"},
        labels=busybox_labels,
        key=busybox_image_key,
    ),
    Image(
        repo="e2e-test-images/busybox",  # imageutils.BusyBox
        tag="1.37.0-2",
        files=e2e_busybox_files,
        config={"Cmd": ["sh"], "Env": [f"PATH={DEFAULT_PATH}"]},
        labels=busybox_labels,
        key=e2e_busybox_key,
    ),
    nginx_image("1.27.0-2", "1.27"),  # imageutils.Nginx
    nginx_image("1.28.0-2", "1.28"),  # imageutils.NginxNew
    glibc_dns_testing_image(),
    nonroot_image(),
]


AGNHOST_PREV = "2.55"  # imageutils.AgnhostPrev


def e2e_images(bin_dir: Path) -> list[Image]:
    """The images made from build-binaries.sh's output (agnhost, nnp, sample-apiserver, the module's test/images
    files)."""
    return [
        agnhost_image(bin_dir),
        agnhost_image(bin_dir, AGNHOST_PREV),
        picture_image(bin_dir, "kitten", "1.8"),
        picture_image(bin_dir, "nautilus", "1.8"),
        nonewprivs_image(bin_dir),
        # Built by build-binaries.sh --e2e only (the conformance targets): the cluster pass's Aggregator spec.
        *([sample_apiserver_image(bin_dir)] if (bin_dir / "sample-apiserver").exists() else []),
    ]


def cluster_images(bin_dir: Path) -> list[Image]:
    """The images `kubeadm init` pulls besides pause, made of build-binaries.sh --cluster's output; tagged as
    kubeadm names them (the etcd tag is the etcd release with kubeadm's image revision -0); and metrics-server's."""
    assets = ClusterAssets(bin_dir)
    k8s = versions_env()["KUBERNETES_VERSION"]
    return [
        *(go_runner_image(name, assets, k8s) for name in SERVER_IMAGES),
        kube_proxy_image(assets, k8s),
        etcd_image(assets, f"{assets.version('etcd').removeprefix('v')}-0"),
        coredns_image(assets, assets.version("coredns")),
        metrics_server_image(assets, assets.version("metrics-server")),
    ]


# --- registry --------------------------------------------------------------------------------


def remote_digest(registry: str, repo: str, tag: str, timeout: float = 10.0) -> str | None:
    """The digest of the manifest the registry serves for repo:tag, or None when it has none.

    A plain HTTP GET is enough for the local, insecure registry; skopeo answers when HTTP can't.
    """
    url = f"http://{registry}/v2/{repo}/manifests/{tag}"
    req = urllib.request.Request(url, headers={"Accept": f"{MT_MANIFEST}, {MT_INDEX}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return sha256(resp.read())
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
    except (urllib.error.URLError, OSError):
        pass
    proc = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{registry}/{repo}:{tag}"],
        capture_output=True,
    )
    return sha256(proc.stdout) if proc.returncode == 0 and proc.stdout else None


def push(built: Built, registry: str) -> str:
    """Copy the layout to the registry unchanged (--preserve-digests) and return the pushed digest."""
    image = built.image
    with tempfile.TemporaryDirectory() as tmp:
        digestfile = Path(tmp) / "digest"
        subprocess.run(
            [
                "skopeo", "copy", "--quiet", "--preserve-digests", "--retry-times", "2",
                "--dest-tls-verify=false", "--digestfile", str(digestfile),
                f"oci:{built.layout}:{image.tag}", f"docker://{registry}/{image.repo}:{image.tag}",
            ],
            check=True,
        )  # fmt: skip
        pushed = digestfile.read_text().strip()
    if pushed != built.manifest_digest:
        raise RuntimeError(f"{image.ref}: registry got {pushed}, built {built.manifest_digest}")
    return pushed


# --- CLI -------------------------------------------------------------------------------------


def select(names: list[str], images: list[Image] | None = None) -> list[Image]:
    """Images named on the command line by repo, last path part, or repo:tag; all when none."""
    images = IMAGES if images is None else images
    if not names:
        return list(images)
    chosen: list[Image] = []
    for name in names:
        matches = [i for i in images if name in i.aliases]
        if not matches:
            raise SystemExit(f"unknown image {name!r}; known: {', '.join(i.ref for i in images)}")
        chosen += [m for m in matches if m not in chosen]
    return chosen


def main(argv: list[str] | None = None) -> int:
    """Build every selected image and push the ones the registry does not already serve."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--registry", help="host:port of the insecure local registry, e.g. 127.0.0.1:5050")
    ap.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help=f"layout cache (default {DEFAULT_CACHE})"
    )
    ap.add_argument(
        "--bin-dir",
        type=Path,
        help="where build-binaries.sh put agnhost, nnp and sample-apiserver (adds the images made of them)",
    )
    ap.add_argument(
        "--cluster",
        action="store_true",
        help="add the kubeadm cluster's images (made of build-binaries.sh --cluster's output in --bin-dir; added "
        "without this flag whenever those binaries are there)",
    )
    ap.add_argument(
        "--csi",
        action="store_true",
        help="add the CSI sidecar images (made of build-binaries.sh --csi's output in --bin-dir; added without this "
        "flag whenever those binaries are there)",
    )
    ap.add_argument("--no-push", action="store_true", help="only build the OCI layouts")
    ap.add_argument("--list", action="store_true", help="list the known images and exit")
    ap.add_argument("images", nargs="*", metavar="IMAGE", help="e.g. pause, busybox, library/busybox:1.36")
    args = ap.parse_args(argv)
    if args.cluster and not (args.bin_dir and ClusterAssets(args.bin_dir).complete):
        ap.error("--cluster needs --bin-dir holding build-binaries.sh --cluster's output")
    if args.csi and not (args.bin_dir and CsiAssets(args.bin_dir).built):
        ap.error("--csi needs --bin-dir holding build-binaries.sh --csi's output")
    images = [*IMAGES, *e2e_images(args.bin_dir)] if args.bin_dir else IMAGES
    if args.bin_dir and ClusterAssets(args.bin_dir).complete:
        images = [*images, *cluster_images(args.bin_dir)]
    if args.bin_dir:
        images = [*images, *csi_images(args.bin_dir)]
    if args.list:
        print("\n".join(i.ref for i in images))
        return 0
    if not args.no_push and not args.registry:
        ap.error("--registry is required unless --no-push is given")
    if not args.no_push and shutil.which("skopeo") is None:
        ap.error("skopeo is not installed (apt-get install -y skopeo)")

    for image in select(args.images, images):
        started = time.monotonic()
        built = build(image, args.cache / "oci" / image.repo / image.tag, cache=args.cache)
        state = "built"
        if not args.no_push:
            if remote_digest(args.registry, image.repo, image.tag) == built.manifest_digest:
                state = "up to date"
            else:
                push(built, args.registry)
                state = "pushed"
        where = f" {args.registry}/{image.ref}" if args.registry and not args.no_push else ""
        print(f"{image.ref} {built.manifest_digest} {state}{where} ({time.monotonic() - started:.2f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
