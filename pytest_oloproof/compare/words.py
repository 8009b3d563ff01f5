"""The words a comparison or a decision stores (its warnings, printed bounds, sample-size notes and plan
lines), written once here and shared with report/, which prints the same values the same way.

Light to import (no policy, no store), so rendering a stored document loads none of the computing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_oloproof.stats.intervals import round_outward

#: the single-run test that counts failed cases (policy.py validates it)
MAX_FAILURES = "max-failures"


def changed_summary(changed: Mapping[str, Sequence[str]], limit: int = 5) -> str:
    """`1 case changed between the runs: refund_review (expected)`."""
    ids = sorted(changed)
    shown = ", ".join(f"{cid} ({' and '.join(changed[cid])})" for cid in ids[:limit])
    more = f", … ({len(ids) - limit} more)" if len(ids) > limit else ""
    n = len(ids)
    return f"{n} case{'' if n == 1 else 's'} changed between the runs: {shown}{more}"


def fmt_points(x: float) -> str:
    """A signed difference in points at 0.1 (never "-0.0")."""
    return f"{round(x, 1) + 0.0:+.1f}"


def printed_interval(low: float, high: float) -> tuple[str, str]:
    """Bounds in points rounded outward at 0.1: the printed interval contains the computed one."""
    lo, hi = round_outward(low, high, 1)
    return f"{lo:+.1f}", f"{hi:+.1f}"


def fmt_margin(m: float) -> str:
    return f"{m:.1f}" if round(m, 1) == m else f"{m:g}"


def shown_ids(ids: Sequence[str], limit: int = 5) -> str:
    """`a, b, c, d, e, … (3 more)`: the first `limit` ids (in warnings, and the report's unpaired cases)."""
    shown = ", ".join(ids[:limit])
    return shown + (f", … ({len(ids) - limit} more)" if len(ids) > limit else "")


def fmt_fraction(x: float, kind: str) -> str:
    """A threshold or estimate as the criterion prints: 70.0% for a rate, 0.700 for a mean (plan lines, and
    report/ for the decisions table)."""
    return f"{x * 100:.1f}%" if kind == "rate" else f"{x:.3f}"
