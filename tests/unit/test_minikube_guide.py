"""tests/cluster/guide.py: docs/operations.md's minikube guide read into commands (the real file), and each command's
translation for the kubeadm cluster, which tests/cluster/test_minikube_guide.py runs."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.cluster import guide
from tests.cluster.guide import Command, Machine

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
ADAPTED = (("/var/lib/kopflet", "/var/lib/kopflet-e2e-ds"), ("/run/kopflet", "/run/kopflet-e2e-ds"),
           ("/var/log/kopflet", "/var/log/kopflet-e2e-ds"))
RESIDENT = "unix:///run/kopflet/containerd/containerd.sock"
MACHINE = Machine(node_name="node-a", manifests="/tmp/guide/manifests", runtime_endpoint=RESIDENT,
                  image="localhost/kopflet:0.1.0", host_paths=ADAPTED, bridge="kopflet-ds0", cgroup_v1=True,
                  root_shared=False)
V2_SHARED = dataclasses.replace(MACHINE, cgroup_v1=False, root_shared=True)
STEPS = guide.parse_steps(DOC)
COMMANDS = guide.commands(STEPS)


def cmd(text: str, step: int = 1, index: int = 1, note: str = "") -> Command:
    return Command(step, index, text, note, 1)


def by_key(step: int, index: int) -> Command:
    return next(c for c in COMMANDS if (c.step, c.index) == (step, index))


# --- the real guide -------------------------------------------------------------------------------------------------

def test_the_guide_has_eight_steps_with_the_commands_it_shows() -> None:
    assert [(s.number, len(s.commands)) for s in STEPS] == [(1, 4), (2, 2), (3, 2), (4, 4), (5, 2), (6, 4), (7, 3),
                                                             (8, 8)]
    assert STEPS[0].title == "Start minikube and check the host"
    assert STEPS[-1].title == "Remove it"


def test_every_command_line_of_the_section_is_in_exactly_one_command() -> None:
    """Every non-blank, non-comment line of the section's sh blocks is part of one parsed command, in order."""
    lines, _ = guide.section(DOC)
    in_sh, block_lines = False, []
    for line in lines:
        fence = re.match(r"^\s*```(\S*)\s*$", line)
        if fence:
            in_sh = not in_sh and fence.group(1) == "sh"
            continue
        if in_sh and line.strip() and not line.strip().startswith("#"):
            block_lines.append(line.strip())
    parsed = [part.strip() for c in COMMANDS for part in c.text.splitlines() if part.strip()]
    without_comments = [re.sub(r"\s{2,}#.*$", "", line).strip() for line in block_lines]
    assert parsed == without_comments


def test_every_command_is_run_or_skipped_with_a_reason() -> None:
    translations = guide.translate_steps(STEPS, MACHINE)
    originals = [(t.step, t.index) for t in translations if not t.added]
    assert originals == [(c.step, c.index) for c in COMMANDS]
    for t in translations:
        assert t.run or t.reasons[0].startswith("skipped: "), t
    skipped = [t.original for t in translations if t.skipped]
    assert skipped == ["minikube start", "minikube ssh"]
    added = [(t.step, t.index, t.run) for t in translations if t.added]
    assert added == [
        (4, 0, "mkdir -p /var/lib/kopflet-e2e-ds && mount --bind /var/lib/kopflet-e2e-ds /var/lib/kopflet-e2e-ds && "
               "mount --make-rshared /var/lib/kopflet-e2e-ds"),
        (8, 5, "umount /var/lib/kopflet-e2e-ds")]
    # Where / is shared (minikube under systemd), nothing is added.
    assert not [t for t in guide.translate_steps(STEPS, V2_SHARED) if t.added]


def test_the_added_shared_mount_is_the_requirements_own_command() -> None:
    assert guide.SHARED_MOUNT in " ".join(DOC.split())


def test_no_minikube_command_is_left_and_no_resident_path_is_touched() -> None:
    """Only the two listings of the resident runtime (the guide's minikube image ls and crictl pods) name the stack's
    own folders; nothing that writes does."""
    naming = []
    for t in guide.translate_steps(STEPS, MACHINE):
        if t.run is None:
            continue
        assert not re.search(r"(^|[|;&]\s*)(sudo|minikube)\s", t.run), t
        assert "minikube" not in t.run, t
        if guide.resident_names(t.run):
            naming.append(t.run)
    assert naming == ["ctr --address /run/kopflet/containerd/containerd.sock -n k8s.io images ls | grep kopflet",
                      f"crictl --runtime-endpoint {RESIDENT} pods"]


def test_step_8_removes_only_the_adapted_folders_bridge_and_cgroups() -> None:
    on_machine = [t.run for t in guide.translate_steps(STEPS, MACHINE) if t.step == 8 and t.run
                  and not t.run.startswith("kubectl")]
    assert on_machine == [
        "sh -c 'grep -o \" /var/lib/kopflet-e2e-ds/[^ ]*\" /proc/mounts | sort -r | xargs -r -n1 umount'",
        "umount /var/lib/kopflet-e2e-ds",
        "rm -rf /var/lib/kopflet-e2e-ds /run/kopflet-e2e-ds /var/log/kopflet-e2e-ds",
        "ip link delete kopflet-ds0",
        "find /sys/fs/cgroup/*/kopflet -depth -type d -exec rmdir {} +",
    ]
    v2 = [t.run for t in guide.translate_steps(STEPS, V2_SHARED) if t.step == 8 and t.run]
    assert "find /sys/fs/cgroup/kopflet -depth -type d -exec rmdir {} +" in v2


@pytest.mark.parametrize("t", [t for t in guide.translate_steps(STEPS, MACHINE) if t.run],
                         ids=lambda t: f"{t.step}.{t.index}{'+' if t.added else ''}")
def test_each_command_and_what_runs_for_it_are_one_valid_sh_command(t: guide.Translation) -> None:
    """`sh -n` (parse only, nothing runs) takes the guide's text and the translation as written, each whole."""
    for text in filter(None, (t.original, t.run)):
        proc = subprocess.run(["sh", "-n", "-c", text], capture_output=True, text=True, timeout=10)
        assert proc.returncode == 0, (text, proc.stderr)


def test_the_heredoc_pod_is_one_command_whose_manifest_is_bound_to_the_kopflet_node() -> None:
    apply = by_key(6, 1)
    assert apply.text.startswith("kubectl apply -f - <<'EOF'\n") and apply.text.endswith("\nEOF")
    run = guide.translate(apply, MACHINE).run
    assert run is not None
    body = run.split("\n", 1)[1].rsplit("\nEOF", 1)[0]
    pod = yaml.safe_load(body)
    assert pod["kind"] == "Pod" and pod["metadata"] == {"name": "hello"}
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "kopflet-node-a"}
    assert pod["spec"]["tolerations"] == [{"key": "kopflet.dev/agent", "operator": "Equal", "value": "true",
                                           "effect": "NoSchedule"}]
    assert pod["spec"]["containers"][0]["image"] == "busybox:1.36"


def test_the_patch_over_three_lines_is_one_command_with_valid_json() -> None:
    patch = by_key(2, 2)
    assert patch.text.count("\n") == 2
    argv = shlex.split(patch.text)
    assert argv[:6] == ["kubectl", "-n", "kube-system", "patch", "ds", "kube-proxy"]
    body = json.loads(argv[argv.index("-p") + 1])
    terms = body["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kopflet.dev/agent", "operator": "DoesNotExist"}]}]


def test_notes_are_kept_and_a_comment_line_below_adds_to_its_command() -> None:
    assert by_key(1, 2).note == "cgroup2fs"
    assert by_key(5, 2).note == '[{"effect":"NoSchedule","key":"kopflet.dev/agent","value":"true"}]'
    assert json.loads(by_key(5, 2).note) == [{"effect": "NoSchedule", "key": "kopflet.dev/agent", "value": "true"}]
    assert by_key(7, 1).note == 'minikube\'s runtime: no "hello"'
    assert by_key(1, 3).text.endswith("""jsonpath='{.spec.clusterIP}{"\\n"}'""")  # '#' only at a word's start


def test_every_noted_command_has_its_check_in_the_integration_test() -> None:
    noted = {(c.step, c.index) for c in COMMANDS if c.note}
    assert noted == set(guide.EXPECTATIONS)


def test_the_image_built_is_the_one_the_daemonset_runs() -> None:
    daemonset = yaml.safe_load((REPO / "manifests" / "40-daemonset.yaml").read_text())
    images = {c["image"] for c in daemonset["spec"]["template"]["spec"]["containers"]}
    assert images == {MACHINE.image}
    with pytest.raises(ValueError, match="not the Containerfile"):
        guide.translate(cmd("minikube image build -t localhost/kopflet:9.9 -f Containerfile ."), MACHINE)


# --- translation cases -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "on_machine", "expected", "reason"), [
    ("minikube start", False, None, "skipped: the kubeadm cluster is up already"),
    ("minikube ssh", False, None, "skipped: the test runs on the node itself"),
    ("minikube ssh -- stat -fc %T /sys/fs/cgroup", False, "stat -fc %T /sys/fs/cgroup", "minikube ssh -- CMD"),
    ("minikube ssh -- ip -4 route", False, "ip -4 route", "minikube ssh -- CMD"),
    ("minikube ssh -- sudo crictl pods", False, f"crictl --runtime-endpoint {RESIDENT} pods", "crictl given"),
    ("minikube ssh -- sudo crictl --runtime-endpoint unix:///run/kopflet/containerd/containerd.sock pods", False,
     "crictl --runtime-endpoint unix:///run/kopflet-e2e-ds/containerd/containerd.sock pods", "/run/kopflet →"),
    ("minikube ssh -- crictl -r unix:///run/kopflet/containerd/containerd.sock ps", False,
     "crictl -r unix:///run/kopflet-e2e-ds/containerd/containerd.sock ps", "/run/kopflet →"),
    ("minikube image build -t localhost/kopflet:0.1.0 -f Containerfile .", False,
     "bash images/build-agent-image.sh --import", "build-agent-image.sh --import"),
    ("minikube image ls | grep kopflet", False,
     "ctr --address /run/kopflet/containerd/containerd.sock -n k8s.io images ls | grep kopflet", "ctr images ls"),
    ("kubectl apply -f manifests/", False, "kubectl apply -f /tmp/guide/manifests/", "the adapted manifests"),
    ("kubectl delete -f manifests/ --ignore-not-found", False,
     "kubectl delete -f /tmp/guide/manifests/ --ignore-not-found", "the adapted manifests"),
    ("kubectl apply -f manifests/cluster/metrics-server.yaml", False,
     "kubectl apply -f manifests/cluster/metrics-server.yaml", "verbatim"),
    ("kubectl get node kopflet-minikube -o wide", False, "kubectl get node kopflet-node-a -o wide", "kopflet-minikube"),
    ("kubectl get pods -A --field-selector spec.nodeName=minikube", False,
     "kubectl get pods -A --field-selector spec.nodeName=node-a", "node minikube → node-a"),
    ("kubectl logs hello", False, "kubectl logs hello", "verbatim"),
    ("sudo rm -rf /var/lib/kopflet /run/kopflet /var/log/kopflet", True,
     "rm -rf /var/lib/kopflet-e2e-ds /run/kopflet-e2e-ds /var/log/kopflet-e2e-ds", "sudo dropped"),
    ("sudo ip link delete kopflet0", True, "ip link delete kopflet-ds0", "kopflet0 → kopflet-ds0"),
    ("ls /var/lib/kopflet-other /srv/run/kopflet", True, "ls /var/lib/kopflet-other /srv/run/kopflet", "verbatim"),
    ("sudo find /sys/fs/cgroup/kopflet -depth -type d -exec rmdir {} +", True,
     "find /sys/fs/cgroup/*/kopflet -depth -type d -exec rmdir {} +", "cgroup v1"),
    ("sudo ip link delete kopflet0", False, "sudo ip link delete kopflet0", "verbatim"),  # only on the machine
])
def test_translation(text: str, on_machine: bool, expected: str | None, reason: str) -> None:
    t = guide.translate(cmd(text), MACHINE, on_machine)
    assert t.original == text
    assert t.run == expected
    assert reason in t.reason


@pytest.mark.parametrize("text", ["minikube addons enable ingress", "kubectl get pods | minikube kubectl -- get x",
                                  "minikube image build -t localhost/kopflet:0.1.0 -f Other ."])
def test_a_minikube_command_without_a_translation_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        guide.translate(cmd(text), MACHINE)


def test_a_bare_minikube_ssh_puts_the_rest_of_its_step_on_the_machine() -> None:
    doc = """## On minikube, step by step

1. **One.**

   ```sh
   sudo ip link delete kopflet0
   minikube ssh   # on the machine
   sudo ip link delete kopflet0
   ```

2. **Two.**

   ```sh
   sudo ip link delete kopflet0
   ```
"""
    runs = [t.run for t in guide.translate_steps(guide.parse_steps(doc), V2_SHARED)]
    assert runs == ["sudo ip link delete kopflet0", None, "ip link delete kopflet-ds0", "sudo ip link delete kopflet0"]


# --- parsing cases ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("block", "expected"), [
    (["echo a   # one", "echo b"], [("echo a", "one"), ("echo b", "")]),
    (["echo a \\", "  b  # two"], [("echo a \\\n  b", "two")]),
    (["echo 'a # not a note'  # note"], [("echo 'a # not a note'", "note")]),
    (["echo \"x\"#y"], [("echo \"x\"#y", "")]),
    (["echo '{", "  }'   # after"], [("echo '{\n  }'", "after")]),
    (["cat <<EOF  # heredoc", "a # kept", "EOF", "echo c"], [("cat <<EOF\na # kept\nEOF", "heredoc"), ("echo c", "")]),
    (["cat <<-'END'", "\tx", "\tEND"], [("cat <<-'END'\n\tx\n\tEND", "")]),
    (["kubectl get x", "# first", "# second", "", "echo y"], [("kubectl get x", "first second"), ("echo y", "")]),
])
def test_split_commands(block: list[str], expected: list[tuple[str, str]]) -> None:
    assert [(text, note) for text, note, _ in guide.split_commands(block)] == expected


@pytest.mark.parametrize(("block", "error"), [
    (["# alone", "echo a"], "follows no command"),
    (["echo a", "", "# apart"], "follows no command"),
    (["cat <<EOF", "a"], "heredoc without"),
    (["echo 'open"], "never ends"),
])
def test_split_commands_refuses(block: list[str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        guide.split_commands(block)


def test_section_ends_at_the_next_heading_of_its_level_and_ignores_fenced_hashes() -> None:
    doc = "# Top\n## A\n```sh\n# not a heading\n```\n### A.1\ntext\n## B\nother\n"
    lines, first = guide.section(doc, "A")
    assert lines == ["```sh", "# not a heading", "```", "### A.1", "text"] and first == 3
    with pytest.raises(ValueError):
        guide.section(doc, "C")


def test_steps_are_numbered_from_one_and_lines_point_into_the_file() -> None:
    for c in COMMANDS:
        assert DOC.splitlines()[c.line - 1].strip().startswith(c.text.splitlines()[0].strip()), c
    with pytest.raises(ValueError, match="numbered"):
        guide.parse_steps("## S\n\n2. **Two.**\n\n   ```sh\n   true\n   ```\n", "S")


# --- reading outputs --------------------------------------------------------------------------------------------------

def test_table_cuts_at_the_header_columns() -> None:
    out = ("POD ID              CREATED              STATE    NAME     NAMESPACE   ATTEMPT   RUNTIME\n"
           "0123456789abc       About a minute ago   Ready    hello    default     0         (default)\n")
    assert guide.table(out) == [{"POD ID": "0123456789abc", "CREATED": "About a minute ago", "STATE": "Ready",
                                 "NAME": "hello", "NAMESPACE": "default", "ATTEMPT": "0", "RUNTIME": "(default)"}]
    nodes = ("NAME     STATUS   ROLES           AGE   VERSION   INTERNAL-IP   EXTERNAL-IP   OS-IMAGE\n"
             "node-a   Ready    control-plane   9m    v1.37.1   10.0.0.5      <none>        "
             "Debian GNU/Linux 12 (bookworm)\n")
    assert guide.table(nodes)[0]["OS-IMAGE"] == "Debian GNU/Linux 12 (bookworm)"
    assert guide.table("") == []


def test_routes_within() -> None:
    routes = ("default via 10.0.0.1 dev eth0\n10.88.0.0/16 dev kopflet0 proto kernel scope link src 10.88.0.1\n"
              "blackhole 10.89.0.128/25\n10.89.0.7 dev x\n")
    subnet = ipaddress.ip_network("10.89.0.0/24")
    assert guide.routes_within(routes, subnet) == ["blackhole 10.89.0.128/25", "10.89.0.7 dev x"]
    assert guide.routes_within("10.0.0.0/8 dev eth0\n", subnet) == ["10.0.0.0/8 dev eth0"]
    assert guide.routes_within("default via 10.89.0.1 dev eth0\n", subnet) == []


def test_tolerate_everything() -> None:
    out = ('kube-system/kube-proxy: [{"operator":"Exists"}]\n'
           'kube-system/other: [{"key":"CriticalAddonsOnly","operator":"Exists"}]\n'
           'ns/plain: \n')
    assert guide.tolerate_everything(out) == {"kube-system/kube-proxy"}


MOUNTINFO = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
40 27 0:30 / /run rw,nosuid shared:5 - tmpfs tmpfs rw
50 27 254:0 /var/lib/x /var/lib/x rw,relatime shared:9 - ext4 /dev/vda rw
51 50 0:44 / /var/lib/x/pods/a\\040b rw - tmpfs tmpfs rw
"""


@pytest.mark.parametrize(("path", "shared"), [("/var/lib/kopflet-e2e-ds", False), ("/run/kopflet-e2e-ds", True),
                                              ("/var/lib/x", True), ("/var/lib/xy", False)])
def test_on_shared_mount(path: str, shared: bool) -> None:
    assert guide.on_shared_mount(MOUNTINFO, path) is shared


def test_mounts_at_or_below() -> None:
    assert guide.mounts_at_or_below(MOUNTINFO, "/var/lib/x") == ["/var/lib/x", "/var/lib/x/pods/a b"]
    assert guide.mounts_at_or_below(MOUNTINFO, "/var/lib/x/pods") == ["/var/lib/x/pods/a b"]
    assert guide.mounts_at_or_below(MOUNTINFO, "/var/lib") == ["/var/lib/x", "/var/lib/x/pods/a b"]


def test_the_adapted_manifests_folder_is_not_renamed_by_the_node_name_substitution() -> None:
    """pytest names the folder after the fixture (…/minikube-guide0/manifests): only the guide's words are
    translated, not what a translation put in."""
    machine = dataclasses.replace(MACHINE, manifests="/tmp/pytest-1/minikube-guide0/manifests")
    t = guide.translate(cmd("kubectl apply -f manifests/"), machine)
    assert t.run == "kubectl apply -f /tmp/pytest-1/minikube-guide0/manifests/"
