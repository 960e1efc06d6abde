"""The profile's arithmetic: py-spy's collapsed stacks, each function's self and total share, the flame graph."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from bench import flamegraph

LOOP = "<module> (kopf/_core/engines.py:10);run (asyncio/base_events.py:600)"
RAW = f"""\
{LOOP};sync (kopflet/pods/workers.py:120) 30
{LOOP};sync (kopflet/pods/workers.py:121);decide (kopflet/kuberuntime/decide.py:44) 50
{LOOP} 15
{LOOP} 5
not a sample line
relist (kopflet/pleg/relist.py:50);relist (kopflet/pleg/relist.py:60) 20
"""


def test_stacks_are_parsed_and_repeats_summed() -> None:
    stacks = flamegraph.parse(RAW)
    assert stacks[("<module> (kopf/_core/engines.py:10)", "run (asyncio/base_events.py:600)")] == 20
    assert sum(stacks.values()) == 120 and len(stacks) == 4


def test_a_function_counts_once_per_sample_however_many_lines_or_recursions() -> None:
    by_name = {c.function: c for c in flamegraph.costs(flamegraph.parse(RAW))}
    assert by_name["sync (workers.py)"] == flamegraph.Cost("sync (workers.py)", 30, 80)
    assert by_name["decide (decide.py)"] == flamegraph.Cost("decide (decide.py)", 50, 50)
    assert by_name["run (base_events.py)"] == flamegraph.Cost("run (base_events.py)", 20, 100)
    # Recursion: relist calls itself; 20 samples, not 40.
    assert by_name["relist (relist.py)"] == flamegraph.Cost("relist (relist.py)", 20, 20)
    order = [c.function for c in flamegraph.costs(flamegraph.parse(RAW))]
    assert order[:2] == ["decide (decide.py)", "sync (workers.py)"]


def test_the_table_gives_shares_of_all_samples() -> None:
    table = flamegraph.markdown_table(flamegraph.costs(flamegraph.parse(RAW)), 120, rows=2)
    assert table.splitlines()[2:] == ["| `decide (decide.py)` | 41.7 | 41.7 |", "| `sync (workers.py)` | 25.0 | 66.7 |"]


def test_the_flame_graph_is_svg_with_a_box_per_frame_and_its_share() -> None:
    document = ET.fromstring(flamegraph.svg(flamegraph.parse(RAW), "burst <110>"))
    ns = "{http://www.w3.org/2000/svg}"
    titles = [t.text for t in document.iter(f"{ns}title")]
    assert "all (120 samples, 100.00%)" in titles
    assert "decide (kopflet/kuberuntime/decide.py:44) (50 samples, 41.67%)" in titles
    assert any(t.text == "burst <110>" for t in document.iter(f"{ns}text"))
    widths = {t: float(g.find(f"{ns}rect").get("width")) for g in document.iter(f"{ns}g")  # type: ignore[union-attr]
              for t in [g.find(f"{ns}title").text]}  # type: ignore[union-attr]
    assert widths["all (120 samples, 100.00%)"] == flamegraph.WIDTH
    decide = widths["decide (kopflet/kuberuntime/decide.py:44) (50 samples, 41.67%)"]
    assert abs(decide - flamegraph.WIDTH * 50 / 120) < 0.01
