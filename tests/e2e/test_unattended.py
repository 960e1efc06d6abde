"""A node left alone keeps itself tidy (issue 18): container logs are rotated and compressed under a size cap,
``/var/log/containers`` holds a link per container for log collectors, the Node gets its ``Starting`` event,
and crash-looping containers do not pile up dead instances.

Everything runs for real (the agent, kube-apiserver, containerd); each test reads what a user or a log
collector on the node sees: files under the log directories, ``kubectl logs``, events, the runtime's containers.
"""

from __future__ import annotations

import datetime as dt
import gzip
import itertools
import os
import re
import subprocess
import time
from pathlib import Path

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import (
    container,
    is_ready,
    pod_manifest,
    runtime_containers,
    statuses,
    wait_gone,
    wait_pod,
)

MAX_SIZE = 64 * 1024
MAX_FILES = 3
AGENT_ARGS = f"--container-log-max-size={MAX_SIZE // 1024}Ki --container-log-max-files={MAX_FILES}"

POD_LOG_ROOT = Path("/var/log/pods")  # podLogsDir: the dev stack's kubelet config keeps the default
CONTAINER_LOGS_DIR = Path("/var/log/containers")
MONITOR_INTERVAL = 10.0  # containerLogMonitorInterval's default: a log is looked at this often

FLOOD_SECONDS = 55
PAD = "x" * 100
# Numbered lines, a few hundred KiB a second (200 lines of ~110 bytes, then a short pause), for FLOOD_SECONDS;
# then the container stays running, quiet, so the files settle.
FLOOD = (f"end=$(( $(date +%s) + {FLOOD_SECONDS} )); i=0; "
         f"while [ $(date +%s) -lt $end ]; do n=0; "
         f"while [ $n -lt 200 ]; do i=$((i+1)); n=$((n+1)); echo \"seq=$i {PAD}\"; done; sleep 0.1; done; "
         f"exec sleep 3600")
SEQ_LINE = re.compile(rf"seq=(\d+) {PAD}")
CRI_LINE = re.compile(rf"\S+ stdout F seq=(\d+) {PAD}")
LOG_FILE = re.compile(r"0\.log(\.(\d{8}-\d{6})(\.gz(\.tmp)?)?)?")


def container_log_dir(namespace: str, pod: dict) -> Path:
    return POD_LOG_ROOT / f"{namespace}_{pod['metadata']['name']}_{pod['metadata']['uid']}" / "main"


def listing(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []


def inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def size_of(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def first_cri_seq(path: Path) -> int | None:
    """The sequence number of the first complete line of a CRI log file, None when it has none yet."""
    try:
        with path.open("rb") as f:
            line = f.readline()
    except FileNotFoundError:
        return None
    match = CRI_LINE.fullmatch(line.decode().rstrip("\n")) if line.endswith(b"\n") else None
    return int(match.group(1)) if match else None


def cri_seqs(data: bytes) -> list[int]:
    lines = data.decode().splitlines()
    bad = [line for line in lines if not CRI_LINE.fullmatch(line)]
    assert not bad, f"lines that are not the container's CRI log lines: {bad[:3]}"
    return [int(CRI_LINE.fullmatch(line).group(1)) for line in lines]  # type: ignore[union-attr]


def plain_seqs(text: str, *, drop_partial_last: bool = False) -> list[int]:
    """The sequence numbers of `kubectl logs` output; every line must be one the container printed."""
    lines = text.split("\n")
    last = lines.pop()  # after the final newline: "" unless the output was cut mid-line
    if last and not drop_partial_last:
        lines.append(last)
    bad = [line for line in lines if not SEQ_LINE.fullmatch(line)]
    assert not bad, f"lines the container never printed: {bad[:3]}"
    return [int(SEQ_LINE.fullmatch(line).group(1)) for line in lines]  # type: ignore[union-attr]


def contiguous(seqs: list[int]) -> bool:
    return bool(seqs) and seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def gaps(seqs: list[int]) -> list[tuple[int, int]]:
    return [(a, b) for a, b in itertools.pairwise(seqs) if b != a + 1][:5]


def test_logs_rotate_under_the_size_cap_and_stay_readable(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                          namespace: str, tmp_path: Path) -> None:
    admin.apply(pod_manifest("flood", namespace, layout.node_name, [container("main", FLOOD)]))
    pod = wait_pod(admin, namespace, "flood", is_ready, what="Ready")
    log_dir = container_log_dir(namespace, pod)
    live = log_dir / "0.log"
    started = time.monotonic()

    follow_out = tmp_path / "follow.out"
    with follow_out.open("wb") as out:
        follow = subprocess.Popen([str(admin.binary), f"--kubeconfig={admin.kubeconfig}", "logs", "-f", "--tail=1",
                                   "flood", "-n", namespace], stdout=out, stderr=subprocess.PIPE)
    try:
        follow_since = time.monotonic()
        samples: list[list[str]] = []
        boundary: int | None = None  # the first line of a live log the runtime reopened while -f was following
        last_inode: int | None = None
        rotated_seen: set[str] = set()
        follow_alive_at_end = False
        tail_out = everything_out = ""
        while time.monotonic() - started < FLOOD_SECONDS + 2:
            names = listing(log_dir)
            samples.append(names)
            rotated_seen |= {n for n in names if n != "0.log"}
            now_inode = inode(live)
            # Rotations count once kubectl logs -f printed its first line (it has the live log open).
            if boundary is None and follow.poll() is None and now_inode is not None \
                    and follow_out.stat().st_size > 0:
                if last_inode is not None and now_inode != last_inode:
                    # The runtime reopened the live log; None while the new file is still empty: look again.
                    boundary = first_cri_seq(live)
                else:
                    last_inode = now_inode
            if follow.returncode is None and boundary is not None and time.monotonic() - follow_since >= 25:
                follow_alive_at_end = follow.poll() is None
                follow.terminate()
                follow.wait(timeout=10)
                # While the flood goes on: kubectl logs without -f.
                tail_out = admin.run("logs", "flood", "-n", namespace, "--tail=50").stdout
                everything_out = admin.run("logs", "flood", "-n", namespace).stdout
            time.sleep(0.3)
    finally:
        if follow.poll() is None:
            follow.kill()
        follow.wait()
    stderr = follow.stderr.read().decode() if follow.stderr else ""

    # The files on disk: the live log, rotated ones named by time, all but the newest rotated one gzipped,
    # never more than --container-log-max-files in all.
    strange = {n for names in samples for n in names if not LOG_FILE.fullmatch(n)}
    assert not strange, f"unexpected files in {log_dir}: {strange}"
    too_many = [names for names in samples if len(names) > MAX_FILES]
    assert not too_many, f"more than {MAX_FILES} log files at once: {too_many[:3]}"
    uncompressed = [names for names in samples if sum(1 for n in names if re.fullmatch(r"0\.log\.\d{8}-\d{6}", n)) > 1]
    assert not uncompressed, f"more than one rotated log left uncompressed: {uncompressed[:3]}"
    assert any(re.fullmatch(r"0\.log\.\d{8}-\d{6}", n) for n in rotated_seen), \
        f"no rotated log ever appeared (saw {sorted(rotated_seen)})"
    assert any(re.fullmatch(r"0\.log\.\d{8}-\d{6}\.gz", n) for n in rotated_seen), \
        f"no rotated log was ever compressed (saw {sorted(rotated_seen)})"
    stamps = {dt.datetime.strptime(n.split(".")[2], "%Y%m%d-%H%M%S") for n in rotated_seen}
    assert len(stamps) >= 3, f"fewer rotations than expected in {FLOOD_SECONDS}s: {sorted(rotated_seen)}"
    assert all(abs(dt.datetime.now() - s) < dt.timedelta(minutes=10) for s in stamps), \
        f"rotated logs not named by the node's local time: {sorted(rotated_seen)}"

    # kubectl logs -f kept streaming across a rotation: no line lost or repeated, and past the first line the
    # runtime wrote to a reopened live log.
    assert boundary is not None, "no rotation happened while kubectl logs -f ran"
    assert follow_alive_at_end, f"kubectl logs -f ended by itself: {stderr}"
    followed = plain_seqs(follow_out.read_text(), drop_partial_last=True)
    assert contiguous(followed), f"kubectl logs -f lost or repeated lines around: {gaps(followed)}"
    assert followed[0] < boundary < followed[-1], \
        f"kubectl logs -f covered seq {followed[0]}..{followed[-1]}, not the rotation at seq {boundary}"

    # kubectl logs (no -f) reads the live log: lines from after the rotations, the newest ones.
    tail = plain_seqs(tail_out)
    assert len(tail) == 50 and contiguous(tail), tail
    assert tail[-1] >= followed[-1]
    everything = plain_seqs(everything_out)
    assert contiguous(everything) and everything[0] >= boundary and everything[-1] >= tail[-1], \
        (everything[:3], everything[-3:], boundary)

    # Once the flood stopped, the files settle: read together (gzipped ones decompressed) they are the last lines
    # the container wrote, in order, without a gap.
    deadline = time.monotonic() + 3 * MONITOR_INTERVAL
    names: list[str] = []
    while time.monotonic() < deadline:
        names = listing(log_dir)
        size = size_of(live)
        if size is not None and size < MAX_SIZE and not any(n.endswith(".tmp") for n in names):
            break
        time.sleep(1)
    else:
        raise AssertionError(f"the logs never settled after the flood: {names}")
    assert len(names) <= MAX_FILES, names
    kept: list[int] = []
    for name in [*sorted(n for n in names if n != "0.log"), "0.log"]:
        data = (log_dir / name).read_bytes()
        kept += cri_seqs(gzip.decompress(data) if name.endswith(".gz") else data)
    assert contiguous(kept), f"the kept logs miss or repeat lines around: {gaps(kept)}"
    assert kept[0] > 1, "nothing was ever removed, yet the logs stay under the size cap?"
    assert kept[-1] >= everything[-1]
    final = plain_seqs(admin.run("logs", "flood", "-n", namespace).stdout)
    assert final == cri_seqs(live.read_bytes()), "kubectl logs is not the live log"


def test_var_log_containers_links_follow_the_container(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                       namespace: str) -> None:
    admin.apply(pod_manifest("linked", namespace, layout.node_name, [container("main", "echo hello-link; sleep 3600")]))
    pod = wait_pod(admin, namespace, "linked", is_ready, what="Ready")
    container_id = statuses(pod)["main"]["containerID"]
    assert container_id.startswith("containerd://")
    link = CONTAINER_LOGS_DIR / f"linked_{namespace}_main-{container_id.removeprefix('containerd://')}.log"
    target = container_log_dir(namespace, pod) / "0.log"

    deadline = time.monotonic() + 10
    while not link.is_symlink() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert link.is_symlink(), f"no link {link}; {CONTAINER_LOGS_DIR} holds " \
        f"{[n for n in listing(CONTAINER_LOGS_DIR) if namespace in n]}"
    assert Path(os.readlink(link)) == target
    assert link.resolve(strict=True) == target.resolve(strict=True)
    assert b"stdout F hello-link\n" in link.read_bytes()
    others = [n for n in listing(CONTAINER_LOGS_DIR) if n.startswith(f"linked_{namespace}_")]
    assert others == [link.name], others

    admin.run("delete", "pod", "linked", "-n", namespace, "--wait=false")
    wait_gone(admin, namespace, "linked")
    deadline = time.monotonic() + 90  # removed with the container; the dangling-link sweep runs every 60s
    while link.is_symlink() and time.monotonic() < deadline:
        time.sleep(1)
    assert not link.is_symlink(), f"{link} outlived its pod"


def process_start(pid: int) -> float:
    """When a process started, in seconds since the epoch (/proc/<pid>/stat starttime, after boot)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime "))
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def test_node_has_a_starting_event(running_agent: Agent, admin: Kubectl, layout: Layout) -> None:
    assert running_agent.proc is not None
    started = process_start(running_agent.proc.pid)
    since = dt.datetime.fromtimestamp(int(started), dt.UTC)
    node_uid = admin.json("get", "node", layout.node_name)["metadata"]["uid"]
    selector = f"involvedObject.kind=Node,involvedObject.name={layout.node_name},reason=Starting"
    deadline = time.monotonic() + 30
    mine: list[dict] = []
    while time.monotonic() < deadline:
        items = admin.json("get", "events", "-n", "default", "--field-selector", selector)["items"]
        # The timestamps are whole seconds, and an agent started in the same second may have posted one too; the
        # name (client-go's "<node>.<UnixNano in hex>") says when to the nanosecond.
        mine = [e for e in items if e.get("firstTimestamp") and dt.datetime.fromisoformat(e["firstTimestamp"]) >= since
                and int(e["metadata"]["name"].rsplit(".", 1)[1], 16) / 1e9 >= started]
        if mine:
            break
        time.sleep(1)
    assert len(mine) == 1, f"Starting events of this agent (started {since}): {mine}"
    event = mine[0]
    assert (event["type"], event["message"], event["count"]) == ("Normal", "Starting kubelet.", 1)
    assert event["involvedObject"]["uid"] == node_uid
    assert event["source"] == {"component": "kubelet", "host": layout.node_name}


def test_dead_containers_are_collected_but_the_previous_one_kept(running_agent: Agent, admin: Kubectl,
                                                                 layout: Layout, namespace: str) -> None:
    # Each instance counts itself in an emptyDir (it outlives the containers), prints its number and crashes.
    script = "n=$(( $(cat /data/n 2>/dev/null || echo 0) + 1 )); echo $n > /data/n; echo run-$n; sleep 6; exit 1"
    admin.apply(pod_manifest("crashes", namespace, layout.node_name,
                             [container("main", script, volumeMounts=[{"name": "data", "mountPath": "/data"}])],
                             volumes=[{"name": "data", "emptyDir": {}}]))
    # The first restart is at once, then the crash-loop back-off waits 10s, 20s: the fourth instance starts about
    # 50s in (each runs 6s); the wait leaves room for slower rounds.
    pod = wait_pod(admin, namespace, "crashes",
                   lambda p: statuses(p).get("main", {}).get("restartCount", 0) >= 3
                   and "running" in statuses(p)["main"]["state"], timeout=180, what="running after 3 restarts")
    main = statuses(pod)["main"]
    restarts = main["restartCount"]
    current, previous = main["containerID"], main["lastState"]["terminated"]["containerID"]
    assert admin.run("logs", "crashes", "-n", namespace).stdout == f"run-{restarts + 1}\n"
    assert admin.run("logs", "crashes", "-n", namespace, "--previous").stdout == f"run-{restarts}\n"

    ids: set[str] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ids = {f"containerd://{c.id}" for c in runtime_containers(layout, pod["metadata"]["uid"])}
        if len(ids) <= 2:
            break
        time.sleep(0.5)
    assert len(ids) <= 2, f"{len(ids)} instances of a container that restarted {restarts} times"
    # What is kept: the newest instance and the one `kubectl logs --previous` reads (both may be dead by now).
    assert previous in ids and ids <= {current, previous}, (ids, current, previous)


def test_log_directories_of_pods_gone_while_the_agent_was_down_are_removed(running_agent: Agent) -> None:
    """What a pod removed with its sandbox while the agent was down leaves: its log directory, a log file and the
    link in /var/log/containers. Nothing in the runtime names the pod any more; upstream's container GC removes the
    directory by UID (evictPodLogsDirectories) and then the link whose log is gone."""
    uid = f"gone-{os.getpid()}-{int(time.time())}"
    directory = POD_LOG_ROOT / f"vanished_web_{uid}"
    (directory / "main").mkdir(parents=True)
    (directory / "main" / "0.log").write_text("2026-11-27T00:00:00.000000000Z stdout F bye\n")
    link = CONTAINER_LOGS_DIR / f"web_vanished_main-{'ab' * 32}.log"
    link.symlink_to(directory / "main" / "0.log")
    deadline = time.monotonic() + 45  # housekeeping runs every 30s
    while directory.exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert not directory.exists(), "the orphaned pod log directory is still there"
    deadline = time.monotonic() + 90  # the dangling-link sweep runs with container GC, every minute
    while os.path.lexists(link) and time.monotonic() < deadline:
        time.sleep(2)
    assert not os.path.lexists(link), "the link to the removed log is still there"
