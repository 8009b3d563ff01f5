"""The cost of one judge call over HTTPS: a client per request against one pooled client per provider.

    python benchmarks/bench_http_client.py [--calls 200]

A loopback TLS server (a self-signed certificate made with `openssl`, trusted through SSL_CERT_FILE)
answers every request at once with a verdict. The same `OpenAIProvider` calls it `--calls` times from one
thread; the wall and CPU time per call and the connections the server accepted are printed. "pooled" is
the provider as it ships; "a client per request" closes the provider's client after every call, so each
call opens a new connection and repeats the TCP and TLS handshakes (what the provider did before).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/judge_server.py: the scripted server

from pytest_oloproof.evaluators.providers import OpenAIProvider
from tests.judge_server import Reply, ScriptedServer, self_signed_cert

HI = [{"role": "user", "content": "hi"}]


def measure(base_url: str, calls: int, per_request: bool) -> tuple[float, float]:
    provider = OpenAIProvider(base_url, "m", retries=0)
    provider.complete(HI)  # the TLS context (CA bundle) is built once in either case: not what is measured
    if per_request:
        provider.close()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        provider.complete(HI)
        if per_request:
            provider.close()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    provider.close()
    return wall / calls * 1000, cpu / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("openssl") is None:
        sys.exit("needs openssl on PATH to make a certificate")
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = self_signed_cert(Path(tmp))
        os.environ["SSL_CERT_FILE"] = str(cert)
        print(f"{args.calls} calls per round, {args.rounds} rounds, loopback TLS, one thread; per call (median):")
        for label, per_request in (("a client per request", True), ("pooled", False)):
            rows = []
            for _ in range(args.rounds):
                with ScriptedServer([Reply.verdict("pass")], tls=(cert, key)) as server:
                    wall, cpu = measure(server.base_url, args.calls, per_request)
                    rows.append((wall, cpu, server.connections))
            rows.sort()
            wall, cpu, conns = rows[len(rows) // 2]
            print(
                f"  {label:<22} wall {wall:6.2f} ms  CPU {cpu:6.2f} ms  "
                f"connections {conns} (rounds' wall {rows[0][0]:.2f}-{rows[-1][0]:.2f} ms)",
                flush=True,
            )


if __name__ == "__main__":
    main()
