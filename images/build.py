#!/usr/bin/env python3
"""Build the stack's container images from local binaries and push them to a local registry.

Nothing can be pulled from the internet here, so the images the tests need (the pod sandbox's
pause image and busybox) are assembled from Debian packages and our own C source into OCI image
layouts, then pushed with skopeo to the local registry that containerd mirrors docker.io and
registry.k8s.io to.

Builds are reproducible (fixed mtimes and owners, sorted tar entries, gzip mtime 0, canonical
JSON), so an unchanged input gives the same manifest digest, and the push is skipped when the
registry already serves that digest.

Usage: python images/build.py --registry 127.0.0.1:5000 [--cache DIR] [IMAGE ...]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
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


def file_(path: str, data: bytes, mode: int = 0o644, uid: int = 0, gid: int = 0) -> Entry:
    """A regular file."""
    return Entry(path.strip("/"), "file", mode, data=data, uid=uid, gid=gid)


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
    entries = image.files(Context(cache=cache or out.parent))
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
    write_layout(out, {layer_digest: gz, config_digest: config, manifest_digest: manifest}, index)
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


def pause_files(ctx: Context) -> list[Entry]:
    """Only /pause, as upstream's sandbox image has."""
    binary = compile_static(HERE / "pause" / "pause.c", ctx, {"PAUSE_VERSION": PAUSE_VERSION})
    return [file_("pause", binary, 0o755)]


BUSYBOX = Path("/bin/busybox")
BUSYBOX_PKG = "busybox-static"

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


def busybox_applets() -> list[str]:
    """Applet paths ("bin/sh", "usr/bin/wget", ...) that this busybox binary provides."""
    out = subprocess.run([str(BUSYBOX), "--list-full"], capture_output=True, text=True, check=True).stdout
    # "linuxrc" (top level) is an initrd entry point, and bin/busybox is the binary itself.
    return sorted({p for p in out.split() if "/" in p and p != "bin/busybox"})


@functools.cache
def busybox_package_version() -> str:
    """Debian's version of the package that ships /bin/busybox, e.g. 1:1.35.0-4+deb12u1+b1."""
    try:
        return subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", BUSYBOX_PKG], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@functools.cache
def busybox_version() -> str:
    """The real busybox version, from its banner ("BusyBox v1.35.0 (...)"): the tag is only a name."""
    head = subprocess.run([str(BUSYBOX)], capture_output=True, text=True).stdout.split("\n", 1)[0]
    return head.split()[1].lstrip("v") if head.startswith("BusyBox v") else "unknown"


def busybox_labels() -> dict[str, str]:
    """Say what is really inside: Debian's busybox, whatever the tag claims."""
    return {
        "org.opencontainers.image.title": "busybox",
        "org.opencontainers.image.version": busybox_version(),
        "org.opencontainers.image.description": "BusyBox from Debian's busybox-static, built by kopflet",
        "io.kopflet.image.debian-package": f"{BUSYBOX_PKG}={busybox_package_version()}",
    }


def busybox_files(ctx: Context) -> list[Entry]:
    """Debian's static busybox with a symlink per applet and a minimal /etc."""
    entries = [file_("bin/busybox", BUSYBOX.read_bytes(), 0o755)]
    entries += [symlink(p, "/bin/busybox") for p in busybox_applets()]
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


IMAGES: list[Image] = [
    Image(
        repo="pause",  # registry.k8s.io/pause
        tag=PAUSE_VERSION,
        files=pause_files,
        config={
            "Entrypoint": ["/pause"],
            "User": "65535:65535",
            "Env": [f"PATH={DEFAULT_PATH}"],
            "WorkingDir": "/",
        },
        labels=lambda: {
            "org.opencontainers.image.title": "pause",
            "org.opencontainers.image.version": PAUSE_VERSION,
        },
    ),
    Image(
        repo="library/busybox",  # docker.io/library/busybox
        tag="1.36",
        files=busybox_files,
        config={"Cmd": ["sh"], "Env": [f"PATH={DEFAULT_PATH}"], "WorkingDir": "/"},
        labels=busybox_labels,
    ),
]


def agnhost_image(bin_dir: Path) -> Image:
    """Upstream's e2e test image: the agnhost binary built from the pinned Kubernetes module.

    build-binaries.sh builds it and records the tag upstream publishes for that source; busybox
    provides the shell and tools the upstream image (Alpine based) has.
    """
    binary, version = bin_dir / "agnhost", (bin_dir / "agnhost.version").read_text().strip()

    def files(ctx: Context) -> list[Entry]:
        return [*busybox_files(ctx), file_("agnhost", binary.read_bytes(), 0o755)]

    return Image(
        repo="e2e-test-images/agnhost",  # registry.k8s.io/e2e-test-images/agnhost
        tag=version,
        files=files,
        config={"Entrypoint": ["/agnhost"], "Cmd": ["pause"], "Env": [f"PATH={DEFAULT_PATH}"], "WorkingDir": "/"},
        labels=lambda: {
            "org.opencontainers.image.title": "agnhost",
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.description": "agnhost from k8s.io/kubernetes, with Debian's busybox, by kopflet",
        },
    )


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
    ap.add_argument("--registry", help="host:port of the insecure local registry, e.g. 127.0.0.1:5000")
    ap.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help=f"layout cache (default {DEFAULT_CACHE})"
    )
    ap.add_argument("--bin-dir", type=Path, help="where build-binaries.sh put agnhost (adds the agnhost image)")
    ap.add_argument("--no-push", action="store_true", help="only build the OCI layouts")
    ap.add_argument("--list", action="store_true", help="list the known images and exit")
    ap.add_argument("images", nargs="*", metavar="IMAGE", help="e.g. pause, busybox, library/busybox:1.36")
    args = ap.parse_args(argv)
    images = [*IMAGES, agnhost_image(args.bin_dir)] if args.bin_dir else IMAGES
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
