"""``python -m bench [run] [--quick] [--agents kopflet,kubelet]`` and ``python -m bench report FILE.json``.

`make bench` runs this inside the dev stack (``python -m devstack run -- ...``): each agent alone on the node
with the same workloads, and the runtime floor before each agent and after the last. Results go to
bench/results/<date>.json with a markdown summary and a PNG plot beside it; a full run also refreshes the
README's benchmark section.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import sys
import traceback
from pathlib import Path

from bench import agents as agents_mod
from bench import cluster, floor, host, report
from bench.agents import other_agents_running, versions
from bench.run import Plan, Run
from devstack.layout import REPO, Layout

RESULTS = REPO / "bench" / "results"
README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"


def readme_block(results: dict, md_name: str) -> str:
    """The compact summary the README shows: start latency, footprint and API cost per agent."""
    s = results["summary"]
    lines = [README_START, "",
             f"Latest full run: {results['date']} on {results['machine']['cores']} cores "
             f"({results['machine']['cpu']}); details in [bench/results/{md_name}](bench/results/{md_name}).", "",
             "| | pod start p50 / p99 (ms) | burst 110 per-pod p50 / p99 (ms) | exit→status p50 (ms) "
             "| delete p50 (ms) | idle RSS (MiB) | API requests per pod |", "|---|---|---|---|---|---|---|"]

    def ms(summary: dict, key: str) -> str:
        return f"{summary[key] * 1000:.0f}" if key in summary else "-"

    def floor_row(label: str, f: dict) -> str:
        b = f["bursts"].get("110", {}).get("per_pod", {})
        return (f"| {label} | {ms(f['start'], 'p50')} / {ms(f['start'], 'p99')} "
                f"| {ms(b, 'p50')} / {ms(b, 'p99')} | | | | |")

    if s["floor"] and not any("floor" in a for a in s["agents"].values()):
        lines.append(floor_row("runtime floor (CRI)", s["floor"]))
    for name, a in s["agents"].items():
        if "floor" in a:  # the floor runs right before and after this agent
            lines.append(floor_row(f"runtime floor (CRI), around {name}", a["floor"]))
        if "start" not in a:
            lines.append(f"| {name} | did not complete: {a.get('error', '?')[:80]} | | | | | |")
            continue
        b = a.get("bursts", {}).get("110", {}).get("per_pod", {})
        lines.append(f"| {name} | {ms(a['start'], 'p50')} / {ms(a['start'], 'p99')} "
                     f"| {ms(b, 'p50')} / {ms(b, 'p99')} "
                     f"| {ms(a.get('exit_to_status', {}), 'p50')} | {ms(a['delete'], 'p50')} "
                     f"| {a['footprint'].get('idle', {}).get('rss_mib', '-')} "
                     f"| {a.get('api', {}).get('per_pod_total', '-')} |")
    cgroups = report.cgroup_lines(s["agents"])
    if cgroups:
        lines += ["", cgroups[0]]
    lines += ["", README_END]
    return "\n".join(lines)


def write_outputs(results: dict, stem: Path, update_readme: bool) -> None:
    results["summary"] = report.summarize(results)
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    stem.with_suffix(".md").write_text(report.markdown(results))
    report.plot(results, stem.with_suffix(".png"))
    print(f"bench: wrote {stem}.json, .md and .png", file=sys.stderr)
    if update_readme:
        readme = REPO / "README.md"
        text = readme.read_text()
        pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.S)
        if pattern.search(text):
            block = readme_block(results, stem.with_suffix(".md").name)
            readme.write_text(pattern.sub(lambda _: block, text))
            print("bench: README benchmark section updated", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    layout = Layout.from_env()
    busy = other_agents_running()
    if busy:
        print("bench: another node agent runs on this node; stop it first:\n  " + "\n  ".join(busy), file=sys.stderr)
        return 2
    plan = Plan.quick() if args.quick else Plan()
    if args.soak_cycles is not None:
        plan = dataclasses.replace(plan, soak_cycles=args.soak_cycles)
    workdir = layout.root / "bench"
    available = agents_mod.agents_by_name(layout, workdir)
    chosen = {name: available[name] for name in args.agents.split(",")}
    now = datetime.datetime.now(datetime.UTC)
    results: dict = {"date": now.strftime("%Y-%m-%d %H:%M UTC"), "machine": host.machine(),
                     "versions": versions(layout, chosen), "plan": dataclasses.asdict(plan), "agents": {}}
    core = cluster.api(layout.admin_kubeconfig)
    for name in cluster.remove_leftover_namespaces(core, "bench-"):
        print(f"bench: removed namespace {name} and its pods, left by an interrupted run", file=sys.stderr)
    # The floor before each agent and once after the last: each agent is compared with the two floors around it.
    # The VM's speed drifts over minutes (a 110-pod floor burst took 10.7 s and 14.9 s an hour apart), and one
    # floor at the start sat half an hour before the second agent's bursts.
    floors: list[dict] = []
    brackets: dict[str, list[int]] = {}
    for name, agent in chosen.items():
        floors.append(_floor(layout, plan, before=name))
        brackets[name] = [len(floors) - 1, len(floors)]
        print(f"bench: {name}", file=sys.stderr)
        r = Run(agent, plan, core, layout.audit_log)
        try:
            results["agents"][name] = r.run()
        except Exception as exc:
            traceback.print_exc()
            results["agents"][name] = {**r.results, "error": f"{type(exc).__name__}: {exc}"}
    floors.append(_floor(layout, plan, before=None))
    results["floors"], results["floor_brackets"] = floors, brackets
    results["floor"] = report.merge_floors(floors)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / (now.strftime("%Y-%m-%d") + ("-quick" if args.quick else ""))
    if not args.quick and stem.with_suffix(".json").exists():
        stem = stem.with_name(stem.name + now.strftime("-%H%M"))  # a second full run that day keeps the first
    write_outputs(results, stem, update_readme=not args.quick)
    return 1 if any("error" in a for a in results["agents"].values()) else 0


def _floor(layout: Layout, plan: Plan, *, before: str | None) -> dict:
    """One floor run; a failure is recorded, not raised (the agents' results around it must still be written)."""
    when = f"before {before}" if before else "after the agents"
    print(f"bench: runtime floor, {when} ({plan.sequential} sequential, bursts {plan.bursts})", file=sys.stderr)
    try:
        return floor.measure(layout.runtime_endpoint, plan.sequential, plan.bursts)
    except Exception as exc:
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    p_run = sub.add_parser("run", help="measure (the default)")
    for p in (parser, p_run):
        p.add_argument("--quick", action="store_true", help="a few samples of each, to check the harness")
        p.add_argument("--agents", default="kopflet,kubelet", help="which agents, in order (default: both)")
        p.add_argument("--soak-cycles", type=int, default=None, metavar="N",
                       help="pod cycles in the soak (default: 2000, 40 with --quick; 0 skips it)")
    p_report = sub.add_parser("report", help="rewrite the markdown and plot of a results file")
    p_report.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.command == "report":
        results = json.loads(args.file.read_text())
        write_outputs(results, args.file.with_suffix(""), update_readme=False)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
