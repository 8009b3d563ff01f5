"""Validating an LLM judge against human labels.

A judge may gate a release only after it agrees well enough with people on a
labelled set. `validate_judge` runs the judge on every labelled example and
reports accuracy (exact Clopper–Pearson interval) and Cohen's kappa (point and
an interval valid at every n: `stats.kappa_interval`, the range of kappa over
Bonferroni-combined Clopper–Pearson intervals of the agreement and of both pass
rates), judge failures counted separately.

Pass rules (all must hold; thresholds are arguments):

1. at least `min_labels` examples received a verdict from the judge;
2. the human labels contain both `pass` and `fail` (kappa is undefined otherwise);
3. judge failures (missing) are at most `max_failure_rate` of the labels;
4. the kappa point estimate is >= `min_kappa`;
5. the lower bound of the accuracy interval is >= `min_accuracy`.

The record carries `judge_identity(judge)`, the sha256 of the canonical JSON of
`judge.settings()`, so the gate can ask whether *this* judge (same type, prompt,
model and settings) holds a passing validation.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import binomtest

from pytest_oloproof.errors import ConfigError
from pytest_oloproof.evaluators.base import ContextPassage, CriterionValue, EvalInput, Evaluator
from pytest_oloproof.records.identity import settings_identity
from pytest_oloproof.stats.intervals import kappa_interval
from pytest_oloproof.store.labels import HEADER_KEY

SCHEMA = "oloproof.judge_validation/1"


class JudgeLabelsError(ConfigError):
    """The labels file is invalid; every problem is listed as file:line: message."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("invalid judge labels:\n  " + "\n  ".join(self.errors))


@dataclass(frozen=True)
class LabelledExample:
    """One human-labelled example: what the judge sees, and the human verdict."""

    line: int
    eval_input: EvalInput
    label: bool  # True = pass


def judge_identity(judge: Evaluator) -> str:
    """`sha256:<hex>` of the canonical JSON of `judge.settings()`."""
    return settings_identity(judge.settings())


def _check_example(obj: Any, where: str, errors: list[str]) -> bool:
    """Append precise errors for one parsed line; True when it is usable."""
    before = len(errors)
    if not isinstance(obj, dict):
        errors.append(f"{where}: expected a JSON object, got {type(obj).__name__}")
        return False
    if not isinstance(obj.get("id"), str) or not obj["id"]:
        errors.append(f"{where}: `id` is required and must be a non-empty string")
    if "output" not in obj:
        errors.append(f"{where}: `output` is required")
    if obj.get("label") not in ("pass", "fail"):
        errors.append(f'{where}: `label` must be "pass" or "fail", got {obj.get("label")!r}')
    if "expected" in obj and not isinstance(obj["expected"], dict):
        errors.append(f"{where}: `expected` must be an object")
    context = obj.get("context")
    if not isinstance(context, list):
        errors.append(f"{where}: `context` is required and must be a list of passages")
    else:
        for i, p in enumerate(context):
            if not isinstance(p, dict) or not isinstance(p.get("doc_id"), str):
                errors.append(f"{where}: context[{i}] needs a string `doc_id`")
            elif not isinstance(p.get("text"), str):
                errors.append(f"{where}: context[{i}] needs a string `text`")
            elif p.get("chunk_id") is not None and not isinstance(p["chunk_id"], str):
                errors.append(f"{where}: context[{i}].chunk_id must be a string")
    unknown = sorted(set(obj) - {"id", "input", "output", "context", "expected", "label", "metadata"})
    if unknown:
        errors.append(f"{where}: unknown key(s) {', '.join(unknown)}")
    return len(errors) == before


def load_labels(path: Path) -> list[LabelledExample]:
    """Parse and validate a labels JSONL file; raise JudgeLabelsError listing every problem."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise JudgeLabelsError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    errors: list[str] = []
    examples: list[LabelledExample] = []
    seen: dict[str, int] = {}
    first = next((i for i, line in enumerate(lines, start=1) if line.strip()), 0)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"{where}:{exc.colno}: invalid JSON: {exc.msg}")
            continue
        if number == first and isinstance(obj, dict) and HEADER_KEY in obj:
            continue  # the provenance line of a file `oloproof labels export` wrote
        if not _check_example(obj, where, errors):
            continue
        if obj["id"] in seen:
            errors.append(f"{where}: duplicate id {obj['id']!r} (first on line {seen[obj['id']]})")
            continue
        seen[obj["id"]] = number
        context = tuple(
            ContextPassage(p["doc_id"], p.get("chunk_id"), p["text"], position=i)
            for i, p in enumerate(obj["context"], start=1)
        )
        x = EvalInput(
            case_id=obj["id"],
            input=obj.get("input"),
            expected=obj.get("expected") or {},
            metadata=obj.get("metadata") or {},
            output=obj["output"],
            context=context,
        )
        examples.append(LabelledExample(number, x, obj["label"] == "pass"))
    if not errors and not examples:
        errors.append(f"{path}: no labelled examples")
    if errors:
        raise JudgeLabelsError(errors)
    return examples


def cohen_kappa(human: np.ndarray, judge: np.ndarray) -> float | None:
    """Cohen's kappa of two boolean vectors; None when undefined (chance agreement is 1)."""
    if human.size == 0:
        return None
    p_o = float(np.mean(human == judge))
    ph, pj = float(np.mean(human)), float(np.mean(judge))
    p_e = ph * pj + (1 - ph) * (1 - pj)
    if math.isclose(p_e, 1.0):
        return None
    return (p_o - p_e) / (1 - p_e)


def _kappa_interval(human: np.ndarray, judge: np.ndarray, confidence: float) -> dict[str, Any]:
    """Kappa interval from the counts (`stats.kappa_interval`); none without examples.

    A percentile bootstrap, used before, printed [1.000, 1.000] for 5 agreements out of 5:
    resampling a perfect sample only ever finds perfection.
    """
    n = int(human.size)
    if n == 0:
        return {"low": None, "high": None}
    iv = kappa_interval(int(np.sum(human == judge)), int(np.sum(human)), int(np.sum(judge)), n, confidence)
    return {"low": iv.low, "high": iv.high}


def validate_judge(
    judge: Evaluator,
    labels_path: Path,
    *,
    confidence: float = 0.95,
    seed: int = 0,
    min_labels: int = 30,
    min_kappa: float = 0.6,
    min_accuracy: float = 0.8,
    max_failure_rate: float = 0.1,
    concurrency: int = 4,
    call: Callable[[EvalInput], CriterionValue] | None = None,
) -> dict[str, Any]:
    """Run `judge` on every labelled example and decide whether it may gate.

    `call` replaces `judge.evaluate` (e.g. the engine's cached call); examples
    run on `concurrency` threads (the provider's own limit still applies).
    Returns a JSON-ready `oloproof.judge_validation/1` record.
    """
    labels_path = Path(labels_path)
    examples = load_labels(labels_path)
    evaluate = call or judge.evaluate

    def safe(x: EvalInput) -> CriterionValue:
        try:
            return evaluate(x)
        except Exception as exc:
            return CriterionValue.missing(f"judge_error: {type(exc).__name__}: {exc}")

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        values = list(pool.map(safe, [e.eval_input for e in examples]))

    cases: list[dict[str, Any]] = []
    human_list: list[bool] = []
    judge_list: list[bool] = []
    failures = excluded = 0
    for example, value in zip(examples, values, strict=True):
        case: dict[str, Any] = {
            "id": example.eval_input.case_id,
            "label": "pass" if example.label else "fail",
            "status": value.status,
        }
        if value.status == "observed" and value.value is not None:
            verdict = value.value >= 0.5
            human_list.append(example.label)
            judge_list.append(verdict)
            case["judge"] = "pass" if verdict else "fail"
            case["agree"] = verdict == example.label
            if value.detail.get("rationale"):
                case["rationale"] = value.detail["rationale"]
        else:
            case["reason"] = value.reason
            if value.status == "missing":
                failures += 1
            else:
                excluded += 1
        cases.append(case)

    human = np.array(human_list, dtype=bool)
    verdicts = np.array(judge_list, dtype=bool)
    judged = int(human.size)
    agree = int(np.sum(human == verdicts))
    agreement: dict[str, Any] = {
        "agree": agree,
        "judged": judged,
        "accuracy": None,
        "low": None,
        "high": None,
        "method": "clopper-pearson",
        "confidence": confidence,
    }
    if judged:
        ci = binomtest(agree, judged).proportion_ci(confidence_level=confidence, method="exact")
        agreement.update(accuracy=agree / judged, low=float(ci.low), high=float(ci.high))

    kappa_point = cohen_kappa(human, verdicts)
    kappa: dict[str, Any] = {
        "value": kappa_point,
        "method": "bonferroni-clopper-pearson",
        "confidence": confidence,
        "note": None,
    }
    kappa.update(_kappa_interval(human, verdicts, confidence))
    human_classes = {bool(v) for v in human_list}
    if judged and len(human_classes) < 2:
        kappa["note"] = "human labels hold one class only; kappa is not informative"
    if kappa_point is None and judged:
        kappa["note"] = "undefined: human labels and verdicts are all one and the same class"
    elif kappa_point == 1.0:
        kappa["note"] = "perfect agreement in this sample; the interval says how far that goes"

    confusion = {
        "human_pass_judge_pass": int(np.sum(human & verdicts)),
        "human_pass_judge_fail": int(np.sum(human & ~verdicts)),
        "human_fail_judge_pass": int(np.sum(~human & verdicts)),
        "human_fail_judge_fail": int(np.sum(~human & ~verdicts)),
    }

    reasons: list[str] = []
    n = len(examples)
    if judged < min_labels:
        reasons.append(f"too_few_labels: {judged} judged examples, at least {min_labels} needed")
    if len(human_classes) < 2:
        reasons.append("one_class_labels: the labels need both pass and fail examples")
    if n and failures / n > max_failure_rate:
        reasons.append(f"judge_failures: {failures} of {n} examples had no verdict (limit {max_failure_rate:.0%})")
    if kappa_point is None or kappa_point < min_kappa:
        shown = "undefined" if kappa_point is None else f"{kappa_point:.3f}"
        reasons.append(f"low_kappa: kappa {shown} < {min_kappa}")
    if agreement["low"] is None or agreement["low"] < min_accuracy:
        shown = "none" if agreement["low"] is None else f"{agreement['low']:.3f}"
        reasons.append(f"low_accuracy: accuracy lower bound {shown} < {min_accuracy}")

    labels_bytes = labels_path.read_bytes()
    return {
        "schema": SCHEMA,
        "judge": {
            "type": judge.type,
            "criterion": judge.criterion,
            "identity": judge_identity(judge),
            "settings": judge.settings(),
        },
        "labels": {"path": str(labels_path), "sha256": "sha256:" + hashlib.sha256(labels_bytes).hexdigest()},
        "n": n,
        "judged": judged,
        "judge_failures": failures,
        "excluded": excluded,
        "confusion": confusion,
        "agreement": agreement,
        "kappa": kappa,
        "thresholds": {
            "min_labels": min_labels,
            "min_kappa": min_kappa,
            "min_accuracy": min_accuracy,
            "max_failure_rate": max_failure_rate,
            "confidence": confidence,
        },
        "passed": not reasons,
        "reasons": reasons,
        "seed": seed,
        "cases": cases,
    }


def passing_validation(records: Iterable[Mapping[str, Any]], identity: str) -> Mapping[str, Any] | None:
    """The first passing validation record for this judge identity, if any (for the gate)."""
    for record in records:
        if (
            record.get("schema") == SCHEMA
            and record.get("passed") is True
            and record.get("judge", {}).get("identity") == identity
        ):
            return record
    return None
