"""``python -m conformance [run] [--pass node,serial|cluster] [--agents kopflet,kubelet] [--focus RE] [--nodes N]``
and ``python -m conformance report``.

`make conformance` runs this inside the dev stack (``python -m devstack run -- ...``): for each pass, upstream's
e2e specs with kopflet as the node's agent, then the same specs with the upstream kubelet of the same
release. `make conformance-cluster` runs the cluster pass (every `[Conformance]` spec) on a kubeadm cluster made
for each agent in turn. A full pass (the pass's own selection) is published: its JUnit files and metadata under
docs/conformance/, docs/conformance.md rewritten from every published pass, and the README's totals; a run of one
agent replaces that agent's half and keeps the other's. A focused rerun writes its report into its run directory
(.devstack/conformance/<stamp>-<pass>/) only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.agents import agents_by_name, kubeadm_nodes, other_agents_running, versions
from conformance import report, run, selection
from devstack import cluster as devcluster
from devstack.layout import REPO, Layout
from devstack.processes import StackError

DOCS = REPO / "docs" / "conformance"
REPORT = REPO / "docs" / "conformance.md"
KNOWN_LIMITS = Path(__file__).with_name("known-limits.yaml")
AGENT_NAMES = (report.KOPFLET, report.KUBELET)
DEFAULT_AGENTS = ",".join(AGENT_NAMES)
TIMEOUTS = {"node": "3h", "serial": "6h", "cluster": "4h"}


def commit() -> str:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    # What a run publishes itself (the report, its JUnit files, the README's totals) does not make the tree dirty:
    # the serial pass starts after the node pass has published.
    published = [f":(exclude){p.relative_to(REPO)}" for p in (DOCS, REPORT, REPO / "README.md")]
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *published], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    return f"{rev.stdout.strip() or '?'}{'-dirty' if dirty else ''}"


def shared_args(args: list[str]) -> list[str]:
    """e2e.test's arguments as the report shows them: the two that differ between agents as placeholders."""
    placeholders = {"--report-dir": "<run dir>/<pass>-<agent>-report", "--kubelet-root-dir": "<the agent's root dir>"}
    out = []
    for arg in args:
        flag = arg.split("=", 1)[0]
        out.append(f"{flag}={placeholders[flag]}" if flag in placeholders else arg)
    return out


def load_passes(directory: Path) -> list[report.PassResult]:
    """Every pass with metadata in `directory` (<pass>.json beside <pass>-<agent>.xml), in PASSES order."""
    passes = []
    for name in selection.PASSES:
        meta_path = directory / f"{name}.json"
        if not meta_path.exists():
            continue
        meta = json.loads(meta_path.read_text())
        suites = {}
        for agent, info in meta.get("agents", {}).items():
            junit = directory / info.get("junit", f"{name}-{agent}.xml")
            if junit.exists():
                suites[agent] = report.parse_junit(junit.read_text())
        passes.append(report.PassResult(name, meta, suites))
    return passes


def write_report(directory: Path, out: Path, readme: Path | None) -> None:
    passes = load_passes(directory)
    limits = report.parse_known_limits(KNOWN_LIMITS.read_text())
    out.write_text(report.markdown(passes, limits))
    print(f"conformance: wrote {out}", file=sys.stderr)
    if readme is not None and passes:
        text = readme.read_text()
        updated = report.replace_readme_block(text, report.readme_block(passes))
        if updated != text:
            readme.write_text(updated)
            print("conformance: README conformance section updated", file=sys.stderr)


def with_published_agents(name: str, meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` plus the published runs of the agents it did not run (their JUnit files stay as published), so
    the two halves of a pass can run apart (each takes an hour or more). Each agent's entry keeps its own date,
    and kopflet's commit is the pass's commit."""
    path = DOCS / f"{name}.json"
    missing = [a for a in AGENT_NAMES if a not in meta["agents"]]
    if not missing or not path.exists():
        return meta
    published = json.loads(path.read_text())
    if published.get("selection", {}).get("cluster_nodes", 1) != meta.get("selection", {}).get("cluster_nodes", 1):
        return meta  # another cluster shape: the halves would not compare
    merged = json.loads(json.dumps(meta))
    for agent in missing:
        if agent not in published.get("agents", {}):
            continue
        entry = dict(published["agents"][agent])
        entry.setdefault("date", published.get("date"))
        entry["published"] = True
        merged["agents"][agent] = entry
        merged["versions"][agent] = published.get("versions", {}).get(agent, "?")
        if agent == report.KOPFLET:
            merged["commit"] = published.get("commit", "?")
    order = [a for a in AGENT_NAMES if a in merged["agents"]]
    merged["agents"] = {a: merged["agents"][a] for a in order}
    return merged


def publish(rundir: Path, name: str, meta: dict[str, Any]) -> None:
    """A full pass into docs/conformance/ (JUnit trimmed to the selected specs), then the report and README."""
    DOCS.mkdir(parents=True, exist_ok=True)
    published = json.loads(json.dumps(meta))
    for info in published["agents"].values():
        if info.pop("published", False):
            continue  # carried over from an earlier published run: its JUnit file is in place
        source = rundir / info["junit"]
        if source.exists():
            (DOCS / info["junit"]).write_text(report.trim_junit(source.read_text()))
        else:
            (DOCS / info["junit"]).unlink(missing_ok=True)
        info.pop("agent_log", None)
    sel = published["selection"]
    if sel.get("focus_file"):
        (DOCS / sel["focus_file"]).write_text((rundir / sel["focus_file"]).read_text())
        sel["focus_file"] = f"docs/conformance/{sel['focus_file']}"
        sel.pop("focus", None)  # tens of kilobytes of escaped names; the file lists them
        for part in sel.get("parts") or ():
            part.pop("focus", None)
    (DOCS / f"{name}.json").write_text(json.dumps(published, indent=1) + "\n")
    write_report(DOCS, REPORT, REPO / "README.md")


def run_pass(args: argparse.Namespace, layout: Layout, name: str, agent_names: list[str]) -> bool:
    """One pass under each agent in turn; True when every agent's run completed (whatever the specs did)."""
    pass_ = selection.PASSES[name]
    e2e, ginkgo = run.tools(layout)
    now = datetime.datetime.now(datetime.UTC)
    rundir = layout.root / "conformance" / f"{now:%Y%m%d-%H%M%S}-{name}"
    rundir.mkdir(parents=True, exist_ok=True)
    sel = run.plan(pass_, layout, e2e, rundir, args.focus)
    if args.nodes:
        sel["nodes"] = args.nodes
        for part in sel.get("parts") or ():
            if part["name"] == "parallel":  # the [Serial] specs stay one at a time
                part["nodes"] = args.nodes
    print(f"conformance: {pass_.title}: {sel['count']} specs, ginkgo {sel['nodes']} process(es); in {rundir}",
          file=sys.stderr)
    agents = kubeadm_nodes(layout, rundir, args.cluster_nodes) if pass_.cluster else agents_by_name(layout, rundir)
    chosen = {a: agents[a] for a in agent_names}
    meta: dict[str, Any] = {"pass": name, "title": pass_.title, "date": now.strftime("%Y-%m-%d %H:%M UTC"),
                            "commit": commit(), "versions": versions(layout, chosen) | run.tool_versions(e2e, ginkgo),
                            "selection": sel, "agents": {}}
    if pass_.setup:
        meta["setup"] = pass_.setup + (" A second node of the same agent joined each cluster (`kubeadm join`; "
                                       "`python -m devstack cluster join`)." if args.cluster_nodes == 2 else "")
        sel["cluster_nodes"] = args.cluster_nodes
    for agent_name, agent in chosen.items():
        print(f"conformance: {pass_.title} under {agent_name}", file=sys.stderr)
        # The tree as this agent starts (a pass takes an hour per agent): what kopflet actually ran.
        meta["versions"][agent_name] = agent.version()
        if agent_name == "kopflet":
            meta["commit"] = commit()
        result = run.run_agent(agent, layout, e2e, ginkgo, sel, rundir, name, args.timeout or TIMEOUTS[name])
        meta["agents"][agent_name] = result
        meta.setdefault("e2e_args", shared_args(result.get("e2e_args", [])))
        (rundir / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
        if result.get("error"):
            print(f"conformance: {agent_name}: {result['error']}", file=sys.stderr)
    if not args.focus:  # a full run: published, beside the other agent's published run when only one ran
        publish(rundir, name, with_published_agents(name, meta))
    else:
        write_report(rundir, rundir / "conformance.md", None)
    return not any(r.get("error") for r in meta["agents"].values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    p_run = sub.add_parser("run", help="run the specs (the default)")
    for p, defaults in ((parser, True), (p_run, False)):
        # Defaults on the main parser only: the subcommand must not reset options given before `run`.
        def default(value: str | None, defaults: bool = defaults) -> str | None:
            return value if defaults else argparse.SUPPRESS

        p.add_argument("--pass", dest="passes", default=default(",".join(selection.STACK_PASSES)),
                       help="passes to run, in order: node (the [NodeConformance] selection, 4 processes), serial "
                            "(default-on feature-gated and [Serial] node specs, one at a time), both on the dev "
                            "stack (default: both); or cluster (every [Conformance] spec but the [Disruptive] ones, "
                            "on a kubeadm cluster made for each agent: `make conformance-cluster`, with the dev "
                            "stack down)"),
        p.add_argument("--agents", default=default(DEFAULT_AGENTS), help="agents, in order (default: kopflet,kubelet)")
        p.add_argument("--focus", default=default(None), help="a ginkgo focus regex in place of the pass's selection "
                                                              "(its skip still applies): a focused rerun")
        p.add_argument("--nodes", type=int, default=default(None), help="ginkgo processes (default: the pass's)")
        p.add_argument("--cluster-nodes", type=int, choices=(1, 2), default=default(1),  # type: ignore[arg-type]
                       help="the cluster pass's nodes: 1, or 2 (a second node of the same agent joined with kubeadm "
                            "join, in namespaces of its own: what the specs that need two nodes ask for)")
        p.add_argument("--timeout", default=default(None),
                       help="ginkgo's suite timeout, a Go duration (default: node 3h, serial 6h)")
    p_report = sub.add_parser("report", help="rewrite docs/conformance.md and the README from docs/conformance/")
    p_report.add_argument("--dir", type=Path, default=DOCS, help="where <pass>.json and the JUnit files are")
    p_report.add_argument("--out", type=Path, default=REPORT)
    args = parser.parse_args(argv)
    if args.command == "report":
        if not load_passes(args.dir):
            print(f"conformance: no pass stored in {args.dir}; `make conformance` runs them", file=sys.stderr)
            return 1
        write_report(args.dir, args.out, REPO / "README.md" if args.dir == DOCS else None)
        return 0

    passes, agent_names = args.passes.split(","), args.agents.split(",")
    unknown = [p for p in passes if p not in selection.PASSES] + [a for a in agent_names if a not in AGENT_NAMES]
    if unknown:
        parser.error(f"unknown pass or agent: {', '.join(unknown)}")
    if len({selection.PASSES[p].cluster for p in passes}) > 1:
        parser.error("the cluster pass runs without the dev stack: run it on its own (make conformance-cluster)")
    try:
        run.parse_duration(args.timeout or "1h")
    except ValueError as exc:
        parser.error(str(exc))
    busy = other_agents_running()
    if busy:
        print("conformance: another node agent runs on this node; stop it first:\n  " + "\n  ".join(busy),
              file=sys.stderr)
        return 2
    layout = Layout.from_env()
    if report.KUBELET in agent_names and not (layout.bin_dir / "kubelet").exists():
        print("conformance: the upstream kubelet is not built: run `bash devstack/build-binaries.sh --kubelet`",
              file=sys.stderr)
        return 2
    try:
        if selection.PASSES[passes[0]].cluster:
            devcluster.check_no_dev_stack(layout)
            if devcluster.is_up(layout):
                raise run.ConformanceError("a kubeadm cluster is up; each agent gets its own: make cluster-down first")
        completed = [run_pass(args, layout, name, agent_names) for name in passes]
    except (run.ConformanceError, StackError) as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 2
    return 0 if all(completed) else 1


if __name__ == "__main__":
    sys.exit(main())
