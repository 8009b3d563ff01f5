"""JSON on the per-case paths (store lines, cache entries): orjson, about ten times the standard library's speed.

Values reaching these paths are already checked JSON: stage results pass the
contract check (canonical JSON, no NaN), verdicts must be finite. What orjson
cannot encode or decode exactly (an integer beyond 64 bits) goes through the standard library.
"""

from __future__ import annotations

import json
import re
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


#: a run of digits that may be an integer beyond 64 bits, which orjson would read as a float (2**70 -> 1.18e21)
_LONG_DIGITS = re.compile(r"\d{20}")
_LONG_DIGITS_BYTES = re.compile(rb"\d{20}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(text: str | bytes) -> Any:
    """Parse JSON text; ValueError (orjson.JSONDecodeError) when it is not JSON.

    Text that may hold an integer beyond 64 bits is read by the standard library, which keeps it exact.
    """
    long = _LONG_DIGITS_BYTES.search(text) if isinstance(text, bytes) else _LONG_DIGITS.search(text)
    if long is None:
        return orjson.loads(text)
    return json.loads(text, parse_constant=_no_constant)
