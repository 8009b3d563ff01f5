"""Judge consistency: ask a run's judge again on the same recorded inputs and count how often its verdict flips.

`oloproof judge probe RUN --criterion C --times K` drives `JudgeProbe`. Each case whose verdict the run
recorded is asked K more times on exactly what the judge read in the run (the answer and the assembled
context, rebuilt from the run record). Ask i is filed in the judgment cache under the verdict's key plus
the probe index i (`records.identity.judgment_probe_key`): it never reuses the run's verdict, and running
the same probe again reuses its asks instead of paying for them twice. A case *flips* when its K+1
verdicts (the recorded one and the K new ones) are not all the same; the overall flip rate gets an exact
Clopper–Pearson interval over the cases. The document is stored content-addressed with the judge's
identity, so `oloproof validate-judge` can show the latest probe of the same judge.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_oloproof.engine.setup import RunSetup, case_from_record, safe_settings
from pytest_oloproof.errors import OloproofError, StoreError
from pytest_oloproof.evaluate.judge_validation import judge_identity
from pytest_oloproof.evaluate.record import VerdictDigests, asks_a_model, eval_input, judge_verdict, verdict_key
from pytest_oloproof.evaluators.base import EvalInput, Evaluator
from pytest_oloproof.records.identity import judgment_probe_key
from pytest_oloproof.stats.intervals import clopper_pearson
from pytest_oloproof.store.files import Store

SCHEMA = "oloproof.judge_probe/1"
KIND = "judge_probe"


class ProbeError(OloproofError):
    """A probe that cannot start (unknown run, criterion, judge that differs from the run's): exit 2."""


def _verdict(value: Mapping[str, Any]) -> str | None:
    """'pass' / 'fail' of an observed criterion value, else None."""
    if value.get("status") != "observed" or value.get("value") is None:
        return None
    return "pass" if float(value["value"]) >= 0.5 else "fail"


@dataclass
class JudgeProbe:
    """One probe of one run's judge: validated on construction (raises ProbeError, spends nothing)."""

    ev: RunSetup
    run: str
    criterion: str
    times: int
    judge: Evaluator = field(init=False)

    def __post_init__(self) -> None:
        if isinstance(self.times, bool) or not isinstance(self.times, int) or self.times < 1:
            raise ProbeError(f"--times {self.times!r}: the number of extra asks is a whole number, at least 1")
        try:
            run = self.ev.store.load_run(self.run)
        except StoreError as exc:
            raise ProbeError(f"cannot probe {self.run!r}: {exc}") from None
        self.run_id: str = run["run_id"]
        if run.get("status") != "complete":
            raise ProbeError(
                f"run {self.run_id} is {run.get('status') or 'incomplete'}; only a complete run's recorded "
                "verdicts are probed — re-run it with `oloproof run`"
            )
        judges = [e for e in self.ev.evaluators if asks_a_model(e)]
        judge = next((e for e in judges if e.criterion == self.criterion), None)
        if judge is None:
            names = ", ".join(e.criterion for e in judges) or "none"
            raise ProbeError(
                f"--criterion {self.criterion!r}: not a judge criterion of {self.ev.cfg.path} (judges: {names})"
            )
        self.judge = judge
        self.identity = judge_identity(judge)
        row = next((e for e in run.get("evaluators") or [] if e.get("criterion") == self.criterion), None)
        if row is None:
            raise ProbeError(f"--criterion {self.criterion!r}: run {self.run_id} did not record it")
        if row.get("identity") != self.identity:
            raise ProbeError(
                f"--criterion {self.criterion!r}: the judge in {self.ev.cfg.path} ({self.identity}) is not the one "
                f"run {self.run_id} asked ({row.get('identity')}); a probe asks the run's own judge again — "
                "use --config with the oloproof.yaml of that run"
            )
        self.records = list(run.get("cases") or [])
        self.probed = [r for r in self.records if _verdict(self._recorded(r)) is not None]

    def _recorded(self, rec: Mapping[str, Any]) -> Mapping[str, Any]:
        return (rec.get("criteria") or {}).get(self.criterion) or {"status": "missing", "reason": "not_evaluated"}

    @property
    def asks(self) -> int:
        """How many judge asks the probe needs (fewer are sent when the judgment cache holds some)."""
        return self.times * len(self.probed)

    def _inputs(self, rec: Mapping[str, Any]) -> tuple[EvalInput, VerdictDigests, str | None]:
        """What the judge read for this case in the run (answer, assembled context), and its verdict key."""
        case = case_from_record(rec)
        gold = (rec.get("expected") or {}).get("gold_context") if rec.get("gold_context") else None
        x = eval_input(case, rec, gold)
        digests = VerdictDigests(x)
        return x, digests, verdict_key(self.judge, digests)

    def cached_asks(self) -> int:
        """How many of the probe's asks the judgment cache already holds (they are not sent again)."""
        n = 0
        for rec in self.probed:
            base = self._inputs(rec)[2]
            if base is not None:
                keys = (judgment_probe_key(base, i) for i in range(1, self.times + 1))
                n += sum(isinstance(self.ev.caches.get("judgment", k), dict) for k in keys)
        return n

    def _ask_case(self, rec: Mapping[str, Any]) -> dict[str, Any]:
        x, digests, base = self._inputs(rec)
        verdicts: list[str | None] = [_verdict(self._recorded(rec))]
        missing: list[dict[str, Any]] = []
        cached = 0
        for i in range(1, self.times + 1):
            keyed = (None if base is None else judgment_probe_key(base, i),)
            value, hit = judge_verdict(self.judge, x, self.ev.caches, False, digests, keyed=keyed)
            cached += hit
            v = value.to_json()
            verdicts.append(_verdict(v))
            if verdicts[-1] is None:
                missing.append({"probe": i, "status": v.get("status"), "reason": v.get("reason")})
        seen = {v for v in verdicts if v is not None}
        flipped = None if missing else len(seen) > 1
        return {"id": rec["id"], "verdicts": verdicts, "flipped": flipped, "missing": missing, "cached": cached}

    def run_all(self, concurrency: int | None = None) -> tuple[str, dict[str, Any]]:
        """Ask, build and store the document; returns (doc id, document).

        Cases are asked on `concurrency` threads (default: the judge provider's own concurrency); the
        provider still applies its own limit and retries to every request.
        """
        workers = concurrency or int(getattr(getattr(self.judge, "provider", None), "concurrency", 1) or 1)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            entries = list(pool.map(self._ask_case, self.probed))
        doc = self.document(entries)
        return self.ev.store.save_doc(KIND, doc), doc

    def document(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        """The oloproof.judge_probe/1 document (cases in the run's order)."""
        confidence = self.ev.cfg.settings.confidence
        counted = [e for e in entries if e["flipped"] is not None]
        flipped = sum(1 for e in counted if e["flipped"])
        rate: dict[str, Any] = {
            "flipped": flipped,
            "of": len(counted),
            "rate": None,
            "low": None,
            "high": None,
            "method": "clopper-pearson",
            "confidence": confidence,
        }
        if counted:
            low, high = clopper_pearson(flipped, len(counted), confidence)
            rate.update(rate=flipped / len(counted), low=float(low), high=float(high))
        probed = {e["id"] for e in entries}
        not_probed = [
            {"id": r["id"], "status": self._recorded(r).get("status"), "reason": self._recorded(r).get("reason")}
            for r in self.records
            if r["id"] not in probed
        ]
        return {
            "schema": SCHEMA,
            "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "run_id": self.run_id,
            "criterion": self.criterion,
            "judge": {
                "type": self.judge.type,
                "criterion": self.criterion,
                "identity": self.identity,
                "settings": safe_settings(self.judge),
            },
            "times": self.times,
            "counts": {
                "cases": len(self.records),
                "probed": len(entries),
                "not_probed": len(not_probed),
                "with_missing_asks": len(entries) - len(counted),
                "asks": self.times * len(entries),
                "asks_cached": sum(e["cached"] for e in entries),
                "asks_missing": sum(len(e["missing"]) for e in entries),
            },
            "flip_rate": rate,
            "cases": entries,
            "not_probed": not_probed,
        }


def latest_probe(store: Store, identity: str) -> tuple[str, dict[str, Any]] | None:
    """The newest stored probe of the judge with this identity (by its creation time), or None."""
    found: list[tuple[str, str, dict[str, Any]]] = []
    for doc_id in store.docs(KIND):
        try:
            doc = store.load_doc(KIND, doc_id)
        except StoreError:
            continue
        if (doc.get("judge") or {}).get("identity") == identity:
            found.append((str(doc.get("created_at") or ""), doc_id, doc))
    if not found:
        return None
    _, doc_id, doc = max(found, key=lambda t: (t[0], t[1]))
    return doc_id, doc


def announce(probe: JudgeProbe, write: Callable[[str], object]) -> None:
    """What the probe will spend, said before it asks anything."""
    j, cached = probe.judge, probe.cached_asks()
    write(
        f"oloproof: asking judge {j.type} ({probe.criterion}) {probe.times} more time(s) on each of "
        f"{len(probe.probed)} recorded verdict(s) of run {probe.run_id}: {probe.asks} asks, "
        f"{cached} already in the judgment cache, {probe.asks - cached} to send\n"
    )
