"""docs/operations.md's "On minikube, step by step", run end to end: every command of its eight steps, in order, on
the kubeadm cluster (``make cluster``), which stands in for minikube (minikube cannot start without internet access).

What runs for each command is tests/cluster/guide.py's translation (its module doc has the table: the cluster is up
in place of ``minikube start``, ``minikube ssh`` commands run in a shell on this machine, which is the node, the image
is built with images/build-agent-image.sh --import, the node's name replaces ``minikube``, and ``manifests/`` is the
DaemonSet test's adapted copy, because the unmodified DaemonSet's ``/run/kopflet`` and ``kopflet0`` are the stack's
own here). Every command runs in ``sh -c`` from the repository, with ``KUBECONFIG`` the cluster's admin.conf and the
project's kubectl and crictl first on ``PATH``. A command whose output the guide says comes later (a pod Running, a
Node registered, a log line) is run again, as a reader would, until it shows it or a deadline passes.

Each step is a test: its commands, then an assertion per comment the guide makes on them (guide.EXPECTATIONS lists
them). Where the machine makes a comment untrue (step 1's ``cgroup2fs``: this is a cgroup v1 host), the test checks
what this machine prints instead and says so with a MachineDifference warning (in pytest's warnings summary). A
command that fails stops the steps after it (skipped); the module's clean-up then removes what was installed.

The transcript (each guide command, what ran for it and why, how it exited, what it printed) is written to
``<devstack logs>/minikube-guide.log`` and printed with each step (``pytest -rA`` or ``-s`` shows it).

The cluster is left as found, but for step 2's patch of kube-proxy's DaemonSet (the guide keeps it) and what the guide
says stays (the bridge's iptables chains).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import ipaddress
import json
import os
import re
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack import cluster
from devstack.layout import REPO, Layout
from tests.cluster import guide as g
from tests.conftest import Kubectl
from tests.e2e.test_daemonset import (
    BRIDGE,
    HOST_PATHS,
    NAMESPACE,
    POD_SUBNET,
    TAINT,
    image_archive,
    manifest_files_for_this_machine,
    remove_cgroups,
    unmount_below,
)
from tests.stack.test_manifests import remove_service_account

CLUSTER_DNS = "10.96.0.10"  # manifests/30-configmap.yaml's clusterDNS, kubeadm's kube-dns Service
KUBELET_PORT = 10350
DATE = re.compile(r"\b\d\d:\d\d:\d\d\b")  # busybox date: "Thu Nov 27 21:40:00 UTC 2025"


class MachineDifference(UserWarning):
    """A comment of the guide that cannot hold on this machine, and what the test checked instead."""


@dataclasses.dataclass
class Guide:
    """The translated guide and its run: the transcript, what was installed, where a command failed."""

    layout: Layout
    kubectl: Kubectl
    machine: g.Machine
    steps: tuple[g.Step, ...]
    translations: tuple[g.Translation, ...]
    env: dict[str, str]
    transcript: Path
    ran: set[int] = dataclasses.field(default_factory=set)  # indexes into translations
    broken: str = ""  # the command that failed, if one did
    touched: bool = False  # the host or cluster got something of the guide's install
    removed: bool = False  # step 8 ran to its end
    before: dict[str, Any] = dataclasses.field(default_factory=dict)  # what step 1 saw
    step_log: list[str] = dataclasses.field(default_factory=list)

    @property
    def inner(self) -> str:
        return f"kopflet-{self.layout.node_name}"

    def log(self, text: str) -> None:
        self.step_log.append(text)
        with self.transcript.open("a") as f:
            f.write(text + "\n")

    def note(self, step: int, index: int) -> str:
        return next(c.note for c in g.commands(self.steps) if (c.step, c.index) == (step, index))

    def differ(self, step: int, index: int, message: str) -> None:
        text = f"step {step}, command {index}: {message}"
        self.log(f"  MACHINE DIFFERENCE: {text}")
        warnings.warn(MachineDifference(text), stacklevel=2)

    @contextlib.contextmanager
    def step(self, number: int) -> Iterator[None]:
        """One step's test: skipped after a failed command; every command of the step must have been run."""
        if self.broken:
            pytest.skip(f"not run: {self.broken} failed")
        title = next(s.title for s in self.steps if s.number == number)
        self.step_log = []
        self.log(f"\n## step {number}: {title}")
        try:
            yield
            self._run_added(number, after=10**6)
            missing = [t.original for i, t in enumerate(self.translations) if t.step == number and i not in self.ran]
            assert not missing, f"step {number}: commands never run: {missing}"
        finally:
            print("\n".join(self.step_log))

    def _run_added(self, step: int, after: int) -> None:
        for i, t in enumerate(self.translations):
            if t.step == step and t.added and t.index < after and i not in self.ran:
                self._run(i, None, 0, 300)

    def run(self, step: int, index: int, *, until: Callable[[str], object] | None = None, within: float = 0,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """The guide's command `index` of `step` as translated (the commands this machine adds before it first);
        with `until`, again every 2 s while it exits 0 without printing what `until` looks for, for `within` s.
        A command that exits non-zero fails the test and stops the steps after it."""
        self._run_added(step, after=index)
        i = next(i for i, t in enumerate(self.translations) if (t.step, t.index, t.added) == (step, index, False))
        return self._run(i, until, within, timeout)

    def _run(self, i: int, until: Callable[[str], object] | None, within: float,
             timeout: float) -> subprocess.CompletedProcess[str]:
        t = self.translations[i]
        self.ran.add(i)
        where = f"step {t.step}, command {t.index}" + (" (added)" if t.added else "")
        self.log(f"$ {t.original or '(not in the guide)'}    [{where}]" + (f"    # {t.note}" if t.note else ""))
        self.log(f"  because: {t.reason}")
        if t.run is None:
            self.log("  ran: nothing")
            return subprocess.CompletedProcess([], 0, "", "")
        self.log("  ran: " + t.run.replace("\n", "\n       "))
        started, tries = time.monotonic(), 0
        while True:
            tries += 1
            try:
                proc = subprocess.run(["sh", "-c", t.run], cwd=REPO, env=self.env, capture_output=True, text=True,
                                      timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
                self.log(f"  timed out after {timeout:.0f}s\n{_indent(out)}")
                self.broken = f"{where} ({t.run.splitlines()[0]})"
                raise AssertionError(f"{where}: `{t.run}` did not end within {timeout:.0f}s") from None
            if proc.returncode != 0 or until is None or until(proc.stdout) or \
                    time.monotonic() - started > within:
                break
            time.sleep(2)
        self.log(f"  exit {proc.returncode} after {tries} run(s), {time.monotonic() - started:.1f}s")
        self.log(_indent(proc.stdout) + (f"\n  stderr:\n{_indent(proc.stderr)}" if proc.stderr.strip() else ""))
        if proc.returncode != 0:
            self.broken = f"{where} ({t.run.splitlines()[0]})"
            raise AssertionError(f"{where}: `{t.run}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return proc

    def namespace_terminating(self, name: str) -> bool:
        proc = self.kubectl.run("get", "namespace", name, "-o", "jsonpath={.status.phase}", check=False)
        return proc.returncode != 0 or proc.stdout.strip() == "Terminating"

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        return self.kubectl.json("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]

    def clean_up(self) -> None:
        """What an interrupted run installed, removed as tests/e2e/test_daemonset.py's `installed` does (idempotent;
        the patch of step 2 stays, as the guide keeps it)."""
        k = self.kubectl
        hello = ("pod", "hello", "-n", "default", "--ignore-not-found")
        k.run("delete", *hello, "--wait=false", check=False)
        with contextlib.suppress(AssertionError):  # while the inner agent runs, it deletes the pod; else forced
            _wait("the pod hello to go", lambda: not k.run("get", *hello).stdout.strip(), timeout=60)
        k.run("delete", *hello, "--grace-period=0", "--force", check=False)
        k.run("delete", "daemonset", "kopflet", "-n", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)
        with contextlib.suppress(AssertionError):
            _wait("the DaemonSet's pod to go", lambda: not k.json(
                "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=kopflet")["items"], timeout=120)
        k.run("delete", "node", self.inner, "--ignore-not-found", check=False)
        k.run("delete", "lease", self.inner, "-n", "kube-node-lease", "--ignore-not-found", check=False)
        remove_service_account(k)
        for folder in HOST_PATHS.values():
            unmount_below(folder)
            subprocess.run(["rm", "-rf", folder], check=False, timeout=120)
        remove_cgroups()
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False, timeout=30)


def _indent(text: str, limit: int = 80) -> str:
    lines = text.rstrip("\n").splitlines()
    if len(lines) > limit:
        lines = [*lines[:limit // 2], f"... ({len(lines) - limit} lines)", *lines[-limit // 2:]]
    return "\n".join(f"  | {line}" for line in lines)


def _wait(what: str, probe: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _mountinfo() -> str:
    return Path("/proc/self/mountinfo").read_text()


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True, timeout=30).returncode == 0


def _kopflet_cgroups() -> list[str]:
    return [str(p) for p in [Path("/sys/fs/cgroup/kopflet"), *Path("/sys/fs/cgroup").glob("*/kopflet")] if p.is_dir()]


def _pod_cgroups(uid: str) -> list[str]:
    """A pod's cgroup in every hierarchy (v1) or the unified tree, whatever its QoS tier."""
    return [*glob.glob(f"/sys/fs/cgroup/*/kubepods/**/pod{uid}", recursive=True),
            *glob.glob(f"/sys/fs/cgroup/kubepods/**/pod{uid}", recursive=True)]


def _leftovers(k: Kubectl, layout: Layout) -> list[str]:
    """What an earlier install left that this run would collide with."""
    found = []
    if k.run("get", "namespace", NAMESPACE, "--ignore-not-found").stdout.strip():
        found.append(f"namespace {NAMESPACE}")
    if k.run("get", "node", f"kopflet-{layout.node_name}", "--ignore-not-found").stdout.strip():
        found.append(f"node kopflet-{layout.node_name}")
    if k.run("get", "pod", "hello", "-n", "default", "--ignore-not-found").stdout.strip():
        found.append("pod default/hello")
    found += [folder for folder in HOST_PATHS.values() if Path(folder).exists()]
    found += [f"link {BRIDGE}"] if _link_exists(BRIDGE) else []
    return found  # not the kopflet cgroups: the runtime takes them as they are, and step 8 removes them


@pytest.fixture(scope="module")
def guide(kubectl: Kubectl, layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guide]:
    nodes = [n["metadata"]["name"] for n in kubectl.json("get", "nodes")["items"]]
    if nodes != [layout.node_name]:
        pytest.fail(f"the guide is for a one-node cluster (minikube's); this one has {nodes}")
    leftovers = _leftovers(kubectl, layout)
    if leftovers:
        pytest.fail(f"an earlier install is still here: {leftovers}; remove it first (this run would take it for its "
                    f"own)")
    if not (layout.bin_dir / "crictl").exists():  # a cluster made before build-binaries.sh --cluster built crictl
        subprocess.run(["bash", str(REPO / "devstack" / "build-binaries.sh"), "--cluster"], check=True,
                       stdout=subprocess.DEVNULL, timeout=1800)
    image, _ = image_archive()
    folder = tmp_path_factory.mktemp("minikube-guide") / "manifests"
    folder.mkdir()
    for name, docs in manifest_files_for_this_machine(image, layout.registry_addr).items():
        (folder / name).write_text(yaml.safe_dump_all(docs, sort_keys=False))
    machine = g.Machine(
        node_name=layout.node_name, manifests=str(folder), runtime_endpoint=layout.runtime_endpoint, image=image,
        host_paths=tuple(HOST_PATHS.items()), bridge=BRIDGE, cgroup_v1=cluster.cgroup_v1(),
        root_shared=g.on_shared_mount(_mountinfo(), HOST_PATHS["/var/lib/kopflet"]))
    steps = g.parse_steps((REPO / "docs" / "operations.md").read_text(encoding="utf-8"))
    env = {**os.environ, "KUBECONFIG": str(cluster.ADMIN_CONF), "PATH": f"{layout.bin_dir}:{os.environ['PATH']}",
           "KOPFLET_CONTAINERD_SOCKET": layout.runtime_endpoint.removeprefix("unix://")}
    transcript = layout.logs / "minikube-guide.log"
    transcript.parent.mkdir(parents=True, exist_ok=True)
    transcript.write_text(f"docs/operations.md, {g.SECTION!r}, on the kubeadm cluster (node {layout.node_name})\n"
                          f"environment: KUBECONFIG={env['KUBECONFIG']} PATH={layout.bin_dir}:... "
                          f"KOPFLET_CONTAINERD_SOCKET={env['KOPFLET_CONTAINERD_SOCKET']}; sh -c from {REPO}\n"
                          f"machine: {machine}\n")
    run = Guide(layout, kubectl, machine, steps, g.translate_steps(steps, machine), env, transcript)
    try:
        yield run
    finally:
        if run.touched:  # idempotent: after a whole step 8, whatever its checks found left
            run.log("\n## clean-up" + ("" if run.removed else " of an interrupted run"))
            run.clean_up()
        print(f"\ntranscript: {transcript}")


def _key(pod: dict[str, Any]) -> tuple[str, str]:
    """A pod of the resident node by what makes it: DaemonSet pods by their DaemonSet (step 2's patch replaces
    kube-proxy's), others by name."""
    owner = next((o for o in pod["metadata"].get("ownerReferences", []) if o.get("kind") == "DaemonSet"), None)
    name = f"DaemonSet/{owner['name']}" if owner else pod["metadata"]["name"]
    return pod["metadata"]["namespace"], name


def _restarts(pod: dict[str, Any]) -> int:
    return sum(c.get("restartCount", 0) for c in pod.get("status", {}).get("containerStatuses", []))


def test_step_1_start_minikube_and_check_the_host(guide: Guide) -> None:
    with guide.step(1):
        # What step 7 compares with ("all Running as before"), and the stack's bridge step 8 must leave.
        # Pods already being deleted (an earlier test's namespace going away) are not "as before" material.
        settled = [p for p in guide.pods_on(guide.layout.node_name) if not p["metadata"].get("deletionTimestamp")
                   and not guide.namespace_terminating(p["metadata"]["namespace"])]
        guide.before = {"pods": settled, "kopflet0": _link_exists(g.GUIDE_BRIDGE)}
        guide.run(1, 1)
        fs = guide.run(1, 2).stdout.strip()
        if guide.machine.cgroup_v1:
            assert fs == "tmpfs", fs
            guide.differ(1, 2, f"prints {fs!r}, not {guide.note(1, 2)!r}: this is a cgroup v1 (hybrid) host and the "
                               f"guide is written for cgroup v2; the DaemonSet's start-containerd.sh takes its v1 "
                               f"branch (checked in step 4)")
        else:
            assert fs == guide.note(1, 2) == "cgroup2fs"
        assert guide.run(1, 3).stdout.strip() == guide.note(1, 3) == CLUSTER_DNS
        routes = guide.run(1, 4).stdout
        assert g.routes_within(routes, POD_SUBNET) == [], f"{POD_SUBNET} is taken here:\n{routes}"


def test_step_2_keep_tolerate_everything_daemonsets_off_kopflet_nodes(guide: Guide) -> None:
    with guide.step(2):
        listing = guide.run(2, 1).stdout
        # kubeadm's kube-proxy tolerates everything ({operator: Exists}), and it is the one: the guide patches only it.
        assert g.tolerate_everything(listing) == {"kube-system/kube-proxy"}, listing
        guide.run(2, 2)
        ds = guide.kubectl.json("-n", "kube-system", "get", "ds", "kube-proxy")
        terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": "kopflet.dev/agent", "operator": "DoesNotExist"}]}]


def test_step_3_build_the_image_into_minikube(guide: Guide) -> None:
    with guide.step(3):
        guide.run(3, 1, timeout=1800)
        listed = guide.run(3, 2).stdout
        assert guide.machine.image in listed.split(), listed


def test_step_4_install(guide: Guide) -> None:
    with guide.step(4):
        guide.touched = True  # the shared mount and the manifests, from here on
        guide.run(4, 1)
        try:
            guide.run(4, 2, timeout=300)
        except AssertionError:
            described = guide.kubectl.run("describe", "pods", "-n", NAMESPACE, check=False).stdout
            guide.log(f"  the DaemonSet's pods:\n{_indent(described, 120)}")
            raise
        pods = guide.kubectl.json("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=kopflet")["items"]
        guide.before["daemonset_pod"] = pods[0]["metadata"]["uid"]  # for step 8: its cgroup must go
        runtime = guide.run(4, 3, until=lambda out: "kopflet-runtime: starting containerd" in out, within=90).stdout
        iptables = runtime.find("kopflet-runtime: iptables backend: ")
        assert 0 <= iptables < runtime.find("kopflet-runtime: starting containerd"), runtime
        if guide.machine.cgroup_v1:
            assert "kopflet-runtime: cgroup v1: kopflet's pods in the kopflet cgroup of each hierarchy" in runtime
            guide.log("  (cgroup v1: the runtime also says 'kopflet-runtime: cgroup v1: ...', start-containerd.sh's "
                      "v1 branch, before the lines the guide shows)")
        expected = (f"registered node {guide.inner}", f"serving the kubelet API on 0.0.0.0:{KUBELET_PORT}")
        agent = guide.run(4, 4, until=lambda out: all(e in out for e in expected), within=120).stdout
        assert all(e in agent for e in expected), agent[-3000:]


def test_step_5_see_the_new_node(guide: Guide) -> None:
    node, inner = guide.layout.node_name, guide.inner
    with guide.step(5):
        listed = guide.run(5, 1, until=lambda out: inner in {r["NAME"] for r in g.table(out)}, within=120).stdout
        rows = {r["NAME"]: r for r in g.table(listed)}
        assert set(rows) == {node, inner}, listed
        assert rows[node]["INTERNAL-IP"] == rows[inner]["INTERNAL-IP"], listed
        expected = json.loads(guide.note(5, 2))
        assert expected == [{k: TAINT[k] for k in ("effect", "key", "value")}]

        def the_taint(out: str) -> bool:
            with contextlib.suppress(ValueError):
                return json.loads(out) == expected
            return False
        # Until the Node is Ready its node.kubernetes.io/not-ready taint is there too.
        taints = guide.run(5, 2, until=the_taint, within=120).stdout
        assert json.loads(taints) == expected


def test_step_6_run_a_pod_on_it(guide: Guide) -> None:
    inner = guide.inner
    with guide.step(6):
        guide.run(6, 1)

        def running(out: str) -> bool:
            return any(r["NAME"] == "hello" and r["STATUS"] == "Running" for r in g.table(out))
        wide = g.table(guide.run(6, 2, until=running, within=180).stdout)
        assert len(wide) == 1 and wide[0]["STATUS"] == "Running", wide
        assert wide[0]["NODE"] == inner
        assert ipaddress.ip_address(wide[0]["IP"]) in POD_SUBNET, wide  # 10.89.0.x
        logs = guide.run(6, 3, until=DATE.search, within=60).stdout
        assert DATE.search(logs), logs
        # "through kopflet's kubelet API on :10350": the port the apiserver takes from the Node.
        node = guide.kubectl.json("get", "node", inner)
        assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == KUBELET_PORT
        resolv = guide.run(6, 4).stdout
        assert f"nameserver {CLUSTER_DNS}" in resolv.splitlines(), resolv  # the ConfigMap's clusterDNS
        assert any(line.startswith("search default.svc.cluster.local svc.cluster.local cluster.local")
                   for line in resolv.splitlines()), resolv
        # Step 2's point: nothing else (no kube-proxy) was placed on the kopflet Node.
        assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in guide.pods_on(inner)] == \
            [("default", "hello")]


def test_step_7_check_the_resident_kubelet_is_undisturbed(guide: Guide) -> None:
    with guide.step(7):
        resident = g.table(guide.run(7, 1).stdout)
        assert "hello" not in {r["NAME"] for r in resident}, resident
        assert any(r["NAMESPACE"] == NAMESPACE and r["NAME"].startswith("kopflet-") for r in resident), resident
        inner = [r for r in g.table(guide.run(7, 2).stdout) if r["NAME"] == "hello"]
        assert [(r["NAMESPACE"], r["STATE"]) for r in inner] == [("default", "Ready")], inner
        seen = {_key(p): p for p in guide.before["pods"]}
        before = {key: p for key, p in seen.items() if p.get("status", {}).get("phase") == "Running"}
        # Pods that were not Running at step 1 either (another test's leftovers) are not the guide's to judge.
        idle = {(p["metadata"]["namespace"], p["metadata"]["name"]) for key, p in seen.items() if key not in before}

        def all_running(out: str) -> bool:
            rows = [r for r in g.table(out) if (r["NAMESPACE"], r["NAME"]) not in idle]
            return bool(rows) and all(r["STATUS"] == "Running" for r in rows)
        listed = guide.run(7, 3, until=all_running, within=120).stdout
        assert all_running(listed), listed
        now = {_key(p): p for p in guide.pods_on(guide.layout.node_name)}
        assert set(before) <= set(now), f"gone from {guide.layout.node_name}: {set(before) - set(now)}"
        restarted = {key: (_restarts(p), _restarts(now[key])) for key, p in before.items()
                     if not key[1].startswith("DaemonSet/") and _restarts(now[key]) != _restarts(p)}
        assert not restarted, f"restarted since step 1 (before, now): {restarted}"
        assert {key for key in now if key not in seen} == {(NAMESPACE, "DaemonSet/kopflet")}


def test_step_8_remove_it(guide: Guide) -> None:
    k, layout = guide.kubectl, guide.layout
    with guide.step(8):
        for command in next(s for s in guide.steps if s.number == 8).commands:
            guide.run(8, command.index)
        guide.removed = True
        guide.log("  (the bridge's iptables rules stay, as the guide says)")
    # The host: nothing of the DaemonSet's left ...
    assert not _link_exists(BRIDGE), f"{BRIDGE} is still there"
    for folder in HOST_PATHS.values():
        assert g.mounts_at_or_below(_mountinfo(), folder) == [], folder
        assert not Path(folder).exists(), folder
    assert _kopflet_cgroups() == []
    uid = guide.before.get("daemonset_pod")
    if uid:  # the resident kubelet removes the DaemonSet pod's cgroup (and what the agent made in it)
        _wait(f"the DaemonSet pod's cgroup pod{uid} to go", lambda: not _pod_cgroups(uid), timeout=60)
    # ... and the stack's own untouched (the paths and bridge the unmodified guide names).
    assert Path(layout.runtime_endpoint.removeprefix("unix://")).is_socket()
    assert _link_exists(g.GUIDE_BRIDGE) == guide.before["kopflet0"]
    # The cluster: the Node, its Lease (the garbage collector follows the Node), the install's objects, the pod.
    assert not k.run("get", "node", guide.inner, "--ignore-not-found").stdout.strip()
    _wait(f"the Lease of {guide.inner} to go", lambda: not k.run(
        "get", "lease", guide.inner, "-n", "kube-node-lease", "--ignore-not-found").stdout.strip(), timeout=90)
    for args in (("namespace", NAMESPACE), ("clusterrole", "kopflet"), ("clusterrolebinding", "kopflet"),
                 ("role", "kopflet", "-n", "kube-node-lease"), ("rolebinding", "kopflet", "-n", "kube-node-lease"),
                 ("pod", "hello", "-n", "default")):
        assert not k.run("get", *args, "--ignore-not-found").stdout.strip(), args
