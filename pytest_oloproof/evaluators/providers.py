"""Judge providers: who answers a judge's chat messages.

Two kinds ship with Oloproof, chosen by `provider:` in the configuration:

- ``openai`` — any OpenAI-compatible chat-completions endpoint over HTTP
  (OpenAI, vLLM, Ollama, LiteLLM, ...). The API key is read from a named
  environment variable at call time and is never stored, hashed, logged or
  put in an exception message. Each attempt has one deadline (`timeout_s`,
  for connecting, sending and every byte of the reply), and a reply is refused
  past MAX_REPLY_BYTES on the wire or once decompressed.
- ``python`` — ``object: module:function``, a callable ``fn(messages) -> str``
  (or an object that already implements the `Provider` protocol).

`Provider.identity()` is hashed into the judgment-cache identity, so it holds
everything that changes a reply (kind, model, base_url, temperature, extra
request fields) and nothing secret.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import random
import sys
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from pytest_oloproof.errors import ConfigError, OloproofError
from pytest_oloproof.records import redaction

from .pacing import AdaptiveConcurrency, RateLimiter, backoff_delay, forget_windows, shared_limiter, shared_window

if TYPE_CHECKING:
    import ssl

    import httpx  # imported when a judge first sends a request: most runs have no judge

log = logging.getLogger("pytest_oloproof.evaluators.providers")

Messages = list[dict[str, str]]

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
_RETRY_STATUSES = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))
#: The most bytes a judge's reply may take, on the wire and again once decompressed (a chat completion
#: is a few KiB): a larger reply is refused, not read, so a gzip bomb never fills memory.
MAX_REPLY_BYTES = 4 * 1024 * 1024
#: The most 429s one call waits out while the endpoint serves other requests (beyond them, each 429 counts
#: as a failed attempt): a busy endpoint delays a verdict, it does not lose it.
MAX_THROTTLED_WAITS = 20
#: Of an error reply (not 200), only this much is read: enough for the message quoted in the reason.
_ERROR_BODY_BYTES = 64 * 1024


#: providers whose pooled client is open (closed together at the session's end)
_OPEN: weakref.WeakSet[OpenAIProvider] = weakref.WeakSet()


def close_clients() -> None:
    """Close the pooled HTTP client of every provider of this process (the session calls it at its end), and
    forget the limits learned from 429s: the next session learns its own."""
    for provider in list(_OPEN):
        provider.close()
    _OPEN.clear()
    forget_windows()


class ProviderError(OloproofError):
    """A provider could not produce a reply (HTTP error, timeout, bad reply, missing key)."""


@runtime_checkable
class Provider(Protocol):
    """What a judge needs from a model: a stable identity and a chat completion."""

    def identity(self) -> dict[str, Any]:
        """Everything that changes replies; safe to hash and store (no secrets)."""
        ...

    def complete(self, messages: Messages) -> str:
        """Return the assistant's reply text for `messages` (raise ProviderError on failure)."""
        ...


class _RedactingFilter(logging.Filter):
    """Redacts a log record's text before any handler sees it (the filter of the HTTP libraries' loggers).

    httpx logs every request's URL at INFO, and httpcore its response headers at DEBUG: a password in
    `user:password@`, a token in the path or a key a server echoes would be printed by pytest's
    `log_cli` and captured-log sections. Keeping credentials out of the URL would not cover a token in
    the path or an echo; a filter on the libraries' own loggers covers every form the redactor knows.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if redaction.active():
            text = record.getMessage()
            redacted = redaction.redact(text)
            if redacted != text:
                record.msg, record.args = redacted, None
        return True


#: The loggers httpx and httpcore write to (a logger's filter sees only the records logged to it by name).
_LIBRARY_LOGGERS = ("httpx", *(f"httpcore.{n}" for n in ("connection", "http11", "http2", "proxy", "socks")))
_LOG_FILTER = _RedactingFilter()
for _name in _LIBRARY_LOGGERS:
    logging.getLogger(_name).addFilter(_LOG_FILTER)


def _redact_url(url: str) -> str:
    """Drop any user:password part of a URL so it can be stored and shown."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _scrub(text: str, secret: str | None, limit: int) -> str:
    """Text that may have come back from a server, with the key and every registered secret removed, then cut
    to `limit` characters (in that order: a secret cut in two would no longer be recognised)."""
    if secret:
        text = text.replace(secret, "***")
    return redaction.redact(text)[:limit]


def _retry_after(value: str | None) -> float | None:
    """Parse a Retry-After header given in seconds; HTTP dates are ignored."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def check_base_url(base_url: Any) -> None:
    """An endpoint URL requests can go to: http(s)://host[:port][/path], nothing else (raises ConfigError).

    Checked when the judge is built, before any case runs: a malformed URL would otherwise fail
    every judge call of the run (each one retried), leaving every judged criterion missing.
    """
    example = "e.g. http://localhost:8000/v1"
    if not isinstance(base_url, str) or not base_url:
        raise ConfigError(
            f"openai provider: base_url is empty; give the endpoint's URL ({example}), "
            f"or leave base_url out for {DEFAULT_OPENAI_BASE_URL}",
            key="base_url",
        )
    shown = _redact_url(base_url)
    if any(ch.isspace() for ch in base_url):
        raise ConfigError(
            f"openai provider: base_url {shown!r} contains whitespace; write the URL without spaces ({example})",
            key="base_url",
        )
    if "://" not in base_url:
        raise ConfigError(
            f"openai provider: base_url {shown!r} has no scheme; write it with http:// or https:// "
            f"(e.g. http://{shown.lstrip('/')})",
            key="base_url",
        )
    parts = urlsplit(base_url)
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError(
            f"openai provider: base_url {shown!r}: scheme {parts.scheme + '://'!r} is not http:// or https:// "
            f"(an OpenAI-compatible endpoint is served over HTTP; {example})",
            key="base_url",
        )
    try:
        host, port = parts.hostname, parts.port  # .port raises on a port that is not a number in 0..65535
        if port == 0:
            raise ValueError(port)
    except ValueError:
        raise ConfigError(
            f"openai provider: base_url {shown!r}: the port is not a number from 1 to 65535 ({example})",
            key="base_url",
        ) from None
    if not host:
        raise ConfigError(f"openai provider: base_url {shown!r} names no host ({example})", key="base_url")
    if parts.query or parts.fragment or base_url.endswith(("?", "#")):
        raise ConfigError(
            f"openai provider: base_url {shown!r} has a query or fragment (?... or #...); Oloproof appends "
            f"/chat/completions to base_url, so give only scheme, host and path ({example})",
            key="base_url",
        )


class OpenAIProvider:
    """An OpenAI-compatible chat-completions endpoint, with retries, pacing and a concurrency limit.

    Retries (up to `retries` extra attempts) on 408/409/425/429, 5xx, timeouts (an
    attempt past its `timeout_s` deadline) and connection errors, waiting a fully jittered
    uniform(0, `backoff_s * 2**attempt`) on top of the server's `Retry-After` (seconds), never more than
    `max_backoff_s` (`rng` draws the jitter: pass a seeded `random.Random` to repeat it). At most
    `concurrency` requests of this instance are in flight at once, fewer after a 429 (halved, then
    climbing back one per round trip). After its first 429 the endpoint's own limit is learned (how many
    requests it accepted in the Retry-After window) and every request waits for a turn in that window
    (`pacing.LearnedWindow`). `rate_limit` ({requests_per_second, tokens_per_minute}) paces every request
    to this endpoint and model in the process from the start. Requests go through one HTTP client per
    provider, made on first use and shared by threads (kept-alive connections, at most `concurrency`),
    closed by `close()` (the session closes every provider's at its end). `extra` is merged into the
    request body (e.g. ``max_tokens``, ``seed``) and is part of the identity.
    """

    kind = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 20.0,
        concurrency: int = 4,
        temperature: float = 0.0,
        extra: dict[str, Any] | None = None,
        rate_limit: Mapping[str, float | None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not model:
            raise ConfigError("openai provider: `model` is required", key="model")
        check_base_url(base_url)
        if concurrency < 1:
            raise ConfigError(f"openai provider: concurrency must be >= 1, got {concurrency}", key="concurrency")
        if retries < 0:
            raise ConfigError(f"openai provider: retries must be >= 0, got {retries}", key="retries")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.concurrency = int(concurrency)
        self.temperature = float(temperature)
        self.extra = dict(extra or {})
        self._slots = AdaptiveConcurrency(self.concurrency)
        self.rng = rng if rng is not None else random.Random()
        self._limiter: RateLimiter | None = None
        endpoint = (_redact_url(self.base_url), self.model, self.api_key_env or "")  # what a provider's limits count
        if rate_limit:
            rps, tpm = rate_limit.get("requests_per_second"), rate_limit.get("tokens_per_minute")
            self._limiter = shared_limiter(endpoint, rps, tpm)
        self._window = shared_window(endpoint)
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        self._closer: Callable[[], Any] = lambda: None
        self._ssl: ssl.SSLContext | None = None
        self._sleep: Callable[[float], None] = time.sleep  # replaceable in tests

    def __repr__(self) -> str:
        return (
            f"OpenAIProvider(base_url={_redact_url(self.base_url)!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    def identity(self) -> dict[str, Any]:
        """Kind, model, endpoint and sampling settings; never the key (timeouts and retries excluded)."""
        return {
            "provider": self.kind,
            "model": self.model,
            "base_url": _redact_url(self.base_url),
            "temperature": self.temperature,
            "extra": dict(sorted(self.extra.items())),
        }

    def close(self) -> None:
        """Close the pooled HTTP client and its connections (a later request opens a new one)."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            self._closer()  # closes the client (once: a finalizer, so a provider dropped unclosed closes it too)

    def _http(self) -> httpx.Client:
        """The provider's one HTTP client, created on first use and shared by every thread: its connections
        stay open between requests (no TCP and TLS handshake per judge call); closed at the session's end."""
        client = self._client
        if client is None:
            ctx = self._ssl_context()
            with self._client_lock:
                if self._client is None:
                    from .http_pool import new_client

                    self._client = new_client(self.base_url, ctx, self.timeout_s, self.concurrency)
                    self._closer = weakref.finalize(self, self._client.close)
                    _OPEN.add(self)
                client = self._client
        return client

    def _ssl_context(self) -> ssl.SSLContext:
        """One TLS context for every request of this provider: building one (loading the CA bundle) is
        about 40 ms of CPU, which a client per request would pay on every judge call."""
        ctx = self._ssl
        if ctx is None:
            with self._client_lock:
                if self._ssl is None:
                    import httpx

                    self._ssl = httpx.create_ssl_context(trust_env=True)  # as httpx.Client(verify=True) builds it
                ctx = self._ssl
        return ctx

    def _api_key(self) -> str | None:
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ProviderError(f"environment variable {self.api_key_env} (api_key_env) is not set or empty")
        redaction.register(key, self.api_key_env)  # a reply that echoes it is redacted wherever it is shown
        return key

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        return backoff_delay(attempt, self.backoff_s, self.max_backoff_s, self.rng, retry_after)

    def complete(self, messages: Messages) -> str:
        """POST the messages to `{base_url}/chat/completions`; return choices[0].message.content."""
        import httpx

        key = self._api_key()
        headers = {"Content-Type": "application/json", "Accept-Encoding": "gzip, deflate"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        body.update(self.extra)
        url = f"{self.base_url}/chat/completions"
        last = "no attempt made"
        attempt, waits = 0, 0
        served = self._slots.served  # successes of this endpoint when this call began, or at its last 429
        while attempt <= self.retries:
            retry_after: float | None = None
            try:
                send, status = self._window.acquire(), None  # a turn in the endpoint's learned window
                try:
                    with self._slots.slot() as outcome:
                        if self._limiter is not None:
                            self._limiter.wait()
                        self._window.sent(send)
                        status, reply_headers, data = self._post(url, body, headers, partial(self._window.sent, send))
                        if status != 200:
                            retry_after = _retry_after(reply_headers.get("Retry-After"))
                        outcome(True if status == 200 else False if status == 429 else None)
                finally:
                    told = None if retry_after is None else min(retry_after, self.max_backoff_s)
                    self._window.release(send, status, told)
            except httpx.TimeoutException:
                last = f"timed out after {self.timeout_s:g}s"
            except httpx.TransportError as exc:
                last = f"connection error ({type(exc).__name__})"
            except _Refused as exc:  # too large, or an encoding Oloproof does not read: asking again changes nothing
                raise ProviderError(f"{self.model} at {_redact_url(url)}: {exc}") from None
            else:
                if status == 200:
                    return self._content(data, key)
                snippet = _scrub(data.decode("utf-8", "replace"), key, 200).strip()
                last = f"HTTP {status}" + (f": {snippet}" if snippet else "")
                if status not in _RETRY_STATUSES:
                    raise ProviderError(f"{self.model} at {_redact_url(url)}: {last}")
                if status == 429:
                    busy, served = self._slots.served > served, self._slots.served
                    if busy and waits < MAX_THROTTLED_WAITS:
                        waits += 1  # the endpoint served others since: a wait in line, not a failed attempt
                        self._sleep(self._delay(attempt, retry_after))
                        continue
            if attempt < self.retries:
                wait = self._delay(attempt, retry_after)
                log.debug(
                    "judge request failed (%s); retry %d/%d in %.2fs",
                    last.split(":")[0],
                    attempt + 1,
                    self.retries,
                    wait,
                )
                self._sleep(wait)
            attempt += 1
        raise ProviderError(f"{self.model} at {_redact_url(url)}: {last} (after {self.retries + 1} attempts)")

    def _post(
        self, url: str, body: dict[str, Any], headers: dict[str, str], on_sent: Callable[[], None] | None = None
    ) -> tuple[int, httpx.Headers, bytes]:
        """One attempt under one deadline of `timeout_s`: connecting, sending and every byte of the reply.

        `on_sent` is called once the request's last byte is written (httpcore's public `trace` extension): the
        moment the endpoint's rate window counts, after any new connection's handshake.

        httpx's timeouts bound each operation alone (a reply dripped one byte at a time never trips them);
        the pooled client's network layer bounds every operation by what is left of this deadline instead.
        """
        from .http_pool import deadline

        client = self._http()
        with deadline(self.timeout_s):
            extensions: dict[str, Any] = {}
            if on_sent is not None:

                def trace(event: str, info: dict[str, Any]) -> None:
                    if event.endswith("send_request_body.complete"):
                        on_sent()

                extensions["trace"] = trace
            request = client.build_request("POST", url, json=body, headers=headers, extensions=extensions)
            response = client.send(request, stream=True)
            try:
                limit = MAX_REPLY_BYTES if response.status_code == 200 else _ERROR_BODY_BYTES
                data = _read_body(response, limit, whole=response.status_code == 200)
            finally:
                response.close()
            return response.status_code, response.headers, data

    def _content(self, data: bytes, key: str | None) -> str:
        try:
            reply = json.loads(data)
        except ValueError:
            text = data.decode("utf-8", "replace")
            raise ProviderError(f"reply is not valid JSON: {_scrub(text, key, 120)!r}") from None
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ProviderError("reply has no choices[0].message.content") from None
        if not isinstance(content, str):
            raise ProviderError("reply content is not a string")
        usage = reply.get("usage") if isinstance(reply, Mapping) else None
        _report_reply_usage(self.model, usage)
        if self._limiter is not None and isinstance(usage, Mapping):
            total = usage.get("total_tokens")
            if isinstance(total, int) and not isinstance(total, bool):
                self._limiter.spend(total)
        return content


class _Refused(Exception):
    """A reply Oloproof will not read: larger than MAX_REPLY_BYTES, or in an encoding it does not decode."""


def _read_body(response: httpx.Response, limit: int, whole: bool = True) -> bytes:
    """A reply's body, decompressed, read as it streams in and refused past `limit` bytes on the wire or decoded.

    gzip and deflate (what the request accepts) are decoded here with zlib, each step producing at most
    what is left of the limit, so a small reply that inflates to gigabytes costs `limit` bytes at most.
    With `whole=False` (an error reply, read for its message) a reply past the limit is cut, not refused.
    """
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        decoder = None
    elif encoding in ("gzip", "x-gzip", "deflate"):
        decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header, detected
    elif whole:
        raise _Refused(f"reply in Content-Encoding {encoding!r}, which Oloproof does not decode (it asks for gzip)")
    else:
        return b""  # an error reply's message cannot be read: the status says enough
    declared = response.headers.get("Content-Length", "")
    if whole and declared.isdigit() and int(declared) > limit:
        raise _Refused(f"reply of {int(declared):,} bytes refused (the limit is {limit:,} bytes)")
    chunks: list[bytes] = []
    size = 0
    try:
        for raw in response.iter_raw():
            if response.num_bytes_downloaded > limit:
                raise _Refused(f"reply larger than {limit:,} bytes refused")
            data = raw if decoder is None else decoder.decompress(raw, limit + 1 - size)
            size += len(data)
            chunks.append(data)
            if size > limit or (decoder is not None and decoder.unconsumed_tail):
                raise _Refused(f"reply larger than {limit:,} bytes once decompressed refused")
    except _Refused:
        if whole:
            raise
        return b"".join(chunks)[:limit]
    except zlib.error as exc:
        if whole:
            raise _Refused(f"reply is not valid {encoding} ({exc})") from None
    return b"".join(chunks)


def _report_reply_usage(model: str | None, usage: Any) -> None:
    """Hand a reply's `usage` (when there is one) to the judge call in progress; bad counts count as unknown."""
    from pytest_oloproof.usage.accounting import report_usage

    if not isinstance(usage, Mapping):
        return  # no usage reported: the judge call records its tokens as unknown
    try:
        report_usage(model=model, usage=usage)
    except ValueError:
        report_usage(model=model)


class PythonProvider:
    """A Python callable `fn(messages) -> str` used as the judge's model.

    Oloproof cannot see code changes: `model` (any label, e.g. "rules-v2") is
    part of the identity, so change it when the function's behaviour changes.
    """

    kind = "python"

    def __init__(self, fn: Callable[[Messages], str], *, object: str | None = None, model: str | None = None) -> None:
        if not callable(fn):
            raise ConfigError(f"python provider: {object or fn!r} is not callable", key="object")
        self.fn = fn
        self.object = object or f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
        self.model = model

    def __repr__(self) -> str:
        return f"PythonProvider(object={self.object!r}, model={self.model!r})"

    def identity(self) -> dict[str, Any]:
        """The function's import path and the user's model label."""
        return {"provider": self.kind, "object": self.object, "model": self.model}

    def complete(self, messages: Messages) -> str:
        """Call the function; any exception or non-string result is a ProviderError.

        The function may return ``{"content": str, "usage": {...}}`` (OpenAI- or
        Anthropic-style token counts) instead of a string, or call
        ``pytest_oloproof.report_usage(...)``, to say what the call cost.
        """
        try:
            reply = self.fn(messages)
        except Exception as exc:  # a user function may raise anything
            raise ProviderError(f"python provider {self.object} raised {type(exc).__name__}: {exc}") from exc
        if isinstance(reply, Mapping) and isinstance(reply.get("content"), str):
            _report_reply_usage(self.model, reply.get("usage"))
            reply = reply["content"]
        if not isinstance(reply, str):
            raise ProviderError(f"python provider {self.object} returned {type(reply).__name__}, expected str")
        return reply


def load_object(spec: str, base_dir: Path | None = None) -> Any:
    """Import `module:attr.path`, with `base_dir` (the config's folder) importable first."""
    module_name, sep, attr_path = (spec or "").partition(":")
    if not sep or not module_name or not attr_path:
        raise ConfigError(f"object {spec!r}: expected 'module:attribute'", key="object")
    if base_dir is not None:
        folder = str(Path(base_dir).resolve())
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"object {spec!r}: cannot import module {module_name!r}: {exc}", key="object") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            message = f"object {spec!r}: {module_name!r} has no attribute {attr_path!r}"
            raise ConfigError(message, key="object") from None
    return obj


def _build_openai(settings: Mapping[str, Any], base_dir: Path | None) -> Provider:
    model = settings.get("model")
    if not model:
        raise ConfigError(
            "provider openai: `model` is required (the model the endpoint serves, e.g. `model: gpt-4o-mini`)",
            key="model",
        )
    kwargs: dict[str, Any] = {}
    names = ("timeout_s", "retries", "backoff_s", "max_backoff_s", "concurrency", "temperature", "extra", "rate_limit")
    for name in names:
        if settings.get(name) is not None:
            kwargs[name] = settings[name]
    base_url = settings.get("base_url")
    return OpenAIProvider(
        DEFAULT_OPENAI_BASE_URL if base_url is None else base_url,  # an empty base_url is an error, not the default
        str(model),
        api_key_env=settings.get("api_key_env"),
        **kwargs,
    )


def _build_python(settings: Mapping[str, Any], base_dir: Path | None) -> Provider:
    spec = settings.get("object")
    if not spec:
        raise ConfigError("provider python: `object: module:function` is required", key="object")
    if settings.get("rate_limit"):
        raise ConfigError(
            "rate_limit paces the requests of provider: openai; a python provider's function paces its own calls",
            key="rate_limit",
        )
    obj = load_object(str(spec), base_dir)
    if callable(getattr(obj, "complete", None)) and callable(getattr(obj, "identity", None)):
        provider: Provider = obj  # already a Provider (e.g. an instance defined in the user's module)
        return provider
    model = settings.get("model")
    return PythonProvider(obj, object=str(spec), model=None if model is None else str(model))


#: provider kind -> factory(settings, base_dir); plugins may add kinds here.
PROVIDERS: dict[str, Callable[[Mapping[str, Any], Path | None], Provider]] = {
    "openai": _build_openai,
    "python": _build_python,
}


def build_provider(settings: Mapping[str, Any], base_dir: Path | None = None) -> Provider:
    """Build a provider from config keys (provider, model, base_url, api_key_env, object, ...)."""
    kind = settings.get("provider", "openai")
    factory = PROVIDERS.get(str(kind))
    if factory is None:
        raise ConfigError(f"unknown judge provider {kind!r}; expected one of {sorted(PROVIDERS)}", key="provider")
    return factory(settings, base_dir)
