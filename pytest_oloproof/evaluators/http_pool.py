"""One pooled HTTP client per judge provider: keep-alive connections, one TLS context, one deadline per attempt.

The client is httpx's, over httpcore's connection pool (public API) with a network backend that bounds
every connect, TLS handshake, read and write by what is left of the attempt's deadline (`deadline()`,
per thread). httpx's own timeouts bound each operation alone, so a reply dripped a byte at a time would
never trip them; and a pooled connection's socket cannot be reached from outside to cut it, as a timer
could with a fresh connection. A proxy from the environment (HTTPS_PROXY, NO_PROXY, ...) is honoured.
Imported when a judge first sends a request (most runs have no judge, and httpx takes a while to import).
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpcore
import httpx

if TYPE_CHECKING:
    import ssl

_LOCAL = threading.local()


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every network operation of this thread inside the block ends by `seconds` from now."""
    _LOCAL.at = time.monotonic() + seconds
    try:
        yield
    finally:
        _LOCAL.at = None


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """The smaller of an operation's own timeout and what is left of the deadline; `expired` once it passed."""
    at: float | None = getattr(_LOCAL, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise expired("the attempt's deadline passed")
    return left if timeout is None else min(timeout, left)


def new_client(url: str, ssl_context: ssl.SSLContext, timeout_s: float, max_connections: int) -> httpx.Client:
    """A client whose connections to `url`'s host stay open between requests (at most `max_connections`)."""
    pool_options: dict[str, Any] = {
        "ssl_context": ssl_context,
        "max_connections": max_connections,
        "max_keepalive_connections": max_connections,
        "keepalive_expiry": 30.0,
        "network_backend": _DeadlineBackend(),
    }
    host = urlsplit(url).hostname or ""
    proxy = urllib.request.getproxies().get(urlsplit(url).scheme)
    pool: httpcore.ConnectionPool
    if proxy and not urllib.request.proxy_bypass(host):
        pool = httpcore.HTTPProxy(proxy_url=proxy, **pool_options)
    else:
        pool = httpcore.ConnectionPool(**pool_options)
    return httpx.Client(transport=_Transport(pool), timeout=httpx.Timeout(timeout_s))


class _Transport(httpx.BaseTransport):
    """httpx's transport interface over an httpcore pool (httpx.HTTPTransport takes no network backend)."""

    def __init__(self, pool: httpcore.ConnectionPool) -> None:
        self._pool = pool

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,  # a sync stream: bytes chunks
            extensions=request.extensions,
        )
        with _as_httpx(request):
            response = self._pool.handle_request(core)
        return httpx.Response(
            response.status,
            headers=response.headers,
            stream=_Body(response, request),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()


class _Body(httpx.SyncByteStream):
    """A reply's body as httpx reads it, with httpcore's errors raised as httpx's."""

    def __init__(self, response: httpcore.Response, request: httpx.Request) -> None:
        self._response, self._request = response, request

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx(self._request):
            yield from self._response.iter_stream()

    def close(self) -> None:
        self._response.close()


@contextmanager
def _as_httpx(request: httpx.Request) -> Iterator[None]:
    """httpcore's exceptions as the httpx exceptions of the same name (httpx's transport does the same)."""
    try:
        yield
    except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError, httpcore.ProxyError) as exc:
        cls = getattr(httpx, type(exc).__name__, httpx.TransportError)
        raise cls(str(exc), request=request) from exc
    except httpcore.UnsupportedProtocol as exc:
        raise httpx.UnsupportedProtocol(str(exc), request=request) from exc


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation ends by the thread's deadline."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> _DeadlineStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync network backend, its streams bounded by the thread's deadline."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> _DeadlineStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_tcp(host, port, left, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> _DeadlineStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)
