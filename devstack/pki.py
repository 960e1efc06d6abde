"""The stack's certificates, made with the openssl CLI as a real cluster's would be.

One CA signs everything: etcd's serving and client certs, the apiserver's serving cert and its
kubelet-client cert, and a client cert per identity (admin, controller-manager, scheduler, and
the node ``system:node:<name>`` in group ``system:nodes`` that the agent runs as).
Files are only created when missing, so a restarted stack keeps its identities.
"""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
from pathlib import Path

DAYS = 3650


@dataclasses.dataclass(frozen=True)
class Cert:
    """A leaf certificate to issue: a subject and what it may be used for."""

    name: str  # file stem: <name>.crt / <name>.key
    cn: str
    orgs: tuple[str, ...] = ()
    server: bool = False
    client: bool = False
    dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def ensure_ca(pki: Path) -> None:
    pki.mkdir(parents=True, exist_ok=True)
    if (pki / "ca.crt").exists() and (pki / "ca.key").exists():
        return
    _openssl("req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-sha256", "-days", str(DAYS),
             "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"),
             "-subj", "/CN=kopflet-devstack-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")


def ensure_cert(pki: Path, cert: Cert) -> tuple[Path, Path]:
    """Issue ``cert`` signed by the CA in ``pki`` unless it exists; return (crt, key) paths."""
    crt, key = pki / f"{cert.name}.crt", pki / f"{cert.name}.key"
    if crt.exists() and key.exists():
        return crt, key
    subject = "".join(f"/O={o}" for o in cert.orgs) + f"/CN={cert.cn}"
    usages = [u for u, on in (("serverAuth", cert.server), ("clientAuth", cert.client)) if on]
    ext = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={','.join(usages)}",
    ]
    sans = [f"DNS:{d}" for d in cert.dns] + [f"IP:{i}" for i in cert.ips]
    if sans:
        ext.append(f"subjectAltName={','.join(sans)}")
    with tempfile.TemporaryDirectory() as tmp:
        csr, extfile = Path(tmp) / "req.csr", Path(tmp) / "ext.cnf"
        extfile.write_text("\n".join(ext) + "\n")
        _openssl("req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", str(key), "-out", str(csr),
                 "-subj", subject)
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
                 "-CAcreateserial", "-sha256", "-days", str(DAYS), "-extfile", str(extfile), "-out", str(crt))
    key.chmod(0o600)
    return crt, key


def ensure_service_account_keys(pki: Path) -> None:
    """The key pair that signs and verifies ServiceAccount tokens."""
    if (pki / "sa.key").exists() and (pki / "sa.pub").exists():
        return
    _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    (pki / "sa.key").chmod(0o600)


def node_cert(node_name: str) -> Cert:
    """The identity the Node authorizer and NodeRestriction recognise as that node's kubelet."""
    return Cert(f"node-{node_name}", f"system:node:{node_name}", ("system:nodes",), client=True)


def kubelet_serving_cert(node_name: str, host_ip: str) -> Cert:
    """The agent's HTTPS serving certificate (port 10250), signed by the cluster CA: the apiserver runs with
    --kubelet-certificate-authority and checks it, as a kubeadm cluster with serverTLSBootstrap does."""
    return Cert(f"kubelet-serving-{node_name}", f"system:node:{node_name}", ("system:nodes",), server=True,
                dns=(node_name, "localhost"), ips=tuple(dict.fromkeys(("127.0.0.1", host_ip))))


def stack_certs(node_name: str, host_ip: str, service_ip: str, cluster_domain: str) -> list[Cert]:
    localhost_ips = ("127.0.0.1",) + ((host_ip,) if host_ip != "127.0.0.1" else ())
    return [
        Cert("etcd-server", "etcd", server=True, client=True, dns=("localhost",), ips=("127.0.0.1",)),
        Cert("apiserver-etcd-client", "kube-apiserver-etcd-client", client=True),
        Cert("apiserver", "kube-apiserver", server=True,
             dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                  f"kubernetes.default.svc.{cluster_domain}"),
             ips=(*localhost_ips, service_ip)),
        # Bound to the upstream `system:kubelet-api-admin` role by the stack (see stack.py).
        Cert("apiserver-kubelet-client", "kube-apiserver-kubelet-client", client=True),
        Cert("admin", "kubernetes-admin", ("system:masters",), client=True),
        Cert("controller-manager", "system:kube-controller-manager", client=True),
        Cert("scheduler", "system:kube-scheduler", client=True),
        node_cert(node_name),
        kubelet_serving_cert(node_name, host_ip),
    ]


def ensure_all(pki: Path, node_name: str, host_ip: str, service_ip: str, cluster_domain: str) -> None:
    ensure_ca(pki)
    # The CA bundle the agent (clientCAFile) and the control plane read, all as root: 0600 as the CIS Kubernetes
    # Benchmark asks of a kubelet's client CA file (4.1.7). Also on a stack made before this line was written.
    (pki / "ca.crt").chmod(0o600)
    ensure_service_account_keys(pki)
    for cert in stack_certs(node_name, host_ip, service_ip, cluster_domain):
        ensure_cert(pki, cert)
