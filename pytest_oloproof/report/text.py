"""Text for people: the metrics table, cache lines, slices; Markdown for CI summaries."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_oloproof.stats.intervals import round_outward
from pytest_oloproof.usage.accounting import budget_line, fmt_cost, tokens_line


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


def accounting(m: Mapping[str, Any]) -> str:
    worst = m.get("missing_at_worst")
    bounded = f" · with missing at worst: {fmt_interval(m['kind'], worst['low'], worst['high'])}" if worst else ""
    rest = f"{m['missing']} missing{bounded} · {m['excluded']} excluded"
    if m["kind"] == "rate":
        return f"{m.get('passed', 0)} / {m['observed']} observed · {rest}"
    return f"mean of {m['observed']} observed · {rest}"


def metric_rows(metrics: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    rows = []
    for name, m in metrics.items():
        interval = fmt_interval(m["kind"], m["low"], m["high"]) if m["observed"] else "—"
        rows.append((name, fmt_estimate(m), interval, accounting(m)))
    return rows


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "│" + "│".join(f" {c!s:<{w}} " for c, w in zip(cells, widths, strict=False)) + "│"

    def rule(left: str, mid: str, right: str) -> str:
        return left + mid.join("─" * (w + 2) for w in widths) + right

    return [rule("┌", "┬", "┐"), line(header), rule("├", "┼", "┤"), *[line(r) for r in rows], rule("└", "┴", "┘")]


def metrics_table(metrics: Mapping[str, Mapping[str, Any]], confidence: float) -> list[str]:
    if not metrics:
        return ["(no evaluators configured)"]
    header = ("criterion", "estimate", f"{confidence * 100:g}% interval", "accounting")
    lines = table(metric_rows(metrics), header)
    return lines + accounting_lines(metrics)


def accounting_lines(metrics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Beneath the table: exclusion and missing reasons with counts, why an interval fell back, clustering."""
    lines = []
    for name, m in metrics.items():
        for label, reasons in (("excluded", m.get("excluded_reasons")), ("missing", m.get("missing_reasons"))):
            if reasons:
                parts = ", ".join(f"{r} {n}" for r, n in sorted(reasons.items()))
                lines.append(f"{name}: {label} — {parts}")
        if m.get("note") and m.get("observed"):
            lines.append(f"{name}: interval {m.get('method')} ({m['note']})")
    if any(m.get("clustered") for m in metrics.values()):
        lines.append("Intervals treat whole clusters (metadata.cluster) as the independent units.")
    return lines


def cache_lines(cache: Mapping[str, Mapping[str, int]]) -> list[str]:
    def hm(k: str) -> str:
        return f"{cache[k]['hit']} hit/{cache[k]['miss']} miss"

    return [
        f"Cache: execution {hm('execution')}; judgment {hm('judgment')}",
        f"Stages: retrieve {hm('retrieve')}; generate {hm('generate')}",
    ]


def miss_lines(misses: Mapping[str, Any] | None) -> list[str]:
    """Why the caches missed, per stage (see missreasons.py)."""
    from pytest_oloproof.cache.miss_reasons import lines

    return lines(misses)


#: terminal width a slice line wraps at
SLICE_WIDTH = 120


def slice_lines(slices: Sequence[Mapping[str, Any]], min_support: int) -> list[str]:
    """One line per slice value listing every criterion; values short of support say so."""
    if not slices:
        return []
    lines = [f"Slices (exploratory: estimates within a slice are not population claims; min support {min_support})"]
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in slices:
        groups.setdefault((row["slice"], row["value"]), []).append(row)
    for (name, value), rows in groups.items():
        head = f"  {name}={value}"
        if all(r.get("insufficient_support") for r in rows):
            most = max(r["support"] for r in rows)
            lines.append(f"{head}: {most} observed · insufficient support")
            continue
        lines += _wrap(f"{head}: ", [_slice_cell(r) for r in rows])
    return lines


def _wrap(head: str, cells: Sequence[str], width: int = SLICE_WIDTH) -> list[str]:
    """Cells joined with " · ", continued on indented lines rather than one very long line."""
    lines, cur = [], head
    for cell in cells:
        if not cur.endswith(": ") and len(cur) + 3 + len(cell) + 2 > width:  # room for " ·"
            lines.append(cur + " ·")
            cur = "      " + cell
        else:
            cur = cur + cell if cur.endswith(": ") else f"{cur} · {cell}"
    return [*lines, cur]


def _slice_cell(row: Mapping[str, Any]) -> str:
    if row.get("insufficient_support"):
        return f"{row['criterion']} {row['support']} observed, insufficient support"
    est = fmt_estimate({"kind": row["kind"], "value": row["value_estimate"]})
    iv = fmt_interval(row["kind"], row["low"], row["high"])
    count = f"{row['passed']}/{row['support']}" if row["kind"] == "rate" else f"n={row['support']}"
    return f"{row['criterion']} {est} {iv} {count}"


def run_summary(record: Mapping[str, Any], *, store_root: str | None = None) -> list[str]:
    lines = metrics_table(record.get("metrics") or {}, float(record.get("confidence", 0.95)))
    lines += cache_lines(record["cache"])
    lines += miss_lines(record.get("cache_misses"))
    lines += usage_lines(record)
    lines += slice_lines(record.get("slices") or [], int(record.get("min_slice_support", 5)))
    counts = record.get("counts") or {}
    internal = counts.get("internal_errors", 0)
    errors = counts.get("errors", 0) - internal
    errors -= len((record.get("budget") or {}).get("cases_not_executed") or [])  # told by the Budget: line
    if errors:
        lines.append(f"System errors: {errors} case(s) missing for every criterion (see the run record)")
    if internal:
        lines.append(
            f"Internal errors: {internal} case(s) hit an error inside Oloproof and are missing for every criterion "
            "(reason internal_error; tracebacks in the run record) — please report it"
        )
    if record.get("note"):
        lines.append(f"Note: {record['note']}")
    where = f" in {store_root}" if store_root else ""
    lines.append(f"Run {record['run_id']} ({record['status']}, {len(record.get('cases') or [])} cases) stored{where}")
    return lines


def markdown_summary(record: Mapping[str, Any]) -> str:
    """A GitHub step-summary section for one run (rendering-safe Markdown: see `report.markdown`)."""
    from .markdown import run_markdown

    metrics = record.get("metrics") or {}
    cache = cache_lines(record["cache"]) + [line.strip() for line in miss_lines(record.get("cache_misses"))]
    return run_markdown(record, metric_rows(metrics), accounting_lines(metrics), cache + usage_lines(record))


def usage_lines(record: Mapping[str, Any]) -> list[str]:
    """The `Tokens:` line (spent by judges and system, saved by the caches) and the budget line, when there are."""
    return [line for line in (tokens_line(record.get("usage")), budget_line(record.get("budget"))) if line]


def case_line(c: Mapping[str, Any]) -> str:
    """One line per case for `oloproof inspect RUN`."""
    parts = []
    for name, cv in (c.get("criteria") or {}).items():
        if cv["status"] == "observed":
            v = cv["value"]
            parts.append(f"{name}={'pass' if v == 1.0 else ('fail' if v == 0.0 else f'{v:.3f}')}")
        else:
            parts.append(f"{name}={cv['status']}({cv.get('reason')})")
    pos = c.get("relevant_position")
    extra = f" · relevant position {pos}" if pos is not None else ""
    trunc = " · context truncated" if c.get("context_truncated") else ""
    err = f" · error: {c['error']['message']}" if c.get("error") else ""
    return f"{c['id']}: {', '.join(parts)}{extra}{trunc}{case_usage_text(c)}{err}"


def case_usage_text(c: Mapping[str, Any]) -> str:
    """` · 3 calls, 213 tokens, ~$0.00042` from a case record's `usage.totals` (empty when it spent nothing)."""
    spent = (((c.get("usage") or {}).get("totals")) or {}).get("spent") or {}
    if not spent.get("calls"):
        return ""
    tokens = "tokens unknown" if spent.get("tokens") is None else f"{spent['tokens']:,} tokens"
    cost = "" if spent.get("cost") is None else f", ~{fmt_cost(spent['cost'])}"
    return f" · {spent['calls']} call{'s' if spent['calls'] != 1 else ''}, {tokens}{cost}"
