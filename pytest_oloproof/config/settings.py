"""oloproof.yaml: pydantic models, ${VAR} expansion, and errors that say where and how to fix."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from pytest_oloproof.errors import ConfigError
from pytest_oloproof.records import redaction

M = TypeVar("M", bound=BaseModel)
#: any `${...}`; what is inside is checked by `_expand_one` (a bad name is an error, never literal text)
_REF = re.compile(r"\$\{([^}]*)\}")
_REF_INSIDE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=?+])(.*))?", re.DOTALL)
CONFIG_NAME = "oloproof.yaml"


def _no_bool(value: Any) -> Any:
    """YAML `true` is not a number: `depth: true` must not run with depth 1."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()} (a boolean)")
    return value


#: numbers that refuse booleans (strings from ${VAR} still convert: "6" is 6)
Int = Annotated[int, BeforeValidator(_no_bool)]
Float = Annotated[float, BeforeValidator(_no_bool), Field(allow_inf_nan=False)]
#: the longest per-case timeout: beyond it the thread and event-loop timers overflow (timeout_s: 1e300)
MAX_TIMEOUT_S = 7 * 24 * 3600.0


def _cases_spec(value: Any) -> Any:
    if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return value
    if isinstance(value, list):
        bad = next(i for i, v in enumerate(value) if not isinstance(v, str))
        raise ValueError(f"entry {bad} must be a path or a glob (a string), got {value[bad]!r}")
    raise ValueError(f"expected a path, a glob or a list of them, got {value!r}")


class Strict(BaseModel):
    """Base for config models: unknown keys are errors, never ignored."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _system_name(value: Any) -> Any:
    """A system name given in the file is a name: an empty one would silently become another (the class's)."""
    if isinstance(value, str) and not value.strip():
        raise ValueError(
            f"expected a non-empty name, got {value!r}; give the system a name (e.g. name: support-rag), or leave "
            "the key out to use the @rag_system name (else the class or function name)"
        )
    return value


#: a system's name in the file: a non-empty string when given
SystemName = Annotated[str | None, BeforeValidator(_system_name)]


class RagSettings(Strict):
    object: str = Field(description="module:attribute of the @rag_system class")
    name: SystemName = None
    version: str | None = None
    depth: Int | None = Field(default=None, ge=1)
    top_k: Int | None = Field(default=None, ge=1)
    token_budget: Int | None = Field(default=None, ge=1)
    index_version: str | None = None


class SystemSettings(Strict):
    name: SystemName = None
    version: str | None = None
    rag: RagSettings | None = None
    object: str | None = Field(default=None, description="module:attribute of a plain callable input -> output")


class RateLimit(Strict):
    """A judge's client-side rate limit (`rate_limit:`), shared by every request to its endpoint and model."""

    requests_per_second: Float | None = Field(default=None, gt=0, description="requests sent per second, evenly")
    tokens_per_minute: Float | None = Field(default=None, gt=0, description="tokens (replies' usage) per minute")

    @model_validator(mode="after")
    def _some_limit(self) -> RateLimit:
        if self.requests_per_second is None and self.tokens_per_minute is None:
            raise ValueError(
                "give requests_per_second, tokens_per_minute or both "
                "(e.g. rate_limit: {requests_per_second: 20, tokens_per_minute: 90000}), or leave rate_limit out"
            )
        return self


class EvaluatorSettings(BaseModel):
    """One evaluator entry; type-specific keys are checked against the type's own signature."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    type: str
    criterion: str | None = None
    assert_: bool | None = Field(default=None, alias="assert")
    rate_limit: RateLimit | None = None

    def options(self) -> dict[str, Any]:
        out = dict(self.model_extra or {})
        if self.rate_limit is not None:
            out["rate_limit"] = self.rate_limit.model_dump()
        return out


class ModelPrice(Strict):
    """USD per million tokens for one model (`pricing:` in oloproof.yaml)."""

    input: Float = Field(ge=0, description="USD per million input (prompt) tokens")
    output: Float = Field(ge=0, description="USD per million output (completion) tokens")
    cached_input: Float | None = Field(default=None, ge=0, description="USD per million cached input tokens")


class Settings(Strict):
    system: SystemSettings
    cases: Annotated[str | list[str], BeforeValidator(_cases_spec)]
    evaluators: list[EvaluatorSettings] = Field(default_factory=list)
    slices: list[str] = Field(default_factory=list)
    min_slice_support: Int = Field(default=5, ge=1)
    confidence: Float = Field(default=0.95, gt=0.5, lt=1.0)
    concurrency: Int = Field(default=1, ge=1)
    timeout_s: Float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S, description="seconds, at most a week")
    retries: Int = Field(default=0, ge=0)
    seed: Int = Field(default=0, ge=0, description="non-negative: it seeds numpy generators")
    markers: list[str] = Field(default_factory=list)
    store: str = Field(default=".oloproof", min_length=1)
    pricing: dict[str, ModelPrice] | None = None
    max_cost: Float | None = Field(default=None, gt=0, description="USD; stop issuing paid calls past it")
    max_judge_calls: Int | None = Field(default=None, ge=0, description="judge requests per run")
    repeats: Int = Field(default=1, ge=1, description="times each case's generation runs (1: once)")
    repeat_retrieval: bool = Field(default=False, description="retrieve again in every repeat (default: once)")

    @field_validator("slices")
    @classmethod
    def _slice_names(cls, v: list[str]) -> list[str]:
        for s in v:
            if s not in ("relevant_position", "context_truncated", "flaky") and not (
                s.startswith("metadata.") and len(s) > len("metadata.")
            ):
                raise ValueError(
                    f"unknown slice {s!r}; use metadata.<key>, relevant_position, context_truncated or flaky"
                )
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
    """The 1-based line of a key path in a composed YAML tree (best effort).

    A key that is not there (a missing required key) gets the line of the mapping it belongs in.
    """
    line = node.start_mark.line + 1 if node is not None else None
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


def _clean_loc(node: yaml.Node | None, loc: Sequence[int | str]) -> list[int | str]:
    """A pydantic error location as a key path of the file.

    Union member tags (`str`, `list[str]`, `function-before[...]`) are not keys:
    a part that names no key at its place in the YAML is dropped.
    """
    out: list[int | str] = []
    for part in loc:
        is_key = isinstance(node, yaml.MappingNode) and any(k.value == part for k, _ in node.value)
        if isinstance(part, str) and not is_key and ("[" in part or part in _TAGS):
            continue
        out.append(part)
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            node = None
    return out


_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict"})


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
        loc = _clean_loc(node, [*prefix, *err["loc"]])
        kp = key_path(loc)
        if kp in seen:  # unions report the same key several times
            continue
        seen.add(kp)
        where = where_in(path, node, loc)
        lines.append(f"{where}: {kp or '(top level)'}: {_describe(err, model, loc)}")
    return "\n".join(lines)


def read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    """Parse a YAML file strictly: UTF-8 only, and no key given twice in one mapping."""
    try:
        data_bytes = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        text = data_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data_bytes[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}:{line}: byte {exc.start}: not UTF-8 (0x{data_bytes[exc.start]:02x}); save the file as UTF-8"
        ) from None
    try:
        node = yaml.compose(text)
        if node is not None:
            _check_duplicate_keys(path, node)
            if _expanded_size(node, {}) > MAX_YAML_VALUES:
                raise ConfigError(
                    f"{path}: invalid YAML: its aliases (*name) expand to more than {MAX_YAML_VALUES:,} values; "
                    "write the settings out instead of nesting aliases"
                )
        data = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply (flatten its lists and mappings)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from exc
    return data, node


#: values a config may expand to through aliases (`&a [x, x]`, `[*a, *a]`, ... grows exponentially)
MAX_YAML_VALUES = 100_000


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many values the composed YAML stands for once every alias is expanded (each node's size is computed once)."""
    known = memo.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(item, memo) for item in node.value)
    memo[id(node)] = size
    return size


def _check_duplicate_keys(path: Path, node: yaml.Node, loc: tuple[int | str, ...] = ()) -> None:
    """A key written twice in one mapping is an error naming both lines (YAML would keep the last silently)."""
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                line = k.start_mark.line + 1
                if k.value in first:
                    raise ConfigError(
                        f"{path}:{line}: {key_path([*loc, k.value])}: duplicate key (first given on line "
                        f"{first[k.value]}); keep one of them"
                    )
                first[k.value] = line
            _check_duplicate_keys(path, v, (*loc, str(k.value)))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicate_keys(path, item, (*loc, i))


def _expand_one(text: str, where: str, kp: str) -> str:
    """Expand every `${VAR}`, `${VAR:-default}` and `${VAR-default}` in one string, as the shell does.

    Each value taken from the environment is registered with the redactor, so it is
    written as `${VAR}` everywhere; a default written in the file is not a secret.
    """

    def sub(m: re.Match[str]) -> str:
        inside = _REF_INSIDE.fullmatch(m.group(1))
        if inside is None or inside.group(2) not in (None, ":-", "-"):
            raise ConfigError(
                f"{where}: {kp}: {m.group(0)!r} is not a variable reference; write ${{NAME}}, "
                "${NAME:-default} or ${NAME-default} (NAME: letters, digits and _, not starting with a digit)"
            )
        name, op, default = inside.group(1), inside.group(2), inside.group(3)
        value = os.environ.get(name)
        if op == ":-" and not value:
            return str(default)
        if op == "-" and value is None:
            return str(default)
        if value is None:
            raise ConfigError(
                f"{where}: {kp}: environment variable {name} is not set "
                f"(export it, write ${{{name}:-default}}, or write the value instead of ${{{name}}})"
            )
        redaction.register(value, name)
        return value

    expanded = _REF.sub(sub, text)
    if "${" in _REF.sub("", text):
        raise ConfigError(f"{where}: {kp}: '${{' without its closing '}}'; write ${{NAME}}")
    redaction.register_expanded(text, expanded)
    return expanded


def expand_vars(data: Any, path: Path, node: yaml.Node | None, loc: tuple[int | str, ...] = ()) -> Any:
    """Replace ${VAR} in string values; an unset variable is an error naming file, key and variable."""
    if isinstance(data, dict):
        return {k: expand_vars(v, path, node, (*loc, k)) for k, v in data.items()}
    if isinstance(data, list):
        return [expand_vars(v, path, node, (*loc, i)) for i, v in enumerate(data)]
    if isinstance(data, str) and "${" in data:
        return _expand_one(data, where_in(path, node, loc), key_path(loc))
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
        if path.is_dir():
            hint = f" (did you mean {path / CONFIG_NAME}?)" if (path / CONFIG_NAME).is_file() else ""
            raise ConfigError(f"--oloproof-config: {path} is a folder; give the path of a YAML file{hint}")
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


def load_config(path: Path, *, check_store: bool = True) -> LoadedConfig:
    """Load and validate an oloproof.yaml. Raises ConfigError with every problem found.

    `check_store=False` leaves out whether the store can be created: pytest's listing flags
    (--collect-only and the like) write nothing, so a read-only checkout can still list its cases.
    """
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
    _check_api_keys(path, node, settings)
    loaded = LoadedConfig(path=path, settings=settings, raw=raw, node=node)
    if not check_store:
        return loaded
    store = loaded.store_dir
    existing = next((p for p in (store, *store.parents) if p.exists()), None)  # the store, or where it would go
    problem = None
    if existing == store and not store.is_dir():
        problem = f"{store} is a file, not a folder; name a folder (it is created when missing)"
    elif existing is not None and existing != store:
        if not existing.is_dir():
            problem = f"{store} cannot be created: {existing} is a file; name a folder"
        elif not os.access(existing, os.W_OK | os.X_OK):
            problem = f"{store} cannot be created: {existing} is not writable"
    if problem is not None:
        raise ConfigError(f"{where_in(path, node, ['store'])}: store: {problem}")
    return loaded


def _check_api_keys(path: Path, node: yaml.Node | None, settings: Settings) -> None:
    """Every `api_key_env` names a set variable (checked before any case runs); its value is a secret."""
    for i, ev in enumerate(settings.evaluators):
        name = ev.options().get("api_key_env")
        if name is None:
            continue
        loc: list[int | str] = ["evaluators", i, "api_key_env"]
        where = where_in(path, node, loc)
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError(f"{where}: {key_path(loc)}: expected the name of an environment variable, got {name!r}")
        value = os.environ.get(name)
        if not value:
            raise ConfigError(
                f"{where}: {key_path(loc)}: environment variable {name} is not set or empty "
                f"(export {name}=<your API key>, or remove api_key_env for an endpoint without a key)"
            )
        redaction.register(value, name)
