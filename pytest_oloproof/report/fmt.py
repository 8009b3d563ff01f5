"""How numbers print in every renderer: rates, means, intervals, points, margins, token counts and dollars.

One copy, so the terminal, the Markdown summary and the HTML page print a value the same way. The few
that also word stored text (a comparison's printed bounds and plan lines, the budget's stop message)
are defined beside that computation and imported here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pytest_oloproof.compare.words import fmt_fraction, fmt_margin, fmt_points, printed_interval
from pytest_oloproof.stats.intervals import round_outward
from pytest_oloproof.usage.accounting import fmt_cost  # also words the budget's own stop message

__all__ = [
    "fmt_cost",
    "fmt_estimate",
    "fmt_fraction",
    "fmt_int",
    "fmt_interval",
    "fmt_margin",
    "fmt_points",
    "pct",
    "printed_interval",
    "signed_cost",
]


def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def fmt_interval(kind: str, low: float, high: float) -> str:
    """Outward-rounded interval: a printed bound never claims more than the data."""
    if kind == "rate":
        lo, hi = round_outward(low, high, 3)
        return f"[{lo * 100:.1f}%, {hi * 100:.1f}%]"
    lo, hi = round_outward(low, high, 3)
    return f"[{lo:.3f}, {hi:.3f}]"


def fmt_estimate(m: Mapping[str, Any]) -> str:
    v = m.get("value")
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return pct(v) if m["kind"] == "rate" else f"{v:.3f}"


def fmt_int(n: int) -> str:
    return f"{n:,}"


def signed_cost(x: float) -> str:
    return ("+" if x >= 0 else "-") + fmt_cost(abs(x))
