"""Markdown for CI step summaries (`$GITHUB_STEP_SUMMARY`), built so that it renders as meant.

GitHub renders CommonMark with GFM tables. Two things break such summaries quietly: a
block that swallows the next one (a `> Warning` line directly followed by a table makes
the table part of the blockquote, shown as raw `| … |` text), and text that happens to
hold Markdown syntax (a `|` inside a cell ends it; `*`, backticks or `<` start emphasis,
code or HTML). So every block here is separated from the next by a blank line, and free
text is escaped. The tests render the output with markdown-it-py and assert on the HTML.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_oloproof.records.access import asserting

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


def failed_cases(record: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(case id, what failed) for each case whose pytest item failed: asserting criteria below 1 or
    missing, or a system error."""
    out: list[tuple[str, list[str]]] = []
    for case in record.get("cases") or []:
        error = case.get("error")
        if error:
            stage = error.get("stage")
            out.append((case["id"], [f"system error{' in ' + stage if stage else ''}: {error.get('message', '')}"]))
            continue
        what = []
        criteria = case.get("criteria") or {}
        for name in asserting(record):
            c = criteria.get(name)
            if not c:
                continue
            if c.get("status") == "observed" and c.get("value") is not None and c["value"] < 1.0:
                what.append(name)
            elif c.get("status") == "missing":
                what.append(f"{name} missing ({c.get('reason')})")
        if what:
            out.append((case["id"], what))
    return out


def failed_case_lines(record: Mapping[str, Any], limit: int = FAILED_CASES_SHOWN) -> list[str]:
    """`**Failed cases (N of M)**` and a list of the first `limit`, then how many more."""
    failed = failed_cases(record)
    if not failed:
        return []
    total = len(record.get("cases") or [])
    items = [f"{code(cid)}: " + "; ".join(text(w) for w in what) for cid, what in failed[:limit]]
    if len(failed) > limit:
        more = len(failed) - limit
        items.append(f"and {more} more (`oloproof inspect {record.get('run_id')}` lists every case)")
    return [f"**Failed cases ({len(failed)} of {total})**", "", *bullets(items)]


def run_markdown(
    record: Mapping[str, Any],
    rows: Sequence[Sequence[str]],
    notes: Sequence[str],
    cache: Sequence[str],
) -> str:
    """A run's section: the metrics table, its notes, the cache lines, the failed cases."""
    conf = float(record.get("confidence", 0.95))
    system = (record.get("system") or {}).get("name")
    out = [f"### Oloproof · {text(system)} · {code(record['run_id'])} ({text(record.get('status'))})", ""]
    out += table(
        ("criterion", "estimate", f"{conf * 100:g}% interval", "accounting"),
        ([text(cell) for cell in row] for row in rows),
    )
    out += bullets([text(n) for n in notes])
    out += [f"{code(line)}  " for line in cache[:-1]] + [code(line) for line in cache[-1:]] + [""]
    out += failed_case_lines(record)
    return "\n".join(out).rstrip("\n") + "\n\n"


# ------------------------------------------------------------------ a comparison


def comparison_markdown(
    doc: Mapping[str, Any],
    doc_id: str,
    fmt_margin: Any,
    paragraphs: Sequence[str] = (),
    after_notes: Sequence[str] = (),
) -> str:
    """A comparison's section: warnings, `paragraphs` (plain text, e.g. the cases that are not pairs), the
    criterion table and its accounting, notes, `after_notes` (plain text, e.g. the cost line), decisions, gate."""
    out = [
        f"### Oloproof gate · {text(doc.get('gate') or 'no policy')}",
        "",
        f"Comparison {code(doc_id)} of {code(doc['candidate']['run_id'])} against {code(doc['baseline']['run_id'])}"
        f" · {doc['paired_cases']} paired cases",
        "",
    ]
    out += quote([f"Warning: {text(w)}" for w in doc.get("warnings") or []])
    for paragraph in paragraphs:
        out += [text(paragraph), ""]
    rows = []
    accounting = []
    for name, c in doc["criteria"].items():
        from pytest_oloproof.compare.comparison import criterion_accounting

        acc = criterion_accounting(c)
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
    for note in [*(doc.get("sample_size_notes") or []), *after_notes]:  # paragraphs: a list would merge
        out += [text(note), ""]
    if doc.get("decisions"):
        from pytest_oloproof.compare.release import describe_test

        def test_of(d: Mapping[str, Any]) -> str:
            if d.get("scope") == "run":
                return f"{describe_test(d)} (candidate alone)"
            return f"{d['test']}, margin {fmt_margin(d['margin'])} points"

        out += decision_table(doc["decisions"], test_of)
        reason = f" · {text(doc['gate_reason'])}" if doc.get("gate_reason") else ""
        out += [f"**Gate: {text(doc['gate'])} (exit {doc['exit_code']}){reason}**", ""]
    return "\n".join(out).rstrip("\n") + "\n\n"


def decision_table(decisions: Sequence[Mapping[str, Any]], test_of: Any) -> list[str]:
    """The decisions table, then each undecided decision's plan line (how many cases would decide it)."""
    rows = [
        [text(d["name"]), text(d["criterion"]), text(test_of(d)), f"**{text(d['outcome'])}**", text(d["reason"])]
        for d in decisions
    ]
    out = table(("decision", "criterion", "test", "outcome", "reason"), rows)
    out += bullets([f"{text(d['name'])}: {text(d['plan'])}" for d in decisions if d.get("plan")])
    return out


def decision_markdown(doc: Mapping[str, Any], doc_id: str, test_of: Any) -> str:
    """One run's release decision: the decisions table, plan lines and the gate."""
    run = doc["run"]
    out = [
        f"### Oloproof gate · {text(doc['gate'])}",
        "",
        f"Decision {code(doc_id)} of {code(run['run_id'])} · {run['cases']} cases · no baseline",
        "",
    ]
    out += decision_table(doc["decisions"], test_of)
    out += [f"**Gate: {text(doc['gate'])} (exit {doc['exit_code']})**", ""]
    return "\n".join(out).rstrip("\n") + "\n\n"
