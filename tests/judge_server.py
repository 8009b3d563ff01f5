"""A scripted HTTP server on 127.0.0.1 for testing judge providers without a network.

    with ScriptedServer([Reply(429, {"Retry-After": "1"}), Reply.chat('{"verdict": "pass"}')]) as s:
        provider = OpenAIProvider(s.base_url, "m")

Replies are served in order; when the script runs out the last reply repeats
(or `responder(request)` decides, when given). Every request is recorded, and
the server tracks the highest number of requests it held at once.

Hostile replies: `drip_s` sends the whole reply (status line and headers too, or only the body with
`drip_body_only`) one byte at a time with that pause between bytes; `length=False` leaves out
Content-Length and ends the body by closing the connection; a `bytes` body with a
`Content-Encoding` header is sent as given (a gzip bomb: `gzip_bomb(n)`). Each recorded request
says how many bytes of its reply were sent and whether the client took all of them (`answered`
is set once the server stopped writing).

Timing never decides a test's outcome: `hold_until_in_flight=n` holds every request
until n are in flight together once (so a test of concurrency sees the overlap however
slowly a loaded machine starts the client's threads), and `wait_for_requests(n)` waits
until the server has read n requests (a client that timed out may return before the
server's thread even read the request it gave up on).
"""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self


@dataclass
class Reply:
    """One scripted reply: status, headers, body (str, bytes or JSON-able) and a delay."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = ""
    delay: float = 0.0
    drip_s: float = 0.0  # pause between bytes of the reply (0: written at once)
    drip_body_only: bool = False  # drip only the body (the status line and headers at once)
    length: bool = True  # send Content-Length (else the body ends when the connection closes)

    @classmethod
    def chat(cls, content: str, usage: dict[str, Any] | None = None, **kw: Any) -> Reply:
        """An OpenAI chat-completions reply whose message content is `content` (with `usage`, when given)."""
        body: dict[str, Any] = {
            "id": "cmpl-test",
            "object": "chat.completion",
            "model": "test",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        }
        if usage is not None:
            body["usage"] = usage
        return cls(200, {}, body, **kw)

    @classmethod
    def verdict(cls, verdict: str, rationale: str = "ok", usage: dict[str, Any] | None = None, **kw: Any) -> Reply:
        """A chat reply carrying a judge verdict as JSON."""
        return cls.chat(json.dumps({"verdict": verdict, "rationale": rationale}), usage=usage, **kw)

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode("utf-8")
        return json.dumps(self.body).encode("utf-8")


@dataclass
class Recorded:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)  # when the server read it
    sent: int = 0  # bytes of the reply written to the client
    complete: bool = False  # the client took the whole reply
    answered: threading.Event = field(default_factory=threading.Event)  # the server stopped writing

    def json(self) -> Any:
        return json.loads(self.body)


class ScriptedServer:
    """Serve scripted replies on an ephemeral loopback port in a background thread."""

    # how long a held request, or a wait for requests, waits at most: far past any loaded machine's
    # scheduling delay; reached only when the client under test really never sends what is waited for
    PATIENCE_S = 30.0

    def __init__(
        self,
        replies: list[Reply] | None = None,
        responder: Callable[[Recorded], Reply] | None = None,
        hold_until_in_flight: int = 0,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        self.replies = list(replies or [])
        self.responder = responder
        self.hold_until_in_flight = hold_until_in_flight
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a request was read, or the server stops
        self._stop = threading.Event()
        self._served = 0
        self.connections = 0  # TCP connections accepted (and, over TLS, past the handshake)
        self.open_connections = 0  # of them, not yet closed
        self.refused_handshakes = 0  # TLS handshakes that failed (a client that did not trust the certificate)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]  # a refused handshake
        self.scheme = "http"
        if tls is not None:  # `tls=(certfile, keyfile)`: serve https (see `self_signed_cert`)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._httpd.socket = context.wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )  # the handshake runs in the connection's own thread (`setup`), never in the accepting one
            self.scheme = "https"
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False  # do not wait for slow handlers on close
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"{self.scheme}://{host}:{port}/v1"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_for_requests(self, n: int, timeout_s: float = PATIENCE_S) -> int:
        """Wait until the server has read `n` requests (or `timeout_s` passed); return how many it read."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.requests) >= n or self._stop.is_set(), timeout_s)
            return len(self.requests)

    def _hold(self) -> None:
        """Hold a request until `hold_until_in_flight` requests were in flight together once (lock held)."""
        self._changed.wait_for(
            lambda: self.max_in_flight >= self.hold_until_in_flight or self._stop.is_set(), self.PATIENCE_S
        )

    def close(self) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _next(self, request: Recorded) -> Reply:
        if self.responder is not None:
            return self.responder(request)
        with self._lock:
            if not self.replies:
                return Reply(500, body="no scripted reply")
            reply = self.replies[min(self._served, len(self.replies) - 1)]
            self._served += 1
            return reply

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                if isinstance(self.request, ssl.SSLSocket):
                    try:
                        self.request.do_handshake()
                    except (ssl.SSLError, OSError):
                        with server._lock:
                            server.refused_handshakes += 1
                        raise
                with server._lock:
                    server.connections += 1
                    server.open_connections += 1
                self._counted = True
                super().setup()

            def finish(self) -> None:
                try:
                    super().finish()
                finally:
                    if getattr(self, "_counted", False):
                        with server._lock:
                            server.open_connections -= 1

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Recorded("POST", self.path, dict(self.headers.items()), self.rfile.read(length))
                with server._changed:
                    server.requests.append(request)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server._changed.notify_all()
                    server._hold()
                try:
                    reply = server._next(request)
                    if reply.delay:
                        server._stop.wait(reply.delay)
                finally:
                    # count the request as held until just before answering it,
                    # so a client released by this answer never overlaps it
                    with server._lock:
                        server.in_flight -= 1
                payload = reply.encoded()
                try:
                    self._answer(request, reply, payload)
                except OSError:
                    pass  # the client gave up (timeout); nothing to answer
                finally:
                    request.answered.set()

            def _answer(self, request: Recorded, reply: Reply, payload: bytes) -> None:
                headers = {"Content-Type": "application/json", **reply.headers}
                if reply.length:
                    headers["Content-Length"] = str(len(payload))
                else:
                    headers["Connection"] = "close"
                    self.close_connection = True
                head = f"HTTP/1.1 {reply.status} {self.responses.get(reply.status, ('',))[0]}\r\n"
                head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
                whole = head.encode("latin-1") + payload
                start = len(whole) - len(payload) if reply.drip_body_only else 0
                end = len(whole) if reply.drip_s else start  # bytes [start, end) are dripped one at a time
                self._send(request, whole[:start])
                for i in range(start, end):
                    if server._stop.wait(reply.drip_s):
                        return  # the server is closing
                    self._send(request, whole[i : i + 1])
                self._send(request, whole[end:])
                request.complete = True

            def _send(self, request: Recorded, data: bytes) -> None:
                if data:
                    self.wfile.write(data)
                    self.wfile.flush()
                    request.sent += len(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Stay quiet."""

        return Handler


def self_signed_cert(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A throw-away certificate and key for `host` (an IP address), made with `openssl` (cert, key)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", f"/CN={host}", "-addext", f"subjectAltName=IP:{host}"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def openai_usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    """A chat-completions `usage` object as OpenAI sends it (cached tokens under prompt_tokens_details)."""
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def gzip_bomb(size: int) -> bytes:
    """`size` zero bytes, gzip-compressed (about 1,000 to 1), built without holding `size` bytes."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    out = [packer.compress(block) for _ in range(size >> 20)]
    out.append(packer.compress(bytes(size & ((1 << 20) - 1))))
    return b"".join(out) + packer.flush()
