"""Human labels for a random sample of a run's judged cases, and the judge-corrected rate they allow.

`oloproof labels export` draws the sample here (`draw_sample`) and writes the file people label;
`oloproof labels import` checks the labelled file against the run it came from (`read_labelled`)
and stores it as a content-addressed `labels` document; reports and the gate compute the corrected
rate from the run and that document (`corrected_for`). The frame is every case of the run whose
criterion has an observed verdict (cases where the judge failed or was not applicable cannot be
corrected: they have no verdict to correct), sorted by case id, so the draw depends only on the
frame and the seed. Only a sample that re-draws from the recorded frame and seed may correct: the
guarantee of prediction-powered inference needs the labelled cases to be a uniform random sample of
the judged ones, which a hand-picked subset is not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pytest_oloproof.errors import ConfigError, StoreError
from pytest_oloproof.records.access import evaluator_rows
from pytest_oloproof.records.identity import sha256_of
from pytest_oloproof.stats.ppi import CorrectedRate, corrected_rate

from .files import Store

SAMPLE_SCHEMA = "oloproof.label_sample/1"
LABELS_SCHEMA = "oloproof.labels/1"
#: the key of a labels file's first line, the sample's provenance (validate-judge skips that line)
HEADER_KEY = "oloproof_sample"
FRAME = "the run's cases whose criterion has an observed verdict, sorted by case id"
NOT_DRAWN = (
    "labels on a subset Oloproof did not draw can validate a judge (`oloproof validate-judge --labels FILE`) but "
    "cannot correct its rate: the correction is guaranteed only when the labelled cases are a uniform random "
    "sample of the judged ones; draw one with `oloproof labels export RUN --criterion C --sample N`"
)
_LINE_KEYS = {"id", "input", "output", "context", "expected", "label", "metadata"}


class LabelsFileError(ConfigError):
    """A labels file that cannot be imported; every problem is listed as file:line: message."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__("cannot import the labels:\n  " + "\n  ".join(self.errors))


def judge_criteria(run: Mapping[str, Any]) -> list[str]:
    """The run's criteria decided by an LLM judge."""
    return [str(e["criterion"]) for e in evaluator_rows(run) if str(e.get("type") or "").endswith("_judge")]


def _judge_identity(run: Mapping[str, Any], criterion: str) -> str | None:
    return next((e.get("identity") for e in evaluator_rows(run) if e.get("criterion") == criterion), None)


def frame_of(run: Mapping[str, Any], criterion: str) -> list[Mapping[str, Any]]:
    """The frame: the run's cases with an observed verdict for `criterion`, sorted by case id."""
    cases = [
        c
        for c in run.get("cases") or []
        if (c.get("criteria") or {}).get(criterion, {}).get("status") == "observed"
        and (c.get("criteria") or {})[criterion].get("value") is not None
    ]
    return sorted(cases, key=lambda c: str(c["id"]))


def frame_digest(frame: Sequence[Mapping[str, Any]], criterion: str) -> str:
    """`sha256:` of the frame's case ids, case digests and judge verdicts: which cases the sample came from."""
    rows = [[c["id"], c.get("digest"), float(c["criteria"][criterion]["value"])] for c in frame]
    return "sha256:" + sha256_of(rows)


def _check_criterion(run: Mapping[str, Any], criterion: str) -> None:
    judges = judge_criteria(run)
    if criterion not in judges:
        raise ConfigError(
            f"--criterion: {criterion!r} is not a judge criterion of run {run.get('run_id')} "
            f"(judge criteria: {', '.join(judges) or 'none'}); only a judge's rate can be corrected by labels"
        )


def draw_sample(run: Mapping[str, Any], criterion: str, size: int, seed: int) -> dict[str, Any]:
    """The sample's provenance: run, criterion, frame (size, digest), seed and the drawn case ids, in draw order."""
    _check_criterion(run, criterion)
    frame = frame_of(run, criterion)
    if size > len(frame):
        raise ConfigError(
            f"--sample: {size} is more than the {len(frame)} cases with an observed {criterion!r} verdict in run "
            f"{run.get('run_id')}; ask for at most {len(frame)}"
        )
    picks = np.random.default_rng(seed).choice(len(frame), size=size, replace=False)
    return {
        "schema": SAMPLE_SCHEMA,
        "run_id": run["run_id"],
        "criterion": criterion,
        "judge_identity": _judge_identity(run, criterion),
        "frame": {"definition": FRAME, "size": len(frame), "digest": frame_digest(frame, criterion)},
        "seed": seed,
        "method": "numpy.random.default_rng(seed).choice(frame size, sample size, replace=False)",
        "size": size,
        "cases": [str(frame[int(i)]["id"]) for i in picks],
    }


def labelling_lines(run: Mapping[str, Any], sample: Mapping[str, Any]) -> Iterator[str]:
    """The file people label: the provenance line, then one line per sampled case with `label: null`.

    Each line holds what the judge read (the question, the assembled context, the answer), never the
    judge's verdict, so it cannot anchor the people labelling."""
    yield json.dumps({HEADER_KEY: dict(sample)}, ensure_ascii=False)
    cases = {str(c["id"]): c for c in run.get("cases") or []}
    for cid in sample["cases"]:
        c = cases[cid]
        by_pos = {r["position"]: r for r in c.get("retrieval") or []}
        context = [
            {"doc_id": by_pos[p]["doc_id"], "chunk_id": by_pos[p].get("chunk_id"), "text": by_pos[p].get("text")}
            for p in c.get("context") or []
            if p in by_pos
        ]
        line = {"id": cid, "input": c.get("input"), "context": context, "output": c.get("output"), "label": None}
        yield json.dumps(line, ensure_ascii=False)


@dataclass(frozen=True)
class LabelledFile:
    """A labels file read back: its sample's provenance and one human verdict per sampled case."""

    sample: dict[str, Any]
    labels: dict[str, bool]


def read_labelled(path: Path) -> LabelledFile:
    """Parse a labelled file; LabelsFileError lists every problem with file, line, key and fix."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise LabelsFileError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    errors: list[str] = []
    sample: dict[str, Any] | None = None
    labels: dict[str, bool] = {}
    seen: dict[str, int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            errors.append(f"{where}:{exc.colno}: invalid JSON: {exc.msg}")
            if sample is None:  # the provenance line itself: nothing after it can be read against a sample
                raise LabelsFileError([*errors, f"{where}: restore the first line from the exported file"]) from None
            continue
        if sample is None:
            head = obj.get(HEADER_KEY) if isinstance(obj, dict) else None
            if not isinstance(head, dict) or head.get("schema") != SAMPLE_SCHEMA:
                raise LabelsFileError(
                    [f"{where}: the first line is not a sample header (`{HEADER_KEY}` of {SAMPLE_SCHEMA}); {NOT_DRAWN}"]
                )
            sample = head
            continue
        if not isinstance(obj, dict):
            errors.append(f"{where}: expected a JSON object, got {type(obj).__name__}")
            continue
        cid = obj.get("id")
        if not isinstance(cid, str) or not cid:
            errors.append(f"{where}: `id` is required and must be a non-empty string (keep the exported id)")
            continue
        unknown = sorted(set(obj) - _LINE_KEYS)
        if unknown:
            errors.append(f"{where}: unknown key(s) {', '.join(unknown)}; only `label` is to be filled in")
        if cid in seen:
            errors.append(f"{where}: duplicate id {cid!r} (first on line {seen[cid]}); keep one line per case")
            continue
        seen[cid] = number
        label = obj.get("label")
        if label is None:
            errors.append(
                f'{where}: `label` of {cid!r} is empty; set it to "pass" or "fail" (every sampled case needs a label: '
                "skipping the hard ones would make the labelled set no longer a random sample)"
            )
        elif label not in ("pass", "fail"):
            errors.append(f'{where}: `label` of {cid!r} must be "pass" or "fail", got {label!r}')
        else:
            labels[cid] = label == "pass"
    if sample is None:
        raise LabelsFileError([f"{path}: the file is empty; export one with `oloproof labels export`"])
    drawn = [str(c) for c in sample.get("cases") or []]
    for cid, number in seen.items():
        if cid not in drawn:
            errors.append(
                f"{path}:{number}: case {cid!r} was not in the drawn sample; remove the line (only drawn cases correct)"
            )
    absent = [c for c in drawn if c not in seen]
    if absent:
        errors.append(
            f"{path}: {len(absent)} sampled case(s) have no line: {', '.join(absent[:10])}"
            f"{' …' if len(absent) > 10 else ''}; restore them from the exported file and label them (a case "
            "edited out breaks the random sample)"
        )
    if errors:
        raise LabelsFileError(errors)
    return LabelledFile(sample, labels)


def check_against_run(run: Mapping[str, Any], sample: Mapping[str, Any], path: Path) -> None:
    """Refuse a sample whose frame or draw the run does not reproduce (edited, or from another run)."""
    criterion = str(sample.get("criterion"))
    where = f"{path}:1: {HEADER_KEY}"
    if sample.get("run_id") != run.get("run_id"):
        raise LabelsFileError([f"{where}.run_id is {sample.get('run_id')!r}, not the run {run.get('run_id')}"])
    if criterion not in judge_criteria(run):
        raise LabelsFileError([f"{where}.criterion {criterion!r} is not a judge criterion of run {run.get('run_id')}"])
    seed, size = sample.get("seed"), sample.get("size")
    if not isinstance(seed, int) or isinstance(seed, bool) or not isinstance(size, int) or isinstance(size, bool):
        raise LabelsFileError([f"{where}: `seed` and `size` must be integers as exported; export the sample again"])
    try:
        again = draw_sample(run, criterion, size, seed)
    except ConfigError as exc:
        raise LabelsFileError([f"{where}.size: {exc}; export the sample again"]) from None
    if again["frame"] != sample.get("frame"):
        raise LabelsFileError(
            [f"{where}.frame does not match the judged cases of run {run.get('run_id')}; export again. {NOT_DRAWN}"]
        )
    if again["cases"] != list(sample.get("cases") or []):
        raise LabelsFileError(
            [f"{where}.cases are not the draw of seed {seed} from the frame; export the sample again. {NOT_DRAWN}"]
        )


def labels_doc(sample: Mapping[str, Any], labels: Mapping[str, bool]) -> dict[str, Any]:
    """The stored document: the sample's provenance and the labels, in the sample's draw order."""
    return {
        "schema": LABELS_SCHEMA,
        "run_id": sample["run_id"],
        "criterion": sample["criterion"],
        "sample": dict(sample),
        "labels": [{"id": cid, "label": "pass" if labels[cid] else "fail"} for cid in sample["cases"]],
    }


def stored_labels(store: Store) -> list[tuple[str, dict[str, Any]]]:
    """Every stored labels document with its id (an unreadable one is skipped, as `iter_docs` does)."""
    out = []
    for doc_id in store.docs("labels"):
        try:
            out.append((doc_id, store.load_doc("labels", doc_id)))
        except StoreError:
            continue
    return out


def corrected_for(
    run: Mapping[str, Any], docs: Sequence[tuple[str, Mapping[str, Any]]], criterion: str
) -> dict[str, Any] | None:
    """The judge-corrected rate of `criterion` from the stored labels docs (id, doc) of this run, or None.

    Several samples for one criterion: the largest is used (ties: the smallest id), chosen before
    looking at any label, so importing another sample cannot pick the convenient result; the others
    are counted. Returns a JSON-able dict (value, low, high, labelled, judged, judge_rate, …, labels_id).
    """
    mine = [
        (doc_id, d)
        for doc_id, d in docs
        if d.get("run_id") == run.get("run_id") and d.get("criterion") == criterion and d.get("schema") == LABELS_SCHEMA
    ]
    if not mine:
        return None
    doc_id, doc = sorted(mine, key=lambda x: (-len(x[1].get("labels") or []), x[0]))[0]
    frame = frame_of(run, criterion)
    if (doc.get("sample") or {}).get("frame", {}).get("digest") != frame_digest(frame, criterion):
        return {"labels_id": doc_id, "missing": "the stored sample's frame does not match the run's judged cases"}
    verdict = {str(c["id"]): float(c["criteria"][criterion]["value"]) for c in frame}
    try:
        human = [{"pass": 1.0, "fail": 0.0}[row["label"]] for row in doc["labels"]]
        judge = [verdict[row["id"]] for row in doc["labels"]]
    except (KeyError, TypeError):
        return {"labels_id": doc_id, "missing": "the stored labels document is damaged; import the labelled file again"}
    confidence = float(run.get("confidence") or 0.95)
    try:
        r: CorrectedRate = corrected_rate(list(verdict.values()), human, judge, confidence)
    except ValueError as exc:  # e.g. verdicts that are means over repeats, not 0/1
        return {"labels_id": doc_id, "missing": f"cannot correct: {exc}"}
    return {
        "value": r.value,
        "low": r.low,
        "high": r.high,
        "confidence": r.confidence,
        "judged": r.judged,
        "judge_rate": r.judge_rate,
        "labelled": r.labelled,
        "rectifier": r.rectifier,
        "method": r.method,
        "labels_id": doc_id,
        "seed": doc["sample"].get("seed"),
        "other_samples": len(mine) - 1,
    }


def corrected_rates(store: Store, run: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per judge criterion with stored labels for this run: its corrected rate (or why it is missing).

    Computed when a run is read (inspect, report, gate), never stored in the run: labels come after the run."""
    docs = stored_labels(store)
    out: dict[str, dict[str, Any]] = {}
    for criterion in judge_criteria(run):
        found = corrected_for(run, docs, criterion)
        if found is not None:
            out[criterion] = found
    return out
