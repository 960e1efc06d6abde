"""``make profile``: kopflet's stacks sampled by py-spy through a pod burst, as a flame graph and a costs table.

The agent runs on the stack as the benchmark runs it (`bench.agents.Kopflet`); py-spy samples it from the moment the
node is Ready and idle until the burst's pods are all running and deleted again. The output goes next to the
benchmark's: ``bench/results/<date>-profile.svg`` (the flame graph), ``.txt`` (py-spy's collapsed stacks) and
``.md`` (the largest self costs, which the benchmark report names).
"""

from __future__ import annotations

import dataclasses
import datetime
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import cluster, flamegraph
from bench.agents import agents_by_name
from bench.run import Plan, Run
from devstack.layout import Layout

RESULTS = Path(__file__).resolve().parent / "results"


def py_spy() -> str:
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("bench profile: py-spy is not installed (make venv installs it with the dev extras)")
    return found


def profile(layout: Layout, size: int = 110, rate: int = 100) -> Path:
    """One burst of `size` pods under the sampler; returns the markdown written."""
    agent = agents_by_name(layout, layout.root / "bench")["kopflet"]
    core = cluster.api(layout.admin_kubeconfig)
    run = Run(agent, dataclasses.replace(Plan(), bursts=(size,), hold_seconds=5, settle_seconds=5), core,
              layout.audit_log)
    now = datetime.datetime.now(datetime.UTC)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / (now.strftime("%Y-%m-%d") + "-profile")
    raw = stem.with_suffix(".txt")
    run.start_agent()
    try:
        cluster.ensure_namespace(core, run.namespace)
        run.watcher.start()
        try:
            # --gil: only what holds the interpreter, the agent's Python work (its threads' waits in queues, epoll or
            # a read of /dev/kmsg would otherwise be counted as busy: py-spy's idle test misses them).
            spy = subprocess.Popen([py_spy(), "record", "--pid", str(agent.pid), "--rate", str(rate), "--gil",
                                    "--format", "raw", "--output", str(raw)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(2)  # py-spy attached before the first pod
            started = time.monotonic()
            try:
                run.bursts()
            finally:
                spy.send_signal(signal.SIGINT)
                _, err = spy.communicate(timeout=120)
            seconds = time.monotonic() - started
            if spy.returncode != 0 or not raw.exists():
                raise SystemExit(f"bench profile: py-spy failed ({spy.returncode}): {err.decode(errors='replace')}")
        finally:
            run.watcher.stop()
            run._cleanup_namespace()
    finally:
        agent.stop()
    stacks = flamegraph.parse(raw.read_text())
    samples = sum(stacks.values())
    title = f"kopflet, {size}-pod burst, {now:%Y-%m-%d %H:%M} UTC ({samples} samples at {rate} Hz)"
    stem.with_suffix(".svg").write_text(flamegraph.svg(stacks, title))
    burst = run.results["bursts"][str(size)]
    costs = flamegraph.costs(stacks)
    stem.with_suffix(".md").write_text(
        f"# {title}\n\n"
        f"The burst: all {size} pods running {burst['all_running']:.1f} s after the first was created, deleted in "
        f"{burst['all_deleted']:.1f} s; the agent used {burst['cpu_seconds']} CPU seconds over the {seconds:.0f} s "
        f"sampled (peak RSS {burst['peak_rss_mib']} MiB). py-spy samples the thread holding the interpreter "
        "(--gil), so the shares below are of the agent's Python work; native work without the GIL (gRPC's core, "
        "system calls) is not in them.\n\n"
        f"Flame graph: [{stem.name}.svg]({stem.name}.svg); collapsed stacks: [{raw.name}]({raw.name}).\n\n"
        "## Largest self costs\n\n" + flamegraph.markdown_table(costs, samples))
    return stem.with_suffix(".md")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=110, help="pods in the burst (default: 110, the node's maximum)")
    parser.add_argument("--rate", type=int, default=100, help="samples a second (default: 100)")
    args = parser.parse_args(argv)
    print(f"bench profile: {profile(Layout.from_env(), args.pods, args.rate)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
