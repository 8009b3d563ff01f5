"""Markdown for CI step summaries (`$GITHUB_STEP_SUMMARY`) of a run, a comparison, a release decision and the
session gate, from the views of views.py, built so that it renders as meant.

GitHub renders CommonMark with GFM tables. Two things break such summaries quietly: a
block that swallows the next one (a `> Warning` line directly followed by a table makes
the table part of the blockquote, shown as raw `| … |` text), and text that happens to
hold Markdown syntax (a `|` inside a cell ends it; `*`, backticks or `<` start emphasis,
code or HTML). So every block here is separated from the next by a blank line, and free
text is escaped. The tests render the output with markdown-it-py and assert on the HTML.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import text as terminal
from .fmt import fmt_margin
from .views import ComparisonView, DecisionView, GateView, RunView

#: failed cases listed by name in a run's summary; the rest are counted
FAILED_CASES_SHOWN = 20

# ASCII punctuation that can start inline syntax anywhere (CommonMark lets any of it be escaped);
# `[…]` alone stays as written (intervals): without a `(` after it, it is no link
_INLINE = re.compile(r"([\\`*<~|&$])")  # `$` too: GitHub renders $…$ as math
_LINK = re.compile(r"\]\(")
# `_` opens or closes emphasis only next to a non-alphanumeric: `answer_correct` stays as written
_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
# what makes a line start a block: heading, list item, ordered list item, thematic break, quote, fence
_LINE_START = re.compile(r"^([-+](?=\s|$)|#{1,6}(?=\s|$)|>|=+$|\d{1,9}(?=[.)](?:\s|$)))")


def text(value: Any) -> str:
    """`value` as Markdown text that renders literally, on one line."""
    s = " ".join(str(value).split())
    s = _INLINE.sub(r"\\\1", s)
    s = _LINK.sub(r"]\\(", s)
    s = _UNDERSCORE.sub(r"\\_", s)
    # "\#", "\-", "\>"; "13\." (the escape goes before an ordered list's `.` or `)`)
    return _LINE_START.sub(lambda m: m.group(1) + "\\" if m.group(1)[0].isdigit() else "\\" + m.group(1), s)


def code(value: Any) -> str:
    """`value` as an inline code span (ids, run ids, digests); backticks inside get a longer fence."""
    s = " ".join(str(value).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A GFM table from cells that are already Markdown (escape them with `text`); blank line after."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return [*out, ""]


def quote(lines: Sequence[str]) -> list[str]:
    """One blockquote holding `lines` (Markdown), each on its own line; a blank line ends it."""
    if not lines:
        return []
    body: list[str] = []
    for i, line in enumerate(lines):
        body.append("> " + line + ("  " if i < len(lines) - 1 else ""))  # a hard break between warnings
    return [*body, ""]


def bullets(lines: Sequence[str]) -> list[str]:
    return [*(f"- {line}" for line in lines), ""] if lines else []


def _reasons(reasons: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{r} {n}" for r, n in sorted((reasons or {}).items()))


# ------------------------------------------------------------------ one run


def failed_case_lines(view: RunView, limit: int = FAILED_CASES_SHOWN) -> list[str]:
    """`**Failed cases (N of M)**` and a list of the first `limit`, then how many more."""
    failed = view.failed
    if not failed:
        return []
    items = [f"{code(f.id)}: " + "; ".join(text(w) for w in f.what) for f in failed[:limit]]
    if len(failed) > limit:
        more = len(failed) - limit
        items.append(f"and {more} more (`oloproof inspect {view.run_id}` lists every case)")
    return [f"**Failed cases ({len(failed)} of {view.case_count})**", "", *bullets(items)]


def run_markdown(view: RunView | Mapping[str, Any]) -> str:
    """A run's section: the metrics table, its notes, the cache and usage lines, the failed cases."""
    if not isinstance(view, RunView):
        view = RunView.of(view)
    cache = terminal.cache_lines(view.cache) + [line.strip() for line in terminal.miss_lines(view.cache_misses)]
    cache += terminal.usage_lines(view.usage)
    out = [f"### Oloproof · {text(view.system_name)} · {code(view.run_id)} ({text(view.status)})", ""]
    out += table(
        ("criterion", "estimate", f"{view.confidence * 100:g}% interval", "accounting"),
        ([text(cell) for cell in row] for row in terminal.metric_rows(view.metrics)),
    )
    notes = terminal.accounting_lines(view.metrics) + terminal.corrected_lines(view.corrected)
    out += bullets([text(n) for n in notes])
    out += [f"{code(line)}  " for line in cache[:-1]] + [code(line) for line in cache[-1:]] + [""]
    repeats = terminal.repeats_lines(view.repeats)
    if repeats:
        out += bullets([text(line.strip()) for line in repeats])
    out += failed_case_lines(view)
    return "\n".join(out).rstrip("\n") + "\n\n"


# ------------------------------------------------------------------ a comparison


def comparison_test(d: Mapping[str, Any]) -> str:
    """A decision's test as the tables show it: the margin against the baseline, or the single-run test."""
    if d.get("scope") == "run":
        return f"{terminal.describe_test(d)} (candidate alone)"
    return f"{d['test']}, margin {fmt_margin(d['margin'])} points"


def comparison_markdown(view: ComparisonView | Mapping[str, Any], doc_id: str | None = None) -> str:
    """A comparison's section: warnings, the cases that are not pairs, the criterion table and its accounting,
    notes, the cost line, decisions, gate."""
    if not isinstance(view, ComparisonView):
        assert doc_id is not None
        view = ComparisonView.of(view, doc_id)
    out = [
        f"### Oloproof gate · {text(view.gate or 'no policy')}",
        "",
        f"Comparison {code(view.doc_id)} of {code(view.candidate_id)} against {code(view.baseline_id)}"
        f" · {view.paired_cases} paired cases",
        "",
    ]
    out += quote([f"Warning: {text(w)}" for w in view.warnings])
    for paragraph in terminal.unpaired_paragraphs(view):
        out += [text(paragraph), ""]
    rows = []
    accounting = []
    for name, c in view.criteria.items():
        acc = terminal.criterion_accounting(c)
        if c["paired"]:
            pr = c["printed"]
            rows.append([text(name), text(pr["estimate"]), text(f"[{pr['low']}, {pr['high']}]"), text(acc)])
        else:
            rows.append([text(name), "—", "—", text(acc)])
        for label in ("missing", "excluded"):
            reasons = c.get(f"{label}_reasons")
            if reasons:
                accounting.append(text(f"{name} — {label}: {_reasons(reasons)}"))
    out += table(("criterion", "difference (points)", "interval", "accounting"), rows)
    out += bullets(accounting)
    for note in [*view.sample_size_notes, *terminal.cost_lines(view.cost)]:  # paragraphs: a list would merge
        out += [text(note), ""]
    if view.decisions:
        out += decision_table(view.decisions, comparison_test)
        reason = f" · {text(view.gate_reason)}" if view.gate_reason else ""
        out += [f"**Gate: {text(view.gate)} (exit {view.exit_code}){reason}**", ""]
    return "\n".join(out).rstrip("\n") + "\n\n"


def decision_table(decisions: Sequence[Mapping[str, Any]], test_of: Callable[[Mapping[str, Any]], str]) -> list[str]:
    """The decisions table, then each undecided decision's plan line (how many cases would decide it)."""
    rows = [
        [text(d["name"]), text(d["criterion"]), text(test_of(d)), f"**{text(d['outcome'])}**", text(d["reason"])]
        for d in decisions
    ]
    out = table(("decision", "criterion", "test", "outcome", "reason"), rows)
    out += bullets([f"{text(d['name'])}: {text(d['plan'])}" for d in decisions if d.get("plan")])
    return out


# ------------------------------------------------------------------ a release decision and the session gate


def decision_markdown(view: DecisionView | Mapping[str, Any], doc_id: str | None = None) -> str:
    """One run's release decision: the decisions table, plan lines and the gate."""
    if not isinstance(view, DecisionView):
        assert doc_id is not None
        view = DecisionView.of(view, doc_id)
    out = [
        f"### Oloproof gate · {text(view.gate)}",
        "",
        f"Decision {code(view.doc_id)} of {code(view.run_id)} · {view.cases} cases · no baseline",
        "",
    ]
    out += decision_table(view.decisions, terminal.describe_test)
    out += [f"**Gate: {text(view.gate)} (exit {view.exit_code})**", ""]
    return "\n".join(out).rstrip("\n") + "\n\n"


def gate_markdown(gate: GateView | Any) -> str:
    """The session gate's section: its comparison or decision ("" when it could not decide)."""
    view = gate if isinstance(gate, GateView) else GateView.of(gate)
    if view.decision is not None:
        return decision_markdown(view.decision)
    if view.comparison is not None:
        return comparison_markdown(view.comparison)
    return ""
