"""Judge providers: who answers a judge's chat messages.

Two kinds ship with Oloproof, chosen by `provider:` in the configuration:

- ``openai`` — any OpenAI-compatible chat-completions endpoint over HTTP
  (OpenAI, vLLM, Ollama, LiteLLM, ...). The API key is read from a named
  environment variable at call time and is never stored, hashed, logged or
  put in an exception message.
- ``python`` — ``object: module:function``, a callable ``fn(messages) -> str``
  (or an object that already implements the `Provider` protocol).

`Provider.identity()` is hashed into the judgment-cache identity, so it holds
everything that changes a reply (kind, model, base_url, temperature, extra
request fields) and nothing secret.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from .errors import ConfigError, OloproofError

if TYPE_CHECKING:
    import ssl

    import httpx  # imported when a judge first sends a request: most runs have no judge

log = logging.getLogger("pytest_oloproof.providers")

Messages = list[dict[str, str]]

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
_RETRY_STATUSES = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))


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


def _redact_url(url: str) -> str:
    """Drop any user:password part of a URL so it can be stored and shown."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _scrub(text: str, secret: str | None) -> str:
    """Remove a secret from text that may have come back from a server."""
    if secret:
        text = text.replace(secret, "***")
    return text


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
    """An OpenAI-compatible chat-completions endpoint, with retries and a concurrency limit.

    Retries (up to `retries` extra attempts) on 408/409/425/429, 5xx, timeouts and
    connection errors, waiting `backoff_s * 2**attempt` or the server's
    `Retry-After` (seconds), never more than `max_backoff_s`. At most
    `concurrency` requests of this instance are in flight at once. `extra` is
    merged into the request body (e.g. ``max_tokens``, ``seed``) and is part of
    the identity.
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
        self._slots = threading.Semaphore(self.concurrency)
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
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
        """Close the pooled HTTP client (optional; it is recreated on demand)."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _new_client(self) -> httpx.Client:
        import httpx

        return httpx.Client(timeout=httpx.Timeout(self.timeout_s), verify=self._ssl_context())

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
        return key

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        wait = retry_after if retry_after is not None else self.backoff_s * (2**attempt)
        return min(wait, self.max_backoff_s)

    def complete(self, messages: Messages) -> str:
        """POST the messages to `{base_url}/chat/completions`; return choices[0].message.content."""
        import httpx

        key = self._api_key()
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        body.update(self.extra)
        url = f"{self.base_url}/chat/completions"
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            retry_after: float | None = None
            try:
                # a client per request: nothing left open between calls or after a timeout
                with self._slots, self._new_client() as client:
                    response = client.post(url, json=body, headers=headers)
            except httpx.TimeoutException:
                last = f"timed out after {self.timeout_s:g}s"
            except httpx.TransportError as exc:
                last = f"connection error ({type(exc).__name__})"
            else:
                if response.status_code == 200:
                    return self._content(response, key)
                snippet = _scrub(response.text[:200], key).strip()
                last = f"HTTP {response.status_code}" + (f": {snippet}" if snippet else "")
                if response.status_code not in _RETRY_STATUSES:
                    raise ProviderError(f"{self.model} at {_redact_url(url)}: {last}")
                retry_after = _retry_after(response.headers.get("Retry-After"))
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
        raise ProviderError(f"{self.model} at {_redact_url(url)}: {last} (after {self.retries + 1} attempts)")

    def _content(self, response: httpx.Response, key: str | None) -> str:
        try:
            data = response.json()
        except ValueError:
            raise ProviderError(f"reply is not valid JSON: {_scrub(response.text[:120], key)!r}") from None
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ProviderError("reply has no choices[0].message.content") from None
        if not isinstance(content, str):
            raise ProviderError("reply content is not a string")
        _report_reply_usage(self.model, data.get("usage"))
        return content


def _report_reply_usage(model: str | None, usage: Any) -> None:
    """Hand a reply's `usage` (when there is one) to the judge call in progress; bad counts count as unknown."""
    from .usage import report_usage

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
    for name in ("timeout_s", "retries", "backoff_s", "max_backoff_s", "concurrency", "temperature", "extra"):
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
