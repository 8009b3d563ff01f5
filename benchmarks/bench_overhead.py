"""Benchmark 1: per-case overhead of `pytest --oloproof` against bare pytest over the same ids.

    python benchmarks/bench_overhead.py [--cases 10000] [--repeat 3] [--paired]

Prints wall times and the ratios (targets: cold <= 2.0x, warm <= 1.5x bare pytest).

By default each round runs bare, cold and warm one after another and the best
time of each is reported. On a shared virtual machine, whose speed can swing by
half within a minute, `--paired` is steadier: while each Oloproof run goes, bare
pytest runs over and over beside it (one per core), so both see the same machine
for the whole window; the ratio is the Oloproof time over the mean of the bare
runs that finished inside it, and the median over rounds is reported.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _project import make_bare, make_project, pytest_command, pytest_env, run_pytest_cpu

TARGETS = {"cold": 2.0, "warm": 1.5}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3, help="rounds")
    ap.add_argument("--paired", action="store_true", help="run each Oloproof run alongside a bare run")
    ap.add_argument("--verbose", action="store_true", help="print every round")
    args = ap.parse_args()
    n = args.cases
    with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
        root = Path(tmp)
        make_bare(root / "bare", n)
        make_project(root / "olo", n)
        store = root / "olo" / ".oloproof"

        def bare() -> float:
            # -p no:oloproof: bare pytest pays nothing for the plugin being installed
            return run_pytest_cpu(root / "bare", "-p", "no:oloproof")[0]

        def olo() -> float:
            return run_pytest_cpu(root / "olo", "--oloproof")[0]

        def bare_beside(stop: threading.Event) -> list[float]:
            """Bare runs back to back until `stop`; the one cut short is not counted, unless it is the
            first (an Oloproof run faster than one bare run), which then runs to its end."""
            done: list[float] = []
            cmd, env = pytest_command("-p", "no:oloproof"), pytest_env()
            while not stop.is_set():
                t0 = time.perf_counter()
                proc = subprocess.Popen(cmd, cwd=root / "bare", env=env, stdout=subprocess.DEVNULL)
                while proc.poll() is None and not stop.is_set():
                    time.sleep(0.02)
                if proc.poll() is None and done:
                    proc.kill()
                    proc.wait()
                    break
                proc.wait()
                done.append(time.perf_counter() - t0)
            return done

        times: dict[str, list[float]] = {"bare": [], "cold": [], "warm": []}
        ratios: dict[str, list[float]] = {"cold": [], "warm": []}
        with ThreadPoolExecutor(2) as pool:
            for i in range(args.repeat):
                if store.exists():
                    shutil.rmtree(store)
                for label in ("cold", "warm"):
                    if args.paired:
                        stop = threading.Event()
                        beside = pool.submit(bare_beside, stop)
                        ot = olo()
                        stop.set()
                        bares = beside.result()
                        bt = statistics.fmean(bares)
                    else:
                        bt, ot = bare(), olo()
                    times["bare"].append(bt)
                    times[label].append(ot)
                    ratios[label].append(ot / bt)
                    if args.verbose:
                        print(f"round {i + 1} {label}: bare {bt:.2f} s, oloproof {ot:.2f} s, ratio {ot / bt:.2f}x")
    mode = "paired (bare runs beside each Oloproof run)" if args.paired else "one after another"
    print(f"cases: {n}, {args.repeat} rounds, {mode}")
    best_bare = min(times["bare"])
    print(f"bare pytest:            best {best_bare:7.2f} s  ({best_bare / n * 1e3:.2f} ms per item)")
    if args.paired:
        print("  (paired: both processes share the machine, so all times are longer than alone; compare ratios)")
    for label in ("cold", "warm"):
        best = min(times[label])
        med = statistics.median(ratios[label])
        print(
            f"pytest --oloproof {label}: best {best:7.2f} s  ({best / n * 1e3:.2f} ms per case)  "
            f"best/best {best / best_bare:.2f}x, median of rounds {med:.2f}x  (target <= {TARGETS[label]}x)"
        )


if __name__ == "__main__":
    main()
