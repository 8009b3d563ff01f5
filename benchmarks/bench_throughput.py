"""Benchmark 2: latency-bound throughput at concurrency 32 against the ideal (total latency / 32).

    python benchmarks/bench_throughput.py [--cases 1000] [--concurrency 32]

Each case's stages sleep 10 ms (retrieve) + 50 ms (generate). The ideal wall time is
cases x 60 ms / concurrency; the figure is ideal / measured (target >= 0.8). Measured
for the thread pool (sync system) and the event loop (async system), on the
prefetcher that `pytest --oloproof` uses, with the cache off; the end-to-end
`pytest --oloproof` wall time (startup and per-item reporting included) is printed beside it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _project import make_project, run_pytest

from pytest_oloproof.cache import CacheMode
from pytest_oloproof.prefetch import Prefetcher
from pytest_oloproof.runner import Evaluation

RETRIEVE_S, GENERATE_S = 0.010, 0.050


def engine_time(cfg: Path, concurrency: int) -> float:
    ev = Evaluation.load(cfg, cache_mode=CacheMode.OFF)
    pre = Prefetcher(ev.engine, ev.cases, concurrency, use_async=ev.is_async)
    t0 = time.perf_counter()
    pre.start()
    for case in ev.cases:
        rec = pre.result(case.id)
        assert rec["error"] is None, rec["error"]
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    n, conc = args.cases, args.concurrency
    ideal = n * (RETRIEVE_S + GENERATE_S) / conc
    print(f"cases: {n}, stages sleep {RETRIEVE_S * 1e3:.0f} ms + {GENERATE_S * 1e3:.0f} ms, concurrency {conc}")
    print(f"ideal: {ideal:.2f} s")
    with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
        for use_async in (False, True):
            name = "async_app" if use_async else "sync_app"
            root = Path(tmp) / name
            cfg = make_project(
                root,
                n,
                retrieve_s=RETRIEVE_S,
                generate_s=GENERATE_S,
                use_async=use_async,
                concurrency=conc,
                module=name,
            )
            sys.path.insert(0, str(root))
            took = engine_time(cfg, conc)
            wall = run_pytest(root, "--oloproof", "--oloproof-cache=off")[0]
            kind = "event loop (async)" if use_async else "threads (sync)  "
            print(
                f"{kind}: prefetcher {took:.2f} s -> {ideal / took:.2f} of the ideal speed-up (target >= 0.8); "
                f"pytest --oloproof end to end {wall:.2f} s -> {ideal / wall:.2f}"
            )


if __name__ == "__main__":
    main()
