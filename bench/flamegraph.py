"""Collapsed stacks (py-spy's ``raw`` format) → where the time went, and a flame graph to look at it.

py-spy writes one line per distinct stack, ``frame;frame;...;frame count``, each frame ``function (file:line)``,
outermost first. The costs table counts each function once per sample: its *self* samples (the stack ends in it)
and its *total* samples (it is anywhere on the stack), so a profile's largest costs can be named. The SVG is a
plain flame graph (Brendan Gregg's layout: width is samples, outermost at the bottom), made here so the tool chain
is py-spy alone.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Iterable

_LINE = re.compile(r"^(?P<stack>.*\S)\s+(?P<count>\d+)$")
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>.*?)(?::\d+)?\)$")


@dataclasses.dataclass(frozen=True)
class Cost:
    function: str
    """``function (file)``: the frame without its line number."""
    self_samples: int
    total_samples: int


def parse(text: str) -> dict[tuple[str, ...], int]:
    """Stacks (outermost first) and their sample counts; malformed lines are skipped, repeated stacks summed."""
    stacks: dict[tuple[str, ...], int] = {}
    for line in text.splitlines():
        found = _LINE.match(line.strip())
        if found:
            stack = tuple(found["stack"].split(";"))
            stacks[stack] = stacks.get(stack, 0) + int(found["count"])
    return stacks


def function_of(frame: str) -> str:
    """``f (path/to/file.py:12)`` → ``f (file.py)``: one function however many lines were sampled in it."""
    found = _FRAME.match(frame)
    if not found:
        return frame
    return f"{found['function']} ({found['file'].rsplit('/', 1)[-1]})"


def costs(stacks: dict[tuple[str, ...], int]) -> list[Cost]:
    """Every function's self and total samples, the largest self cost first."""
    self_samples: dict[str, int] = {}
    total: dict[str, int] = {}
    for stack, count in stacks.items():
        functions = [function_of(frame) for frame in stack]
        if functions:
            self_samples[functions[-1]] = self_samples.get(functions[-1], 0) + count
        for function in set(functions):
            total[function] = total.get(function, 0) + count
    return sorted((Cost(f, self_samples.get(f, 0), total[f]) for f in total),
                  key=lambda c: (-c.self_samples, -c.total_samples, c.function))


def markdown_table(all_costs: Iterable[Cost], samples: int, rows: int = 15) -> str:
    lines = ["| function | self % | total % |", "|---|---:|---:|"]
    for c in list(all_costs)[:rows]:
        lines.append(f"| `{c.function}` | {100 * c.self_samples / max(samples, 1):.1f} | "
                     f"{100 * c.total_samples / max(samples, 1):.1f} |")
    return "\n".join(lines) + "\n"


@dataclasses.dataclass
class _Node:
    name: str
    samples: int = 0
    children: dict[str, _Node] = dataclasses.field(default_factory=dict)


def _tree(stacks: dict[tuple[str, ...], int]) -> _Node:
    root = _Node("all")
    for stack, count in stacks.items():
        node = root
        node.samples += count
        for frame in stack:
            node = node.children.setdefault(frame, _Node(frame))
            node.samples += count
    return root


ROW = 16
WIDTH = 1200


def svg(stacks: dict[tuple[str, ...], int], title: str) -> str:
    """The flame graph; each box's tooltip names its frame, samples and share."""
    root = _tree(stacks)
    total = max(root.samples, 1)
    boxes: list[tuple[float, int, float, _Node]] = []

    def place(node: _Node, x: float, depth: int) -> int:
        width = WIDTH * node.samples / total
        if width < 0.3:
            return depth
        boxes.append((x, depth, width, node))
        deepest = depth
        for child in sorted(node.children.values(), key=lambda n: n.name):
            deepest = max(deepest, place(child, x, depth + 1))
            x += WIDTH * child.samples / total
        return deepest

    depth = place(root, 0.0, 0)
    height = (depth + 1) * ROW + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'font-family="monospace" font-size="11">',
           f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="14">{html.escape(title)}</text>']
    for x, level, width, node in boxes:
        y = height - (level + 1) * ROW
        hue = 20 + (sum(map(ord, node.name)) % 40)
        label = html.escape(node.name)
        share = 100 * node.samples / total
        out.append(f'<g><title>{label} ({node.samples} samples, {share:.2f}%)</title>'
                   f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{ROW - 1}" '
                   f'fill="hsl({hue},90%,60%)" rx="2"/>')
        chars = int(width / 7)
        if chars >= 4:
            text = node.name if len(node.name) <= chars else node.name[:chars - 2] + ".."
            out.append(f'<text x="{x + 3:.2f}" y="{y + ROW - 4}">{html.escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
