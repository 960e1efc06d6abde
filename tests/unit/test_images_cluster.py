"""Unit tests for images/build.py's kubeadm cluster images: the table against kubeadm's constants, the distroless
bases' files, kube-proxy's distroless-iptables staging, file capabilities in layers, DT_NEEDED reading.

Pure: fake packages and a fake bin dir; no registry, no network, no apt.
"""

import io
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.unit.test_images import PLATFORM, ROOT, _deb, _manifest_go, b, e2e_bin_dir, read_layout

K8S = "v1.37.1"
METRICS_SERVER = "v0.9.0"


def cluster_bin_dir(tmp_path):
    """What build-binaries.sh --cluster leaves beside the e2e images' binaries (fakes)."""
    d = e2e_bin_dir(tmp_path)
    (d / "cluster").mkdir(parents=True)
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kube-log-runner"):
        (d / name).write_bytes(f"{name} binary".encode())
    for name in ("etcd", "etcdctl", "etcdutl", "coredns", "metrics-server"):
        (d / "cluster" / name).write_bytes(f"{name} binary".encode())
    (d / "cluster" / "etcd.version").write_text("v3.7.0\n")
    (d / "cluster" / "coredns.version").write_text("v1.14.6\n")
    (d / "cluster" / "metrics-server.version").write_text(f"{METRICS_SERVER}\n")
    return d


CLUSTER_REFS = {
    f"kube-apiserver:{K8S}",
    f"kube-controller-manager:{K8S}",
    f"kube-scheduler:{K8S}",
    f"kube-proxy:{K8S}",
    "etcd:3.7.0-0",
    "coredns/coredns:v1.14.6",
    f"metrics-server/metrics-server:{METRICS_SERVER}",
}
OS_RELEASE = b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n'


def _elf():
    """A real dynamically linked executable (needs libc.so.6), when the system has one."""
    return Path("/bin/true").read_bytes() if Path("/bin/true").is_file() else b"\x7fELF?"


CLUSTER_DEBS = {
    d.name: d
    for d in [
        _deb("base-files", [
            b.dir_("bin"),
            b.dir_("tmp", 0o1777),
            b.file_("usr/lib/os-release", OS_RELEASE),
            b.symlink("etc/os-release", "../usr/lib/os-release"),
            b.file_("usr/share/base-files/profile", b"# profile\n"),
            b.file_("usr/share/doc/base-files/README", b"docs"),
        ]),
        _deb("netbase", [b.file_("etc/services", b"http 80/tcp\n")]),
        _deb("tzdata", [b.file_("usr/share/zoneinfo/Etc/UTC", b"TZif")]),
        _deb("media-types", [b.file_("etc/mime.types", b"text/plain txt\n")]),
        _deb("ca-certificates", [
            b.file_("usr/share/ca-certificates/mozilla/B.crt", b"B-cert"),
            b.file_("usr/share/ca-certificates/mozilla/A.crt", b"A-cert\n"),
            b.file_("usr/share/doc/ca-certificates/copyright", b"MPL"),
            b.file_("usr/sbin/update-ca-certificates", b"#!/bin/sh\n", 0o755),
        ]),
        _deb("libc6", [
            b.file_("lib/x86_64-linux-gnu/libc.so.6", b"libc", 0o755),
            b.file_("usr/lib/x86_64-linux-gnu/gconv/UTF-16.so", b"gconv"),
            b.file_("usr/share/doc/libc6/copyright", b"LGPL"),
        ]),
        _deb("libc-bin", [
            b.file_("usr/lib/locale/C.utf8/LC_CTYPE", b"ctype"),
            b.file_("usr/bin/getconf", b"getconf", 0o755),
        ]),
        _deb("libssl3", [b.file_("usr/lib/x86_64-linux-gnu/libssl.so.3", b"ssl")]),
        _deb("openssl", [
            b.file_("usr/bin/openssl", b"openssl", 0o755),
            b.file_("usr/bin/c_rehash", b"c_rehash", 0o755),
            b.file_("etc/ssl/openssl.cnf", b"cnf"),
        ]),
        b.DebContents("iptables", "Package: iptables\nVersion: 1.8.9-2\nDepends: libxtables12, netbase (>= 5.0),\n"
                      " libc6 (>= 2.34)\nDescription: fake\n", (
            b.file_("usr/sbin/xtables-nft-multi", _elf(), 0o755),
            b.file_("usr/sbin/xtables-legacy-multi", b"legacy", 0o755),
            b.symlink("usr/sbin/iptables-nft", "xtables-nft-multi"),
            b.symlink("usr/sbin/iptables-legacy-save", "xtables-legacy-multi"),
            b.file_("usr/share/man/man8/iptables.8.gz", b"man"),
            b.file_("usr/share/doc/iptables/copyright", b"GPL"),
            b.file_("usr/share/bash-completion/completions/iptables", b"completion"),
            b.file_("etc/iptables/.hidden", b"hidden"),
        )),
        _deb("libxtables12", [b.file_("usr/lib/x86_64-linux-gnu/libxtables.so.12", b"xt")]),
        _deb("ipset", [b.file_("usr/sbin/ipset", b"ipset", 0o755)]),
        _deb("kmod", [b.file_("bin/kmod", b"kmod", 0o755), b.symlink("sbin/modprobe", "/bin/kmod")]),
        _deb("nftables", [
            b.file_("usr/sbin/nft", b"nft", 0o755),
            b.file_("etc/nftables.conf", b"flush ruleset\n", 0o755),
        ]),
        _deb("dash", [b.file_("bin/dash", b"dash", 0o755)]),
        _deb("coreutils", [b.file_(f"bin/{n}", n.encode(), 0o755) for n in ("cat", "chmod", "ln", "rm", "sleep")]
             + [b.file_("usr/bin/wc", b"wc", 0o755), b.file_("usr/bin/tr", b"tr", 0o755)]),
        _deb("grep", [b.file_("bin/grep", b"grep", 0o755)]),
    ]
}  # fmt: skip


@pytest.fixture
def cluster_build(tmp_path, monkeypatch):
    """debs_for answers from CLUSTER_DEBS (every named package, no closure)."""

    def debs_for(packages, ctx):
        names = set(packages)
        for name in list(names):  # the closure, as apt resolves it
            names.update(b.direct_depends(CLUSTER_DEBS[name].control) if name in CLUSTER_DEBS else ())
        return [CLUSTER_DEBS[n] for n in sorted(names) if n in CLUSTER_DEBS]

    monkeypatch.setattr(b, "debs_for", debs_for)
    monkeypatch.setattr(b, "debs_key", lambda packages, ctx: [f"{n}_1.0_amd64.deb SHA256:x" for n in sorted(packages)])
    monkeypatch.setattr(b, "source_date_epoch", lambda: 0)
    monkeypatch.setattr(b, "host_platform", lambda: PLATFORM)
    return b.Context(cache=tmp_path / "cache")


# --- the table -------------------------------------------------------------------------------


def test_cluster_image_table(tmp_path):
    images = {i.ref: i for i in b.cluster_images(cluster_bin_dir(tmp_path))}
    assert set(images) == CLUSTER_REFS
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        config = images[f"{name}:{K8S}"].config
        assert config["Entrypoint"] == ["/go-runner"] and config["User"] == "0" and config["WorkingDir"] == "/"
        assert "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" in config["Env"] and "Cmd" not in config
        assert images[f"{name}:{K8S}"].labels()["maintainers"] == "Kubernetes Authors"
    # distroless-iptables is FROM scratch: only what the server image sets
    assert images[f"kube-proxy:{K8S}"].config == {
        "Entrypoint": ["/go-runner"], "Env": [f"PATH={b.DEFAULT_PATH}"], "WorkingDir": "/"}  # fmt: skip
    etcd = images["etcd:3.7.0-0"].config
    assert etcd["Cmd"] == ["/usr/local/bin/etcd"] and "Entrypoint" not in etcd and etcd["User"] == "0"
    assert etcd["WorkingDir"] == "/var/lib/etcd" and etcd["ExposedPorts"] == {"2379/tcp": {}, "2380/tcp": {}}
    coredns = images["coredns/coredns:v1.14.6"].config
    assert coredns["Entrypoint"] == ["/coredns"] and coredns["User"] == "nonroot:nonroot"
    assert coredns["WorkingDir"] == "/" and coredns["ExposedPorts"] == {"53/tcp": {}, "53/udp": {}}
    # metrics-server's Dockerfile: distroless static's config, USER 65534, ENTRYPOINT ["/metrics-server"]
    assert images[f"metrics-server/metrics-server:{METRICS_SERVER}"].config == {
        "Entrypoint": ["/metrics-server"], "Env": b.DISTROLESS_ENV, "User": "65534", "WorkingDir": "/"}  # fmt: skip
    for image in images.values():
        assert image.key is not None and "PATH=" + b.DEFAULT_PATH in image.config["Env"]
        assert "kopflet" in image.labels()["org.opencontainers.image.description"]


def _kubeadm_constants():
    """cmd/kubeadm/app/constants/constants.go of the pinned Kubernetes module, when it is in the Go module cache."""
    if shutil.which("go") is None:
        return None
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    version = b.versions_env()["KUBERNETES_VERSION"]
    path = Path(modcache) / f"k8s.io/kubernetes@{version}" / "cmd/kubeadm/app/constants/constants.go"
    return path.read_text() if path.is_file() else None


def test_versions_env_pins_what_kubeadm_deploys():
    versions = b.versions_env()
    assert versions["KUBERNETES_VERSION"] == K8S
    assert (versions["CLUSTER_ETCD_VERSION"], versions["COREDNS_VERSION"]) == ("v3.7.0", "v1.14.6")
    assert versions["METRICS_SERVER_VERSION"] == METRICS_SERVER


def test_the_metrics_server_tag_is_the_pinned_release(tmp_path):
    """The image is tagged with the release build-binaries.sh built (its version file), which versions.env pins."""
    pinned = b.versions_env()["METRICS_SERVER_VERSION"]
    refs = {i.ref for i in b.cluster_images(cluster_bin_dir(tmp_path))}
    assert f"metrics-server/metrics-server:{pinned}" in refs
    bin_dir = cluster_bin_dir(tmp_path / "other")
    (bin_dir / "cluster" / "metrics-server.version").write_text("v0.8.0\n")
    assert "metrics-server/metrics-server:v0.8.0" in {i.ref for i in b.cluster_images(bin_dir)}


@pytest.mark.skipif(_kubeadm_constants() is None, reason="the pinned Kubernetes module is not in the Go module cache")
def test_the_table_names_the_images_kubeadm_pulls(tmp_path):
    """The names and tags kubeadm's images.GetControlPlaneImages asks for, from its constants."""
    source = _kubeadm_constants()

    def constant(name):
        return re.search(rf'\b{name}\s*=\s*"([^"]+)"', source).group(1)

    versions = b.versions_env()
    ours = {i.ref for i in b.cluster_images(cluster_bin_dir(tmp_path))}
    for component in ("KubeAPIServer", "KubeControllerManager", "KubeScheduler", "KubeProxy"):
        assert f"{constant(component)}:{versions['KUBERNETES_VERSION']}" in ours, component
    assert f"{constant('Etcd')}:{constant('DefaultEtcdVersion')}" in ours
    assert f"coredns/{constant('CoreDNSImageName')}:{constant('CoreDNSVersion')}" in ours
    assert constant("DefaultEtcdVersion") == versions["CLUSTER_ETCD_VERSION"].removeprefix("v") + "-0"
    assert constant("CoreDNSVersion") == versions["COREDNS_VERSION"]
    assert f"pause:{constant('PauseVersion')}" in {i.ref for i in b.IMAGES}


@pytest.mark.skipif(_manifest_go() is None, reason="the pinned k8s.io/kubernetes module is not in the Go module cache")
def test_the_aggregator_specs_etcd_sidecar_is_the_clusters_etcd_image(tmp_path):
    """The [Conformance] Aggregator spec runs imageutils.Etcd's /usr/local/bin/etcd beside sample-apiserver: the
    manifest's etcd tag is the one kubeadm pulls, which the cluster images carry."""
    pattern = r'configs\[Etcd\] = Config\{list\.(\w+), "([^"]+)", "([^"]+)"\}'
    [(registry, name, tag)] = re.findall(pattern, _manifest_go())
    assert registry == "GcEtcdRegistry"  # registry.k8s.io, as kubeadm's
    images = {i.ref: i for i in b.cluster_images(cluster_bin_dir(tmp_path))}
    assert f"{name}:{tag}" in images
    assert images[f"{name}:{tag}"].config["Cmd"] == ["/usr/local/bin/etcd"]


def _metrics_server_module():
    """The pinned metrics-server module's directory, when it is in the Go module cache."""
    if shutil.which("go") is None:
        return None
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    path = Path(modcache) / f"sigs.k8s.io/metrics-server@{b.versions_env()['METRICS_SERVER_VERSION']}"
    return path if (path / "Dockerfile").is_file() else None


@pytest.mark.skipif(_metrics_server_module() is None, reason="the pinned metrics-server module is not in the cache")
def test_the_metrics_server_image_is_its_dockerfiles_final_stage(tmp_path):
    """The final stage of the module's Dockerfile: its base (distroless static, root), COPY, USER, ENTRYPOINT."""
    dockerfile = (_metrics_server_module() / "Dockerfile").read_text()
    final = dockerfile[dockerfile.rindex("\nFROM "):]
    assert re.search(r"^FROM gcr\.io/distroless/static:latest-\$ARCH$", final, re.M)  # not :nonroot
    assert re.search(r"^COPY --from=build \S+/metrics-server /$", final, re.M)
    user = re.search(r"^USER (\S+)$", final, re.M).group(1)
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", final, re.M).group(1))
    assert not re.search(r"^(WORKDIR|EXPOSE|CMD|ENV) ", final, re.M)  # nothing else over the base's config
    image = {i.repo: i for i in b.cluster_images(cluster_bin_dir(tmp_path))}["metrics-server/metrics-server"]
    assert (image.config["User"], image.config["Entrypoint"]) == (user, entrypoint)
    assert entrypoint == ["/metrics-server"]


def test_select_and_list_take_the_cluster_images_when_their_binaries_are_there(tmp_path, capsys):
    bin_dir = cluster_bin_dir(tmp_path)
    images = b.cluster_images(bin_dir)
    assert [i.ref for i in b.select(["etcd"], images)] == ["etcd:3.7.0-0"]
    assert [i.ref for i in b.select(["coredns"], images)] == ["coredns/coredns:v1.14.6"]
    assert [i.ref for i in b.select(["metrics-server"], images)] == [f"metrics-server/metrics-server:{METRICS_SERVER}"]
    assert [i.ref for i in b.select([f"kube-proxy:{K8S}"], images)] == [f"kube-proxy:{K8S}"]
    assert b.main(["--list", "--bin-dir", str(bin_dir)]) == 0
    listed = set(capsys.readouterr().out.split())
    assert CLUSTER_REFS <= listed and {i.ref for i in b.IMAGES} <= listed
    (bin_dir / "cluster" / "coredns").unlink()
    assert not b.ClusterAssets(bin_dir).complete
    assert b.main(["--list", "--bin-dir", str(bin_dir)]) == 0
    assert not CLUSTER_REFS & set(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        b.main(["--list", "--cluster", "--bin-dir", str(bin_dir)])


# --- file capabilities and DT_NEEDED ---------------------------------------------------------


def test_file_capabilities_are_setcaps_record_and_travel_as_pax_xattrs():
    caps = b.file_capabilities(b.CAP_NET_BIND_SERVICE)
    # what `setcap cap_net_bind_service=+ep` writes: revision 2, effective, permitted bit 10
    assert caps["security.capability"].hex() == "0100000200040000000000000000000000000000"
    layer = b.layer_tar([b.file_("coredns", b"x", 0o755, xattrs=caps), b.file_("plain", b"y")], 0)
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        assert tar.getmember("coredns").pax_headers["SCHILY.xattr.security.capability"].encode() == (
            caps["security.capability"])
        assert not any(k.startswith("SCHILY") for k in tar.getmember("plain").pax_headers)
    # an entry without xattrs is laid out as before
    assert b.layer_tar([b.file_("plain", b"y")], 0) == b.layer_tar([b.Entry("plain", "file", 0o644, data=b"y")], 0)


def test_elf_needed():
    assert b.elf_needed(b"#!/bin/sh\n") == [] and b.elf_needed(b"") == []
    if Path("/bin/true").is_file():
        assert "libc.so.6" in b.elf_needed(Path("/bin/true").read_bytes())


def test_direct_depends():
    control = ("Package: x\nPre-Depends: libc6 (>= 2.34)\nDepends: libfoo1:any (>= 1), netbase | netbase-lite,\n"
               " libbar2\nRecommends: nope\n")  # fmt: skip
    assert b.direct_depends(control) == ["libc6", "libfoo1", "netbase", "netbase-lite", "libbar2"]


# --- contents ----------------------------------------------------------------------------------


def test_distroless_static(cluster_build):
    root = b.distroless_static(cluster_build)
    assert root["etc/passwd"].data.decode() == b.DISTROLESS_PASSWD
    assert "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n" in b.DISTROLESS_PASSWD
    assert root["etc/group"].data == b"root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"
    assert root["etc/ssl/certs/ca-certificates.crt"].data == b"A-cert\nB-cert\n"
    assert "usr/share/ca-certificates/mozilla/A.crt" not in root and "usr/sbin/update-ca-certificates" not in root
    assert root["usr/share/doc/ca-certificates/copyright"].data == b"MPL"
    os_release = b.resolve_link(root, "etc/os-release").data.decode()
    assert 'PRETTY_NAME="Distroless"\n' in os_release and 'VERSION="Debian GNU/Linux 12 (bookworm)"\n' in os_release
    assert root["usr/share/doc/base-files/README"].data == b"docs"  # packages unpacked whole
    assert root["var/lib/dpkg/status.d/tzdata"].data.decode().startswith("Package: tzdata\nStatus: install ok")
    assert "var/lib/dpkg/status.d/ca-certificates" not in root
    assert root["tmp"].mode == 0o1777 and root["root"].mode == 0o700
    assert (root["home/nonroot"].mode, root["home/nonroot"].uid) == (0o700, 65532)
    assert "etc/localtime" not in root and "bin" in root and root["bin"].kind == "dir"  # no scripts ran


def _files(image, ctx):
    return {e.path: e for e in image.files(ctx)}


def test_server_images(cluster_build, tmp_path):
    images = {i.ref: i for i in b.cluster_images(cluster_bin_dir(tmp_path))}
    api = _files(images[f"kube-apiserver:{K8S}"], cluster_build)
    assert api["usr/local/bin/kube-apiserver"].data == b"kube-apiserver binary"
    assert dict(api["usr/local/bin/kube-apiserver"].xattrs) == b.file_capabilities(b.CAP_NET_BIND_SERVICE)
    assert api["go-runner"] == b.file_("go-runner", b"kube-log-runner binary", 0o755)
    assert "etc/ssl/certs/ca-certificates.crt" in api and "usr/bin/openssl" not in api
    for name in ("kube-controller-manager", "kube-scheduler"):
        files = _files(images[f"{name}:{K8S}"], cluster_build)
        assert files[f"usr/local/bin/{name}"] == b.file_(f"usr/local/bin/{name}", f"{name} binary".encode(), 0o755)
        assert files["go-runner"].data == b"kube-log-runner binary"
    etcd = _files(images["etcd:3.7.0-0"], cluster_build)
    for name in ("etcd", "etcdctl", "etcdutl"):
        assert etcd[f"usr/local/bin/{name}"] == b.file_(f"usr/local/bin/{name}", f"{name} binary".encode(), 0o755)
    assert etcd["var/etcd"].kind == etcd["var/lib/etcd"].kind == "dir" and "go-runner" not in etcd
    coredns = _files(images["coredns/coredns:v1.14.6"], cluster_build)
    assert coredns["coredns"].data == b"coredns binary" and coredns["coredns"].mode == 0o755
    assert dict(coredns["coredns"].xattrs) == b.file_capabilities(b.CAP_NET_BIND_SERVICE)
    assert "usr/local/bin/coredns" not in coredns and coredns["home/nonroot"].uid == 65532
    metrics = _files(images[f"metrics-server/metrics-server:{METRICS_SERVER}"], cluster_build)
    assert metrics["metrics-server"] == b.file_("metrics-server", b"metrics-server binary", 0o755)
    assert not metrics["metrics-server"].xattrs and metrics["metrics-server"].uid == 0
    assert "nobody:x:65534:65534:" in metrics["etc/passwd"].data.decode()  # the USER it runs as
    assert metrics["tmp"].mode == 0o1777 and "etc/ssl/certs/ca-certificates.crt" in metrics
    assert "go-runner" not in metrics and "usr/local/bin/metrics-server" not in metrics


def test_kube_proxy_on_distroless_iptables(cluster_build, tmp_path):
    image = {i.ref: i for i in b.cluster_images(cluster_bin_dir(tmp_path))}[f"kube-proxy:{K8S}"]
    root = _files(image, cluster_build)
    assert root["usr/local/bin/kube-proxy"].data == b"kube-proxy binary" and not root["usr/local/bin/kube-proxy"].xattrs
    assert root["go-runner"].data == b"kube-log-runner binary"
    # iptables-wrapper-installer.sh's work: the six commands lead to the wrapper, which picks legacy or nft
    for cmd in b.IPTABLES_WRAPPED:
        assert root[f"usr/sbin/{cmd}"] == b.symlink(f"usr/sbin/{cmd}", "/usr/sbin/iptables-wrapper"), cmd
    wrapper = root["usr/sbin/iptables-wrapper"]
    assert wrapper.mode == 0o755 and wrapper.data.startswith(b"#!/bin/sh\n")
    assert b'ln -s "/usr/sbin/xtables-${mode}-multi" "/usr/sbin/${cmd}"' in wrapper.data
    assert root["bin/sh"] == b.symlink("bin/sh", "/bin/dash") and root["bin/dash"].data == b"dash"
    # the packages' files with their direct dependencies', not manuals, completions or hidden files
    assert root["usr/sbin/xtables-legacy-multi"].data == b"legacy" and root["usr/sbin/iptables-nft"].kind == "symlink"
    assert root["usr/lib/x86_64-linux-gnu/libxtables.so.12"].data == b"xt" and root["etc/services"].data
    assert root["usr/sbin/ipset"].data == b"ipset" and b.resolve_link(root, "sbin/modprobe").data == b"kmod"
    assert not any(p.startswith(("usr/share/man", "usr/share/bash-completion")) or "/." in p for p in root)
    # nft alone of nftables; only the named tools of coreutils
    assert root["usr/sbin/nft"].data == b"nft" and "etc/nftables.conf" not in root
    for tool in ("bin/cat", "bin/chmod", "bin/ln", "bin/rm", "bin/sleep", "usr/bin/wc", "bin/grep"):
        assert root[tool].kind == "file", tool
    assert "usr/bin/tr" not in root
    # copyright and status of every package a staged file came from
    assert root["usr/share/doc/iptables/copyright"].data == b"GPL"
    for package in ("iptables", "libxtables12", "ipset", "kmod", "nftables", "coreutils", "grep", "dash", "libc6",
                    "libssl3", "openssl", "base-files"):  # fmt: skip
        assert f"var/lib/dpkg/status.d/{package}" in root, package
    # distroless base: glibc, libssl, the C.utf8 locale; clean-distroless.sh's removals
    assert root["lib/x86_64-linux-gnu/libc.so.6"].data == b"libc" and "usr/lib/locale/C.utf8/LC_CTYPE" in root
    assert "usr/bin/getconf" not in root and "etc/ssl/openssl.cnf" in root
    for gone in ("usr/bin/openssl", "usr/bin/c_rehash", "usr/share/base-files/profile",
                 "usr/lib/x86_64-linux-gnu/gconv/UTF-16.so"):  # fmt: skip
        assert gone not in root, gone


@pytest.mark.skipif(b.elf_needed(_elf()) != ["libc.so.6"], reason="no /bin/true linked to libc.so.6 alone")
def test_staged_binaries_bring_the_libraries_they_need():
    stager = b.Stager([CLUSTER_DEBS["iptables"], CLUSTER_DEBS["libc6"], CLUSTER_DEBS["libxtables12"]])
    stager.stage_binary("usr/sbin/iptables-nft")
    assert set(stager.root) >= {"usr/sbin/iptables-nft", "usr/sbin/xtables-nft-multi",
                                "lib/x86_64-linux-gnu/libc.so.6", "usr/share/doc/libc6/copyright",
                                "var/lib/dpkg/status.d/libc6"}  # fmt: skip
    assert "usr/lib/x86_64-linux-gnu/libxtables.so.12" not in stager.root  # not needed by this binary
    missing = b.Stager([CLUSTER_DEBS["iptables"]])
    with pytest.raises(RuntimeError, match=r"libc\.so\.6"):
        missing.stage_binary("usr/sbin/xtables-nft-multi")


def test_cluster_images_build_reproducibly(cluster_build, tmp_path):
    bin_dir = cluster_bin_dir(tmp_path)
    for image in b.cluster_images(bin_dir):
        first = b.build(image, tmp_path / "one" / image.repo / image.tag, cache=tmp_path / "c1")
        second = b.build(image, tmp_path / "two" / image.repo / image.tag, cache=tmp_path / "c2")
        assert first.manifest_digest == second.manifest_digest, image.ref
        _, _, config = read_layout(first.layout)
        assert config["config"]["Entrypoint" if "Entrypoint" in image.config else "Cmd"], image.ref


def test_build_binaries_cluster_flag_and_versions():
    script = (ROOT / "devstack" / "build-binaries.sh").read_text()
    assert "--cluster)" in script and '"$out/cluster"' in script
    packages = ("k8s.io/kubernetes/cmd/kubeadm", "k8s.io/kubernetes/cmd/kube-proxy",
                "k8s.io/component-base/logs/kube-log-runner", "go.etcd.io/etcd/etcdutl/v3",
                "github.com/coredns/coredns", "sigs.k8s.io/metrics-server/cmd/metrics-server",
                "sigs.k8s.io/cri-tools/cmd/crictl")  # fmt: skip
    for pkg in packages:
        assert f'_ "{pkg}"' in script, pkg
    assert "cluster/metrics-server)" in script and "$c/metrics-server.version" in script
    # crictl for the node's shell (the minikube guide's step 7), at the pinned cri-tools release, beside kubectl.
    assert " crictl\n" in script and '"$out/crictl"' in script
    assert re.fullmatch(r"v1\.\d+\.\d+", b.versions_env()["CRI_TOOLS_VERSION"])
