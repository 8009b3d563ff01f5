"""Canonical JSON and the sha256 identities of the caches."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .redaction import redact

# one encoder for every call: json.dumps with options builds a new encoder each time
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no whitespace, UTF-8; fails on non-JSON values.

    Secrets taken from the environment are spelled `${VAR}` (redaction.py): every identity
    hashed from this text stays the same when a key rotates, and never encodes the key.
    """
    return redact(_CANONICAL.encode(value))


def sha256_of(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def context_identity(context: Sequence[Any]) -> list[list[Any]]:
    """What of a context matters to generation: doc_id, chunk_id and text, in order."""
    return [[p.doc_id, p.chunk_id, p.text] for p in context]


class StageKeys:
    """The cache keys of one system's stages.

    The system's part of each identity is serialised once per run, and a
    case's input once per case, instead of once per key.
    """

    def __init__(self, system: Mapping[str, Any]) -> None:
        # The system's settings as they are, not redacted: `version: ${GIT_SHA}` must change the keys
        # when the commit changes (a stale reuse is worse than a miss). Only a digest is stored.
        encode = _CANONICAL.encode
        self._retrieve = encode(
            {"system": system["name"], "index_version": system.get("index_version"), "depth": system.get("depth")}
        )
        self._generate = encode({"system": system["name"], "version": system.get("version")})
        self._execution = encode(dict(system))

    @staticmethod
    def _key(kind: str, system_part: str, *parts: str) -> str:
        return hashlib.sha256("|".join((kind, system_part, *parts)).encode("utf-8")).hexdigest()

    def retrieve(self, input_json: str, repeat: int = 0) -> str:
        """system name, index_version, depth, input (not version, top_k, budget); the repeat index when > 0."""
        return self._key("retrieve/2", self._retrieve, input_json, *_repeat_part(repeat))

    def generate(self, input_json: str, context: Sequence[Any], repeat: int = 0) -> str:
        """system name, version, input, the assembled context (not depth, top_k, budget); the repeat index when > 0."""
        context_json = canonical_json(context_identity(context))
        return self._key("generate/2", self._generate, input_json, context_json, *_repeat_part(repeat))

    def execution(self, input_json: str, repeat: int = 0, repeat_retrieval: bool = False) -> str:
        """the whole system configuration and the input; the repeat index when > 0 (and whether it retrieved)."""
        parts = _repeat_part(repeat)
        if repeat and repeat_retrieval:
            parts += ("retrieval=each",)
        return self._key("execution/2", self._execution, input_json, *parts)


def _repeat_part(repeat: int) -> tuple[str, ...]:
    """A repeat's part of a key: nothing for repeat 0, so a run without repeats (and every repeat 0) keeps the
    keys it always had, and `repeats: 3` after `repeats: 1` reuses the single run's entries as its repeat 0."""
    return (f"repeat={repeat}",) if repeat else ()


def retrieve_key(system: Mapping[str, Any], input: Any) -> str:
    return StageKeys(system).retrieve(canonical_json(input))


def execution_key(system: Mapping[str, Any], input: Any) -> str:
    return StageKeys(system).execution(canonical_json(input))


def judgment_key(
    evaluator_type: str, settings_digest: str, expected_digest: str, reads_digest: str, repeat: int = 0
) -> str:
    """Identity of one verdict: the evaluator (type, settings) and everything it reads (never a secret).

    The parts are digests (`sha256_of` of each), so a case's expected data and
    output are serialised once for all its evaluators, not once per evaluator.
    A repeat > 0 is part of it, so a judge is asked again in every repeat even when two answers are equal.
    """
    text = f"judgment/2|{evaluator_type}|{settings_digest}|{expected_digest}|{reads_digest}"
    if repeat:
        text += f"|repeat={repeat}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def judgment_probe_key(verdict_key: str, probe: int) -> str:
    """Identity of the `probe`-th extra ask of a judge (`oloproof judge probe`) on the inputs of `verdict_key`.

    Only probes carry a probe index: every other verdict keeps its `judgment_key` unchanged.
    """
    return hashlib.sha256(f"judgment-probe/1|{verdict_key}|{int(probe)}".encode()).hexdigest()


def case_digest(input: Any, expected: Any) -> dict[str, str]:
    """sha256 of a case's input and of its expected data (recorded per case; compared by `compare`)."""
    return {"input": _fast_digest(input), "expected": _fast_digest(expected)}


def _fast_digest(value: Any) -> str:
    """sha256 of sorted-key compact JSON via orjson (a quarter of the standard encoder's time, every case)."""
    import orjson

    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits: the standard encoder takes it
        return sha256_of(value)
    return hashlib.sha256(text).hexdigest()


def case_set_digest(cases: Sequence[Mapping[str, Any]]) -> str | None:
    """`sha256:<hex>` of a whole case set (ids with their digests, in id order); None if a case has no digest."""
    parts = []
    for c in cases:
        d = c.get("digest")
        if not isinstance(d, Mapping):
            return None
        parts.append(f"{c['id']}|{d.get('input')}|{d.get('expected')}")
    parts.sort()
    return "sha256:" + hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()


def settings_identity(settings: Mapping[str, Any]) -> str:
    """`sha256:<hex>` naming an evaluator's settings: how a judge validation is matched to a judge."""
    return "sha256:" + sha256_of(dict(settings))


def shard_of(case_id: str, count: int) -> int:
    """The shard (1..count) a case belongs to: by the sha256 of its id alone, so a case stays in its shard
    whatever the file order, the other cases or the run (a shard's cache stays warm across runs)."""
    return int.from_bytes(hashlib.sha256(case_id.encode("utf-8")).digest()[:8], "big") % count + 1
