"""oloproof.yaml (SPEC §3): pydantic models, ${VAR} expansion, and errors that say where and how to fix."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError

M = TypeVar("M", bound=BaseModel)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
CONFIG_NAME = "oloproof.yaml"


class Strict(BaseModel):
    """Base for config models: unknown keys are errors, never ignored."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class RagSettings(Strict):
    object: str = Field(description="module:attribute of the @rag_system class")
    name: str | None = None
    version: str | None = None
    depth: int | None = Field(default=None, ge=1)
    top_k: int | None = Field(default=None, ge=1)
    token_budget: int | None = Field(default=None, ge=1)
    index_version: str | None = None


class SystemSettings(Strict):
    name: str | None = None
    version: str | None = None
    rag: RagSettings | None = None
    object: str | None = Field(default=None, description="module:attribute of a plain callable input -> output")


class EvaluatorSettings(BaseModel):
    """One evaluator entry; type-specific keys are checked against the type's own signature."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    type: str
    criterion: str | None = None
    assert_: bool | None = Field(default=None, alias="assert")

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ModelPrice(Strict):
    """USD per million tokens for one model (`pricing:` in oloproof.yaml)."""

    input: float = Field(ge=0, description="USD per million input (prompt) tokens")
    output: float = Field(ge=0, description="USD per million output (completion) tokens")
    cached_input: float | None = Field(default=None, ge=0, description="USD per million cached input tokens")


class Settings(Strict):
    system: SystemSettings
    cases: str | list[str]
    evaluators: list[EvaluatorSettings] = Field(default_factory=list)
    slices: list[str] = Field(default_factory=list)
    min_slice_support: int = Field(default=5, ge=1)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    concurrency: int = Field(default=1, ge=1)
    timeout_s: float | None = Field(default=None, gt=0)
    retries: int = Field(default=0, ge=0)
    seed: int = 0
    markers: list[str] = Field(default_factory=list)
    store: str = ".oloproof"
    pricing: dict[str, ModelPrice] | None = None
    max_cost: float | None = Field(default=None, gt=0, description="USD; stop issuing paid calls past it")
    max_judge_calls: int | None = Field(default=None, ge=0, description="judge requests per run")

    @field_validator("slices")
    @classmethod
    def _slice_names(cls, v: list[str]) -> list[str]:
        for s in v:
            if s not in ("relevant_position", "context_truncated") and not (
                s.startswith("metadata.") and len(s) > len("metadata.")
            ):
                raise ValueError(f"unknown slice {s!r}; use metadata.<key>, relevant_position or context_truncated")
        return v


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config with where it came from."""

    path: Path
    settings: Settings
    raw: Mapping[str, Any]  # as written, ${VAR} unexpanded: safe to record
    node: yaml.Node | None = None  # the composed YAML, for locating errors found after loading

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def store_dir(self) -> Path:
        return (self.base_dir / self.settings.store).resolve()


# ---------------------------------------------------------------- YAML + errors


def _line_of(node: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """The 1-based line of a key path in a composed YAML tree (best effort)."""
    line = None
    for part in loc:
        if node is None:
            break
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == part:
                    line = k.start_mark.line + 1
                    nxt = v
                    break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def where_in(path: Path, node: yaml.Node | None, loc: Sequence[int | str]) -> str:
    """`file:line` of a key path (just `file` when the line cannot be found), for error messages."""
    line = _line_of(node, loc)
    return f"{path}:{line}" if line else str(path)


def key_path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def close_spelling(word: str, choices: Sequence[str]) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {match[0]}?" if match else ""


def _fields_at(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """Valid key names at a location, for spelling suggestions."""
    current: Any = model
    keyed = False  # the previous key holds a mapping of free keys to models (e.g. pricing: {MODEL: ...})
    for part in loc:
        if isinstance(part, int):
            continue
        if keyed:
            keyed = False
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        ann = field.annotation
        keyed = _is_mapping_of_models(ann)
        current = _model_in(ann)
        if current is None:
            return []
    fields = getattr(current, "model_fields", {})
    return [f.alias or name for name, f in fields.items()]


def _is_mapping_of_models(ann: Any) -> bool:
    """dict[str, Model] (optionally | None): its keys are the user's, its values are models."""
    if getattr(ann, "__origin__", None) is dict:
        return _model_in(ann) is not None
    return any(_is_mapping_of_models(a) for a in getattr(ann, "__args__", ()) or ())


def _model_in(ann: Any) -> Any:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _describe(error: Mapping[str, Any], model: type[BaseModel], prefix: Sequence[int | str]) -> str:
    loc = [p for p in error["loc"] if not (isinstance(p, str) and ("[" in p or p in ("function-after",)))]
    etype = error["type"]
    if etype == "extra_forbidden":
        parent, key = loc[:-1], str(loc[-1])
        return f"unknown key{close_spelling(key, _fields_at(model, parent))}"
    if etype == "missing":
        return "required key is missing"
    msg = str(error["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    got = error.get("input")
    if etype not in ("value_error",) and not isinstance(got, (dict, list)):
        msg = f"expected {msg[0].lower()}{msg[1:]}, got {got!r}" if msg.startswith("Input should") else msg
        msg = msg.replace("expected input should be", "expected")
    return msg


def validation_message(
    exc: ValidationError, model: type[BaseModel], path: Path, node: yaml.Node | None, prefix: Sequence[int | str] = ()
) -> str:
    """Render pydantic errors as `file:line: key.path: what was wrong`."""
    lines = []
    seen = set()
    for err in exc.errors():
        loc = [*prefix, *[p for p in err["loc"] if not (isinstance(p, str) and "[" in p)]]
        kp = key_path(loc)
        if kp in seen:  # unions report the same key several times
            continue
        seen.add(kp)
        where = where_in(path, node, loc)
        lines.append(f"{where}: {kp or '(top level)'}: {_describe(err, model, loc)}")
    return "\n".join(lines)


def read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from exc
    return data, node


def expand_vars(data: Any, path: Path, node: yaml.Node | None, loc: tuple[int | str, ...] = ()) -> Any:
    """Replace ${VAR} in string values; an unset variable is an error naming file, key and variable."""
    if isinstance(data, dict):
        return {k: expand_vars(v, path, node, (*loc, k)) for k, v in data.items()}
    if isinstance(data, list):
        return [expand_vars(v, path, node, (*loc, i)) for i, v in enumerate(data)]
    if isinstance(data, str):

        def sub(m: re.Match[str]) -> str:
            value = os.environ.get(m.group(1))
            if value is None:
                where = where_in(path, node, loc)
                raise ConfigError(
                    f"{where}: {key_path(loc)}: environment variable {m.group(1)} is not set "
                    f"(export it, or write the value instead of ${{{m.group(1)}}})"
                )
            return value

        return _VAR.sub(sub, data)
    return data


def load_yaml_model(path: Path, model: type[M], *, expand: bool = True) -> tuple[M, dict[str, Any], yaml.Node | None]:
    """Read, expand and validate a YAML file against a model.

    Returns the model, the raw mapping (as written) and the composed tree, which
    later errors use to name lines without reading the file again.
    """
    data, node = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the file must be a mapping of keys to values, got {type(data).__name__}")
    expanded = expand_vars(data, path, node) if expand else data
    try:
        return model.model_validate(expanded), data, node
    except ValidationError as exc:
        raise ConfigError(validation_message(exc, model, path, node)) from None


def find_config(explicit: str | os.PathLike[str] | None, rootdir: Path, invocation_dir: Path | None = None) -> Path:
    """The config named explicitly, else oloproof.yaml in the invocation folder, else at the rootdir."""
    if explicit:
        path = Path(explicit)
        if not path.is_absolute():
            path = ((invocation_dir or Path.cwd()) / path).resolve()
        if not path.is_file():
            raise ConfigError(f"--oloproof-config: {path} does not exist")
        return path
    for folder in (invocation_dir, rootdir):
        if folder is not None and (folder / CONFIG_NAME).is_file():
            return (folder / CONFIG_NAME).resolve()
    raise ConfigError(
        f"no {CONFIG_NAME} in {invocation_dir or rootdir} or at the pytest rootdir ({rootdir}); "
        "create one or pass --oloproof-config PATH"
    )


def load_config(path: Path) -> LoadedConfig:
    """Load and validate an oloproof.yaml. Raises ConfigError with every problem found."""
    path = path.resolve()
    settings, raw, node = load_yaml_model(path, Settings)
    sysset = settings.system
    if (sysset.rag is None) == (sysset.object is None):
        where = where_in(path, node, ["system"])
        raise ConfigError(
            f"{where}: system: give exactly one of system.rag.object (a @rag_system class) "
            "or system.object (a plain callable input -> output)"
        )
    names: dict[str, int] = {}
    for i, ev in enumerate(settings.evaluators):
        if ev.criterion is not None:
            if ev.criterion in names:
                where = where_in(path, node, ["evaluators", i])
                raise ConfigError(
                    f"{where}: evaluators[{i}].criterion: {ev.criterion!r} is also the criterion of "
                    f"evaluators[{names[ev.criterion]}]; give one of them another criterion: name"
                )
            names[ev.criterion] = i
    if settings.max_cost is not None and not settings.pricing:
        raise ConfigError(
            f"{where_in(path, node, ['max_cost'])}: max_cost: needs a pricing: table to compute costs from "
            "(Oloproof never guesses prices); add pricing: {MODEL: {input: USD, output: USD}} per million tokens, "
            "or use max_judge_calls"
        )
    return LoadedConfig(path=path, settings=settings, raw=raw, node=node)
