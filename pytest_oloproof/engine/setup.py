"""A run's setup: config, system, cases and evaluators, loaded and validated before anything runs.

`RunSetup` is what every path that executes cases starts from (a pytest session, a diagnosis's
child runs, `oloproof validate-judge`): it evaluates one case (`evaluate`) and describes the run
(`header`). Beside it, the helpers that make a case record self-contained and rebuild a case from one.
"""

from __future__ import annotations

import datetime as _dt
import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_oloproof import __version__
from pytest_oloproof.cache.caches import CacheMode, Caches
from pytest_oloproof.config.settings import LoadedConfig, load_config
from pytest_oloproof.errors import CaseFileError, ConfigError
from pytest_oloproof.evaluate.record import evaluate_record
from pytest_oloproof.evaluate.repeats import REPEATS, combine_repeats
from pytest_oloproof.evaluators.base import Evaluator
from pytest_oloproof.evaluators.registry import Registry
from pytest_oloproof.evaluators.retrieval import label_facts
from pytest_oloproof.records.cases import Case, load_cases
from pytest_oloproof.records.identity import case_digest, settings_identity
from pytest_oloproof.store.files import Store
from pytest_oloproof.usage import accounting as usage

from .error_records import error_record, internal_error
from .stages import NORMAL, Engine, ExecutionPlan
from .system_resolution import ResolvedSystem, resolve_system


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class RunSetup:
    """Config, system, cases and evaluators, loaded and validated before anything runs."""

    cfg: LoadedConfig
    system: ResolvedSystem
    cases: list[Case]
    evaluators: list[Evaluator]
    caches: Caches
    store: Store
    engine: Engine
    registry: Registry = field(default_factory=Registry)
    budget: usage.Budget | None = None  # max_cost / max_judge_calls, shared by the engine and the judges
    #: what the cases' relevance labels say (`retrieval.label_facts`), kept when the cases are let go
    labels: dict[str, Any] | None = None

    @classmethod
    def load(
        cls,
        config_path: Path | LoadedConfig,
        *,
        cache_mode: CacheMode = CacheMode.READWRITE,
        registry: Registry | None = None,
        overrides: Mapping[str, Any] | None = None,
        load_case_files: bool = True,
    ) -> RunSetup:
        cfg = config_path if isinstance(config_path, LoadedConfig) else load_config(config_path)
        if overrides:
            cfg = apply_overrides(cfg, overrides)
        registry = registry or Registry()
        system = resolve_system(cfg)
        evaluators = build_evaluators(cfg, registry, system)
        cases = load_cases_located(cfg) if load_case_files else []
        store = Store(cfg.store_dir)
        caches = Caches(store.cache_dir, cache_mode)
        budget = make_budget(cfg)
        engine = Engine(
            system,
            caches,
            timeout_s=cfg.settings.timeout_s,
            retries=cfg.settings.retries,
            base_dir=cfg.base_dir,
            budget=budget,
            repeats=cfg.settings.repeats,
            repeat_retrieval=cfg.settings.repeat_retrieval,
        )
        labels = label_facts(c.relevant for c in cases) if load_case_files else None
        return cls(cfg, system, cases, evaluators, caches, store, engine, registry, budget, labels)

    @property
    def relevance_unit(self) -> str:
        for ev in self.evaluators:
            unit = getattr(ev, "relevance_unit", None)
            if unit:
                return str(unit)
        return "document"

    @property
    def is_async(self) -> bool:
        obj = self.system.obj
        fns = [getattr(obj, "retrieve", None), getattr(obj, "generate", None)] if self.system.is_rag else [obj]
        return any(inspect.iscoroutinefunction(f) for f in fns if f is not None)

    def criteria(self, evaluators: Sequence[Evaluator] | None = None) -> list[tuple[str, str]]:
        return [(e.criterion, e.kind_for(self.labels)) for e in (evaluators or self.evaluators)]

    def execute(self, case: Case, plan: ExecutionPlan = NORMAL) -> dict[str, Any]:
        return self.engine.execute(case, plan)

    def evaluate(
        self,
        case: Case,
        rec: dict[str, Any],
        evaluators: Sequence[Evaluator] | None = None,
        *,
        gold: Sequence[Mapping[str, Any]] | None = None,
        bypass_judgment: bool = False,
        ask: bool = True,
    ) -> dict[str, Any]:
        """The case record with its criteria; never raises but KeyboardInterrupt (see internal_error_case).

        `ask=False`: judge nothing more (see evaluate_record).
        """
        evs = evaluators or self.evaluators
        others = rec.pop(REPEATS, None)  # repeats 1 … N−1 of the case (`repeats: N`), each judged on its own
        try:
            with usage.using_budget(self.budget):  # judge calls reserve from the run's budget
                judged = [
                    evaluate_record(
                        case,
                        r,
                        evs,
                        self.caches,
                        relevance_unit=self.relevance_unit,
                        gold=gold,
                        bypass_judgment=bypass_judgment,
                        ask=ask,
                    )
                    for r in [rec, *(others or [])]
                ]
            rec = combine_repeats(judged[0], judged[1:]) if others else judged[0]
            return with_case_fields(case, rec)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            failed = internal_error_case(rec, exc, [e.criterion for e in evs])
        try:
            return with_case_fields(case, failed)
        except Exception:  # the case's own fields, as far as they go (the recorder copes with the rest)
            failed.update(input=case.input, expected=case.expected, metadata=case.metadata, source=case.source)
            return failed

    def header(
        self, *, cache_mode: CacheMode, purpose: str = "run", extra: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        s = self.cfg.settings
        return {
            "oloproof_version": __version__,
            "purpose": purpose,
            "started_at": now_iso(),
            "config_path": str(self.cfg.path),
            "config": self.cfg.raw,
            "system": dict(self.system.config),
            "evaluators": describe_evaluators(self.evaluators, self.labels),
            **({"labels": self.labels} if self.labels is not None else {}),
            "slices": list(s.slices),
            "min_slice_support": s.min_slice_support,
            "confidence": s.confidence,
            "seed": s.seed,
            **({"repeats": s.repeats, "repeat_retrieval": s.repeat_retrieval} if s.repeats > 1 else {}),
            "cache_mode": cache_mode.value,
            **usage_settings(s),
            **(dict(extra) if extra else {}),
        }


def load_cases_located(cfg: LoadedConfig) -> list[Case]:
    """The config's cases; an error in the `cases:` setting itself names the config's file and line."""
    import re

    from pytest_oloproof.config.settings import where_in

    try:
        return load_cases(cfg.settings.cases, cfg.base_dir)
    except CaseFileError as exc:
        located = []
        for err in exc.errors:
            m = re.match(r"cases(?:\[(\d+)\])?: ", err)
            if m:
                loc: list[int | str] = ["cases"] if m.group(1) is None else ["cases", int(m.group(1))]
                err = f"{where_in(cfg.path, cfg.node, loc)}: {err}"
            located.append(err)
        if located == exc.errors:
            raise
        raise CaseFileError(located) from None


def make_budget(cfg: LoadedConfig) -> usage.Budget | None:
    """The run's budget guard, when oloproof.yaml sets max_cost or max_judge_calls."""
    s = cfg.settings
    if s.max_cost is None and s.max_judge_calls is None:
        return None
    return usage.Budget(max_cost=s.max_cost, max_judge_calls=s.max_judge_calls, pricing=pricing_table(s))


def pricing_table(s: Any) -> dict[str, dict[str, Any]] | None:
    """`pricing:` as plain JSON (model -> input/output/cached_input USD per million tokens)."""
    if not s.pricing:
        return None
    return {model: price.model_dump(exclude_none=True) for model, price in s.pricing.items()}


def usage_settings(s: Any) -> dict[str, Any]:
    """The header keys that say how usage is priced and limited (absent when not configured)."""
    out: dict[str, Any] = {}
    if s.pricing:
        out["pricing"] = pricing_table(s)
    if s.max_cost is not None or s.max_judge_calls is not None:
        out["budget"] = {"max_cost": s.max_cost, "max_judge_calls": s.max_judge_calls}
    return out


def describe_evaluators(
    evaluators: Sequence[Evaluator], labels: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """What the run record says about each evaluator (the metrics are computed from this list).

    Each kind is the one this run reads, from the labels' facts (`labels`; recall is a rate when
    every labelled case has one relevant unit), so a comparison reads the run the same way.
    """
    return [
        {
            "criterion": e.criterion,
            "type": e.type or type(e).__name__,
            "kind": e.kind_for(labels),
            "asserts": e.asserts,
            "settings": safe_settings(e),
            "identity": _identity(e),
        }
        for e in evaluators
    ]


def safe_settings(e: Evaluator) -> dict[str, Any]:
    try:
        return dict(e.settings())
    except Exception:
        return {}


def _identity(e: Evaluator) -> str | None:
    try:
        return settings_identity(e.settings())
    except (TypeError, ValueError):
        return None


def with_case_fields(case: Case, rec: dict[str, Any]) -> dict[str, Any]:
    """Make a case record self-contained, so diagnosis and comparison need only the store."""
    rec["input"] = case.input
    rec["expected"] = case.expected
    rec["metadata"] = case.metadata
    rec["source"] = case.source
    # so a comparison can tell a case whose input or expected data changed under the same id
    rec["digest"] = case_digest(case.input, case.expected)
    return rec


def internal_error_case(rec: Mapping[str, Any], exc: BaseException, criteria: Iterable[str]) -> dict[str, Any]:
    """A case that hit an error in Oloproof's own code: still a record, every criterion missing (`internal_error`).

    So no case ever vanishes from a run: the run's cases are the selected cases, and
    every metric's observed + missing + excluded is the number of cases.
    """
    cache = rec.get("cache")
    plain = {k: cache.get(k) for k in ("execution", "retrieve", "generate")} if isinstance(cache, Mapping) else {}
    out = error_record(
        str(rec.get("id")),
        rec.get("plan", "normal"),
        internal_error(exc),
        cache={
            "execution": plain.get("execution") if plain.get("execution") in ("hit", "miss") else "miss",
            "retrieve": plain.get("retrieve") if plain.get("retrieve") in ("hit", "miss") else None,
            "generate": plain.get("generate") if plain.get("generate") in ("hit", "miss") else None,
            "judgment": {"hit": 0, "miss": 0},
        },
    )
    out["criteria"] = {name: {"status": "missing", "reason": "internal_error"} for name in criteria}
    out["relevant_position"] = None
    return out


def case_from_record(rec: Mapping[str, Any]) -> Case:
    """Rebuild a Case from a stored case record."""
    from pytest_oloproof.records.cases import GoldPassage, RelevantUnit

    expected = dict(rec.get("expected") or {})
    rel = expected.get("relevant")
    gold = expected.get("gold_context")
    return Case(
        id=rec["id"],
        input=rec.get("input"),
        expected=expected,
        metadata=dict(rec.get("metadata") or {}),
        relevant=None
        if rel is None
        else tuple(RelevantUnit(r["doc_id"], r.get("chunk_id"), int(r.get("grade", 1))) for r in rel),
        gold_context=None
        if gold is None
        else tuple(GoldPassage(g.get("doc_id"), g["text"], g.get("chunk_id")) for g in gold),
        source=str(rec.get("source", "")),
    )


def build_evaluators(cfg: LoadedConfig, registry: Registry, system: ResolvedSystem) -> list[Evaluator]:
    from pytest_oloproof.config.settings import where_in

    out = []
    for i, entry in enumerate(cfg.settings.evaluators):
        where = where_in(cfg.path, cfg.node, ["evaluators", i])  # the entry's line, so errors point into the file
        out.append(registry.build(entry, i, where, cfg.base_dir, is_rag=system.is_rag))
    seen: dict[str, int] = {}
    for i, ev in enumerate(out):
        if ev.criterion in seen:
            raise ConfigError(
                f"{where_in(cfg.path, cfg.node, ['evaluators', i])}: evaluators[{i}]: criterion {ev.criterion!r} "
                "is also produced by "
                f"evaluators[{seen[ev.criterion]}]; name one of them with criterion:"
            )
        seen[ev.criterion] = i
    return out


def apply_overrides(cfg: LoadedConfig, overrides: Mapping[str, Any]) -> LoadedConfig:
    """Apply validated command-line overrides (e.g. concurrency) to the settings."""
    settings = cfg.settings.model_copy(update=dict(overrides))
    return LoadedConfig(cfg.path, settings, cfg.raw, cfg.node)
