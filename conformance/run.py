"""One pass on the real stack: the selection (dry runs of e2e.test), then per agent: start it as the node,
wait for the Node to be Ready, run ginkgo, clean up the suite's namespaces while the agent can still stop
their pods, stop it, and leave the runtime empty for the next agent.

Synchronous and in threads where it waits: this is a driver, like the benchmarks, not agent code.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.exceptions import ApiException

from bench import cluster
from bench.agents import Agent, wait_until
from conformance import report, selection
from devstack import stack
from devstack.layout import Layout

E2E_RUN_LABEL = "e2e-run"  # on every namespace the e2e framework creates (framework.CreateTestingNS)
CLEANUP_TIMEOUT = 600
# Linux caps one argument at 128 KiB (MAX_ARG_STRLEN); the serial pass's exact focus is ~50 KiB.
MAX_FOCUS = 120 * 1024


class ConformanceError(Exception):
    pass


def tools(layout: Layout) -> tuple[Path, Path]:
    """e2e.test and ginkgo from devstack/build-binaries.sh --e2e."""
    e2e, ginkgo = layout.bin_dir / "e2e.test", layout.bin_dir / "ginkgo"
    missing = [p.name for p in (e2e, ginkgo) if not os.access(p, os.X_OK)]
    if missing:
        raise ConformanceError(f"{', '.join(missing)} not built: run `bash devstack/build-binaries.sh --e2e`")
    return e2e, ginkgo


def tool_versions(e2e: Path, ginkgo: Path) -> dict[str, str]:
    def first_line(argv: list[str]) -> str:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.strip()
        return out.splitlines()[0] if out else "?"

    return {"e2e.test": first_line([str(e2e), "--version"]),
            "ginkgo": first_line([str(ginkgo), "version"]).removeprefix("Ginkgo Version ")}


# ------------------------------------------------------------------------------------------ selection

def dry_run(e2e: Path, workdir: Path, name: str, focus: str = "", skip: str = "") -> list[selection.Spec]:
    """The specs e2e.test would run with this focus/skip (all of them without), from a dry run's JSON report.

    No cluster is contacted: a dry run walks the spec tree and reports what it would run as passed.
    """
    report = workdir / f"{name}.json"
    argv = [str(e2e), "--ginkgo.dry-run", "--ginkgo.no-color", f"--ginkgo.json-report={report}",
            "--provider=skeleton"]
    argv += [f"--ginkgo.focus={focus}"] if focus else []
    argv += [f"--ginkgo.skip={skip}"] if skip else []
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, timeout=600).returncode
    if code != 0 or not report.exists():
        raise ConformanceError(f"the dry run of e2e.test failed (exit {code}); see {log}")
    data = json.loads(report.read_text())
    if focus or skip:  # a dry run reports what it would run as passed and what it filtered out as skipped
        for suite in data:
            suite["SpecReports"] = [r for r in suite.get("SpecReports") or [] if r.get("State") == "passed"]
    return selection.specs_from_ginkgo_json(data)


def gate_sources(layout: Layout) -> list[str]:
    """The pinned release's feature gate files, from the Go module cache the e2e build filled."""
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    root = Path(modcache or Path.home() / "go" / "pkg" / "mod")
    v = layout.versions
    paths = [root / f.format(staging=v["KUBERNETES_STAGING_VERSION"], kubernetes=v["KUBERNETES_VERSION"])
             for f in selection.GATE_FILES]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ConformanceError(f"feature gate sources not in the Go module cache ({missing[0]} ...): "
                               "run `bash devstack/build-binaries.sh --e2e`")
    return [p.read_text() for p in paths]


def kubernetes_minor(layout: Layout) -> int:
    return int(layout.versions["KUBERNETES_VERSION"].removeprefix("v").split(".")[1])


def plan(pass_: selection.Pass, layout: Layout, e2e: Path, workdir: Path, focus: str | None) -> dict[str, Any]:
    """The pass's selection as run: focus, skip, processes, the rule in words and the dry run's count."""
    sel: dict[str, Any] = {"nodes": pass_.nodes, "rule": pass_.rule, "focus": pass_.focus, "skip": pass_.skip}
    if focus:
        sel.update(focus=focus, rule="focused rerun")
    elif not pass_.focus:  # computed: the serial pass
        gates = selection.merge_gates(gate_sources(layout), kubernetes_minor(layout))
        chosen = selection.serial_selection(dry_run(e2e, workdir, "dry-run-all"), gates)
        (workdir / f"{pass_.name}-focus.txt").write_text("".join(f"{s.text}\n" for s, _ in chosen))
        sel.update(focus=selection.exact_focus(s.text for s, _ in chosen), focus_file=f"{pass_.name}-focus.txt")
        if pass_.serial_nodes is not None:
            serial, others = selection.split_serial(s.text for s, _ in chosen)
            sel["parts"] = [{"name": name, "nodes": nodes, "focus": selection.exact_focus(texts)}
                            for name, nodes, texts in (("parallel", pass_.nodes, others),
                                                       ("serial", pass_.serial_nodes, serial)) if texts]
    elif pass_.serial_nodes is not None:  # a regex focus: its [Serial] specs by name, after the others
        specs = dry_run(e2e, workdir, f"dry-run-{pass_.name}-all", pass_.focus, pass_.skip)
        serial, _ = selection.split_serial(s.text for s in specs)
        parallel_skip = "|".join(p for p in (pass_.skip, selection.go_regexp_quote(selection.SERIAL_MARK)) if p)
        sel["parts"] = [{"name": "parallel", "nodes": pass_.nodes, "focus": pass_.focus, "skip": parallel_skip}]
        if serial:
            sel["parts"].append({"name": "serial", "nodes": pass_.serial_nodes,
                                 "focus": selection.exact_focus(serial)})
    if len(sel["focus"]) > MAX_FOCUS:
        raise ConformanceError(f"the focus is {len(sel['focus'])} bytes, more than one argument may carry")
    sel["count"] = len(dry_run(e2e, workdir, f"dry-run-{pass_.name}", sel["focus"], sel["skip"]))
    return sel


# ------------------------------------------------------------------------------------------ one agent

def e2e_args(layout: Layout, agent: Agent, report_dir: Path) -> list[str]:
    """The framework's flags for this stack (test/e2e/framework/test_context.go): no cloud, the admin
    kubeconfig, and what some specs need to know about the node and its agent."""
    return ["--provider=skeleton", f"--kubeconfig={agent.admin_kubeconfig}", f"--report-dir={report_dir}",
            f"--kubectl-path={layout.bin_dir / 'kubectl'}", f"--kubelet-root-dir={agent.pod_dirs.parent}",
            f"--container-runtime-endpoint={layout.runtime_endpoint}", f"--dns-domain={layout.cluster_domain}",
            "--node-os-distro=debian"]


def ginkgo_argv(ginkgo: Path, e2e: Path, sel: dict[str, Any], outdir: Path, junit: str, timeout: str,
                args: Sequence[str]) -> list[str]:
    argv = [str(ginkgo), f"--nodes={sel['nodes']}", f"--focus={sel['focus']}"]
    argv += [f"--skip={sel['skip']}"] if sel.get("skip") else []
    # --junit-report is relative to --output-dir (ginkgo joins even an absolute path to the suite's directory).
    return [*argv, f"--output-dir={outdir}", f"--junit-report={junit}", f"--timeout={timeout}", "--no-color",
            str(e2e), "--", *args]


def parse_duration(text: str) -> float:
    """A Go duration such as 3h, 90m or 1h30m, in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    total, number = 0.0, ""
    for ch in text:
        if ch.isdigit() or ch == ".":
            number += ch
        elif ch in units and number:
            total, number = total + float(number) * units[ch], ""
        else:
            raise ValueError(f"not a duration: {text!r}")
    if number or not text:
        raise ValueError(f"not a duration: {text!r}")
    return total


def run_ginkgo(argv: list[str], log: Path, timeout: float, append: bool = False) -> int:
    """ginkgo's output to its log and to our stdout as it comes (a pass takes an hour or more)."""
    with log.open("ab" if append else "wb") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        stream = proc.stdout
        assert stream is not None
        # ginkgo enforces --timeout itself; this is the backstop should it hang past it.
        backstop = threading.Timer(timeout, proc.kill)
        backstop.start()
        try:
            for chunk in iter(lambda: stream.read1(65536), b""):
                out.write(chunk)
                out.flush()
                with contextlib.suppress(OSError):
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.buffer.flush()
            return proc.wait()
        finally:
            backstop.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def e2e_namespaces(core: kubernetes.client.CoreV1Api) -> list[str]:
    return [ns.metadata.name for ns in core.list_namespace(label_selector=E2E_RUN_LABEL, _request_timeout=30).items]


def delete_e2e_namespaces(core: kubernetes.client.CoreV1Api, agent: Agent | None, timeout: float) -> list[str]:
    """Delete what the suite left; with the agent running, wait while it stops the pods. Returns what is left."""
    names = e2e_namespaces(core)
    for name in names:
        with contextlib.suppress(ApiException):
            core.delete_namespace(name, _request_timeout=30)
    if names and agent is not None:
        with contextlib.suppress(RuntimeError):
            wait_until(lambda: not e2e_namespaces(core), timeout, "the e2e namespaces to be gone", agent)
    return e2e_namespaces(core)


def force_delete_pods(core: kubernetes.client.CoreV1Api, namespaces: Sequence[str]) -> int:
    """With no agent on the node nobody confirms a pod's end: remove the objects outright (grace 0)."""
    count = 0
    for ns in namespaces:
        for pod in core.list_namespaced_pod(ns, _request_timeout=30).items:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0, _request_timeout=30)
                count += 1
    return count


def clean_node(core: kubernetes.client.CoreV1Api, layout: Layout, agent: Agent | None) -> dict[str, Any]:
    """Leave no e2e namespace, pod object or sandbox behind, so the next agent starts on a clean node."""
    try:
        left = delete_e2e_namespaces(core, agent, CLEANUP_TIMEOUT) if agent is not None else e2e_namespaces(core)
    finally:
        if agent is not None:
            agent.stop()
    result: dict[str, Any] = {"namespaces_left_while_agent_ran": len(left)} if agent is not None else {}
    if agent is not None and agent.owns_cluster:
        return result  # the cluster is gone, with its objects and its pods (kubeadm reset)
    if left:
        result["pods_force_deleted"] = force_delete_pods(core, left)
        delete_e2e_namespaces(core, None, 0)
        with contextlib.suppress(RuntimeError):
            wait_until(lambda: not e2e_namespaces(core), 120, "the e2e namespaces to be gone")
        result["namespaces_left"] = len(e2e_namespaces(core))
    stack.remove_all_pods(layout)
    return result


def run_agent(agent: Agent, layout: Layout, e2e: Path, ginkgo: Path, sel: dict[str, Any], outdir: Path,
              pass_name: str, timeout: str) -> dict[str, Any]:
    """The pass under one agent; what happened, for the run's metadata."""
    junit = f"{pass_name}-{agent.name}.xml"
    result: dict[str, Any] = {"junit": junit, "log": f"{pass_name}-{agent.name}.log", "agent_log": str(agent.log),
                              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    core = None if agent.owns_cluster else cluster.api(agent.admin_kubeconfig)
    if core is not None:
        clean_node(core, layout, None)  # a previous run's leftovers
    t0 = time.monotonic()
    since = time.time()
    try:
        agent.start()  # a kubeadm cluster: up with its add-ons when this returns
        core = core or cluster.api(agent.admin_kubeconfig)
        wait_until(lambda: cluster.node_ready_since(core, agent.node_name, since), 180, "the node to be Ready",
                   agent)
        result["version"] = agent.version()
        args = e2e_args(layout, agent, outdir / f"{pass_name}-{agent.name}-report")
        result["e2e_args"] = args
        parts = sel.get("parts") or [{"name": "", "nodes": sel["nodes"], "focus": sel["focus"]}]
        codes, reports = [], []
        for index, part in enumerate(parts):
            part_junit = junit if len(parts) == 1 else f"{pass_name}-{agent.name}-{part['name']}.xml"
            argv = ginkgo_argv(ginkgo, e2e, {**sel, **part}, outdir, part_junit, timeout, args)
            codes.append(run_ginkgo(argv, outdir / result["log"], parse_duration(timeout) + 900, append=index > 0))
            reports.append(outdir / part_junit)
        if len(parts) > 1 and all(r.exists() for r in reports):
            (outdir / junit).write_text(report.merge_junit([r.read_text() for r in reports]))
        code = next((c for c in codes if c), 0)
        result["ginkgo_exit"] = code
        if not (outdir / junit).exists():
            result["error"] = f"ginkgo exited {code} without a JUnit report (see {outdir / result['log']})"
        elif not agent.alive():
            result["error"] = f"{agent.name} exited during the run (see {agent.log})"
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if core is not None:
            result["cleanup"] = clean_node(core, layout, agent)
        else:  # it never came up
            agent.stop()
        result["seconds"] = round(time.monotonic() - t0, 1)
    return result
