"""Terminal text, from the views of views.py: a run's summary (metrics table, caches, usage, slices), a case
line, a diagnosis, a comparison, a release decision, the session gate, a plan and a judge validation.

What `pytest` prints under its summary, what every `oloproof` command prints, and what `oloproof inspect`
prints back from the store: one function per document, so the three never differ.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_oloproof.cache.miss_reasons import lines as _miss_reason_lines
from pytest_oloproof.compare.words import MAX_FAILURES, changed_summary, shown_ids
from pytest_oloproof.diagnose.labels import HYPOTHESIS, LABELS, NOT_DIAGNOSED, observed, passed
from pytest_oloproof.usage.accounting import BUDGET_EXHAUSTED

from .fmt import (
    fmt_cost,
    fmt_estimate,
    fmt_fraction,
    fmt_int,
    fmt_interval,
    fmt_margin,
    pct,
    printed_interval,
    signed_cost,
)
from .views import (
    CaseDetail,
    CaseView,
    ComparisonView,
    DecisionView,
    DiagnosisView,
    GateView,
    JudgeValidationView,
    PlanView,
    RepeatRow,
    RepeatsView,
    RunRow,
    RunView,
    UsageView,
    case_repeats,
)

if TYPE_CHECKING:
    from pytest_oloproof.diagnose.diagnosis import Result

__all__ = [
    "case_line",
    "case_repeat_lines",
    "comparison_lines",
    "decision_lines",
    "diagnosis_case_lines",
    "diagnosis_lines",
    "gate_lines",
    "judge_validation_lines",
    "plan_lines",
    "run_lines",
    "run_summary",
]

# ------------------------------------------------------------------ a run


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


def cache_lines(cache: Mapping[str, Mapping[str, int]] | None) -> list[str]:
    if cache is None:
        raise KeyError("cache")  # a record that holds only its start header has no summary

    def hm(k: str) -> str:
        return f"{cache[k]['hit']} hit/{cache[k]['miss']} miss"

    return [
        f"Cache: execution {hm('execution')}; judgment {hm('judgment')}",
        f"Stages: retrieve {hm('retrieve')}; generate {hm('generate')}",
    ]


def miss_lines(misses: Mapping[str, Any] | None) -> list[str]:
    """Why the caches missed, per stage (see cache/miss_reasons.py)."""
    return _miss_reason_lines(misses)


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


def corrected_line(criterion: str, c: Mapping[str, Any]) -> str:
    """A judge-corrected rate beside the judge's own figure (or why it cannot be computed)."""
    if c.get("missing"):
        return f"{criterion} judge-corrected: missing — {c['missing']} (labels {str(c.get('labels_id'))[:19]}…)"
    others = f"; {c['other_samples']} other sample(s) not used" if c.get("other_samples") else ""
    return (
        f"{criterion} judge-corrected: {pct(c['value'])} {fmt_interval('rate', c['low'], c['high'])} · "
        f"{c['labelled']} labels of a random sample of {c['judged']} judged · judge alone {pct(c['judge_rate'])}, "
        f"human − judge {c['rectifier']:+.3f} (labels {str(c['labels_id'])[:19]}…{others})"
    )


def corrected_lines(corrected: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One `corrected_line` per judge criterion with imported labels."""
    return [corrected_line(name, c) for name, c in corrected.items()]


def run_lines(view: RunView, *, store_root: str | None = None) -> list[str]:
    """The summary under pytest's, and the head of `oloproof inspect RUN`."""
    lines = metrics_table(view.metrics, view.confidence)
    lines += corrected_lines(view.corrected)
    lines += cache_lines(view.cache)
    lines += miss_lines(view.cache_misses)
    lines += usage_lines(view.usage)
    lines += slice_lines(view.slices, view.min_slice_support)
    lines += repeats_lines(view.repeats)
    if view.system_errors:
        n = view.system_errors
        lines.append(
            f"System errors: {n} case{'' if n == 1 else 's'} missing for every criterion "
            f"(see oloproof inspect {view.run_id} --failures)"
        )
    if view.internal_errors:
        lines.append(
            f"Internal errors: {view.internal_errors} case(s) hit an error inside Oloproof and are missing for "
            "every criterion (reason internal_error; tracebacks in the run record) — please report it"
        )
    if view.note:
        lines.append(f"Note: {view.note}")
    lines += [f"Check wiring: {w}" for w in wiring_texts(view.wiring)]
    where = f" in {store_root}" if store_root else ""
    n = view.case_count
    lines.append(f"Run {view.run_id} ({view.status}, {n} case{'' if n == 1 else 's'}) stored{where}")
    return lines


def repeats_lines(view: RepeatsView | None) -> list[str]:
    """The flaky cases and the variance split of a run with repeats (nothing for a run without)."""
    if view is None:
        return []
    lines = [
        f"Repeats: {view.n} per case · flaky cases (a verdict differs across repeats): "
        f"{len(view.flaky_cases)} of {view.case_count}"
    ]
    for name, ids in view.flaky.items():
        lines.append(f"  {name}: {', '.join(ids)}")
    if not view.variance:
        lines.append("No criterion varies within a case: more repeats would not narrow any interval")
    for v in view.variance:
        lines.append(
            f"Variance of {v.criterion} (Miller 2024): between cases {v.between:.4f}, within a case {v.within:.4f}"
        )
        lines.append(
            f"  standard error {v.se:.3f} with {v.repeats} repeats, {v.se_double:.3f} with {2 * v.repeats}, "
            f"{v.se_floor:.3f} with unlimited repeats (they remove at most {v.within_share:.0%} of the variance)"
        )
        if v.note:
            lines.append(f"  note: {v.note}")
    return lines


def case_repeat_lines(case: Mapping[str, Any]) -> list[str]:
    """One line per repeat of a case (for `oloproof inspect`): its verdicts, answer and error."""
    return repeat_row_lines(case_repeats(case))


def repeat_row_lines(rows: Sequence[RepeatRow]) -> list[str]:
    """One line per repeat: its verdicts, answer and error."""
    out = []
    for r in rows:
        parts = []
        for name, cv in r.criteria.items():
            if cv.get("status") == "observed":
                v = cv.get("value")
                parts.append(f"{name}={'pass' if v == 1.0 else ('fail' if v == 0.0 else f'{v:.3f}')}")
            else:
                parts.append(f"{name}={cv.get('status')}({cv.get('reason')})")
        answer = r.output.get("answer") if isinstance(r.output, Mapping) else None
        said = f" · answer {_short_answer(answer)}" if answer is not None else ""
        err = f" · error: {r.error}" if r.error is not None else ""
        out.append(f"  repeat {r.repeat}: {', '.join(parts)}{said}{err}")
    return out


def _short_answer(answer: Any, limit: int = 60) -> str:
    text = json.dumps(answer, ensure_ascii=False) if not isinstance(answer, str) else repr(answer)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_summary(record: Mapping[str, Any], *, store_root: str | None = None) -> list[str]:
    """`run_lines` of a run record."""
    return run_lines(RunView.of(record), store_root=store_root)


def case_line(c: CaseView | Mapping[str, Any]) -> str:
    """One line per case for `oloproof inspect RUN`."""
    view = c if isinstance(c, CaseView) else CaseView.of(c)
    parts = []
    for name, cv in view.criteria.items():
        if cv["status"] == "observed":
            v = cv["value"]
            parts.append(f"{name}={'pass' if v == 1.0 else ('fail' if v == 0.0 else f'{v:.3f}')}")
        else:
            parts.append(f"{name}={cv['status']}({cv.get('reason')})")
    pos = view.relevant_position
    extra = f" · relevant position {pos}" if pos is not None else ""
    trunc = " · context truncated" if view.context_truncated else ""
    err = f" · error: {view.error}" if view.error is not None else ""
    return f"{view.id}: {', '.join(parts)}{extra}{trunc}{case_usage_text(view)}{err}"


def case_usage_text(view: CaseView) -> str:
    """` · 3 calls, 213 tokens, ~$0.00042` from a case's spending (empty when it spent nothing)."""
    spent = view.spent
    if not spent.get("calls"):
        return ""
    tokens = "tokens unknown" if spent.get("tokens") is None else f"{spent['tokens']:,} tokens"
    cost = "" if spent.get("cost") is None else f", ~{fmt_cost(spent['cost'])}"
    return f" · {spent['calls']} call{'s' if spent['calls'] != 1 else ''}, {tokens}{cost}"


# ------------------------------------------------------------------ usage and cost


def usage_lines(view: UsageView | Mapping[str, Any]) -> list[str]:
    """The `Tokens:` line (spent by judges and system, saved by the caches) and the budget line, when there are
    (from a usage view, or a run record)."""
    if not isinstance(view, UsageView):
        view = UsageView.of_run(view)
    return [line for line in (tokens_line(view.summary), budget_line(view.budget)) if line]


def _source_text(name: str, s: Mapping[str, Any]) -> str:
    calls = s["calls"]
    head = f"{name} {fmt_int(calls)} call{'s' if calls != 1 else ''}"
    if s["input_tokens"] is None:
        return f"{head}, tokens unknown (not reported)"
    text = f"{head}, {fmt_int(s['input_tokens'])} in / {fmt_int(s['output_tokens'])} out"
    if s.get("cached_input_tokens"):
        text += f" ({fmt_int(s['cached_input_tokens'])} cached in)"
    if s["unknown_calls"]:
        text += f" + {s['unknown_calls']} call(s) of unknown usage"
    if s.get("cost") is not None:
        text += f", ~{fmt_cost(s['cost'])}"
    elif s.get("unpriced_models"):
        text += f" (no price for {', '.join(s['unpriced_models'])})"
    return text


def tokens_line(usage: Mapping[str, Any] | None) -> str | None:
    """`Tokens: judges …; system …; saved …` (None when the run reported no usage at all)."""
    if not usage:
        return None
    parts = []
    judges, system, saved = usage["judges"], usage["system"], usage["saved"]
    parts.append(_source_text("judges", judges) if judges["calls"] else "judges 0 calls")
    parts.append(_source_text("system", system) if system["calls"] else "system none reported")
    if saved["calls"]:
        what = []
        if saved["judges"]["calls"]:
            what.append(f"{fmt_int(saved['judges']['calls'])} judge call{'s' if saved['judges']['calls'] != 1 else ''}")
        if saved["system"]["calls"]:
            n = saved["system"]["calls"]
            what.append(f"{fmt_int(n)} system call{'s' if n != 1 else ''}")
        tokens = saved["tokens"]
        what.append("tokens unknown" if tokens is None else f"{fmt_int(tokens)} tokens")
        if saved["cost"] is not None:
            what.append(f"~{fmt_cost(saved['cost'])}")
        parts.append("saved " + ", ".join(what))
    else:
        parts.append("saved nothing")
    line = "Tokens: " + "; ".join(parts)
    if not usage.get("priced"):
        line += " (cost not computed: no `pricing` table in oloproof.yaml)"
    return line


def budget_line(budget: Mapping[str, Any] | None) -> str | None:
    """`Budget: the budget (max_cost ~$0.02) stopped the run: …` (None unless a budget stopped the run)."""
    if not budget or not budget.get("exhausted"):
        return None
    limits = []
    if budget.get("max_judge_calls") is not None:
        limits.append(f"max_judge_calls {budget['max_judge_calls']}")
    if budget.get("max_cost") is not None:
        limits.append(f"max_cost ~{fmt_cost(float(budget['max_cost']))}")
    parts = []
    if budget["cases_not_judged"]:
        parts.append(f"{len(budget['cases_not_judged'])} case(s) not fully judged")
    if budget["cases_not_executed"]:
        parts.append(f"{len(budget['cases_not_executed'])} case(s) not executed")
    return (
        f"Budget: the budget ({', '.join(limits)}) stopped the run: {', '.join(parts)}; "
        f"{budget['criteria_missing']} criterion value(s) missing ({BUDGET_EXHAUSTED})"
    )


def reexecution_line(view: UsageView | None) -> str | None:
    """What a diagnosis's re-execution spent (its child runs' usage), as a `Re-execution tokens:` line."""
    line = tokens_line(view.summary) if view is not None else None
    if line is None:
        return None
    line = "Re-execution tokens:" + line.removeprefix("Tokens:")
    if view is not None and view.absent_runs:
        line += f" ({view.absent_runs} child run(s) not in the store are not counted)"
    return line


def cost_lines(cost: Mapping[str, Any] | None) -> list[str]:
    """The comparison's cost line: totals over the paired cases and the difference per case."""
    if not cost or not cost.get("paired"):
        return []
    c, b, d, per = cost["candidate"], cost["baseline"], cost["difference"], cost["difference_per_case"]
    if d["cost"] is not None:
        return [
            f"Cost of the {cost['paired']} paired cases (cache hits at their recorded cost): "
            f"candidate ~{fmt_cost(c['cost'])}, baseline ~{fmt_cost(b['cost'])}, "
            f"difference {signed_cost(d['cost'])} ({signed_cost(per['cost'])} per case)"
        ]
    if d["tokens"] is not None:
        return [
            f"Tokens of the {cost['paired']} paired cases (cost not computed: no `pricing` table or an unpriced "
            f"model): candidate {fmt_int(c['tokens'])}, baseline {fmt_int(b['tokens'])}, "
            f"difference {d['tokens']:+,} ({per['tokens']:+,.1f} per case)"
        ]
    return [f"Cost of the {cost['paired']} paired cases: unknown (a provider did not report usage)"]


# ------------------------------------------------------------------ a diagnosis


def intervention_title(intervention: Mapping[str, Any]) -> str:
    """How an intervention is named in the output: "gold context", "top-k 4", "token budget 120", …"""
    name, settings = intervention["name"], intervention.get("settings") or {}
    if name == "top-k":
        return f"top-k {settings.get('top_k')}"
    if name == "reranker":
        return f"reranker {settings.get('reranker')}"
    if name == "token-budget":
        return f"token budget {settings.get('token_budget')}"
    return "gold context"


_CHILD_TITLES = {"control": "control", "intervention": "gold context", "replay_control": "replay control"}


def _short_message(message: str) -> str:
    """ "reranker() raised AttributeError: x" -> "AttributeError: x" (the stage is named by the line)."""
    head, sep, rest = message.partition("() raised ")
    return rest if sep and head.isidentifier() else message


def missing_lines(view: DiagnosisView) -> list[str]:
    """`reranker m:f failed on 13 of 13 cases: AttributeError: … (money_back, …); missing, reason system_error`."""
    lines = []
    for key, m in view.missing.items():
        title = intervention_title(view.intervention) if key == "replay" else _CHILD_TITLES.get(key, key)
        ids = ", ".join(m["cases"][:3]) + (", …" if len(m["cases"]) > 3 else "")
        example = f": {_short_message(m['example'])}" if m.get("example") else ""
        reasons = ", ".join(m["reasons"])
        lines.append(
            f"{title} failed on {m['count']} of {m['of']} cases{example} ({ids}); "
            f"missing, reason {reasons}; excluded from the counts below"
        )
    return lines


def _label_lines(counts: Mapping[str, int], of: int) -> list[str]:
    return [f"{label}: {counts[label]} of {of}, {LABELS[label][2]}" for label in LABELS if counts.get(label)]


def _case_list_lines(view: DiagnosisView) -> list[str]:
    """`Cases by label:` then one line per label (UNSTABLE and NOT_DIAGNOSED too) naming its cases."""
    by_label: dict[str, list[str]] = {}
    for e in view.cases:
        by_label.setdefault(str(e.get("label")), []).append(str(e["id"]))
    order = [*LABELS, *sorted(k for k in by_label if k not in LABELS)]
    rows = [f"  {label}: {', '.join(by_label[label])}" for label in order if by_label.get(label)]
    return ["Cases by label:", *rows] if rows else []


def _undiagnosable_lines(view: DiagnosisView) -> list[str]:
    ids = view.undiagnosable
    return [f"Undiagnosable: {len(ids)} failed case(s) without gold context: {', '.join(ids)}"] if ids else []


def _excluded(counts: Mapping[str, Any]) -> str:
    n = int(counts.get("replay_not_counted", 0))
    return f" ({n} without a value under the replay or its control, not counted)" if n else ""


def diagnosis_lines(view: DiagnosisView | Result | Mapping[str, Any], doc_id: str | None = None) -> list[str]:
    """The diagnose output (from the stored document alone), then what the re-execution spent when known.

    From a view, a diagnosis just run (`Result`), or a stored document and its id.
    """
    if isinstance(view, Mapping):
        view = DiagnosisView.of(view, doc_id)
    elif not isinstance(view, DiagnosisView):
        view = DiagnosisView.of_result(view)
    lines = _diagnosis_lines(view)
    line = reexecution_line(view.reexecution)
    return [*lines, line] if line else lines


def _diagnosis_lines(view: DiagnosisView) -> list[str]:
    c = view.counts
    lines = [f"Selected: {c['selected']} failed cases with gold context (observed; no population claim)"]
    lines += _undiagnosable_lines(view)
    doc_id = view.doc_id
    if not c["selected"] or doc_id is None:
        return lines
    no_control = (view.missing.get("control") or {}).get("count", 0)
    across_repeats = int(c.get("unstable_across_repeats") or 0)  # known from the run's repeats, not re-run
    lines.append(
        f"Control: {c['control_passed']} of {c['selected'] - across_repeats} passed when re-executed without the "
        "intervention" + (f" ({no_control} without a value)" if no_control else "")
    )
    if c["unstable"] - across_repeats:
        where = "the control" if view.intervention["name"] == "gold-context" else "a control"
        lines.append(f"UNSTABLE: {c['unstable'] - across_repeats} of {c['selected']}, passed in {where}; not diagnosed")
    if across_repeats:
        lines.append(
            f"UNSTABLE: {across_repeats} of {c['selected']}, verdicts differ across the run's repeats "
            "(not re-run); not diagnosed"
        )
    if c["not_diagnosed"]:
        lines.append(
            f"{NOT_DIAGNOSED}: {c['not_diagnosed']} of {c['selected']}, no value under the intervention "
            "or in the control (an error; see the child run); not diagnosed"
        )
    title = intervention_title(view.intervention)
    children = view.child_runs
    lines += missing_lines(view)
    if view.measured_nothing:
        lines.append("Nothing was measured: every selected case is missing a value (see above); no labels")
    if view.intervention["name"] == "gold-context":
        lines.append(f"Recovered under gold context: {c['recovered']} of {c['diagnosed']}")
        lines += _label_lines(c["labels"], c["diagnosed"])
        if view.implicated:
            parts = [f"{i['factor']}, in {i['count']} of the {i['of']} {i['basis']} failures" for i in view.implicated]
            lines.append(f"Implicated: {'; '.join(parts)}.")
        lines += [f"Candidate experiment: {x['experiment']}. {HYPOTHESIS}" for x in view.candidate_experiments]
        child = f"gold context {children['gold_context']}, control {children['control']}"
    else:
        g = c["gold"]
        lines.append(f"Recovered under {title}: {c['recovered']} of {c['diagnosed']}{_excluded(c)}")
        confirm = " or ".join(c["confirm_labels"])
        lines.append(f"Confirmed under {title}: {c['confirmed']} of {c['confirmable']} {confirm} cases also recovered")
        lines.append(
            f"Labels from gold context (diagnosis {view.gold_context_diagnosis}): "
            f"{g['recovered']} of {g['diagnosed']} recovered"
        )
        lines += _label_lines(g["labels"], g["diagnosed"])
        child = (
            f"gold context {children['gold_context']}, control {children['control']}, "
            f"{title} {children['replay']}, replay control {children['replay_control']}"
        )
    lines += _case_list_lines(view)
    lines += [f"Diagnosis {doc_id}", f"Child runs: {child}", f"Cases: oloproof inspect {doc_id}"]
    return lines


def diagnosis_case_lines(view: DiagnosisView | Mapping[str, Any], doc_id: str | None = None) -> list[str]:
    """`oloproof inspect DIAGNOSIS`: one line per case, then the undiagnosable ones."""
    if not isinstance(view, DiagnosisView):
        view = DiagnosisView.of(view, doc_id)
    title = intervention_title(view.intervention)
    lines = []
    for e in view.cases:
        pos = e.get("best_relevant_position")
        line = (
            f"{e['id']}: {e['label']}, {e['reason']}, strength {e['strength']}, "
            f"best relevant position {'n/a' if pos is None else pos}"
        )
        if view.replay:
            if passed(e["replay_control"]):
                tail = "passed in the replay control"
            elif not observed(e["replay_control"]):
                tail = f"no value in the replay control ({e['replay_control'].get('reason')})"
            elif passed(e["replay"]):
                tail = "recovered"
            elif e["replay"].get("status") != "observed":
                tail = f"no value ({e['replay'].get('reason')})"
            else:
                tail = "not recovered"
            line += f"; under {title}: {tail}"
        lines.append(line)
    lines += _undiagnosable_lines(view)
    return lines


# ------------------------------------------------------------------ a comparison


def criterion_accounting(c: Mapping[str, Any]) -> str:
    """`13 paired · 2 missing · with missing at worst: [-31.0, +20.1] · 0 excluded`."""
    worst = c.get("missing_at_worst")
    bounded = ""
    if worst:
        lo, hi = printed_interval(worst["low"], worst["high"])
        bounded = f" · with missing at worst: [{lo}, {hi}]"
    return f"{c['paired']} paired · {c['missing']} missing{bounded} · {c['excluded']} excluded"


def criterion_line(name: str, c: Mapping[str, Any]) -> str:
    acc = criterion_accounting(c)
    if not c["paired"]:
        return f"{name}: no paired values · {acc}"
    pr = c["printed"]
    return f"{name}: {pr['estimate']} points [{pr['low']}, {pr['high']}] · {acc}"


def decided_what(decisions: Sequence[Mapping[str, Any]]) -> str:
    """`2 against the baseline, 1 on the candidate alone`: what a policy mixing both kinds decided."""
    against = sum(1 for d in decisions if d.get("scope") != "run")
    alone = len(decisions) - against
    return f"{against} against the baseline, {alone} on the candidate alone"


def comparison_lines(view: ComparisonView | Mapping[str, Any], doc_id: str | None = None) -> list[str]:
    """The comparison (what `oloproof compare` and `oloproof inspect COMPARISON` print), from its view or
    from the stored document and its id."""
    if not isinstance(view, ComparisonView):
        assert doc_id is not None
        view = ComparisonView.of(view, doc_id)
    lines = [
        f"Comparison {view.doc_id} of {view.candidate_id} against {view.baseline_id} · {view.paired_cases} paired cases"
    ]
    if view.has_policy:  # the answer first: the gate and each decision, then what to know about them
        reason = f" · {view.gate_reason}" if view.gate_reason else ""
        lines.append(f"Gate: {view.gate} (exit {view.exit_code}){reason}")
        decisions = view.decisions
        lines.append("Decisions" + (f" ({decided_what(decisions)})" if view.mixed_scopes else ""))
        for d in decisions:
            if d.get("scope") == "run":
                lines += _run_decision_rows([d])
                continue
            at_worst = " with missing at worst" if d["interval"].get("missing_at_worst") else ""
            lines.append(
                f"  {d['name']}  {d['criterion']}  {d['test']}, margin {fmt_margin(d['margin'])} points{at_worst}"
                f"  {d['outcome']}  {d['reason']}"
            )
            if d.get("plan"):
                lines.append(f"    {d['plan']}")
    else:
        lines.append("No policy given: no decisions and no gate (add --policy compare.yaml)")
    lines += [f"Warning: {w}" for w in view.warnings]
    for name, c in view.criteria.items():
        lines.append(criterion_line(name, c))
        for label in ("missing", "excluded"):
            reasons = c.get(f"{label}_reasons") or {}
            if reasons:
                lines.append(f"  {label}: " + ", ".join(f"{r} {n}" for r, n in reasons.items()))
    lines += list(view.sample_size_notes)
    lines += cost_lines(view.cost)
    flipped = view.flipped
    if flipped:
        lines.append("Flipped cases")
        lines += [f"  {g.criterion} {g.direction} ({len(g.ids)}): {', '.join(g.ids)}" for g in flipped]
    if view.slices:
        supported = [r for r in view.slices if not r.get("insufficient_support")]
        folded = len(view.slices) - len(supported)
        lines.append("Slices (exploratory; grouped by the baseline's value; not population claims)")
        for r in supported:
            pr = r["printed"]
            lines.append(
                f"  {r['slice']}={r['value']}  {r['criterion']}: {pr['estimate']} points [{pr['low']}, {pr['high']}]"
                f" · {r['paired']} paired"
            )
        if folded:
            lines.append(
                f"  {folded} slice row{'' if folded == 1 else 's'} with fewer than {view.min_slice_support} paired "
                f"cases not shown (insufficient support; all of them: oloproof inspect {view.doc_id} --json)"
            )
    return lines


def unpaired_paragraphs(view: ComparisonView) -> list[str]:
    """One paragraph naming the cases that are not pairs: changed, or present in one run only."""
    parts = []
    if view.changed:
        parts.append(changed_summary(view.changed))
    for ids, label in (
        (view.only_in_candidate, "only in the candidate"),
        (view.only_in_baseline, "only in the baseline"),
    ):
        if ids:
            parts.append(f"{len(ids)} case{'' if len(ids) == 1 else 's'} {label}: {shown_ids(ids)}")
    if not parts:
        return []
    return ["Cases not paired: " + "; ".join(parts) + "."]


# ------------------------------------------------------------------ a release decision


def describe_test(d: Mapping[str, Any]) -> str:
    """`minimum 70.0%  [63.1%, 80.2%]`, `max-failures 0 (1 failed, 0 missing)`: a single-run decision's test."""
    if d["test"] == MAX_FAILURES:
        return f"max-failures {d['max_failures']} ({d['failures']} failed, {d['missing']} missing)"
    iv = d["interval"]
    at_worst = " with missing at worst" if iv.get("missing_at_worst") else ""
    if d.get("corrected"):  # the judge-corrected rate: its interval, or none without labels
        labels = d.get("labels")
        shown = fmt_interval("rate", iv["low"], iv["high"]) if labels else "no labels"
        of = f" ({labels['labelled']} labels of {labels['judged']} judged)" if labels else ""
        return f"{d['test']} {fmt_fraction(d['threshold'], d['kind'])}  judge-corrected {shown}{of}"
    return (
        f"{d['test']} {fmt_fraction(d['threshold'], d['kind'])}"
        f"  {fmt_interval(d['kind'], iv['low'], iv['high'])}{at_worst}"
    )


def _run_decision_rows(decisions: Sequence[Mapping[str, Any]]) -> list[str]:
    """The single-run rows of a decisions table, each undecided one followed by its plan line."""
    lines = []
    for d in decisions:
        lines.append(f"  {d['name']}  {d['criterion']}  {describe_test(d)}  {d['outcome']}  {d['reason']}")
        if d.get("plan"):
            lines.append(f"    {d['plan']}")
    return lines


def decision_lines(view: DecisionView | Mapping[str, Any], doc_id: str | None = None) -> list[str]:
    """The decision (what `oloproof gate` and `oloproof inspect DECISION` print), from its view or from the
    stored document and its id."""
    if not isinstance(view, DecisionView):
        assert doc_id is not None
        view = DecisionView.of(view, doc_id)
    n = len(view.decisions)
    return [
        f"Decision {view.doc_id} of {view.run_id} · {view.cases} cases · "
        f"{n} single-run decision{'' if n == 1 else 's'} (no baseline)",
        "Decisions",
        *_run_decision_rows(view.decisions),
        f"Gate: {view.gate} (exit {view.exit_code}) · blocks on {', '.join(view.block_on)}",
    ]


def gate_lines(gate: GateView | Any) -> list[str]:
    """What the session's gate adds beneath the run's summary: the comparison or decision, or why there is none."""
    view = gate if isinstance(gate, GateView) else GateView.of(gate)
    if view.failure is not None:
        what, message = view.failure
        return [f"{what} not possible: {message}"]
    if view.decision is not None:
        return decision_lines(view.decision)
    if view.comparison is not None:
        return comparison_lines(view.comparison)
    return []


# ------------------------------------------------------------------ a plan


def plan_lines(view: PlanView) -> list[str]:
    """`oloproof plan`: each decision's outcome, and for an undecided one how many cases would decide it."""
    what = (
        f"run {view.ref} · {view.cases} cases"
        if view.kind == "run"
        else f"comparison {view.ref} · {view.cases} paired cases"
    )
    lines = [f"Plan for {what} · {view.policy}"]
    for r in view.rows:
        lines.append(f"  {r['name']}  {r['criterion']}  {r['outcome']}  {r['reason']}")
        if r["plan"]:
            lines.append(f"    {r['plan']}")
    if not any(r["plan"] for r in view.rows):
        lines.append("Every decision is decided: nothing to plan")
    return lines


# ------------------------------------------------------------------ a judge validation


def judge_validation_lines(view: JudgeValidationView | Mapping[str, Any], doc_id: str | None = None) -> list[str]:
    """`oloproof validate-judge` and `oloproof inspect VALIDATION`: agreement, kappa, the confusion table, verdict."""
    if not isinstance(view, JudgeValidationView):
        assert doc_id is not None
        view = JudgeValidationView.of(view, doc_id)
    acc, kappa = view.agreement, view.kappa

    def num(v: Any) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    return [
        f"Judge {view.judge['type']} ({view.judge['criterion']}) {view.judge['identity']}",
        f"Labels: {view.n} examples, {view.judged} judged, {view.judge_failures} judge failures",
        f"Agreement: {num(acc.get('accuracy'))} [{num(acc.get('low'))}, {num(acc.get('high'))}]",
        f"Cohen's kappa: {num(kappa.get('value'))} [{num(kappa.get('low'))}, {num(kappa.get('high'))}]",
        *confusion_lines(view.confusion),
        f"Validation: {'PASSED' if view.passed else 'NOT PASSED'}"
        + ("" if view.passed else " — " + "; ".join(view.reasons)),
        f"Validation {view.doc_id}",
    ]


def confusion_lines(confusion: Mapping[str, Any] | None) -> list[str]:
    """The judged examples as a 2x2 table: human label by judge verdict (failures are not in it)."""
    if not confusion:
        return []
    cells = {k: int(v) for k, v in confusion.items()}
    pp, pf = cells.get("human_pass_judge_pass", 0), cells.get("human_pass_judge_fail", 0)
    fp, ff = cells.get("human_fail_judge_pass", 0), cells.get("human_fail_judge_fail", 0)
    rows = [
        ("", "judge pass", "judge fail", "total"),
        ("human pass", str(pp), str(pf), str(pp + pf)),
        ("human fail", str(fp), str(ff), str(fp + ff)),
        ("total", str(pp + fp), str(pf + ff), str(pp + pf + fp + ff)),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    body = [
        "  " + r[0].ljust(widths[0]) + "".join("  " + c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))
        for r in rows
    ]
    return ["Confusion (human label × judge verdict, judged examples only):", *body]


# ------------------------------------------------------------------ a judge probe


def judge_probe_summary(doc: Mapping[str, Any]) -> str:
    """`flipped on 2 of 13 cases re-asked 3 times: 15.4% [1.9%, 45.4%]` (95% Clopper–Pearson, rounded outward
    like every printed interval)."""
    r = doc["flip_rate"]
    rate = "n/a" if r["rate"] is None else pct(r["rate"])
    interval = "[n/a]" if r["low"] is None or r["high"] is None else fmt_interval("rate", r["low"], r["high"])
    return (
        f"verdict flipped on {r['flipped']} of {r['of']} cases asked {doc['times'] + 1} times: "
        f"{rate} {interval} ({100 * r['confidence']:g}% Clopper–Pearson)"
    )


def judge_probe_lines(doc: Mapping[str, Any], doc_id: str) -> list[str]:
    """`oloproof judge probe` and `oloproof inspect PROBE`: the flip rate, then each case's verdicts."""
    j, c = doc["judge"], doc["counts"]
    lines = [
        f"Judge {j['type']} ({j['criterion']}) {j['identity']}",
        f"Run {doc['run_id']}: {c['probed']} recorded verdicts, each asked {doc['times']} more time(s) on the same "
        f"inputs; {c['asks']} asks ({c['asks_cached']} from the judgment cache, {c['asks_missing']} without a verdict)",
    ]
    if c["not_probed"]:
        lines.append(f"Not probed: {c['not_probed']} case(s) without a recorded verdict")
    if c["with_missing_asks"]:
        lines.append(
            f"Missing: {c['with_missing_asks']} case(s) with an ask that returned no verdict; "
            "left out of the flip rate (see below)"
        )
    lines.append("Consistency: " + judge_probe_summary(doc))
    lines.append("Cases (recorded verdict first):")
    for e in doc["cases"]:
        shown = ", ".join(v or "missing" for v in e["verdicts"])
        state = "missing" if e["flipped"] is None else "flipped" if e["flipped"] else "stable"
        why = "; ".join(f"ask {m['probe']}: {m['reason']}" for m in e["missing"])
        lines.append(f"  {e['id']}: {shown} — {state}" + (f" ({why})" if why else ""))
    lines.append(f"Probe {doc_id}")
    return lines


# ------------------------------------------------------------------ a new project


def capacity_line(c: Mapping[str, Any], confidence: float) -> str:
    """What one decision of a release policy can decide at the suite's size (`oloproof init`)."""
    head = f"  {c['name']} ({c['criterion']} {c['test']}"
    if c["test"] == "max-failures":
        return f"{head} {c['max_failures']}): counts failed cases, so any suite size can decide it"
    threshold = pct(c["threshold"])
    head += f" {threshold}):"
    allowed = c["failures_allowed"]
    if allowed is not None:
        if allowed == 0:
            return f"{head} PASS only if all {c['cases']} cases pass"
        return f"{head} PASS with at most {allowed} of the {c['cases']} cases failing"
    needed = c.get("cases_needed")
    size = f"about {needed:,} cases" if needed is not None else "more cases than any suite holds"
    return (
        f"{head} cannot PASS at {c['cases']} cases even if every case passes (the {confidence:.0%} interval "
        f"is too wide); it takes {size} all passing"
    )


def init_lines(
    directory: str,
    written: Sequence[str],
    capacity: Sequence[Mapping[str, Any]],
    cases: int,
    confidence: float,
    in_place: bool,
) -> list[str]:
    """`oloproof init`: the files written, what to do next, and what the suite can decide at its size."""
    lines = [f"Wrote a runnable Oloproof project in {directory}:"]
    lines += [f"  {name}" for name in written]
    lines.append("Next:")
    step = 1
    if not in_place:
        lines.append(f"  {step}. cd {directory}")
        step += 1
    lines += [
        f"  {step}. oloproof run                                   evaluate the {cases} cases (exit 1 if any fails)",
        f"  {step + 1}. oloproof inspect latest --failures             one line per failed case",
        f"  {step + 2}. oloproof run --oloproof-policy release.yaml    gate a release (exit 3 on BLOCK)",
        f"  {step + 3}. edit app.py (your retriever and generator) and cases.jsonl (your questions and labels)",
        f"What {cases} cases can decide (release.yaml, {confidence:.0%} intervals):",
    ]
    lines += [capacity_line(c, confidence) for c in capacity]
    return lines


# ------------------------------------------------------------------ wiring checks

LANGCHAIN_K = "def _get_relevant_documents(self, query, *, run_manager, k=None)"


def wiring_text(w: Mapping[str, Any]) -> str:
    """One wiring check's finding: what was seen in every case, and what to check."""
    check, n = w.get("check"), w.get("cases")
    every = f"every case ({n})" if n != 1 else "the one case"
    if check == "short_retrieval":
        return (
            f"the retriever returned fewer than depth {w['depth']} candidates in {every} (at most "
            f"{w['most_returned']}): does it accept the depth Oloproof asks for? A LangChain retriever must take k: "
            f"`{LANGCHAIN_K}`; otherwise lower depth or add documents"
        )
    if check == "no_label_match":
        return (
            f"no retrieved {w['unit']} of any labelled case ({n}) matches a relevance label "
            f"(retrieved e.g. {w['retrieved_example']!r}, labels name e.g. {w['label_example']!r}): do the "
            "retriever's ids match the ids in cases.jsonl? (a vector store makes random ids unless documents are "
            "added with ids, or pass doc_id_key=)"
        )
    if check == "vacuous_citations":
        return (
            f"{w['criterion']} was observed on outputs citing nothing in {every} (output field {w['field']!r} "
            "empty), so it checked nothing: does generate() return citations? Set `require_citations: true` on "
            "the citation_validity evaluator to fail an answer that cites nothing"
        )
    if check == "identical_scores":
        same = f" ({w['score']:g})" if isinstance(w.get("score"), (int, float)) else ""
        return (
            f"every candidate of {every} has the same score{same}: is the embedding a mock (MockEmbedding scores "
            "every node alike)? The ranking then carries no information"
        )
    return f"{check}: {dict(w)}"


def wiring_texts(wiring: Sequence[Mapping[str, Any]]) -> list[str]:
    """The wiring findings of a run, one text each (the same words in the terminal, JSON readers and HTML)."""
    return [wiring_text(w) for w in wiring]


# ------------------------------------------------------------------ triage in the terminal


def runs_line(r: RunRow) -> str:
    """One run of `oloproof runs`: id, status, start, system, cases, headline metric, and its kind."""
    cases = f"{r.cases if r.cases is not None else '?'} case{'' if r.cases == 1 else 's'}"
    headline = ""
    if r.headline is not None:
        name, m = r.headline
        headline = f"  {name} {fmt_estimate(m)}"
    marks = []
    if r.child:
        marks.append(f"child run ({r.purpose})")
    if r.partial:
        marks.append(f"{r.partial}: part of the suite")
    if r.started_only:
        marks.append("not finished: run.json holds only its start header")
    kind = f"  [{'; '.join(marks)}]" if marks else ""
    return (
        f"{r.run_id}  {r.status or '?':<10}  {r.started_at or '':<24}  {r.system} {r.version or ''}  {cases}"
        f"{headline}{kind}"
    )


def failures_lines(view: RunView) -> list[str]:
    """`oloproof inspect RUN --failures`: one line per failed, errored or missing case and what failed."""
    failed = view.failed
    n = view.case_count
    head = f"Run {view.run_id} · {n} case{'' if n == 1 else 's'} · {len(failed)} failed"
    if not failed:
        return [head, "No case failed"]
    width = max(len(f.id) for f in failed)
    lines = [head]
    lines += [f"  {f.id:<{width}}  {'; '.join(f.what)}" for f in failed]
    lines.append(f"One case whole: oloproof inspect {view.run_id} --case {failed[0].id}")
    return lines


def _clip(value: Any, width: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _score(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else ("—" if v is None else str(v))


def case_detail_lines(d: CaseDetail) -> list[str]:
    """`oloproof inspect RUN --case ID`: the case whole, from its input to each verdict and its reason."""
    verdict = f"FAILED: {'; '.join(d.failed)}" if d.failed else "passed"
    lines = [f"Case {d.id} · run {d.run_id} · {verdict}", f"Input: {_clip(d.input, 200)}"]
    question = d.input.get("question") if isinstance(d.input, Mapping) else d.input
    if d.query is not None and d.query != question:
        lines.append(f"Query: {_clip(d.query, 200)}")
    if d.expected:
        lines.append(f"Expected: {_clip(d.expected, 200)}")
    if d.metadata:
        lines.append(f"Metadata: {_clip(d.metadata)}")
    if d.error:
        lines.append(f"Error in {d.error.get('stage') or 'the system'}: {d.error.get('message')}")
    if d.ladder is None:
        lines.append("Retrieval: none recorded")
    else:
        labelled = any(r.grade is not None for r in d.ladder)
        lines.append(
            f"Retrieval: {len(d.ladder)} of depth {d.depth}, top-k {d.top_k}"
            + (" (* relevant)" if labelled else " (the case has no relevance labels)")
        )
        cut_shown = False
        for r in d.ladder:
            if not cut_shown and isinstance(d.top_k, int) and isinstance(r.position, int) and r.position > d.top_k:
                lines.append(f"  ---- top-k cut ({d.top_k}): below, not given to generate ----")
                cut_shown = True
            unit = f"{r.doc_id}" + (f"#{r.chunk_id}" if r.chunk_id else "")
            mark = "*" if r.grade else " "
            state = f"dropped ({r.reason})" if r.state == "dropped" else r.state
            lines.append(f"  {mark}{r.position!s:>3}  {unit}  score {_score(r.score)}  {state}  {_clip(r.text, 60)}")
    n = len(d.context)
    lines.append(
        f"Context: {n} passage{'' if n == 1 else 's'}"
        + (" (truncated by the token budget)" if d.context_truncated else "")
    )
    lines += [f"  [{r.position}] {r.doc_id}: {_clip(r.text, 200)}" for r in d.context]
    lines.append(f"Output: {_clip(d.output, 300)}")
    lines.append("Verdicts:")
    width = max((len(v.name) for v in d.verdicts), default=0)
    for v in d.verdicts:
        part = "asserts " if v.asserts else "measured"
        if v.status == "observed":
            outcome = "FAIL" if v.failed else ("pass" if (v.value or 0) >= 1.0 else "")
            actual = _score(v.actual) if isinstance(v.actual, float) else _clip(v.actual, 80)
            lines.append(
                f"  {v.name:<{width}}  {outcome:<4}  {_score(v.value):<6}  {part}  "
                f"expected {_clip(v.expected, 80)} · got {actual}"
            )
        else:
            lines.append(f"  {v.name:<{width}}  {v.status} ({v.reason})  {part}")
    repeats = repeat_row_lines(d.repeats)
    if repeats:
        lines.append(f"Repeats: {len(repeats)}")
        lines += repeats
    return lines
