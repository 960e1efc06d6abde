"""``python -m reliability [--churn N]``: run the fault tests and the churn, write docs/reliability.md.

`make reliability` runs it inside the dev stack. The fault tests are ordinary pytest modules (they also run
in `make test`); here their JUnit results, with what each injected and what the user saw, become the
report, together with a long churn run's leftover counts from the benchmark harness.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import cluster
from bench.agents import Kopflet
from bench.run import Plan, Run
from devstack.layout import REPO, Layout
from reliability import report

TESTS = (
    "tests/e2e/test_cri_faults.py",
    "tests/e2e/test_kill_matrix.py",
    "tests/e2e/test_faults.py",
    "tests/e2e/test_hostile_input.py",
    "tests/e2e/test_kubelet_api_hostile.py",
    "tests/unit/test_reconciler_properties.py",
    "tests/stack/test_stack.py",
)


def run_tests(junit: Path) -> int:
    present = [t for t in TESTS if (REPO / t).exists()]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--junitxml={junit}", "-o", "junit_family=xunit1", *present], cwd=REPO).returncode


def churn(layout: Layout, cycles: int) -> dict:
    plan = Plan(sequential=0, exits=0, bursts=(), churn=cycles, churn_parallel=10, idle_seconds=30)
    results = Run(Kopflet(layout, layout.root / "reliability"), plan, cluster.api(layout.admin_kubeconfig),
                  layout.audit_log).run()
    return {**results["churn"], "idle_rss_mib": results["idle"]["rss_mib"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reliability", description=__doc__.split("\n\n")[0])
    parser.add_argument("--churn", type=int, default=1000, help="create/delete cycles (0: skip)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "reliability.md")
    args = parser.parse_args(argv)
    layout = Layout.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        code = run_tests(junit)
        cases = report.parse_junit(junit.read_text()) if junit.exists() else []
    figures = churn(layout, args.churn) if args.churn else None
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    header = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
              "commit": rev.stdout.strip() or "?",
              "stack": f"kube-apiserver {layout.versions.get('KUBERNETES_VERSION', '?')}, containerd (devstack)"}
    args.out.write_text(report.markdown(cases, figures, header))
    print(f"reliability: wrote {args.out}", file=sys.stderr)
    failed_churn = bool(figures and (figures["failures"] or any(figures["leftovers"].values())))
    return 1 if code != 0 or failed_churn else 0


if __name__ == "__main__":
    sys.exit(main())
