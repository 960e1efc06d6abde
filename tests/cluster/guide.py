"""docs/operations.md's "On minikube, step by step" as commands, and each command as it runs on the project's
kubeadm cluster (tests/cluster/test_minikube_guide.py runs them; tests/unit/test_minikube_guide.py checks this).

Pure: markdown text in, frozen dataclasses out; no files, processes or clock.

Parsing: the section is found by its heading; each numbered step (``N. **Title.**``) owns the ```sh blocks up to the
next step. A command is one shell command as a reader pastes it: lines continued by a backslash or by an open
quote (step 2's patch), and a heredoc's body up to its delimiter (step 6's ``kubectl apply -f - <<'EOF'``), stay
one command. What follows an unquoted ``#`` is the guide's note on that command (what it should print), and
comment lines right below a command add to its note (step 5's taint JSON).

Translation (minikube cannot start here without internet access; the kubeadm cluster stands in for it), the guide's
command → what runs here, and why:
- ``minikube start`` → nothing, recorded as skipped: the cluster is up already (``make cluster``).
- ``minikube ssh -- CMD`` → CMD in a shell on this machine: the test runs on the node itself.
- a bare ``minikube ssh``, then commands "on the machine" → nothing; the commands after it in a shell here.
- on the machine: ``sudo CMD`` → CMD (the test runs as root); ``/var/lib/kopflet``, ``/run/kopflet``,
  ``/var/log/kopflet`` → the adapted manifests' folders and ``kopflet0`` → their bridge (the unmodified DaemonSet's
  are the stack's own here); on a cgroup v1 machine ``/sys/fs/cgroup/kopflet`` → ``/sys/fs/cgroup/*/kopflet`` (one
  per hierarchy); ``crictl`` without ``--runtime-endpoint`` → with the cluster's runtime (minikube's
  ``/etc/crictl.yaml`` names its runtime; crictl's own defaults start with ``/run/containerd``, not the cluster's).
- ``minikube image build -t IMAGE -f Containerfile .`` → ``bash images/build-agent-image.sh --import``: buildah
  builds the same Containerfile as IMAGE and loads it into the cluster's containerd.
- ``minikube image ls`` → ``ctr --address <the cluster's containerd> -n k8s.io images ls``.
- ``kubectl apply -f manifests/``, ``kubectl delete -f manifests/`` → the same on the folder the adapted manifests
  are written to (tests/e2e/test_daemonset.py: host paths, bridge, registry mirror), nothing else changed.
- the node name ``minikube`` (and ``kopflet-minikube``) → the cluster's node name (``kopflet-<node>``).
- anything else → verbatim, with ``KUBECONFIG`` the cluster's admin.conf and the project's kubectl and crictl first
  on ``PATH``.

Two commands are added where this machine needs them: before step 4 the Requirements' shared bind mount of
``/var/lib/kopflet`` (minikube's ``/``, under systemd, is shared already; this machine's is not), and in step 8 its
undoing, right after the guide's unmounting of the volumes below it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
import shlex
from collections.abc import Iterable, Sequence

SECTION = "On minikube, step by step"
# The Requirements' command for a host whose / is not a shared mount (docs/operations.md, "Requirements").
SHARED_MOUNT = ("mkdir -p /var/lib/kopflet && mount --bind /var/lib/kopflet /var/lib/kopflet && mount "
                "--make-rshared /var/lib/kopflet")
GUIDE_HOST_PATHS = ("/var/lib/kopflet", "/run/kopflet", "/var/log/kopflet")
GUIDE_BRIDGE = "kopflet0"
GUIDE_NODE = "minikube"

# What the integration test checks for each command the guide comments on, by (step, index in the step).
# tests/unit/test_minikube_guide.py keeps this in step with the guide's notes.
EXPECTATIONS: dict[tuple[int, int], str] = {
    (1, 2): "cgroup2fs on a cgroup v2 host; this machine is cgroup v1 (a hybrid host), where it prints tmpfs",
    (1, 3): "10.96.0.10, the ConfigMap's clusterDNS",
    (1, 4): "no route inside 10.89.0.0/24",
    (4, 3): "the runtime container's lines 'kopflet-runtime: iptables backend: ' and 'kopflet-runtime: starting "
            "containerd'",
    (4, 4): "'registered node kopflet-<node>' and 'serving the kubelet API on 0.0.0.0:10350'",
    (5, 1): "both Nodes listed, with the same INTERNAL-IP",
    (5, 2): "exactly the one kopflet.dev/agent NoSchedule taint (JSON compared as data)",
    (6, 2): "NODE kopflet-<node>, IP in 10.89.0.0/24 (once Running)",
    (6, 3): "date lines, and the Node's kubelet endpoint is port 10350",
    (7, 1): "no pod named hello in the resident runtime (and the DaemonSet's pod is there)",
    (7, 2): "the pod hello, Ready, in kopflet's own runtime",
    (7, 3): "every pod Running, and those Running at step 1 still there with the same restart counts",
    (8, 4): "not an output: the commands after it run on the machine",
    (8, 5): "no mount left below the root folder",
}


@dataclasses.dataclass(frozen=True)
class Command:
    """One command of the guide, as written (continued lines and a heredoc's body included, its comment not)."""

    step: int
    index: int  # 1-based within its step
    text: str
    note: str  # the comment after '#', and comment lines right below: what the guide expects; '' if none
    line: int  # 1-based line of docs/operations.md where it starts


@dataclasses.dataclass(frozen=True)
class Step:
    number: int
    title: str
    commands: tuple[Command, ...]


@dataclasses.dataclass(frozen=True)
class Machine:
    """What differs on the kubeadm cluster's machine."""

    node_name: str
    manifests: str  # the folder the adapted manifests are written to
    runtime_endpoint: str  # the cluster's (resident) runtime, unix://...
    image: str  # what images/build-agent-image.sh builds: localhost/kopflet:<setup.cfg's version>
    host_paths: tuple[tuple[str, str], ...]  # the DaemonSet's host folders → the adapted manifests'
    bridge: str  # the adapted manifests' bridge, in place of kopflet0
    cgroup_v1: bool
    root_shared: bool  # whether the folder the root folder is made in is on a shared mount already


@dataclasses.dataclass(frozen=True)
class Translation:
    """A guide command and what runs for it here (`run` None: nothing runs), with the reason for each change."""

    step: int
    index: int  # the guide command's (for an added command: the guide command it comes after, 0 before the first)
    original: str  # the guide's text ('' for a command the guide does not have)
    run: str | None
    reasons: tuple[str, ...]
    note: str = ""
    added: bool = False

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "verbatim"

    @property
    def skipped(self) -> bool:
        return self.run is None


# --- parsing ------------------------------------------------------------------------------------------------------

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_STEP = re.compile(r"^(\d+)\.\s+\*\*(.+?)\*\*")
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


def section(markdown: str, heading: str = SECTION) -> tuple[list[str], int]:
    """The section's lines under `heading` (to the next heading of its level or above) and the 1-based line number
    of its first line. ValueError if there is no such heading."""
    lines = markdown.splitlines()
    in_fence = False
    start = level = None
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        m = None if in_fence else _HEADING.match(line)
        if not m:
            continue
        if start is None and m.group(2) == heading:
            start, level = i + 1, len(m.group(1))
        elif start is not None and level is not None and len(m.group(1)) <= level:
            return lines[start:i], start + 1
    if start is None:
        raise ValueError(f"no section {heading!r}")
    return lines[start:], start + 1


def _scan(line: str, quote: str) -> tuple[str, str, str, tuple[str, bool] | None, bool]:
    """One line of shell: (its code, its comment, the quote still open at its end, a heredoc it starts
    (delimiter, <<-), whether it ends in a line-continuing backslash)."""
    i, heredoc = 0, None
    while i < len(line):
        ch = line[i]
        if quote == "'":
            if ch == "'":
                quote = ""
        elif quote == '"':
            if ch == "\\":
                i += 1
            elif ch == '"':
                quote = ""
        elif ch == "\\":
            if i == len(line) - 1:
                return line, "", quote, heredoc, True
            i += 1
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip(), quote, heredoc, False
        elif line.startswith("<<", i) and heredoc is None:
            m = _HEREDOC.match(line, i)
            if m:
                heredoc = (m.group(3), m.group(1) == "-")
                i = m.end()
                continue
        i += 1
    return (line if quote else line.rstrip()), "", quote, heredoc, False


def split_commands(lines: Sequence[str]) -> list[tuple[str, str, int]]:
    """A sh block's commands: (text, note, index of its first line in `lines`)."""
    out: list[tuple[str, str, int]] = []
    i, last_end = 0, -2
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped:
            i += 1
            continue
        if stripped.startswith("#"):
            if not out or last_end != i - 1:
                raise ValueError(f"a comment line that follows no command: {stripped!r}")
            text, note, start = out[-1]
            out[-1] = (text, f"{note} {stripped[1:].strip()}".strip(), start)
            last_end = i
            i += 1
            continue
        start, parts, notes, quote, heredoc = i, [], [], "", None
        while True:
            if i >= len(lines):
                raise ValueError(f"a command that never ends: {lines[start]!r}")
            code, comment, quote, opened, continued = _scan(lines[i], quote)
            parts.append(code)
            if comment:
                notes.append(comment)
            heredoc = heredoc or opened
            i += 1
            if not quote and not continued:
                break
        if heredoc:
            delimiter, dash = heredoc
            while True:
                if i >= len(lines):
                    raise ValueError(f"a heredoc without its {delimiter}: {lines[start]!r}")
                body = lines[i]
                parts.append(body)
                i += 1
                if (body.lstrip("\t") if dash else body) == delimiter:
                    break
        out.append(("\n".join(parts), " ".join(notes), start))
        last_end = i - 1
    return out


def parse_steps(markdown: str, heading: str = SECTION) -> tuple[Step, ...]:
    """The section's numbered steps with their sh commands, in order."""
    lines, first = section(markdown, heading)
    steps: list[tuple[int, str, list[Command]]] = []
    i = 0
    while i < len(lines):
        step = _STEP.match(lines[i])
        if step:
            steps.append((int(step.group(1)), step.group(2).strip().rstrip("."), []))
            i += 1
            continue
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, language = fence.group(1), fence.group(2)
        end = next((j for j in range(i + 1, len(lines)) if re.match(r"^\s*```\s*$", lines[j])), None)
        if end is None:
            raise ValueError(f"an unclosed code block at line {first + i}")
        if language == "sh":
            if not steps:
                raise ValueError(f"a sh block before step 1 at line {first + i}")
            block = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:end]]
            number, _, commands = steps[-1]
            for text, note, offset in split_commands(block):
                commands.append(Command(number, len(commands) + 1, text, note, first + i + 1 + offset))
        i = end + 1
    numbers = [n for n, _, _ in steps]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ValueError(f"steps not numbered 1..n: {numbers}")
    return tuple(Step(n, title, tuple(commands)) for n, title, commands in steps)


def commands(steps: Iterable[Step]) -> list[Command]:
    return [c for s in steps for c in s.commands]


# --- translation ------------------------------------------------------------------------------------------------

def _path_pattern(path: str) -> re.Pattern[str]:
    """`path` as a whole path (itself or a prefix of a deeper one; also in a unix:// URL), never a prefix of another
    name nor the tail of another path."""
    return re.compile(rf"(?:(?<=//)|(?<![\w./-])){re.escape(path)}(?![\w.-])")


def resident_names(text: str) -> list[str]:
    """The DaemonSet's unadapted host folders and bridge `text` names: on this machine they are the stack's own."""
    names = [p for p in GUIDE_HOST_PATHS if _path_pattern(p).search(text)]
    return names + ([GUIDE_BRIDGE] if re.search(rf"\b{GUIDE_BRIDGE}\b", text) else [])


def _on_machine(text: str, machine: Machine) -> tuple[str, list[str]]:
    """A command for the node's shell: no sudo, the adapted folders and bridge, v1 cgroups, crictl's endpoint."""
    reasons = []
    if text.startswith("sudo "):
        text = text[len("sudo "):]
        reasons.append("sudo dropped: the test runs as root")
    for guide_path, here in machine.host_paths:
        text, n = _path_pattern(guide_path).subn(here, text)
        if n:
            reasons.append(f"{guide_path} → {here}: the adapted DaemonSet's folder ({guide_path} is the stack's own "
                           f"here)")
    text, n = re.subn(rf"\b{GUIDE_BRIDGE}\b", machine.bridge, text)
    if n:
        reasons.append(f"{GUIDE_BRIDGE} → {machine.bridge}: the adapted DaemonSet's bridge ({GUIDE_BRIDGE} is the "
                       f"stack's pod bridge here)")
    if machine.cgroup_v1:
        text, n = _path_pattern("/sys/fs/cgroup/kopflet").subn("/sys/fs/cgroup/*/kopflet", text)
        if n:
            reasons.append("/sys/fs/cgroup/kopflet → /sys/fs/cgroup/*/kopflet: cgroup v1 has a kopflet cgroup in "
                           "each hierarchy")
    left = resident_names(text)
    if left:
        raise ValueError(f"{text!r} still names {left}, which are the stack's own on this machine")
    if re.match(r"crictl\b", text) and not re.search(r"(^|\s)(--runtime-endpoint|-r)(\s|=)", text):
        text = f"crictl --runtime-endpoint {machine.runtime_endpoint}{text[len('crictl'):]}"
        reasons.append(f"crictl given the cluster's runtime {machine.runtime_endpoint}: minikube's /etc/crictl.yaml "
                       f"names its runtime, this node has none and crictl's default endpoints start with "
                       f"/run/containerd, not the cluster's")
    return text, reasons


def _node_names(text: str, machine: Machine) -> tuple[str, list[str]]:
    """The guide's node name, alone or in kopflet's naming scheme, as the cluster's."""
    reasons = []
    inner = re.compile(rf"\bkopflet-{GUIDE_NODE}\b")
    if inner.search(text):
        text = inner.sub(f"kopflet-{machine.node_name}", text)
        reasons.append(f"kopflet-{GUIDE_NODE} → kopflet-{machine.node_name}: the kopflet Node of the cluster's node")
    text, n = re.subn(rf"(?<![\w.-]){GUIDE_NODE}\b", machine.node_name, text)
    if n:
        reasons.append(f"node {GUIDE_NODE} → {machine.node_name}: the cluster's node")
    return text, reasons


def translate(command: Command, machine: Machine, on_machine: bool = False) -> Translation:
    """What runs here for `command`; `on_machine`: it comes after a bare ``minikube ssh`` in its step."""
    text, reasons = command.text, []

    def done(run: str | None) -> Translation:
        return Translation(command.step, command.index, command.text, run, tuple(reasons), command.note)

    if text == "minikube start":
        reasons.append("skipped: the kubeadm cluster is up already (make cluster); minikube cannot start without "
                       "internet access")
        return done(None)
    if text == "minikube ssh":
        reasons.append("skipped: the test runs on the node itself, as root; the commands after it run in a shell here")
        return done(None)
    if text.startswith("minikube ssh -- "):
        text = text[len("minikube ssh -- "):]
        reasons.append("minikube ssh -- CMD: CMD in a shell on this machine, the cluster's node")
        on_machine = True
    elif text.startswith("minikube image build "):
        argv = shlex.split(text)
        tag = argv[argv.index("-t") + 1] if "-t" in argv else None
        if tag != machine.image or argv[-1] != "." or "Containerfile" not in argv:
            raise ValueError(f"{text!r}: not the Containerfile built as {machine.image}")
        reasons.append(f"minikube image build → images/build-agent-image.sh --import: builds the Containerfile as "
                       f"{machine.image} with buildah and loads it into the cluster's containerd")
        text = "bash images/build-agent-image.sh --import"
    elif text.startswith("minikube image ls"):
        socket = machine.runtime_endpoint.removeprefix("unix://")
        text = f"ctr --address {socket} -n k8s.io images ls{text[len('minikube image ls'):]}"
        reasons.append("minikube image ls → ctr images ls: the images of the cluster's containerd (its CRI namespace)")
    if on_machine:
        text, more = _on_machine(text, machine)
        reasons += more
    if re.search(r"(^|[|;&(]\s*)minikube\s", text):
        raise ValueError(f"no translation for {command.text!r}")
    # The node names first: what the substitutions below put in (a temporary folder's path) is not the guide's.
    text, more = _node_names(text, machine)
    reasons += more
    text, n = re.subn(r"^(kubectl (?:apply|delete)\b.*?-f )manifests/(?=\s|$)", rf"\g<1>{machine.manifests}/", text)
    if n:
        reasons.insert(0, f"manifests/ → {machine.manifests}/: the adapted manifests (host paths, bridge, registry "
                          f"mirror), nothing else changed")
    return done(text)


def translate_steps(steps: Iterable[Step], machine: Machine) -> tuple[Translation, ...]:
    """Every command of every step, in order, with the two this machine adds (see the module doc)."""
    out: list[Translation] = []
    for step in steps:
        on_machine = False
        for command in step.commands:
            t = translate(command, machine, on_machine)
            if t.run is not None and t.run.startswith("kubectl apply -f " + machine.manifests) and \
                    not machine.root_shared:
                root = dict(machine.host_paths)["/var/lib/kopflet"]
                out.append(Translation(step.number, command.index - 1, "", SHARED_MOUNT.replace(
                    "/var/lib/kopflet", root), ("added: the Requirements' shared mount of the root folder, for a "
                                                "host whose / is not shared (minikube's is, under systemd)",),
                    added=True))
            out.append(t)
            on_machine = on_machine or command.text == "minikube ssh"
            if not machine.root_shared and re.match(r"sudo sh -c 'grep -o \" /var/lib/kopflet/", command.text):
                root = dict(machine.host_paths)["/var/lib/kopflet"]
                out.append(Translation(step.number, command.index, "", f"umount {root}", (
                    "added: undoes the shared bind mount added before step 4 (the volumes below it are unmounted "
                    "now); minikube has none, and rm -rf stops at a mount point",), added=True))
    return tuple(out)


# --- reading what the commands print -----------------------------------------------------------------------------

def table(text: str) -> list[dict[str, str]]:
    """kubectl's and crictl's column output as rows by header. The columns are cut at the header's positions (tabwriter
    aligns them), so values with single spaces ("About a minute ago", an OS image) stay whole."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    columns = [(m.group(), m.start()) for m in re.finditer(r"\S+(?: \S+)*", lines[0])]
    rows = []
    for line in lines[1:]:
        bounds = [start for _, start in columns[1:]] + [len(line)]
        rows.append({name: line[start:end].strip() for (name, start), end in zip(columns, bounds, strict=True)})
    return rows


_ROUTE_TYPES = {"unicast", "local", "broadcast", "multicast", "throw", "unreachable", "prohibit", "blackhole", "nat"}


def routes_within(text: str, subnet: ipaddress.IPv4Network) -> list[str]:
    """The lines of ``ip -4 route`` whose destination overlaps `subnet`."""
    found = []
    for line in text.splitlines():
        words = line.split()
        if words and words[0] in _ROUTE_TYPES:
            words = words[1:]
        if not words or words[0] == "default":
            continue
        try:
            destination = ipaddress.ip_network(words[0], strict=False)
        except ValueError:
            continue
        if isinstance(destination, ipaddress.IPv4Network) and destination.overlaps(subnet):
            found.append(line)
    return found


def tolerate_everything(text: str) -> set[str]:
    """From step 2's listing (``<namespace>/<name>: <tolerations JSON>`` lines): the DaemonSets with a toleration
    that has no key and operator Exists, which tolerates every taint."""
    found = set()
    for line in text.splitlines():
        name, _, tolerations = line.partition(": ")
        if tolerations.strip() and any(not t.get("key") and t.get("operator") == "Exists"
                                       for t in json.loads(tolerations)):
            found.add(name.strip())
    return found


def _mounts(mountinfo: str) -> list[tuple[str, list[str]]]:
    """(mount point, optional fields) of each /proc/self/mountinfo line, in order."""
    out = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 6 and "-" in fields[6:]:
            point = fields[4].replace("\\040", " ")
            out.append((point, fields[6:fields.index("-", 6)]))
    return out


def on_shared_mount(mountinfo: str, path: str) -> bool:
    """Whether the mount `path` is on (the last one mounted at its longest covering mount point) propagates shared."""
    covering = [(point, optional) for point, optional in _mounts(mountinfo)
                if point == "/" or path == point or path.startswith(point.rstrip("/") + "/")]
    if not covering:
        return False
    longest = max(len(point) for point, _ in covering)
    _, optional = [c for c in covering if len(c[0]) == longest][-1]
    return any(o.startswith("shared:") for o in optional)


def mounts_at_or_below(mountinfo: str, folder: str) -> list[str]:
    return [point for point, _ in _mounts(mountinfo) if point == folder or point.startswith(folder.rstrip("/") + "/")]
