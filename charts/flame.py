"""A flame graph of collapsed stacks (model.stacks) as one self-contained SVG: the root at
the bottom, each frame as wide as its samples, coloured by its category
(model.cpu_split's rules), its name, samples and share in a tooltip. Nothing is fetched:
no script, no font, no CDN."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape

from model.cpu_split import frame_parts, is_source, native_category, source_category

WIDTH_PX = 1200
ROW_PX = 16
MIN_WIDTH_PX = 0.3  # narrower frames are left out (their samples stay in the parent)
CHAR_PX = 6.5  # about one character of the 11 px label font
COLOURS = {
    "kernel": "#e8a0a0",
    "runtime": "#a8c0e8",
    "framework": "#a8d8a8",
    "handler": "#f0c090",
    "other": "#d0d0d0",
}


@dataclass
class _Node:
    samples: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


def _tree(folded: Mapping[str, int]) -> _Node:
    root = _Node()
    for stack, count in folded.items():
        node = root
        node.samples += count
        for frame in stack.split(";"):
            node = node.children.setdefault(frame, _Node())
            node.samples += count
    return root


def frame_category(frame: str, framework: str) -> str:
    """One frame's own category (a flame graph's colour): its source or its module's."""
    where = frame_parts(frame)[1]
    return source_category(where, framework) if is_source(frame) else native_category(where)


def _depth(node: _Node) -> int:
    return 1 + max((_depth(child) for child in node.children.values()), default=0)


def flame_svg(folded: Mapping[str, int], framework: str, title: str = "") -> str:
    """The flame graph of `folded` (run for `framework`); "" without samples."""
    root = _tree(folded)
    if not root.samples:
        return ""
    scale = WIDTH_PX / root.samples
    height = (_depth(root) + 1) * ROW_PX
    shapes: list[str] = []

    def draw(node: _Node, name: str, x: float, level: int) -> None:
        width = node.samples * scale
        y = height - (level + 1) * ROW_PX
        share = 100 * node.samples / root.samples
        tip = f"{name} — {node.samples} samples, {share:.1f} %"
        colour = COLOURS[frame_category(name, framework)] if level else "#eeeeee"
        shapes.append(
            f'<g><title>{escape(tip)}</title><rect x="{x:.2f}" y="{y}" width="{width:.2f}" '
            f'height="{ROW_PX - 1}" fill="{colour}"/>'
        )
        chars = int(width / CHAR_PX)
        if chars >= 3:
            label = name if len(name) <= chars else name[: chars - 1] + "…"
            shapes.append(f'<text x="{x + 2:.2f}" y="{y + ROW_PX - 4}">{escape(label)}</text>')
        shapes.append("</g>")
        for child_name, child in sorted(node.children.items()):
            if child.samples * scale >= MIN_WIDTH_PX:
                draw(child, child_name, x, level + 1)
            x += child.samples * scale

    draw(root, f"all ({title})" if title else "all", 0.0, 0)
    return (
        f'<svg class="flame" role="img" viewBox="0 0 {WIDTH_PX} {height}" width="100%" '
        f'style="font:11px monospace"><title>{escape(title)} flame graph</title>'
        f"{''.join(shapes)}</svg>"
    )
