"""Secrets never leave the process: every value a config took from the environment is written as `${VAR}`.

One redactor per process. Loading a configuration registers each value that
came from an environment variable (`${VAR}` anywhere in oloproof.yaml or
compare.yaml, and the variable an `api_key_env` names); every boundary where
text leaves the process (store files, cache keys and values, reports, JUnit
properties and failure text, the step summary, the terminal, CLI output and
error messages) passes its text through `redact()`. A value is also caught in
the forms it takes on the wire or in JSON: JSON- and repr-escaped (once or twice), percent-encoded in a
URL (as httpx logs a `user:password@` part or a path), base64 (HTTP Basic credentials, alone or as
`user:password`), and behind `Bearer `.

Values shorter than `MIN_SECRET_LENGTH` characters, and numbers or booleans
(`depth: ${DEPTH}`), are not redacted: replacing "6" or "true" everywhere
would garble unrelated text, and such values are settings, not secrets.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import urllib.parse
from collections.abc import Iterable
from typing import Any

MIN_SECRET_LENGTH = 6
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
#: what a URL leaves unencoded besides letters, digits and -._~: nothing, a user:password part, a path
#: (RFC 3986 sub-delims plus ':' / ':@/'); each also with '%' kept, as httpx keeps a '%' it cannot decode
_URL_SAFE = ("", "!$&'()*+,;=:", "!$&'()*+,;=:@/")
_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#@]*)@")

_lock = threading.Lock()
_names: dict[str, str] = {}  # secret text -> its placeholder (`${VAR}`, or `${A}:${B}`)
_pattern: re.Pattern[str] | None = None


def _is_secret(value: str) -> bool:
    v = value.strip()
    if len(v) < MIN_SECRET_LENGTH:
        return False
    return not (_NUMBER.fullmatch(v) or v.lower() in ("true", "false", "null", "none", "yes", "no"))


def _escapes(value: str) -> set[str]:
    """`value` as JSON and Python's repr write it inside a string: JSON-escaped (ASCII or not), and as repr
    writes it between ' (each ' as \\') or between " (' as is); backslashes doubled by both."""
    quoted = repr(value + "'\"")[1:-4]  # holding both quotes, repr quotes with ' and escapes each ' inside
    unquoted = _REPR_ESCAPE.sub(lambda m: "'" if m.group(1) == "'" else m.group(0), quoted)
    return {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], quoted, unquoted}


_REPR_ESCAPE = re.compile(r"\\(.)")


def _forms(value: str) -> Iterable[str]:
    """A value as it may appear in text: itself, escaped once or twice (JSON of a repr, repr of a repr, ...),
    base64 and percent-encoded. A secret holding a quote or a backslash is shown escaped by pytest's failure
    text, by a system's `repr` in a traceback, by JSON in a record and by a URL in httpx's log; each is redacted."""
    once = _escapes(value)
    yield value
    yield from once
    for form in once:
        yield from _escapes(form)
    yield base64.b64encode(value.encode("utf-8")).decode("ascii")
    for safe in _URL_SAFE:  # percent-encoded, as a URL holds it (httpx's log line of a request)
        yield urllib.parse.quote(value, safe=safe)
        yield urllib.parse.quote(value, safe=safe + "%")


def register(value: str, name: str) -> None:
    """Note that `value` came from environment variable `name` (redacted to `${name}` from now on)."""
    if not _is_secret(value):
        return
    placeholder = "${" + name + "}"
    global _pattern
    with _lock:
        new = [form for form in _forms(value) if len(form) >= MIN_SECRET_LENGTH and form not in _names]
        for form in new:
            _names[form] = placeholder
        if new:  # registering a known value again (a provider does, per call) keeps the compiled pattern
            _pattern = None


def register_expanded(original: str, expanded: str) -> None:
    """Register the derived forms of a config string whose `${VAR}`s were expanded.

    A URL's `user:password@` part is what HTTP Basic credentials are made of; its
    base64 form (`Authorization: Basic ...`, echoed by a server) is redacted too.
    """
    if original == expanded:
        return
    m = _USERINFO.match(expanded)
    o = _USERINFO.match(original)
    if m and o and m.group(1) != o.group(1):
        global _pattern
        with _lock:
            _names.setdefault(base64.b64encode(m.group(1).encode("utf-8")).decode("ascii"), o.group(1))
            _pattern = None


def _compiled() -> re.Pattern[str] | None:
    global _pattern
    with _lock:
        if _pattern is None and _names:
            # longest first, so a value inside a longer registered form is not replaced piecemeal
            alternatives = sorted(_names, key=len, reverse=True)
            _pattern = re.compile("|".join(map(re.escape, alternatives)))
        return _pattern


def active() -> bool:
    """Whether any secret is registered (every boundary is a no-op until one is)."""
    return bool(_names)


def redact(text: str) -> str:
    """`text` with every registered secret replaced by its `${VAR}` placeholder."""
    if not _names or not text:
        return text
    if not any(form in text for form in tuple(_names)):  # the usual case: substring scans in C, no regex
        return text
    pattern = _compiled()
    if pattern is None:
        return text
    return pattern.sub(lambda m: _names[m.group(0)], text)


def redact_obj(value: Any) -> Any:
    """A JSON-like value with every string (keys included) redacted; other values unchanged."""
    if not _names:
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k) if isinstance(k, str) else k: redact_obj(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_obj(v) for v in value]
    return value


def clear() -> None:
    """Forget every registered secret (tests)."""
    global _pattern
    with _lock:
        _names.clear()
        _pattern = None
