"""The benchmark's soak: the levels-off and RSS verdicts, the soak pods, the sampler's sources and the report."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import cluster, host, report, run, soak, workload
from bench.run import Plan
from cri_client import types

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20


def saw(n: int, low: float, high: float, period: int) -> list[float]:
    """A garbage-collected series: climbs from low to high over `period` samples, then drops back."""
    return [low + (high - low) * (i % period) / (period - 1) for i in range(n)]


# ---------------------------------------------------------------------------------------- levels off

@pytest.mark.parametrize(("values", "rel", "abs_", "expected"), [
    ([5.0] * 30, 0.1, 0, True),  # flat
    ([0, 2, 4, 6, 8, 10] + [10.0] * 24, 0.1, 0, True),  # a ramp from an empty node, then a plateau
    (saw(60, 0, 40, 12), 0.1, 0, True),  # a collector trims it every 12 samples
    (list(map(float, range(30))), 0.1, 0, False),  # one more per sample, never collected
    (list(map(float, range(30))), 0.1, 10, True),  # ... within one wave's slack
    ([10.0] * 20 + [10.9] * 10, 0.1, 0, True),  # 9% above the middle third's peak: inside 10%
    ([10.0] * 20 + [11.5] * 10, 0.1, 0, False),  # 15% above
    ([10.0] * 20 + [11.5] * 10, 0.1, 2, True),  # ... inside 10% plus 2
    ([0.0] * 20 + [1.0] * 10, 0.1, 0, False),  # from nothing to something is growth
    ([0.0] * 30, 0.1, 0, True),  # nothing at all levels off
    ([50.0] * 10 + [1.0] * 20, 0.1, 0, True),  # falling is fine
    ([1.0, None, 1.0, None, 1.0, 1.0, 1.0, 1.0], 0.1, 0, True),  # unread samples are dropped
])
def test_levels_off(values, rel, abs_, expected):
    verdict = soak.levels_off(values, rel, abs_)
    assert verdict["levels_off"] is expected
    assert verdict["peak"] == max(v for v in values if v is not None)


@pytest.mark.parametrize("values", [[], [1.0] * 5, [1.0, None, 2.0, None, 3.0, None, 4.0, 5.0]])
def test_levels_off_needs_enough_samples(values):
    verdict = soak.levels_off(values)
    assert verdict["levels_off"] is None and "need 6" in verdict["reason"]


def test_levels_off_compares_the_last_third_with_the_middle_thirds_peak():
    # A spike in the first third (start-up) is not what the last third is held to.
    values = [100.0] + [10.0] * 8 + [10.0, 10.0, 12.0]
    verdict = soak.levels_off(values, 0.1, 0)
    assert (verdict["middle_max"], verdict["last_max"], verdict["limit"]) == (10.0, 12.0, 11.0)
    assert verdict["levels_off"] is False


@pytest.mark.parametrize(("n", "sizes"), [(6, (2, 2, 2)), (7, (2, 2, 3)), (8, (2, 3, 3)), (9, (3, 3, 3)),
                                          (2, (0, 1, 1))])
def test_thirds(n, sizes):
    first, middle, last = soak.thirds(list(range(n)))
    assert (len(first), len(middle), len(last)) == sizes
    assert [*first, *middle, *last] == list(range(n))


# ---------------------------------------------------------------------------------------- RSS

@pytest.mark.parametrize(("values", "grows"), [
    ([100 * MIB] * 30, False),
    ([100 * MIB] * 20 + [150 * MIB], False),  # one spike at the end: the median does not move
    ([100 * MIB] * 10 + [108 * MIB] * 20, False),  # +8%, under 10% + 4 MiB
    ([100 * MIB] * 10 + [115 * MIB] * 20, True),  # +15%
    ([100 * MIB + i * MIB for i in range(30)], True),  # a steady climb
    ([20 * MIB] * 10 + [27 * MIB] * 20, True),  # a small agent: +7 MiB is more than 10% (2 MiB) + 4 MiB
    ([20 * MIB] * 10 + [25 * MIB] * 20, False),  # +5 MiB: within 10% + 4 MiB
    ([120 * MIB] * 10 + [100 * MIB] * 20, False),  # shrinking
])
def test_rss_growth(values, grows):
    verdict = soak.rss_growth(values)
    assert verdict["grows"] is grows


def test_rss_growth_figures_and_too_few_samples():
    verdict = soak.rss_growth([100 * MIB] * 3 + [None] * 2 + [110 * MIB] * 3 + [120 * MIB] * 3)
    assert verdict["first_median"] == 100 * MIB and verdict["last_median"] == 120 * MIB
    assert verdict["growth"] == 20 * MIB and verdict["growth_percent"] == 20.0 and verdict["grows"] is True
    assert soak.rss_growth([MIB] * 5)["grows"] is None


# ---------------------------------------------------------------------------------------- summary

def _series(n: int = 30, leak: bool = False) -> dict:
    return {
        "t": [float(i * 5) for i in range(n)],
        "cycles": [i * 10 for i in range(n)],
        "pod_log_bytes": [v * MIB for v in saw(n, 1, 8, 6)],
        "container_log_links": saw(n, 0, 20, 6),
        "image_fs_bytes": [500.0 * MIB] * n,
        "containers": [3.0 * i for i in range(n)] if leak else saw(n, 2, 20, 6),  # a leak: 3 more per sample
        "exited_containers": saw(n, 0, 18, 6),
        "sandboxes": saw(n, 1, 10, 6),
        "rss_bytes": [90.0 * MIB] * n,
    }


def _raw_soak(leak: bool = False, n: int = 30) -> dict:
    return {"cycles": 300, "completed": 300, "parallel": 4, "images": list(workload.SOAK_IMAGES), "log_kib": 256,
            "seconds": 150.0, "failures": ["soak-0001: phase Failed"], "restarts": 75, "cpu_seconds": 12.5,
            "tolerances": soak.tolerances(4, workload.soak_pod_log_bytes(256), 3),
            "series": _series(n, leak),
            "before": {"pod_log_bytes": MIB, "containers": 2, "exited_containers": 0, "sandboxes": 1},
            "after": {"pod_log_bytes": MIB, "containers": 2, "exited_containers": 0, "sandboxes": 1},
            "leftovers": {"sandboxes": 0, "containers": 1}}


def test_summarize_judges_every_series_and_the_rss():
    s = soak.summarize(_raw_soak())
    assert set(s["verdicts"]) == set(soak.SERIES)
    assert all(v["levels_off"] for v in s["verdicts"].values()) and s["all_level_off"] is True
    assert s["rss"]["grows"] is False
    assert (s["completed"], s["failures"], s["restarts"], s["samples"]) == (300, 1, 75, 30)
    assert s["third_seconds"] == 48.3 and s["shorter_than_gc_period"] is True


def test_summarize_reports_a_leak():
    s = soak.summarize(_raw_soak(leak=True))
    assert s["verdicts"]["containers"]["levels_off"] is False
    assert s["all_level_off"] is False


def test_summarize_a_soak_that_stopped_early():
    s = soak.summarize({"cycles": 300, "parallel": 4, "failures": ["x"] * 30, "series": _series(4)})
    assert s["all_level_off"] is None and s["rss"]["grows"] is None
    assert soak.summarize({"cycles": 300})["all_level_off"] is None


def test_tolerances_are_one_wave_of_pods():
    tol = soak.tolerances(10, 1000, 3)
    assert tol["pod_log_bytes"] == (soak.REL_TOL, 10_000.0)
    assert tol["exited_containers"] == (soak.REL_TOL, 30.0)
    assert tol["sandboxes"] == (soak.REL_TOL, 10.0)
    assert set(tol) == set(soak.SERIES)


# ---------------------------------------------------------------------------------------- pods

def test_soak_pods_rotate_images_pull_always_and_some_restart():
    pods = [workload.soak_pod(f"soak-{i}", "node-a", i, log_kib=256, restart_every=4) for i in range(8)]
    images = [p["spec"]["containers"][0]["image"] for p in pods]
    assert images == [*workload.SOAK_IMAGES, *workload.SOAK_IMAGES]
    for i, p in enumerate(pods):
        spec = p["spec"]
        assert spec["nodeName"] == "node-a"
        assert spec["initContainers"][0]["image"] == spec["containers"][0]["image"]
        assert {c["imagePullPolicy"] for c in (*spec["initContainers"], *spec["containers"])} == {"Always"}
        assert spec["restartPolicy"] == ("OnFailure" if i % 4 == 0 else "Never")
        assert ("volumes" in spec) == (i % 4 == 0)
    assert workload.soak_pod("p", "n", 0, 256, restart_every=0)["spec"]["restartPolicy"] == "Never"


def _sh() -> str:
    found = shutil.which("busybox") and "busybox"
    return found or shutil.which("sh") or pytest.skip("no sh")


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    argv = ["busybox", "sh", "-c", command] if _sh() == "busybox" else [_sh(), "-c", command]
    return subprocess.run(argv, capture_output=True, cwd=cwd, timeout=30, check=False)


def test_soak_containers_write_their_logs_and_fail_the_first_run(tmp_path):
    manifest = workload.soak_pod("p", "n", 4, log_kib=64, restart_every=4, restarts=1)
    main = manifest["spec"]["containers"][0]["command"][2].replace("/state", str(tmp_path))
    first, second = _run(main, tmp_path), _run(main, tmp_path)
    assert (first.returncode, second.returncode) == (1, 0)
    lines = second.stdout.decode().splitlines()
    assert len(lines) == 64 and all(len(line) == len(line.split()[0]) + 1 + 1024 for line in lines)
    assert not second.stderr
    init = _run(manifest["spec"]["initContainers"][0]["command"][2], tmp_path)
    assert init.returncode == 0 and not init.stdout and len(init.stderr) >= workload.SOAK_INIT_KIB * 1024
    plain = workload.soak_pod("q", "n", 1, log_kib=8, restart_every=4)["spec"]["containers"][0]["command"][2]
    assert _run(plain, tmp_path).returncode == 0
    assert workload.soak_pod_log_bytes(64, 1) >= len(first.stdout) + len(second.stdout) + len(init.stderr)


def test_soak_images_are_ones_the_dev_stack_pushes():
    spec = importlib.util.spec_from_file_location("kopflet_images_build_soak", ROOT / "images" / "build.py")
    build = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = build  # dataclasses look their module up here
    try:
        spec.loader.exec_module(build)
    finally:
        del sys.modules[spec.name]
    pushed = {i.ref for i in build.IMAGES} | {f"{build.E2E_REGISTRY_IMAGES}/agnhost:{build.AGNHOST_PREV}"}
    for image in workload.SOAK_IMAGES:
        registry, _, ref = image.partition("/")
        assert registry in ("docker.io", "registry.k8s.io") and ref in pushed, image


def test_plans():
    full, quick = Plan(), Plan.quick()
    assert full.soak_cycles >= 2000 and quick.soak_cycles <= 50
    assert quick.soak_sample_seconds <= 1 and quick.soak_parallel <= full.soak_parallel


# ---------------------------------------------------------------------------------------- watch and sampler

def _pod(phase, restarts=(0,), running=False):
    statuses = [SimpleNamespace(name="main", restart_count=r, started=running,
                                state=SimpleNamespace(running=running or None, terminated=None)) for r in restarts]
    return SimpleNamespace(metadata=SimpleNamespace(name="p", uid="u1", resource_version="1"),
                           spec=SimpleNamespace(containers=[SimpleNamespace(name="main")]),
                           status=SimpleNamespace(phase=phase, container_statuses=statuses))


def test_watch_records_when_a_pod_is_done_and_its_restarts():
    watcher = cluster.PodWatcher(core=None, namespace="ns")
    watcher._observe("MODIFIED", _pod("Running", (1,), running=True))
    rec = watcher.record("p")
    assert rec.finished is None and rec.restarts == 1 and rec.phase == "Running"
    watcher._observe("MODIFIED", _pod("Succeeded", (1,)))
    done = rec.finished
    assert done is not None and rec.phase == "Succeeded"
    watcher._observe("DELETED", _pod("Succeeded", (0,)))
    assert rec.finished == done and rec.restarts == 1 and rec.gone is not None


def test_dir_usage_counts_blocks_without_following_links(tmp_path):
    logs = tmp_path / "pods" / "ns_p_uid" / "main"
    logs.mkdir(parents=True)
    (logs / "0.log").write_bytes(b"x" * 100_000)
    outside = tmp_path / "big"
    outside.write_bytes(b"y" * 1_000_000)
    (logs / "link").symlink_to(outside)
    used = host.dir_usage(tmp_path / "pods")
    assert 100_000 <= used < 1_000_000
    assert host.dir_usage(tmp_path / "absent") == 0
    assert host.entry_count(logs) == 2 and host.entry_count(tmp_path / "absent") == 0


class FakeCri:
    def __init__(self, fail=False):
        self.fail = fail
        fs = types.ImageFsInfo(image_filesystems=(types.FilesystemUsage(used_bytes=7 * MIB),
                                                  types.FilesystemUsage(used_bytes=None)))
        states = [types.ContainerState.RUNNING, types.ContainerState.EXITED, types.ContainerState.EXITED]
        self.images = SimpleNamespace(fs_info=self._answer(fs))
        self.containers = SimpleNamespace(list=self._answer([types.Container(id=str(i), state=s)
                                                             for i, s in enumerate(states)]))
        self.sandboxes = SimpleNamespace(list=self._answer([types.PodSandbox(id="s")]))

    def _answer(self, value):
        async def call(*_args):
            if self.fail:
                raise OSError("runtime down")
            return value
        return call


def test_sampler_reads_disk_runtime_and_rss(tmp_path):
    (tmp_path / "pods").mkdir()
    (tmp_path / "pods" / "0.log").write_bytes(b"z" * 10_000)
    (tmp_path / "containers").mkdir()
    (tmp_path / "containers" / "a.log").symlink_to(tmp_path / "pods" / "0.log")
    sampler = host.SoakSampler(os.getpid(), "unix:///nonexistent", tmp_path / "pods", tmp_path / "containers", 1,
                               lambda: 0)
    sample = asyncio.run(sampler._sample(FakeCri()))
    assert sample["pod_log_bytes"] >= 10_000 and sample["container_log_links"] == 1
    assert (sample["image_fs_bytes"], sample["containers"], sample["exited_containers"], sample["sandboxes"]) == \
        (7 * MIB, 3, 2, 1)
    assert sample["rss_bytes"] == host.rss_bytes(os.getpid()) or sample["rss_bytes"] > 0
    assert set(sample) == {*soak.SERIES, soak.RSS}
    failed = asyncio.run(sampler._sample(FakeCri(fail=True)))
    assert failed["containers"] is None and failed["pod_log_bytes"] >= 10_000 and sampler.errors == 1


# ---------------------------------------------------------------------------------------- report

def _results(quick: bool = False) -> dict:
    raw = _raw_soak()
    if not quick:
        raw["series"]["t"] = [t * 10 for t in raw["series"]["t"]]
    leaking = _raw_soak(leak=True)
    return {
        "date": "2026-11-22 05:00 UTC",
        "machine": {"cpu": "Test CPU", "cores": 2, "memory_mib": 1024, "kernel": "6.1", "cgroup": "v1"},
        "versions": {"kubernetes (apiserver)": "v1.37.1"},
        "plan": {"soak_cycles": 300, "soak_log_kib": 256, "soak_restart_every": 4, "soak_sample_seconds": 5},
        "floor": {},
        "agents": {"kopflet": {"version": "abc", "soak": raw},
                   "kubelet": {"version": "v1.37.1", "soak": leaking}},
    }


def test_markdown_has_a_soak_row_per_agent_and_a_row_per_series():
    results = _results()
    results["summary"] = report.summarize(results)
    md = report.markdown(results)
    assert "## Soak" in md
    assert "| kopflet | 300 of 300 (4) | 150.0 | 1 | 75 | yes | 90.0 → 90.0 (+0.0%) | no | 12.5 | containers 1 |" in md
    assert "| kubelet* | 300 of 300 (4) | 150.0 | 1 | 75 | **no** |" in md  # *: its thirds are under a minute
    assert "| containers the runtime holds | kubelet | 2 | 57 | 87 | 74.7 | 2 | **no** |" in md
    assert "| bytes under /var/log/pods | kopflet | 1.0 | 8.0 | 8.0 |" in md
    assert "docker.io/library/busybox:1.36" in md
    assert "shorter than upstream's one-minute container GC period" in md
    # the summary round-trips through JSON, as `python -m bench report FILE.json` reads it back
    assert report.markdown(json.loads(json.dumps(results))) == md


def test_markdown_without_a_soak_has_no_soak_section():
    results = _results()
    for raw in results["agents"].values():
        del raw["soak"]
    results["summary"] = report.summarize(results)
    assert "Soak" not in report.markdown(results)


def test_plot_draws_the_soak_curves(tmp_path):
    path = tmp_path / "plot.png"
    results = _results()
    results["agents"]["kopflet"]["soak"]["series"]["containers"][3] = None  # an unread sample: a gap
    report.plot(results, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------- the phase, faked

class _FakeClient:
    async def __aenter__(self):
        return FakeCri()

    async def __aexit__(self, *exc):
        return None


def test_the_soak_phase_cycles_every_pod_and_samples_throughout(monkeypatch, tmp_path):
    """Run.soak against a fake apiserver (pods finish as soon as they are created, one in four after a
    restart) and a fake runtime: every cycle runs, the series are sampled, the results summarise."""
    watcher = cluster.PodWatcher(core=None, namespace="ns")

    def pod_object(manifest, phase, restarts):
        obj = _pod(phase, (restarts,))
        obj.metadata.name = manifest["metadata"]["name"]
        return obj

    def create(_core, _ns, manifest, w):
        w.record(manifest["metadata"]["name"]).created = 0.0
        restarts = 1 if manifest["spec"]["restartPolicy"] == "OnFailure" else 0
        threading.Timer(0.01, w._observe, ("MODIFIED", pod_object(manifest, "Succeeded", restarts))).start()

    def delete(_core, _ns, name, w):
        threading.Timer(0.01, w._observe, ("DELETED", pod_object({"metadata": {"name": name}}, "Succeeded", 0)))\
            .start()

    monkeypatch.setattr(cluster, "create_pod", create)
    monkeypatch.setattr(cluster, "delete_pod", delete)
    monkeypatch.setattr(host, "CriClient", lambda *a, **k: _FakeClient())
    monkeypatch.setattr(run, "DEFAULT_POD_LOG_ROOT", str(tmp_path))
    monkeypatch.setattr(run, "DEFAULT_CONTAINER_LOGS_DIR", str(tmp_path))
    agent = SimpleNamespace(name="fake", pid=os.getpid(), alive=lambda: True, log=tmp_path / "log")
    r = run.Run.__new__(run.Run)
    r.agent, r.core, r.namespace, r.node, r.endpoint, r.watcher = agent, None, "ns", "node", "unix:///x", watcher
    r.plan = dataclasses.replace(Plan.quick(), soak_cycles=40, soak_sample_seconds=0.02, gc_wait_seconds=0)
    r.results, r._seq = {}, 0
    monkeypatch.setattr(run.Run, "_leftovers", lambda self: {"sandboxes": 0})
    r.soak()
    raw = r.results["soak"]
    assert (raw["completed"], raw["failures"], raw["restarts"]) == (40, [], 10)
    assert raw["series"]["containers"] and set(raw["series"]["containers"]) == {3}
    assert raw["before"]["exited_containers"] == 2 and raw["after"]["sandboxes"] == 1
    assert raw["leftovers"] == {"sandboxes": 0}
    s = soak.summarize(json.loads(json.dumps(raw)))
    assert s["completed"] == 40 and s["restarts"] == 10
