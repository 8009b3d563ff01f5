"""Resolving the system under test: importing it and merging its decorator's settings with oloproof.yaml."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from pytest_oloproof.config.settings import LoadedConfig
from pytest_oloproof.errors import ConfigError, Transient
from pytest_oloproof.system.declare import RAG_SETTINGS, load_object, settings_problem

from .error_records import text_of, user_traceback


@dataclass
class ResolvedSystem:
    """The system under test with its effective settings (decorator overridden by config)."""

    kind: str  # "rag" | "callable"
    obj: Any
    config: dict[str, Any]
    transient: tuple[type[BaseException], ...] = (Transient,)

    @property
    def is_rag(self) -> bool:
        return self.kind == "rag"


def resolve_system(cfg: LoadedConfig) -> ResolvedSystem:
    """Import the system and merge decorator settings with oloproof.yaml (the file wins)."""
    from pytest_oloproof.config.settings import where_in

    s = cfg.settings.system

    def at(*loc: str) -> str:
        return where_in(cfg.path, cfg.node, loc)

    if s.rag is not None:
        try:
            target = load_object(s.rag.object, cfg.base_dir, what="system.rag.object")
        except ConfigError as exc:
            raise ConfigError(f"{at('system', 'rag', 'object')}: {exc}") from exc
        cls = target if inspect.isclass(target) else type(target)
        declared = dict(getattr(target, "__oloproof_rag__", None) or {})  # an adapter instance carries its own
        if not callable(getattr(target, "retrieve", None)) or not callable(getattr(target, "generate", None)):
            raise ConfigError(
                f"{at('system', 'rag', 'object')}: system.rag.object: {s.rag.object!r} has no retrieve() and "
                "generate(); "
                "decorate a class with @rag_system or use system.object for a plain callable"
            )
        merged = dict(declared)
        for key in RAG_SETTINGS:
            value = getattr(s.rag, key)
            if value is not None:
                merged[key] = value
        for key in ("name", "version"):
            if getattr(s, key) is not None:
                merged[key] = getattr(s, key)
        if merged.get("depth") is None:
            raise ConfigError(f"{at('system', 'rag')}: system.rag.depth: required (set depth in @rag_system or here)")
        problem = settings_problem(merged)  # oloproof.yaml's values are valid: a bad one is the decorator's
        if problem is not None:
            raise ConfigError(
                f"{at('system', 'rag', 'object')}: @rag_system on {s.rag.object}: {problem} "
                "(fix the decorator or set it in oloproof.yaml)"
            )
        obj = _instantiate(target, s.rag.object, at("system", "rag", "object")) if inspect.isclass(target) else target
        config = {
            "kind": "rag",
            "object": s.rag.object,
            "name": merged.get("name") or cls.__name__,
            "version": merged.get("version"),
            "depth": merged["depth"],
            "top_k": merged.get("top_k") or merged["depth"],
            "token_budget": merged.get("token_budget"),
            "index_version": merged.get("index_version"),
        }
        if config["token_budget"] is not None and not callable(getattr(obj, "count_tokens", None)):
            raise ConfigError(
                f"{at('system', 'rag', 'token_budget')}: system.rag.token_budget: set, but {s.rag.object} has no "
                "count_tokens(passage); "
                "add one (Oloproof never estimates tokens) or remove token_budget"
            )
        if config["top_k"] > config["depth"]:
            where = at("system", "rag", "top_k") if s.rag.top_k is not None else at("system", "rag")
            raise ConfigError(f"{where}: system.rag.top_k: {config['top_k']} is larger than depth {config['depth']}")
        extra = tuple(getattr(obj, "transient_errors", ()) or ())
        return ResolvedSystem("rag", obj, config, (Transient, *extra))
    assert s.object is not None
    try:
        fn = load_object(s.object, cfg.base_dir, what="system.object")
    except ConfigError as exc:
        raise ConfigError(f"{at('system', 'object')}: {exc}") from exc
    if not callable(fn):
        raise ConfigError(f"{at('system', 'object')}: system.object: {s.object!r} is not callable")
    config = {
        "kind": "callable",
        "object": s.object,
        "name": s.name or getattr(fn, "__name__", "system"),
        "version": s.version,
    }
    extra = tuple(getattr(fn, "transient_errors", ()) or ())
    return ResolvedSystem("callable", fn, config, (Transient, *extra))


def _instantiate(cls: Any, spec: str, where: str) -> Any:
    """The system's instance; its constructor raising is a config error with the user's traceback."""
    try:
        return cls()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise ConfigError(
            f"{where}: system.rag.object: {spec}() raised {type(exc).__name__}: {text_of(exc)}\n{user_traceback(exc)}"
        ) from exc
