"""A judge behind a rate limit: 500 verdicts against a loopback server that allows 20 requests per second.

    python benchmarks/bench_ratelimit.py [--verdicts 500] [--concurrency 4 8 32] [--rate-limit] [--repeat K]

The server (in this file) answers each request within the limit after 200 ms with a verdict, and any
request beyond 20 in the last second at once with `429` and `Retry-After: 1`. Each row drives one
`groundedness_judge` (`provider: openai`, default retries and backoff, `concurrency: C`) from C threads,
as the run's judge threads do, and prints the wall time, the 429s the server sent, and the verdicts
missing. `--rate-limit` adds `rate_limit: {requests_per_second: 20}` to the judge. At 20 requests per
second 500 verdicts take at least 25 s; the target is at most 27.8 s (0.9 of the limit's pace) and 0
missing at concurrency 32, and concurrency 8 never slower than 4. `--repeat K` runs K rounds (each round
every concurrency in turn, so a slow spell of the machine falls on all of them) and ends with each
concurrency's median and range, and in how many rounds 8 was slower than 4.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pytest_oloproof.evaluators import http_pool  # noqa: F401  imported now: no row pays httpx's import
from pytest_oloproof.evaluators.base import ContextPassage, EvalInput
from pytest_oloproof.evaluators.judges import GroundednessJudge

LIMIT_PER_S = 20
REPLY_S = 0.2
VERDICT = json.dumps(
    {"choices": [{"message": {"role": "assistant", "content": json.dumps({"verdict": "pass", "rationale": "ok"})}}]}
).encode()


class LimitedServer:
    """At most LIMIT_PER_S accepted requests in any one second (a sliding window); 429 + Retry-After: 1 beyond."""

    def __init__(self) -> None:
        self.accepted: collections.deque[float] = collections.deque()
        self.too_many = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall between

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                now = time.monotonic()
                with server.lock:
                    while server.accepted and server.accepted[0] <= now - 1.0:
                        server.accepted.popleft()
                    ok = len(server.accepted) < LIMIT_PER_S
                    if ok:
                        server.accepted.append(now)
                    else:
                        server.too_many += 1
                if ok:
                    time.sleep(REPLY_S)
                    self._reply(200, VERDICT, {})
                else:
                    self._reply(429, b'{"error": "rate limited"}', {"Retry-After": "1"})

            def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        ThreadingHTTPServer.request_queue_size = 256  # socketserver's 5 drops connections (a 1 s SYN retry each)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def case(i: int) -> EvalInput:
    return EvalInput(
        case_id=f"c{i}",
        input={"question": f"q{i}"},
        expected={},
        metadata={},
        output={"answer": f"answer {i}"},
        context=[ContextPassage(doc_id="kb-1", chunk_id=None, text="passage")],
    )


def run(verdicts: int, concurrency: int, rate_limit: bool, round_: int = 0) -> dict[str, Any]:
    server = LimitedServer()
    try:
        kwargs: dict[str, Any] = {"rate_limit": {"requests_per_second": LIMIT_PER_S}} if rate_limit else {}
        judge = GroundednessJudge(
            provider="openai", model=f"m-{concurrency}-{rate_limit}-{round_}", base_url=server.base_url,
            concurrency=concurrency, **kwargs,
        )  # fmt: skip
        time.sleep(1.1)  # the window of the previous row is empty
        start = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            values = list(pool.map(judge.evaluate, (case(i) for i in range(verdicts))))
        wall = time.monotonic() - start
        close = getattr(judge.provider, "close", None)
        if close is not None:
            close()
    finally:
        server.close()
    missing = [v.reason for v in values if v.status != "observed"]
    return {"concurrency": concurrency, "wall_s": wall, "429": server.too_many, "missing": len(missing)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verdicts", type=int, default=500)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 8, 32])
    parser.add_argument("--rate-limit", action="store_true", help="rate_limit: {requests_per_second: 20}")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every concurrency (medians at the end)")
    args = parser.parse_args()
    floor = args.verdicts / LIMIT_PER_S
    print(f"{args.verdicts} verdicts, {LIMIT_PER_S} req/s allowed, {REPLY_S * 1000:.0f} ms per reply")
    print(f"the limit's pace: {floor:.1f} s; 0.9 of it: {floor / 0.9:.1f} s; pid {os.getpid()}")
    print("rate_limit: " + ("requests_per_second: 20" if args.rate_limit else "none"))
    walls: dict[int, list[float]] = {c: [] for c in args.concurrency}
    for round_ in range(args.repeat):
        for c in args.concurrency:
            row = run(args.verdicts, c, args.rate_limit, round_)
            walls[c].append(row["wall_s"])
            pace = floor / row["wall_s"]
            print(
                f"concurrency {c:>3}: {row['wall_s']:6.1f} s  ({pace:.2f} of the pace)  "
                f"429s {row['429']:>4}  missing {row['missing']}",
                flush=True,
            )
    if args.repeat > 1:
        for c, ws in walls.items():
            print(f"concurrency {c:>3}: median {statistics.median(ws):.1f} s  [{min(ws):.1f}, {max(ws):.1f}]")
        if 4 in walls and 8 in walls:
            slower = sum(w8 > w4 for w4, w8 in zip(walls[4], walls[8], strict=True))
            print(f"concurrency 8 slower than 4 in {slower} of {args.repeat} rounds")


if __name__ == "__main__":
    main()
