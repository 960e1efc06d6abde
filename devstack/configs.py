"""Text of the configuration files the stack writes: pure functions of the layout, easy to test."""

from __future__ import annotations

import json
from pathlib import Path

from devstack.layout import Layout


def kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> str:
    """A kubeconfig with file references, so rotating a cert never needs a rewrite."""
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kopflet-devstack",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "kopflet-devstack", "context": {"cluster": "kopflet-devstack", "user": user}}],
        "current-context": "kopflet-devstack",
    }, indent=2) + "\n"


def bootstrap_kubeconfig(server: str, ca: Path, token: str) -> str:
    """The node's bootstrap kubeconfig as kubeadm writes ``bootstrap-kubelet.conf``: the cluster and a bootstrap
    token (user ``tls-bootstrap-token-user``), nothing else."""
    user, cluster = "tls-bootstrap-token-user", "kubernetes"
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
        "current-context": f"{user}@{cluster}",
    }, indent=2) + "\n"


# kubeadm's constants.NodeBootstrapTokenAuthGroup: the extra group of node bootstrap tokens, which the bindings below
# name (cmd/kubeadm/app/phases/bootstraptoken/node/tlsbootstrap.go).
NODE_BOOTSTRAP_TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"


def bootstrap_token_secret(token_id: str, token_secret: str) -> str:
    """The ``bootstrap-token-<id>`` Secret in kube-system the apiserver's bootstrap token authenticator reads
    (``--enable-bootstrap-token-auth``): for authentication only, in kubeadm's node group, with no expiration (the
    controller-manager's tokencleaner would delete an expired one)."""
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "description": "kopflet dev stack: the node's TLS bootstrap token",
            "token-id": token_id,
            "token-secret": token_secret,
            "usage-bootstrap-authentication": "true",
            "auth-extra-groups": NODE_BOOTSTRAP_TOKEN_GROUP,
        },
    }, indent=2) + "\n"


def _group_binding(name: str, role: str, group: str) -> str:
    return f"""\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {name}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {role}
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: {group}
"""


# kubeadm's TLS bootstrap RBAC (AllowBootstrapTokensToPostCSRs, AutoApproveNodeBootstrapTokens,
# AutoApproveNodeCertificateRotation): bootstrap tokens may create CSRs, their node client CSRs are approved by the
# controller-manager's csrapproving controller, and so are a node's renewals of its own client certificate.
TLS_BOOTSTRAP_BINDINGS = "---\n".join([
    _group_binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", NODE_BOOTSTRAP_TOKEN_GROUP),
    _group_binding("kubeadm:node-autoapprove-bootstrap",
                   "system:certificates.k8s.io:certificatesigningrequests:nodeclient", NODE_BOOTSTRAP_TOKEN_GROUP),
    _group_binding("kubeadm:node-autoapprove-certificate-rotation",
                   "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"),
])


def containerd_config(layout: Layout) -> str:
    """containerd 1.6 (config version 2) with the CRI plugin as kopflet expects it.

    ``restrict_oom_score_adj``: this VM refuses negative oom_score_adj; without it every sandbox
    fails with "can't get final child's PID from pipe: EOF".
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{layout.containerd_root}"
state = "{layout.containerd_state}"

[grpc]
  address = "{layout.containerd_socket}"

[ttrpc]
  address = "{layout.containerd_state}/containerd.sock.ttrpc"

[{cri}]
  sandbox_image = "{layout.sandbox_image}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  max_container_log_line_size = 16384

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{layout.cni_conf_dir}"
  max_conf_num = 1

[{cri}.registry]
  config_path = "{layout.containerd_dir / "certs.d"}"
"""


def registry_hosts(registry_addr: str) -> str:
    """hosts.toml routing a registry to the local one; ``server`` too, so nothing goes outside."""
    return f"""\
server = "http://{registry_addr}"

[host."http://{registry_addr}"]
  capabilities = ["pull", "resolve"]
"""


MIRRORED_REGISTRIES = ("docker.io", "registry.k8s.io")


def registry_host_files(layout: Layout) -> dict[str, str]:
    """certs.d/<registry>/hosts.toml for each mirrored registry and the local one itself."""
    names = (*MIRRORED_REGISTRIES, layout.registry_addr)
    files = {f"{name}/hosts.toml": registry_hosts(layout.registry_addr) for name in names}
    files[f"{layout.private_registry_addr}/hosts.toml"] = registry_hosts(layout.private_registry_addr)
    return files


def cni_conflist(layout: Layout) -> str:
    """A bridge network with host-local IPAM and hostPort support, from Debian's CNI plugins."""
    return json.dumps({
        "cniVersion": "1.0.0",
        "name": "kopflet",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "kopflet0",
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": layout.pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.cni_data_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=2) + "\n"


def _registry_config(storage: Path, addr: str, extra: str = "") -> str:
    return f"""\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
http:
  addr: {addr}
""" + extra


def registry_config(layout: Layout) -> str:
    return _registry_config(layout.registry_storage, layout.registry_addr)


def private_registry_config(layout: Layout) -> str:
    """The registry behind a login (htpasswd), for imagePullSecrets."""
    return _registry_config(layout.private_registry_storage, layout.private_registry_addr, f"""\
auth:
  htpasswd:
    realm: kopflet-devstack
    path: {layout.private_registry_htpasswd}
""")


def env_file(layout: Layout) -> str:
    """What `source .devstack/env` gives a shell: admin kubectl, the runtime, the node identity, and the
    stack's registry (images/build-agent-image.sh pushes there)."""
    lines = [
        "# Written by the kopflet dev stack. Usage: source .devstack/env",
        f"export KUBECONFIG={layout.admin_kubeconfig}",
        f"export CONTAINER_RUNTIME_ENDPOINT={layout.runtime_endpoint}",
        f"export KOPFLET_NODE_NAME={layout.node_name}",
        f"export KOPFLET_KUBECONFIG={layout.node_kubeconfig}",
        f"export KOPFLET_BOOTSTRAP_KUBECONFIG={layout.bootstrap_kubeconfig}",
        f"export KOPFLET_DEVSTACK_DIR={layout.root}",
        f"export KOPFLET_CONFIG={layout.kubelet_config}",
        f"export KOPFLET_REGISTRY={layout.registry_addr}",
        f'export PATH="{layout.bin_dir}:$PATH"',
    ]
    return "\n".join(lines) + "\n"


def audit_policy() -> str:
    """Metadata of every request made as a node (group system:nodes), nothing else: the apiserver's metrics
    have no user label, so this is how `make bench` tells the agent's requests from everyone else's."""
    return """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:nodes"]
  - level: None
"""


def kubelet_config(layout: Layout) -> str:
    """The agent's config file: its HTTPS API with a CA-signed serving cert (the apiserver verifies it),
    client certificates from the cluster CA, and webhook (TokenReview/SubjectAccessReview) auth."""
    p = layout.pki
    return f"""\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
tlsCertFile: {p / f"kubelet-serving-{layout.node_name}.crt"}
tlsPrivateKeyFile: {p / f"kubelet-serving-{layout.node_name}.key"}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {p / "ca.crt"}
authorization:
  mode: Webhook
"""


KUBELET_API_ADMIN_BINDING = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kube-apiserver-kubelet-api-admin
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:kubelet-api-admin
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: kube-apiserver-kubelet-client
"""
