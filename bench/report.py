"""From raw results to what a reader compares: summaries with ratios, a markdown page and a PNG plot.

`summarize` and `markdown` are pure (the JSON carries their output, so the numbers in the README, the
markdown and the JSON are the same); `plot` draws with matplotlib's non-interactive backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import soak
from bench.stats import ratios, summary

REFERENCE = "kubelet"


def cgroup_lines(agents: Mapping[str, Any]) -> list[str]:
    """Each agent's cgroup settings as its /configz gave them, and whether they match."""
    shown = {name: agent["cgroups"] for name, agent in agents.items() if "cgroups" in agent}
    if not shown:
        return []

    def value(v: Any) -> str:
        if isinstance(v, list):
            return "[" + ", ".join(v) + "]"
        return '""' if v == "" else str(v).lower() if isinstance(v, bool) else str(v)

    def spell(settings: Mapping[str, Any]) -> str:
        return ", ".join(f"{k} {value(v)}" for k, v in settings.items())

    values = list(shown.values())
    if len(values) > 1 and all(v == values[0] for v in values):
        return [f"Cgroup settings, the same for {' and '.join(shown)} (read from each agent's /configz): "
                f"{spell(values[0])}.", ""]
    return ["Cgroup settings (read from each agent's /configz): "
            + "; ".join(f"{name}: {spell(v)}" for name, v in shown.items()) + ".", ""]


def _agent_summary(raw: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"version": raw.get("version", "")}
    if "cgroups" in raw:
        out["cgroups"] = raw["cgroups"]
    if "error" in raw:
        out["error"] = raw["error"]
    if "sequential" in raw:
        out["start"] = summary(raw["sequential"]["start"])
        out["delete"] = summary(raw["sequential"]["delete"])
    if "exit_to_status" in raw:
        out["exit_to_status"] = summary(raw["exit_to_status"])
    if "bursts" in raw:
        out["bursts"] = {
            size: {"per_pod": summary(b["per_pod"]), "all_running": round(b["all_running"], 3),
                   "all_deleted": round(b.get("all_deleted", 0.0), 3)}
            for size, b in raw["bursts"].items()}
    if "churn" in raw:
        c = raw["churn"]
        out["churn"] = {"cycles": c["cycles"], "parallel": c["parallel"], "seconds": c["seconds"],
                        "failures": len(c["failures"]), "start": summary(c["start"]), "leftovers": c["leftovers"],
                        "leftovers_at_once": c.get("leftovers_at_once", {}), "rss_after_mib": c["rss_after_mib"],
                        "leftovers_before": raw.get("leftovers_before"),
                        "rss_after_gc_mib": c.get("rss_after_gc_mib", c["rss_after_mib"])}
    if "soak" in raw:
        out["soak"] = soak.summarize(raw["soak"])
    footprint: dict[str, Any] = {}
    if "idle" in raw:
        footprint["idle"] = raw["idle"]
    bursts = raw.get("bursts", {})
    if bursts:
        largest = max(bursts, key=int)
        if "held" in bursts[largest]:
            footprint[f"running_{largest}"] = bursts[largest]["held"]
        footprint[f"burst_{largest}"] = {"peak_rss_mib": bursts[largest]["peak_rss_mib"],
                                         "cpu_seconds": bursts[largest]["cpu_seconds"]}
    out["footprint"] = footprint
    if "api_per_pod" in raw:
        out["api"] = {"per_pod": raw["api_per_pod"]["net_per_pod"],
                      "per_pod_total": round(sum(raw["api_per_pod"]["net_per_pod"].values()), 1),
                      "idle_per_minute": raw["api_idle"]["per_minute"],
                      "idle_per_minute_total": round(sum(raw["api_idle"]["per_minute"].values()), 1),
                      "user_agents": raw["api_per_pod"]["user_agents"]}
        if "api_lost" in raw:
            out["api"]["lost"] = raw["api_lost"]
    return out


def merge_floors(measures: Sequence[Mapping[str, Any]]) -> dict:
    """Several floor runs as one: every sample of each set together, and the mean of the bursts' all-started
    times. A burst size missing from any run is left out (its floor would lean on some runs only)."""
    measures = [m for m in measures if "start" in m]  # a run that failed ({"error": ...}) adds nothing
    if not measures:
        return {}
    sizes = [size for size in measures[0].get("bursts", {}) if all(size in m.get("bursts", {}) for m in measures)]
    return {"start": [x for m in measures for x in m["start"]], "stop": [x for m in measures for x in m["stop"]],
            "bursts": {size: {"per_pod": [x for m in measures for x in m["bursts"][size]["per_pod"]],
                              "all_started": sum(m["bursts"][size]["all_started"] for m in measures) / len(measures)}
                       for size in sizes}}


def _floor_summary(floor: Mapping[str, Any]) -> dict[str, Any]:
    if "start" not in floor:
        return {}
    return {"start": summary(floor["start"]), "stop": summary(floor["stop"]),
            "bursts": {size: {"per_pod": summary(b["per_pod"]), "all_started": round(b["all_started"], 3)}
                       for size, b in floor["bursts"].items()}}


def summarize(results: Mapping[str, Any]) -> dict[str, Any]:
    """Percentiles for every latency set, with each agent's ratios to the floor and to the upstream kubelet."""
    out: dict[str, Any] = {"floor": _floor_summary(results.get("floor", {})), "agents": {}}
    floors, brackets = results.get("floors", []), results.get("floor_brackets", {})
    for name, raw in results.get("agents", {}).items():
        out["agents"][name] = _agent_summary(raw)
    reference = out["agents"].get(REFERENCE, {})
    for name, agent in out["agents"].items():
        if "start" not in agent:
            continue
        # Its own floor: the runs right before and after it (reports before 2026-11-29 measured one floor first).
        own = out["floor"]
        if name in brackets and all(0 <= i < len(floors) for i in brackets[name]):
            around = _floor_summary(merge_floors([floors[i] for i in brackets[name]]))
            if around:
                own = agent["floor"] = around
        if own:
            agent["start_vs_floor"] = ratios(agent["start"], own["start"])
            for size, burst in agent.get("bursts", {}).items():
                if size in own["bursts"]:
                    burst["per_pod_vs_floor"] = ratios(burst["per_pod"], own["bursts"][size]["per_pod"])
        if name != REFERENCE and "start" in reference:
            agent["vs_kubelet"] = {
                "start": ratios(agent["start"], reference["start"]),
                "delete": ratios(agent["delete"], reference["delete"]),
                "exit_to_status": ratios(agent.get("exit_to_status", {}), reference.get("exit_to_status", {})),
                "bursts": {size: ratios(b["per_pod"], reference["bursts"][size]["per_pod"])
                           for size, b in agent.get("bursts", {}).items() if size in reference.get("bursts", {})}}
    return out


def _ms(value: Any) -> str:
    return f"{value * 1000:.0f}" if isinstance(value, int | float) else "-"


def _counts(counts: Mapping[str, int]) -> str:
    """Non-zero counts by name, or "none"."""
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "none"


def _row(label: str, s: Mapping[str, Any], extra: str = "") -> str:
    return (f"| {label} | {s.get('n', 0)} | {_ms(s.get('p50'))} | {_ms(s.get('p90'))} | {_ms(s.get('p99'))} "
            f"| {_ms(s.get('max'))} | {extra} |")


FLOOR_TEXT = ("The runtime floor is the same pod straight through CRI, with no agent and no apiserver: RunPodSandbox "
              "(its pod cgroup, a log directory and the RuntimeDefault seccomp profile every agent asks for a "
              "sandbox, as upstream's kubelet does whatever the pod says), then CreateContainer and "
              "StartContainer, back to back. Reports before 2026-11-28 19:00 UTC measured a floor without the "
              "seccomp profile (about 15 ms lower on this machine): their floor ratios are not comparable.")

BRACKET_TEXT = ("The floor is measured before each agent and once after the last, and each agent is compared with the "
                "two runs around it (their samples together): the machine's speed drifts over minutes, so a floor "
                "measured once at the start sat half an hour before the second agent's bursts. Reports before "
                "2026-11-29 12:30 UTC measured one floor, first.")


def markdown(results: Mapping[str, Any]) -> str:
    """The summary page: latency tables (milliseconds), footprint, API cost, churn leftovers."""
    s = results["summary"]
    agents: dict[str, Any] = s["agents"]
    lines = [f"# kopflet benchmark, {results['date']}", "",
             f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores, "
             f"{results['machine']['memory_mib']} MiB, kernel {results['machine']['kernel']}, "
             f"cgroup {results['machine']['cgroup']}.  ",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()) + ".  ",
             "Plan: " + ", ".join(f"{k}={v}" for k, v in results["plan"].items()) + ".", ""]
    if REFERENCE in agents:
        lines += [f"The reference is the upstream kubelet built from the apiserver's release "
                  f"({agents[REFERENCE].get('version', '?')}), on the same containerd, with its defaults (API QPS "
                  "50, burst 100) except what this host needs: cgroupDriver cgroupfs, failCgroupV1 false, "
                  "failSwapOn false." + ("" if "error" in agents[REFERENCE] else " It accepted this containerd."), ""]
    lines += cgroup_lines(agents)
    for name, agent in agents.items():
        if "error" in agent:
            lines += [f"**{name} did not complete:** `{agent['error']}`", ""]
    header = ["| what | n | p50 ms | p90 ms | p99 ms | max ms | ratio p50/p99 |", "|---|---|---|---|---|---|---|"]

    def ratio(r: Mapping[str, float] | None) -> str:
        return f"{r.get('p50', '-')}x / {r.get('p99', '-')}x" if r else ""

    lines += ["## Pod start (creation → Running, all containers started; one at a time)", ""]
    if s["floor"]:
        lines += [FLOOR_TEXT, ""]
    bracketed = any("floor" in agent for agent in agents.values())
    if bracketed:
        lines += [BRACKET_TEXT, ""]
    lines += header
    if s["floor"] and not bracketed:
        lines.append(_row("runtime floor (CRI)", s["floor"]["start"]))
    for name, agent in agents.items():
        if "floor" in agent:
            lines.append(_row(f"runtime floor (CRI), around {name}", agent["floor"]["start"]))
        if "start" in agent:
            lines.append(_row(name, agent["start"], "vs floor " + ratio(agent.get("start_vs_floor"))))
    for name, agent in agents.items():
        if "vs_kubelet" in agent:
            lines += ["", f"{name} vs upstream kubelet (p50 / p99): start {ratio(agent['vs_kubelet']['start'])}, "
                          f"delete {ratio(agent['vs_kubelet']['delete'])}, "
                          f"exit→status {ratio(agent['vs_kubelet']['exit_to_status'])}."]
    sizes = sorted({size for a in agents.values() for size in a.get("bursts", {})}, key=int)
    for size in sizes:
        lines += ["", f"## Burst of {size} pods (per-pod creation → Running)", "", *header]
        if size in s["floor"].get("bursts", {}) and not bracketed:
            fb = s["floor"]["bursts"][size]
            lines.append(_row("runtime floor (CRI)", fb["per_pod"], f"all started {fb['all_started']:.2f} s"))
        for name, agent in agents.items():
            if size in agent.get("floor", {}).get("bursts", {}):
                fb = agent["floor"]["bursts"][size]
                lines.append(_row(f"runtime floor (CRI), around {name}", fb["per_pod"],
                                  f"all started {fb['all_started']:.2f} s (mean)"))
            if size in agent.get("bursts", {}):
                b = agent["bursts"][size]
                extra = f"all Running {b['all_running']:.2f} s; vs floor {ratio(b.get('per_pod_vs_floor'))}"
                if "vs_kubelet" in agent and size in agent["vs_kubelet"]["bursts"]:
                    extra += f"; vs kubelet {ratio(agent['vs_kubelet']['bursts'][size])}"
                lines.append(_row(name, b["per_pod"], extra))
    lines += ["", "## Exit → status and delete", "", *header]
    if s["floor"]:
        lines.append(_row("runtime floor: stop+remove (CRI)", s["floor"]["stop"]))
    for name, agent in agents.items():
        if "exit_to_status" in agent:
            lines.append(_row(f"{name}: container exit → status shows it", agent["exit_to_status"]))
        if "delete" in agent:
            lines.append(_row(f"{name}: delete call → Pod object gone", agent["delete"]))
    lines += ["", "## Footprint", "", "| agent | idle RSS MiB | idle CPU % core | RSS MiB, all burst pods running "
              "| CPU % core, running | burst peak RSS MiB | burst CPU s |", "|---|---|---|---|---|---|---|"]
    for name, agent in agents.items():
        f = agent.get("footprint", {})
        idle = f.get("idle", {})
        held = next((v for k, v in f.items() if k.startswith("running_")), {})
        burst = next((v for k, v in f.items() if k.startswith("burst_")), {})
        lines.append(f"| {name} | {idle.get('rss_mib', '-')} | {idle.get('cpu_percent_of_core', '-')} "
                     f"| {held.get('rss_mib', '-')} | {held.get('cpu_percent_of_core', '-')} "
                     f"| {burst.get('peak_rss_mib', '-')} | {burst.get('cpu_seconds', '-')} |")
    lines += ["", "## API cost (from the apiserver's audit log, user system:node:<node>)", "",
              "| agent | requests per pod lifecycle | idle requests per node-minute | breakdown per pod |",
              "|---|---|---|---|"]
    for name, agent in agents.items():
        if "api" in agent:
            a = agent["api"]
            breakdown = ", ".join(f"{k}: {v}" for k, v in sorted(a["per_pod"].items(), key=lambda kv: -kv[1]))
            lines.append(f"| {name} | {a['per_pod_total']} | {a['idle_per_minute_total']} | {breakdown} |")
    lines += [f"\n**{name}:** {agent['api']['lost']}." for name, agent in agents.items()
              if "lost" in agent.get("api", {})]
    lines += ["", "## Churn (create → Running → delete → gone, mixed specs)", "",
              "Leftovers are counted before the agent starts (what earlier runs left), right after the last pod is "
              "gone and again after one upstream GC period.", "",
              "| agent | cycles | parallel | seconds | failures | start p50 ms | start p99 ms "
              "| before the agent started | leftovers at once | leftovers after GC period | RSS after MiB (idle) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, agent in agents.items():
        if "churn" in agent:
            c = agent["churn"]
            idle_rss = agent.get("footprint", {}).get("idle", {}).get("rss_mib", "-")
            lines.append(f"| {name} | {c['cycles']} | {c['parallel']} | {c['seconds']} | {c['failures']} "
                         f"| {_ms(c['start'].get('p50'))} | {_ms(c['start'].get('p99'))} "
                         f"| {_counts(c['leftovers_before']) if c.get('leftovers_before') is not None else '-'} "
                         f"| {_counts(c['leftovers_at_once'])} | {_counts(c['leftovers'])} "
                         f"| {c['rss_after_gc_mib']} ({idle_rss}) |")
    lines += _soak_markdown(results, agents)
    return "\n".join(lines) + "\n"


def _amount(key: str, value: Any) -> str:
    """A sampled value as the soak tables show it: bytes in MiB, counts as they are."""
    if not isinstance(value, int | float):
        return "-"
    return f"{value / 2**20:.1f}" if key.endswith("_bytes") else f"{value:g}"


def _verdict(flag: bool | None, yes: str, no: str) -> str:
    return "?" if flag is None else (yes if flag else f"**{no}**")


def _soak_markdown(results: Mapping[str, Any], agents: Mapping[str, Any]) -> list[str]:
    soaks = {name: a["soak"] for name, a in agents.items() if "soak" in a}
    if not soaks:
        return []
    plan = results.get("plan", {})
    images = next((v["images"] for v in soaks.values() if v.get("images")), [])
    lines = ["", "## Soak (pods that write logs, pull one of several images and exit; sampled over the run)", "",
             f"Each cycle creates a pod whose init container writes 32 KiB to stderr and whose main container writes "
             f"{plan.get('soak_log_kib', '?')} KiB to stdout and exits, with the image round-robin from "
             f"{', '.join(images) or '?'} (the stack's registry serves them; imagePullPolicy Always); every "
             f"{plan.get('soak_restart_every', '?')}th pod is OnFailure and fails its first run. Each pod is "
             "deleted once it has Succeeded. Sampled every "
             f"{plan.get('soak_sample_seconds', '?')} s: disk used under /var/log/pods, entries in "
             "/var/log/containers, the image filesystem (CRI ImageFsInfo), the runtime's containers (all and "
             "exited) and sandboxes, and the agent's RSS.", "",
             "A series levels off when its highest value in the last third of the run is at most 10% plus one "
             "wave of pods above its highest in the middle third. RSS grows when the median of the last third "
             "is more than 10% + 4 MiB above the first third's. \"after\" is one GC period after the last pod.",
             ""]
    if any(v.get("shorter_than_gc_period") for v in soaks.values()):
        lines += ["Each third of a run marked * is shorter than upstream's one-minute container GC period: its "
                  "verdicts cannot show collection keeping up (a --quick run checks the harness, not the agent).",
                  ""]
    lines += ["| agent | cycles done (parallel) | seconds | failures | restarts | all series level off "
              "| RSS MiB first → last third (median) | RSS grows | agent CPU s | leftovers after GC period |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for name, v in soaks.items():
        rss = v["rss"]
        rss_cell = (f"{rss['first_median'] / 2**20:.1f} → {rss['last_median'] / 2**20:.1f} "
                    f"({rss['growth_percent']:+}%)" if "first_median" in rss else rss.get("reason", "-"))
        short = "*" if v.get("shorter_than_gc_period") else ""
        lines.append(f"| {name}{short} | {v['completed']} of {v['cycles']} ({v['parallel']}) | {v['seconds']} "
                     f"| {v['failures']} | {v['restarts']} | {_verdict(v['all_level_off'], 'yes', 'no')} "
                     f"| {rss_cell} | {_rss_word(rss)} "
                     f"| {v.get('cpu_seconds') or '-'} "
                     f"| {'-' if v.get('leftovers') is None else _counts(v['leftovers'])} |")
    lines += ["", "| series (MiB for bytes) | agent | before | middle-third max | last-third max | limit "
              "| after GC period | levels off |", "|---|---|---|---|---|---|---|---|"]
    for key, what in soak.SERIES.items():
        for name, v in soaks.items():
            verdict = v["verdicts"].get(key)
            if verdict is None:
                continue
            word = verdict["reason"] if "reason" in verdict else _verdict(verdict["levels_off"], "yes", "no")
            lines.append(f"| {what} | {name} | {_amount(key, v['before'].get(key))} "
                         f"| {_amount(key, verdict.get('middle_max'))} | {_amount(key, verdict.get('last_max'))} "
                         f"| {_amount(key, verdict.get('limit'))} | {_amount(key, v['after'].get(key))} | {word} |")
    return lines


def _rss_word(rss: Mapping[str, Any]) -> str:
    grows = rss.get("grows")
    return "?" if grows is None else ("**yes**" if grows else "no")


# The soak's curves, after the latency panels: title, series keys (solid, then dashed), unit.
SOAK_PANELS: list[tuple[str, tuple[str, ...], str]] = [
    ("Soak: disk used under /var/log/pods", ("pod_log_bytes",), "MiB"),
    ("Soak: entries in /var/log/containers", ("container_log_links",), "entries"),
    ("Soak: image filesystem used (ImageFsInfo)", ("image_fs_bytes",), "MiB"),
    ("Soak: runtime containers (dashed: exited)", ("containers", "exited_containers"), "containers"),
    ("Soak: pod sandboxes in the runtime", ("sandboxes",), "sandboxes"),
    ("Soak: agent RSS", (soak.RSS,), "MiB"),
]


def plot(results: Mapping[str, Any], path: Path) -> None:
    """Cumulative distributions of the latency sets, one panel per measurement, one line per agent; then the
    soak's sampled series over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    panels: list[tuple[str, dict[str, list[float]]]] = []
    agents = results.get("agents", {})
    floor = results.get("floor", {})
    floor_name = "runtime floor (all runs)" if results.get("floors") else "runtime floor"  # pooled around agents

    def collect(fn: Any) -> dict[str, list[float]]:
        return {name: fn(raw) for name, raw in agents.items() if fn(raw)}

    start = collect(lambda r: r.get("sequential", {}).get("start", []))
    if floor.get("start"):
        start = {floor_name: floor["start"], **start}
    panels.append(("Pod start, one at a time", start))
    for size in sorted({size for r in agents.values() for size in r.get("bursts", {})}, key=int):
        burst = collect(lambda r, size=size: r.get("bursts", {}).get(size, {}).get("per_pod", []))
        if size in floor.get("bursts", {}):
            burst = {floor_name: floor["bursts"][size]["per_pod"], **burst}
        panels.append((f"Pod start, burst of {size}", burst))
    panels.append(("Container exit → status", collect(lambda r: r.get("exit_to_status", []))))
    panels.append(("Delete → Pod gone", collect(lambda r: r.get("sequential", {}).get("delete", []))))

    names = [floor_name, *agents]
    colors = {name: f"C{i}" for i, name in enumerate(names)}  # one colour per series in every panel
    soaks = {name: raw["soak"]["series"] for name, raw in agents.items() if raw.get("soak", {}).get("series")}
    soak_panels = SOAK_PANELS if soaks else []
    columns = 3
    soak_at = -(-len(panels) // columns) * columns  # the soak's curves start on a row of their own
    rows = -(-(soak_at + len(soak_panels)) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.6 * rows), squeeze=False)
    for ax, (title, series) in zip(axes.flat, panels, strict=False):
        for name, samples in series.items():
            ordered = sorted(samples)
            ax.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post", label=name,
                    color=colors[name])
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("seconds (log scale)")
        ax.set_xscale("log")
        # Plain numbers at 1, 2 and 5 of each decade: the default minor labels overlap on narrow ranges.
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}".lstrip("0.")[:1] in "25" else ""))
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        ax.set_ylabel("fraction of pods")
        if series:
            ax.legend(fontsize=8, loc="lower right")
    for ax in list(axes.flat)[len(panels):soak_at]:
        ax.set_visible(False)
    for ax, (title, keys, unit) in zip(list(axes.flat)[soak_at:], soak_panels, strict=False):
        scale = 2**20 if unit == "MiB" else 1
        for name, series in soaks.items():
            for key, style in zip(keys, ("-", "--"), strict=False):
                if key not in series:
                    continue
                values = [float("nan") if v is None else v / scale for v in series[key]]
                label = name if len(keys) == 1 else f"{name}, {soak.SERIES.get(key, key).split()[0]}"
                ax.plot(series["t"], values, style, label=label, color=colors[name], linewidth=1.2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("seconds into the soak")
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    for ax in list(axes.flat)[soak_at + len(soak_panels):]:
        ax.set_visible(False)
    fig.suptitle(f"kopflet benchmark {results.get('date', '')}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
