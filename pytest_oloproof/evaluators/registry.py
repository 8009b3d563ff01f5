"""Evaluator registry: built-in types, plugin types (pytest_oloproof_evaluators), and building from config."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, ValidationError, create_model

from pytest_oloproof.config.settings import EvaluatorSettings, close_spelling
from pytest_oloproof.errors import ConfigError

from .answers import Contains, ExactMatch, Regex
from .base import Evaluator, OptionError
from .citations import CitationValidity
from .retrieval import MRR, NDCG, HitRate, Precision, Recall

__all__ = ["Registry", "builtin_types"]


def builtin_types() -> dict[str, type[Evaluator]]:
    from .judges import JUDGE_TYPES

    types: list[type[Evaluator]] = [
        Contains,
        ExactMatch,
        Regex,
        HitRate,
        Recall,
        Precision,
        MRR,
        NDCG,
        CitationValidity,
        *JUDGE_TYPES.values(),
    ]
    return {t.type: t for t in types}


class Registry:
    """Evaluator types by name; plugins add theirs through the pytest_oloproof_evaluators hook."""

    def __init__(self, types: Mapping[str, type[Evaluator]] | None = None) -> None:
        self.types: dict[str, type[Evaluator]] = dict(builtin_types() if types is None else types)

    def add(self, types: Iterable[type[Evaluator]] | Mapping[str, type[Evaluator]]) -> None:
        items = types.values() if isinstance(types, Mapping) else types
        for t in items:
            if not (inspect.isclass(t) and issubclass(t, Evaluator) and t.type):
                raise TypeError(f"{t!r} is not an Evaluator subclass with a `type` name")
            self.types[t.type] = t

    def build(
        self, entry: EvaluatorSettings, index: int, where: str, base_dir: Path | None, *, is_rag: bool
    ) -> Evaluator:
        """Construct evaluators[index]; any problem is a ConfigError naming the key."""
        cls = self.types.get(entry.type)
        if cls is None:
            raise ConfigError(
                f"{where}: evaluators[{index}].type: unknown evaluator type {entry.type!r}"
                f"{close_spelling(entry.type, sorted(self.types))} (known: {', '.join(sorted(self.types))})"
            )
        if cls.needs_rag and not is_rag:
            raise ConfigError(
                f"{where}: evaluators[{index}]: {entry.type} needs a RAG system (system.rag); "
                "a plain callable has no retrieval or context"
            )
        options = entry.options()
        params = _options_of(cls)
        for key in options:
            if key not in params:
                raise ConfigError(
                    f"{where}: evaluators[{index}].{key}: unknown key for {entry.type}"
                    f"{close_spelling(key, [*params, 'type', 'criterion', 'assert'])}"
                )
        options = _validate_options(cls, options, where, index)
        if "base_dir" in params and base_dir is not None:
            options["base_dir"] = base_dir
        try:
            # the same default name the plugin gave the criterion's fixture at configure time
            criterion = entry.criterion or cls.default_criterion(options)
            return cls(criterion=criterion, asserts=entry.assert_, **options)
        except ConfigError as exc:  # a constructor's own check (a judge's provider, object or prompt)
            key = f".{exc.key}" if exc.key else ""
            raise ConfigError(f"{where}: evaluators[{index}]{key}: {exc}") from None
        except TypeError as exc:
            missing = [p for p, d in params.items() if d is inspect.Parameter.empty and p not in options]
            if missing:
                raise ConfigError(f"{where}: evaluators[{index}].{missing[0]}: required for {entry.type}") from None
            raise ConfigError(f"{where}: evaluators[{index}]: {exc}") from None
        except ValueError as exc:
            key = f".{exc.key}" if isinstance(exc, OptionError) else ""
            raise ConfigError(f"{where}: evaluators[{index}]{key}: {exc}") from None


def _init_chain(cls: type[Evaluator]) -> list[Any]:
    """The constructors whose keyword-only parameters are settings of `cls`.

    `cls.__init__`, and when it forwards ``**kwargs`` the constructors up the MRO it
    forwards them to, so a subclass that adds one setting keeps every setting of its base.
    """
    chain: list[Any] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if klass is object:
            break
        chain.append(init)
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            break
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            break
    return chain or [cls.__init__]


def _options_of(cls: type[Evaluator]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for init in _init_chain(cls):
        for name, p in inspect.signature(init).parameters.items():
            if name in ("self", "criterion", "asserts") or p.kind is not inspect.Parameter.KEYWORD_ONLY:
                continue
            options.setdefault(name, p.default)
    return options


def _hints_of(cls: type[Evaluator]) -> dict[str, Any]:
    """Annotations of the settings, the nearest constructor's first; a constructor whose annotations
    cannot be resolved contributes none (its settings are then passed on unchecked)."""
    hints: dict[str, Any] = {}
    seen: set[str] = set()
    for init in _init_chain(cls):
        own = [n for n, p in inspect.signature(init).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        try:
            resolved = typing.get_type_hints(init)
        except Exception:
            resolved = {}
        for name in own:
            if name not in seen and name in resolved:
                hints[name] = resolved[name]
        seen.update(own)
    return hints


def _validate_options(cls: type[Evaluator], options: dict[str, Any], where: str, index: int) -> dict[str, Any]:
    """Type-check options against the constructor's annotations, when they can be resolved."""
    try:
        hints = _hints_of(cls)
    except Exception:
        return dict(options)
    fields: dict[str, Any] = {}
    for name, default in _options_of(cls).items():
        if name in options and name in hints:
            fields[name] = (hints[name], ... if default is inspect.Parameter.empty else default)
    for name in fields:
        if isinstance(options[name], bool) and _wants_number(hints[name]):
            raise ConfigError(
                f"{where}: evaluators[{index}].{name}: expected a number, got {str(options[name]).lower()} (a boolean)"
            )
    try:
        model = create_model(f"{cls.__name__}Options", __config__=ConfigDict(arbitrary_types_allowed=True), **fields)
        checked = model.model_validate({k: options[k] for k in fields})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ConfigError(
            f"{where}: evaluators[{index}].{key}: {err['msg'].replace('Input should be', 'expected')}, "
            f"got {err.get('input')!r}"
        ) from None
    except Exception:
        return dict(options)
    out = dict(options)
    out.update({k: getattr(checked, k) for k in fields})
    return out


def _wants_number(hint: Any) -> bool:
    """An int or float annotation (possibly optional) that does not also accept a bool."""
    args = typing.get_args(hint) or (hint,)
    return bool not in args and any(a in (int, float) for a in args)
