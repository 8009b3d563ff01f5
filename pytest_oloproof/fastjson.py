"""JSON on the per-case paths (store lines, cache entries): orjson, about ten times the standard library's speed.

Values reaching these paths are already checked JSON: stage results pass the
contract check (canonical JSON, no NaN), verdicts must be finite. What orjson
cannot encode (an integer beyond 64 bits) goes through the standard library.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS  # int or bool keys become strings, as json.dumps does
_STANDARD = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def dumps(value: Any) -> str:
    """Compact JSON text; TypeError or ValueError for what is not JSON."""
    try:
        return orjson.dumps(value, option=_OPTIONS).decode("utf-8")
    except orjson.JSONEncodeError:
        return _STANDARD.encode(value)


def loads(text: str | bytes) -> Any:
    """Parse JSON text; ValueError (orjson.JSONDecodeError) when it is not JSON."""
    return orjson.loads(text)
