"""The HTML page's data: the views of views.py (a run, a diagnosis, a comparison, a release decision) as
the JSON the page's templates and script lay out, with what only the page shows (plots, the funnel,
each case's retrieval ladder and details).

The numbers and phrases come from the same views and the same text functions as the terminal and
Markdown output (text.py), so the HTML page never says something the terminal does not. Each page
view is plain data: the templates only lay it out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_oloproof.diagnose.labels import LABELS
from pytest_oloproof.evaluators.retrieval import qrels_of
from pytest_oloproof.records.access import asserting, cases_by_id, criteria_of, evaluator_rows, relevance_unit
from pytest_oloproof.stats.aggregate import slice_value

from .fmt import fmt_estimate, fmt_interval, fmt_margin
from .svg import ForestRow, forest_plot, nice_symmetric, percent_tick, points_tick, unit_tick
from .text import (
    accounting,
    accounting_lines,
    cache_lines,
    case_usage_text,
    corrected_lines,
    cost_lines,
    criterion_line,
    describe_test,
    diagnosis_lines,
    intervention_title,
    miss_lines,
    repeats_lines,
    usage_lines,
    wiring_texts,
)
from .views import CaseView, DiagnosisView, RunView, case_repeats, criterion_failures, flipped_groups

#: a criterion value in the case table: o(bserved) / m(issing) / x (excluded)
_STATUS_CODE = {"observed": "o", "missing": "m", "excluded": "x"}


# ------------------------------------------------------------------ small helpers


def json_clean(value: Any) -> Any:
    """A copy safe for strict JSON: non-finite floats become their text ("nan", "inf")."""
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_clean(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def case_failed(case: Mapping[str, Any], asserts: set[str]) -> bool:
    """As pytest judged the case's item: a system error, or an asserting criterion failed or missing."""
    return bool(case.get("error")) or bool(criterion_failures(case, asserts))


def grades_of(case: Mapping[str, Any], unit: str) -> dict[Any, int] | None:
    """The case's relevance labels as qrels, or None when it has none."""
    rel = (case.get("expected") or {}).get("relevant") if isinstance(case.get("expected"), Mapping) else None
    if not rel:
        return None
    try:
        return qrels_of(rel, unit)  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError):
        return None


def _unit_key(cand: Mapping[str, Any], unit: str) -> Any:
    return (cand.get("doc_id"), cand.get("chunk_id")) if unit == "chunk" else cand.get("doc_id")


# ------------------------------------------------------------------ forest plots


def _axis(kind: str) -> dict[str, Any]:
    if kind == "rate":
        return {"domain": (0.0, 1.0), "ticks": (0.0, 0.25, 0.5, 0.75, 1.0), "tick_format": percent_tick}
    return {"domain": (0.0, 1.0), "ticks": (0.0, 0.25, 0.5, 0.75, 1.0), "tick_format": unit_tick}


def metric_forest_rows(metrics: Mapping[str, Mapping[str, Any]]) -> list[ForestRow]:
    rows = []
    for name, m in metrics.items():
        observed = int(m.get("observed") or 0)
        est, lo, hi = _num(m.get("value")), _num(m.get("low")), _num(m.get("high"))
        if observed and est is not None and lo is not None and hi is not None:
            text = f"{fmt_estimate(m)} {fmt_interval(m['kind'], lo, hi)} · {accounting(m)}"
            rows.append(ForestRow(name, est, lo, hi, text=text))
        else:
            rows.append(ForestRow(name, None, None, None, note=f"no observed values · {accounting(m)}"))
    return rows


def metrics_plot(metrics: Mapping[str, Mapping[str, Any]], confidence: float) -> Any:
    if not metrics:
        return None
    return forest_plot(
        metric_forest_rows(metrics),
        title=f"Every criterion: estimate and {confidence * 100:g}% interval",
        text_width=470,
        **_axis("rate"),
    )


def slice_plots(slices: Sequence[Mapping[str, Any]], min_support: int) -> list[dict[str, Any]]:
    """One small forest plot per slice: a row per value and criterion; short support shown as such."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in slices:
        groups.setdefault(str(row["slice"]), []).append(row)
    out = []
    for name, rows in groups.items():
        frows = []
        for r in rows:
            label = f"{r['value']} · {r['criterion']}"
            if r.get("insufficient_support"):
                frows.append(ForestRow(label, None, None, None, note=f"{r['support']} observed · insufficient support"))
                continue
            est, lo, hi = _num(r.get("value_estimate")), _num(r.get("low")), _num(r.get("high"))
            if est is None or lo is None or hi is None:
                frows.append(ForestRow(label, None, None, None, note=f"{r.get('support')} observed · no estimate"))
                continue
            count = f"{r.get('passed')}/{r['support']}" if r.get("kind") == "rate" else f"n={r['support']}"
            est_text = fmt_estimate({"kind": r.get("kind"), "value": est})
            text = f"{est_text} {fmt_interval(str(r.get('kind')), lo, hi)} {count}"
            frows.append(ForestRow(label, est, lo, hi, text=text))
        out.append(
            {
                "name": name,
                "plot": forest_plot(
                    frows,
                    title=f"Slice {name} (exploratory; min support {min_support})",
                    label_width=230,
                    text_width=300,
                    css_class="forest small",
                    **_axis("rate"),
                ),
            }
        )
    return out


# ------------------------------------------------------------------ the stage funnel


def answer_criterion(record: Mapping[str, Any]) -> str | None:
    """The criterion a funnel ends in: the run's first pass/fail (asserting) criterion, as diagnose picks it."""
    for e in evaluator_rows(record):
        if e.get("asserts") and e.get("kind", "rate") == "rate":
            return str(e["criterion"])
    return None


def funnel(record: Mapping[str, Any], criterion: str | None = None) -> dict[str, Any]:
    """Cases with relevance labels, step by step: retrieved within depth → within top-k → in context → passed.

    Each step counts the cases of the step before that also pass this one, so each drop is one of
    the four failure places a diagnosis names (retrieval, ranking cut, context budget, generation).
    """
    system = record.get("system") or {}
    depth, top_k = system.get("depth"), system.get("top_k")
    criterion = criterion or answer_criterion(record)
    unit = relevance_unit(record)
    labelled = retrieved = within_k = in_context = answered = with_retrieval = 0
    for case in record.get("cases") or []:
        if case.get("error") or case.get("retrieval") is None:
            continue
        with_retrieval += 1
        qrels = grades_of(case, unit)
        if not qrels or not any(g > 0 for g in qrels.values()):
            continue
        labelled += 1
        positions = [
            int(c["position"]) for c in case["retrieval"] if qrels.get(_unit_key(c, unit), 0) > 0 and "position" in c
        ]
        if not positions:
            continue
        retrieved += 1
        if top_k is not None and min(positions) > int(top_k):
            continue
        within_k += 1
        if not set(positions) & set(case.get("context") or []):
            continue
        in_context += 1
        c = (case.get("criteria") or {}).get(criterion or "") or {}
        if c.get("status") == "observed" and (_num(c.get("value")) or 0.0) >= 1.0:
            answered += 1
    steps = [
        ("Relevant retrieved within depth" + (f" {depth}" if depth else ""), retrieved, "not retrieved: retrieval"),
        ("Relevant within top-k" + (f" {top_k}" if top_k else ""), within_k, "ranked below the cut: ranking cut"),
        ("Relevant entered the context", in_context, "dropped by assembly: context budget"),
        (f"Answer passed ({criterion})" if criterion else "Answer passed", answered, "failed with it in context"),
    ]
    out_steps, before = [], labelled
    for label, count, lost in steps:
        out_steps.append(
            {
                "label": label,
                "count": count,
                "of": labelled,
                "share": (count / labelled) if labelled else 0.0,
                "dropped": before - count,
                "dropped_label": lost,
            }
        )
        before = count
    answer_measured = criterion is not None
    return {
        "criterion": criterion,
        "labelled": labelled,
        "with_retrieval": with_retrieval,
        "cases": len(record.get("cases") or []),
        "steps": out_steps if answer_measured else out_steps[:3],
    }


# ------------------------------------------------------------------ the case table and details


class _Texts:
    """Passage texts stored once per page: a large run repeats the same passages across cases."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.items: list[str] = []

    def ref(self, text: Any) -> int | None:
        if not isinstance(text, str):
            return None
        i = self.index.get(text)
        if i is None:
            i = self.index[text] = len(self.items)
            self.items.append(text)
        return i


def _ladder(case: Mapping[str, Any], qrels: Mapping[Any, int] | None, unit: str, top_k: Any, texts: _Texts) -> Any:
    retrieval = case.get("retrieval")
    if retrieval is None:
        return None
    context = set(case.get("context") or [])
    dropped = {
        int(d["position"]): str(d.get("reason") or "dropped") for d in case.get("dropped") or [] if "position" in d
    }
    rows = []
    for c in retrieval:
        pos = c.get("position")
        if pos in context:
            state = "c"  # entered the context
        elif pos in dropped:
            state = "d:" + dropped[pos]  # dropped by assembly, with its reason
        elif top_k is not None and isinstance(pos, int) and pos > int(top_k):
            state = "b"  # below the top-k cut
        else:
            state = "o"  # within top-k, not in the context, no reason recorded
        grade = None if qrels is None else qrels.get(_unit_key(c, unit))
        rows.append(
            [
                pos,
                c.get("doc_id"),
                c.get("chunk_id"),
                _readable(_num(c.get("score"))) if c.get("score") is not None else None,
                c.get("tokens"),
                grade,
                state,
                texts.ref(c.get("text")),
            ]
        )
    return rows


def _readable(v: float | None) -> float | None:
    """A retrieval score as a reader reads it: four significant digits (0.8234567891 -> 0.8235)."""
    return v if v is None or not math.isfinite(v) else float(f"{v:.4g}")


def _short_float(v: float | None) -> float | None:
    """Six decimals are plenty for a table cell, but never round a value below 1 up to a pass."""
    if v is None:
        return None
    r = round(v, 6)
    return v if (v < 1.0 <= r) or (v > 0.0 >= r) else r


def _criterion_cells(case: Mapping[str, Any], criteria: Sequence[str]) -> list[list[Any]]:
    out: list[list[Any]] = []
    for name in criteria:
        c = (case.get("criteria") or {}).get(name)
        if not c:
            out.append(["m", "not_evaluated"])
            continue
        code = _STATUS_CODE.get(str(c.get("status")), "m")
        out.append([code, _short_float(_num(c.get("value")))] if code == "o" else [code, c.get("reason")])
    return out


def _timings(timings: Any) -> Any:
    if not isinstance(timings, Mapping):
        return timings
    return {k: round(v, 6) if isinstance(v, float) and math.isfinite(v) else v for k, v in timings.items()}


def _criterion_details(case: Mapping[str, Any], texts: _Texts) -> dict[str, Any]:
    """Per criterion what the table does not already hold: expected, actual, reason, rationale, traceback.

    Strings go through the page's text table (`xs`, `as`: an index) since runs repeat them case after
    case ("relevant units within the first 2"); other values stay as they are (`x`, `a`). An actual
    equal to the criterion's value is left out.
    """
    out = {}
    for name, c in (case.get("criteria") or {}).items():
        d: dict[str, Any] = {}
        for key, short in (("expected", "x"), ("actual", "a")):
            v = c.get(key)
            if v is None or (key == "actual" and _num(v) is not None and _num(v) == _num(c.get("value"))):
                continue
            if isinstance(v, str):
                d[short + "s"] = texts.ref(v)
            else:
                d[short] = v
        if c.get("status") != "observed" and c.get("reason"):
            d["reason"] = c["reason"]
        detail = c.get("detail") or {}
        if isinstance(detail, Mapping):
            for key in ("rationale", "traceback", "message"):
                if detail.get(key):
                    d[key] = detail[key]
        if d:
            out[name] = d
    return out


def _cache(cache: Any) -> Any:
    """[execution, retrieve, generate, judgment hits, judgment misses]: the case's cache line, compactly."""
    if not isinstance(cache, Mapping):
        return None
    j = cache.get("judgment") or {}
    return [cache.get("execution"), cache.get("retrieve"), cache.get("generate"), j.get("hit"), j.get("miss")]


def _repeat_rows(case: Mapping[str, Any], criteria: Sequence[str]) -> list[list[Any]] | None:
    """Every repeat of the case (`repeats: N`): [index, criterion cells, output, error message]; None without."""
    rows = [
        [r.repeat, _criterion_cells({"criteria": r.criteria}, criteria), r.output, r.error] for r in case_repeats(case)
    ]
    return rows or None


def _without_nulls(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if v is not None}


def case_payload(
    record: Mapping[str, Any],
    labels: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The page's embedded data: a compact row per case, details rendered on demand by the page's script."""
    criteria = criteria_of(record)
    asserts = set(asserting(record))
    slice_names = [str(s) for s in (record.get("config") or {}).get("slices") or []] or sorted(
        {str(r["slice"]) for r in record.get("slices") or []}
    )
    unit = relevance_unit(record)
    top_k = (record.get("system") or {}).get("top_k")
    texts = _Texts()
    rows = []
    for case in record.get("cases") or []:
        qrels = grades_of(case, unit)
        label = (labels or {}).get(str(case.get("id")))
        rows.append(
            _without_nulls(
                {
                    "id": case.get("id"),
                    "f": case_failed(case, asserts),
                    "c": _criterion_cells(case, criteria),
                    "p": case.get("relevant_position"),
                    "t": case.get("context_truncated"),
                    "l": label.get("label") if label else None,
                    "s": [slice_value(case, n) for n in slice_names],
                    "md": case.get("metadata") or {},
                    "in": case.get("input"),
                    "ex": case.get("expected"),
                    "out": case.get("output"),
                    "q": case.get("query"),
                    "r": _ladder(case, qrels, unit, top_k, texts),
                    "e": case.get("error"),
                    "tm": _timings(case.get("timings")),
                    "ca": _cache(case.get("cache")),
                    "cd": _criterion_details(case, texts),
                    "src": case.get("source"),
                    "u": case_usage_text(CaseView.of(case)).removeprefix(" · ") or None,
                    "dg": dict(label) if label else None,
                    "rp": _repeat_rows(case, criteria),
                }
            )
        )
    metric_kinds = {n: (record.get("metrics") or {}).get(n, {}).get("kind") for n in criteria}
    return {
        "kind": "run",
        "run_id": record.get("run_id"),
        "criteria": [{"name": n, "asserts": n in asserts, "kind": metric_kinds.get(n)} for n in criteria],
        "slices": slice_names,
        "top_k": top_k,
        "depth": (record.get("system") or {}).get("depth"),
        "texts": texts.items,
        "cases": rows,
    }


# ------------------------------------------------------------------ page views


def _system_rows(system: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(str(k), "" if v is None else str(v)) for k, v in system.items()]


def diagnosis_labels(doc: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Case id -> its diagnosis entry (label, reason, strength), for the run page's label column."""
    if not doc:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for e in doc.get("cases") or []:
        out[str(e["id"])] = {k: e.get(k) for k in ("label", "reason", "strength", "best_relevant_position")}
    return out


def run_view(
    record: Mapping[str, Any],
    *,
    diagnosis: tuple[str, Mapping[str, Any]] | None = None,
    comparison: Mapping[str, Any] | None = None,
    store_root: str | None = None,
    decision: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything the run page shows; `comparison` is a comparison_view to show beneath (the CI form),
    `decision` a decision_view (the run decided alone by a release policy)."""
    view = RunView.of(record)
    metrics, confidence = view.metrics, view.confidence
    cases = record.get("cases") or []
    asserts = set(asserting(record))
    failed = sum(1 for c in cases if case_failed(c, asserts))
    labels = diagnosis_labels(diagnosis[1]) if diagnosis else {}
    system = record.get("system") or {}
    head = {
        "Run": record.get("run_id"),
        "Status": record.get("status"),
        "Note": record.get("note"),  # e.g. a run.json that holds only its start header
        "Purpose": record.get("purpose", "run"),
        "Started": record.get("started_at"),
        "Finished": record.get("finished_at"),
        "Oloproof": record.get("oloproof_version"),
        "Configuration": record.get("config_path"),
        "Store": store_root,
        "Confidence": f"{confidence * 100:g}%",
        "Seed": record.get("seed"),
        "Cache mode": record.get("cache_mode"),
        "Case set digest": record.get("case_set_digest"),
    }
    return {
        "kind": "run",
        "title": f"Oloproof run {record.get('run_id')}",
        "run_id": record.get("run_id"),
        "status": record.get("status"),
        "system_name": system.get("name"),
        "system_version": system.get("version"),
        "head": [(k, str(v)) for k, v in head.items() if v is not None],
        "system": _system_rows(system),
        "evaluators": [
            {
                "criterion": e.get("criterion"),
                "type": e.get("type"),
                "kind": e.get("kind"),
                "asserts": bool(e.get("asserts")),
                "identity": e.get("identity"),
                "settings": ", ".join(f"{k}={v}" for k, v in (e.get("settings") or {}).items()),
            }
            for e in evaluator_rows(record)
        ],
        "cache_lines": (cache_lines(view.cache) if view.cache else [])
        + [line.strip() for line in miss_lines(view.cache_misses)]
        + usage_lines(view.usage),
        "counts": {
            "cases": len(cases),
            "failed": failed,
            "passed": len(cases) - failed,
            "errors": (record.get("counts") or {}).get("errors", 0),
        },
        "confidence": confidence,
        "metrics": [
            {
                "name": name,
                "estimate": fmt_estimate(m),
                "interval": fmt_interval(m["kind"], m["low"], m["high"]) if m.get("observed") else "—",
                "accounting": accounting(m),
                "method": m.get("method"),
            }
            for name, m in metrics.items()
        ],
        "accounting_lines": accounting_lines(metrics) + corrected_lines(view.corrected),
        "wiring": wiring_texts(view.wiring),
        "metrics_plot": metrics_plot(metrics, confidence),
        "funnel": funnel(record, diagnosis[1].get("criterion") if diagnosis else None),
        "slices": slice_plots(view.slices, view.min_slice_support),
        "min_slice_support": view.min_slice_support,
        "repeat_lines": [line.strip() for line in repeats_lines(view.repeats)],
        "diagnosis": {"id": diagnosis[0], "criterion": diagnosis[1].get("criterion")} if diagnosis else None,
        "labels": sorted({v["label"] for v in labels.values() if v.get("label")}),
        "data": case_payload(record, labels),
        "comparison": comparison,
        "decision": decision,
    }


def _verdict(v: Mapping[str, Any] | None) -> dict[str, str]:
    if not v:
        return {"text": "—", "tone": ""}
    status = v.get("status")
    if status == "observed":
        value = _num(v.get("value"))
        if value is None:
            return {"text": "observed", "tone": ""}
        if value >= 1.0:
            return {"text": "pass", "tone": "pass"}
        return {"text": "fail" if value == 0.0 else f"{value:.3f}", "tone": "fail"}
    return {"text": f"{status} ({v.get('reason')})", "tone": "warn"}


def diagnosis_view(doc: Mapping[str, Any], doc_id: str, reexecution_line: str | None = None) -> dict[str, Any]:
    """The diagnosis page: counts, control, per-case verdicts side by side, the tool's own cautious lines.

    `reexecution_line` says what re-executing the cases spent (from the child runs' records), when known.
    """
    view = DiagnosisView.of(doc, doc_id)
    lines = diagnosis_lines(view)
    replay = view.replay
    counts = doc["counts"]
    label_counts = counts["gold"]["labels"] if replay else counts.get("labels") or {}
    of = counts["gold"]["diagnosed"] if replay else counts.get("diagnosed", 0)
    title = intervention_title(doc["intervention"])
    columns = [("original", "original"), ("control", "control"), ("intervention", "gold context")]
    if replay:
        columns += [("replay", title), ("replay_control", "replay control")]
    cases = []
    for e in doc.get("cases") or []:
        pos = e.get("best_relevant_position")
        cases.append(
            {
                "id": e["id"],
                "label": e.get("label"),
                "reason": e.get("reason"),
                "strength": e.get("strength"),
                "position": "n/a" if pos is None else str(pos),
                "verdicts": [_verdict(e.get(key)) for key, _ in columns],
            }
        )
    children = [(k.replace("_", " "), v) for k, v in (doc.get("child_runs") or {}).items() if v]
    return {
        "kind": "diagnosis",
        "title": f"Oloproof diagnosis {doc_id}",
        "id": doc_id,
        "run_id": doc.get("run_id"),
        "criterion": doc.get("criterion"),
        "intervention": title,
        "system": _system_rows(doc.get("system") or {}),
        "label_counts": [
            {"label": label, "count": int(label_counts.get(label, 0)), "of": of, "text": LABELS[label][2]}
            for label in LABELS
        ],
        "lines": lines,
        "control_line": next((ln for ln in lines if ln.startswith("Control:")), None),
        "outcome_lines": [
            ln
            for ln in lines
            if ln.startswith(("Recovered under", "Labels from gold context", "UNSTABLE:", "NOT_DIAGNOSED:"))
        ],
        "cautious": [ln for ln in lines if ln.startswith(("Implicated:", "Candidate experiment:", "Confirmed under"))],
        "columns": [label for _, label in columns],
        "cases": cases,
        "undiagnosable": [
            {"id": u.get("id"), "reason": u.get("reason")} if isinstance(u, Mapping) else {"id": u, "reason": ""}
            for u in doc.get("undiagnosable") or []
        ],
        "children": children,
        "reexecution_line": reexecution_line,
        "gold_context_diagnosis": doc.get("gold_context_diagnosis"),
    }


def _margin_marks(criterion: str, decisions: Sequence[Mapping[str, Any]]) -> tuple[tuple[float, str], ...]:
    marks: list[tuple[float, str]] = []
    for d in decisions:
        if d.get("criterion") != criterion:
            continue
        m = float(d.get("margin") or 0.0)
        test = d.get("test")
        name = str(d.get("name"))
        if test == "non-inferiority":
            marks.append((-m, f"{name}: non-inferiority margin −{m:g} points"))
        elif test == "superiority":
            marks.append((m, f"{name}: superiority margin +{m:g} points"))
        elif test == "equivalence":
            marks += [(-m, f"{name}: equivalence margin −{m:g}"), (m, f"{name}: equivalence margin +{m:g}")]
    return tuple(marks)


def differences_plot(doc: Mapping[str, Any]) -> Any:
    decisions = doc.get("decisions") or []
    rows, spans = [], []
    for name, c in (doc.get("criteria") or {}).items():
        marks = _margin_marks(name, decisions)
        spans += [c.get("low"), c.get("high")] + [m for m, _ in marks]
        text = criterion_line(name, c).split(": ", 1)[1]
        if c.get("paired") and _num(c.get("estimate")) is not None:
            rows.append(ForestRow(name, _num(c["estimate"]), _num(c["low"]), _num(c["high"]), text=text, marks=marks))
        else:
            rows.append(ForestRow(name, None, None, None, note=text, marks=marks))
    if not rows:
        return None
    half = nice_symmetric(spans)
    step = half / 2
    return forest_plot(
        rows,
        domain=(-half, half),
        ticks=(-half, -step, 0.0, step, half),
        tick_format=points_tick,
        ref_lines=[(0.0, "no difference")],
        title="Paired differences, candidate − baseline, in points; ticks beside a row mark its policy margins",
        text_width=400,
    )


def _short(value: Any) -> str:
    if isinstance(value, Mapping) and len(value) == 1:
        (only,) = value.values()
        if isinstance(only, str):
            return only
    import json

    return json.dumps(json_clean(value), indent=2, ensure_ascii=False)


def _changed_ids(changed: Any) -> list[str]:
    """Cases whose input or expected data differ between the runs: `id` or `id (input, expected)`."""
    if isinstance(changed, Mapping):
        return [f"{cid} ({', '.join(map(str, what))})" if what else str(cid) for cid, what in changed.items()]
    return [c if isinstance(c, str) else str(c.get("id")) for c in changed]


def decision_rows(decisions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The decisions table's rows (comparison and single-run decisions), each with its plan line if undecided."""
    rows = []
    for d in decisions:
        if d.get("scope") == "run":
            test = describe_test(d)
        else:
            test = f"{d.get('test')}, margin {fmt_margin(float(d.get('margin') or 0.0))} points"
        rows.append(
            {
                "name": d.get("name"),
                "criterion": d.get("criterion"),
                "test": test,
                "outcome": d.get("outcome"),
                "reason": d.get("reason"),
                "plan": d.get("plan"),
                "tone": "pass" if d.get("outcome") == "PASS" else ("fail" if d.get("outcome") == "FAIL" else "warn"),
            }
        )
    return rows


def decision_view(doc: Mapping[str, Any], doc_id: str) -> dict[str, Any]:
    """One run's release decision (no baseline), shown on the run page."""
    return {
        "id": doc_id,
        "decisions": decision_rows(doc.get("decisions") or []),
        "gate": doc.get("gate"),
        "exit_code": doc.get("exit_code"),
        "block_on": list((doc.get("policy") or {}).get("block_on") or []),
    }


def comparison_view(
    doc: Mapping[str, Any],
    doc_id: str,
    candidate: Mapping[str, Any] | None = None,
    baseline: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The comparison: the differences plot with margins, decisions, the gate, flipped and unpaired cases.

    `candidate` and `baseline` are the two run records when available (for both outputs side by side).
    """
    cand, base = cases_by_id(candidate), cases_by_id(baseline)
    flipped: list[dict[str, Any]] = []
    for g in flipped_groups(doc):
        name, key, direction = g.criterion, g.key, g.direction
        for case_id in g.ids:
            cc, bc = cand.get(case_id), base.get(case_id)
            flipped.append(
                {
                    "criterion": name,
                    "case": case_id,
                    "direction": direction,
                    "tone": "fail" if key == "regressed" else ("pass" if key == "improved" else "warn"),
                    "candidate": _short(cc.get("output")) if cc else "(candidate run record not available)",
                    "baseline": _short(bc.get("output")) if bc else "(baseline run record not available)",
                    "candidate_value": _verdict((cc.get("criteria") or {}).get(name) if cc else None)["text"],
                    "baseline_value": _verdict((bc.get("criteria") or {}).get(name) if bc else None)["text"],
                }
            )
    sets = doc.get("case_sets") or {}
    changed = doc.get("changed_cases") or sets.get("changed") or []
    decisions = decision_rows(doc.get("decisions") or [])
    return {
        "kind": "comparison",
        "title": f"Oloproof comparison {doc_id}",
        "id": doc_id,
        "candidate": doc["candidate"]["run_id"],
        "baseline": doc["baseline"]["run_id"],
        "paired": doc.get("paired_cases"),
        "warnings": list(doc.get("warnings") or []),
        "lines": [criterion_line(n, c) for n, c in (doc.get("criteria") or {}).items()],
        "cost_lines": cost_lines(doc.get("cost")),
        "plot": differences_plot(doc),
        "notes": list(doc.get("sample_size_notes") or []),
        "decisions": decisions,
        "policy": doc.get("policy") is not None,
        "gate": doc.get("gate"),
        "exit_code": doc.get("exit_code"),
        "flipped": flipped,
        "changed": _changed_ids(changed),
        "only_in_candidate": list(sets.get("only_in_candidate") or []),
        "only_in_baseline": list(sets.get("only_in_baseline") or []),
        "missing": [
            (name, ", ".join(str(x) for x in c.get("missing_cases") or []))
            for name, c in (doc.get("criteria") or {}).items()
            if c.get("missing_cases")
        ],
        "slices": [
            {
                "slice": r["slice"],
                "value": r["value"],
                "criterion": r["criterion"],
                "text": f"{r['paired']} paired · insufficient support"
                if r.get("insufficient_support")
                else f"{r['printed']['estimate']} points [{r['printed']['low']}, {r['printed']['high']}] · "
                f"{r['paired']} paired",
            }
            for r in doc.get("slices") or []
        ],
    }


def index_view(
    store_root: str,
    runs: Sequence[Mapping[str, Any]],
    docs: Sequence[Mapping[str, Any]],
    problems: Sequence[str] = (),
) -> dict[str, Any]:
    """The store's index: runs newest first with their headline metrics, then diagnoses and comparisons."""
    rows = []
    for h in runs:
        system = h.get("system") or {}
        rows.append(
            {
                "run_id": h.get("run_id"),
                "href": page_name("run", str(h.get("run_id"))),
                "status": h.get("status"),
                "purpose": h.get("purpose", "run"),
                "started_at": h.get("started_at"),
                "system": system.get("name"),
                "version": system.get("version"),
                "cases": (h.get("counts") or {}).get("cases"),
                "metrics": [f"{n} {fmt_estimate(m)}" for n, m in (h.get("metrics") or {}).items()],
            }
        )
    return {
        "kind": "index",
        "title": f"Oloproof store {store_root}",
        "store": store_root,
        "runs": rows,
        "docs": docs,
        "problems": list(problems),
    }


def page_name(kind: str, doc_id: str) -> str:
    """The file name of a page in a report folder (what the index and the pages link to)."""
    if kind == "run":
        return f"{doc_id}.html"
    return f"{kind}-{doc_id.removeprefix('sha256:')}.html"
