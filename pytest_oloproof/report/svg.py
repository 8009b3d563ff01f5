"""Forest plots as inline SVG: estimates with their intervals on one shared axis.

Small and dependency-free so a report needs no charting library and makes no request.
Every piece of text goes through markupsafe's escape.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape

ROW_HEIGHT = 26
AXIS_HEIGHT = 30
TOP = 8


@dataclass(frozen=True)
class ForestRow:
    """One line of a forest plot; `estimate` None means no estimate, and `note` says why."""

    label: str
    estimate: float | None
    low: float | None
    high: float | None
    text: str = ""  # right-hand annotation: the printed estimate, interval, accounting
    note: str = ""
    marks: tuple[tuple[float, str], ...] = field(default=())  # per-row reference lines, e.g. a margin
    tone: str = ""  # a CSS class suffix: "pass", "fail", "warn"


def finite(x: float | None) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def scale(value: float, domain: tuple[float, float], x0: float, x1: float) -> float:
    """The x coordinate of `value` on an axis from x0 to x1, clamped to the axis."""
    lo, hi = domain
    if hi <= lo:
        raise ValueError(f"empty domain {domain}")
    t = (min(max(value, lo), hi) - lo) / (hi - lo)
    return x0 + t * (x1 - x0)


def nice_symmetric(values: Sequence[float | None], floor: float = 5.0) -> float:
    """Half-width of a symmetric axis around 0 that holds every finite value (5, 10, 25, 50 or 100)."""
    big = max([abs(v) for v in values if v is not None and finite(v)] + [floor])
    for step in (5.0, 10.0, 25.0, 50.0, 100.0):
        if big <= step:
            return step
    return math.ceil(big / 100.0) * 100.0


def _fmt(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def forest_plot(
    rows: Sequence[ForestRow],
    *,
    domain: tuple[float, float],
    ticks: Sequence[float],
    tick_format: Callable[[float], str],
    title: str,
    ref_lines: Sequence[tuple[float, str]] = (),
    label_width: int = 170,
    plot_width: int = 300,
    text_width: int = 380,
    css_class: str = "forest",
) -> Markup:
    """An SVG forest plot: one row per estimate, the interval as a line, a square at the estimate.

    A row without an estimate shows its note instead of a mark, so a missing value is visible.
    """
    x0, x1 = float(label_width), float(label_width + plot_width)
    width = label_width + plot_width + text_width
    height = TOP + ROW_HEIGHT * len(rows) + AXIS_HEIGHT
    axis_y = TOP + ROW_HEIGHT * len(rows)
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{escape(css_class)}" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
    ]
    for t in ticks:
        x = scale(t, domain, x0, x1)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{axis_y}"/>')
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle">{escape(tick_format(t))}</text>'
        )
    out.append(f'<line class="axis" x1="{x0:.1f}" y1="{axis_y}" x2="{x1:.1f}" y2="{axis_y}"/>')
    for value, label in ref_lines:
        x = scale(value, domain, x0, x1)
        out.append(
            f'<line class="ref" x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{axis_y}">'
            f"<title>{escape(label)}</title></line>"
        )
    for i, row in enumerate(rows):
        y = TOP + ROW_HEIGHT * i + ROW_HEIGHT / 2
        tone = f" {escape(row.tone)}" if row.tone else ""
        out.append(f'<g class="row{tone}" data-label="{escape(row.label)}">')
        out.append(f'<text class="label" x="{x0 - 8:.1f}" y="{y + 4:.1f}" text-anchor="end">{escape(row.label)}</text>')
        for value, label in row.marks:
            x = scale(value, domain, x0, x1)
            out.append(
                f'<line class="margin" x1="{x:.1f}" y1="{y - 10:.1f}" x2="{x:.1f}" y2="{y + 10:.1f}">'
                f"<title>{escape(label)}</title></line>"
            )
        if finite(row.estimate) and finite(row.low) and finite(row.high):
            assert row.estimate is not None and row.low is not None and row.high is not None
            lx, hx = scale(row.low, domain, x0, x1), scale(row.high, domain, x0, x1)
            ex = scale(row.estimate, domain, x0, x1)
            out.append(f'<line class="ci" x1="{lx:.1f}" y1="{y:.1f}" x2="{hx:.1f}" y2="{y:.1f}"/>')
            for wx in (lx, hx):
                out.append(f'<line class="ci" x1="{wx:.1f}" y1="{y - 5:.1f}" x2="{wx:.1f}" y2="{y + 5:.1f}"/>')
            out.append(
                f'<rect class="est" x="{ex - 4:.1f}" y="{y - 4:.1f}" width="8" height="8">'
                f"<title>{escape(row.label)}: {escape(row.text)}</title></rect>"
            )
            side = row.text
        else:
            side = row.note or "no estimate"
            out.append(f'<text class="none" x="{(x0 + x1) / 2:.1f}" y="{y + 4:.1f}" text-anchor="middle">—</text>')
        out.append(f'<text class="side" x="{x1 + 10:.1f}" y="{y + 4:.1f}">{escape(side)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return Markup("".join(out))


def percent_tick(v: float) -> str:
    return f"{v * 100:.0f}%"


def unit_tick(v: float) -> str:
    return _fmt(v)


def points_tick(v: float) -> str:
    return f"{v:+g}" if v else "0"
