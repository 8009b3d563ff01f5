"""Benchmark 1: per-case overhead of `pytest --oloproof` against bare pytest over the same ids.

    python benchmarks/bench_overhead.py [--cases 10000]

Prints wall times and the ratios (targets: cold <= 2.0x, warm <= 1.5x bare pytest).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _project import make_bare, make_project, run_pytest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=1, help="take the best of N runs of each")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
        root = Path(tmp)
        make_bare(root / "bare", args.cases)
        make_project(root / "olo", args.cases)
        # -p no:oloproof: bare pytest pays nothing for the plugin being installed
        bare = min(run_pytest(root / "bare", "-p", "no:oloproof")[0] for _ in range(args.repeat))
        colds, warms = [], []
        for _ in range(args.repeat):
            store = root / "olo" / ".oloproof"
            if store.exists():
                import shutil

                shutil.rmtree(store)
            colds.append(run_pytest(root / "olo", "--oloproof")[0])
            warms.append(run_pytest(root / "olo", "--oloproof")[0])
        cold, warm = min(colds), min(warms)
    n = args.cases
    print(f"cases: {n}")
    print(f"bare pytest:            {bare:7.2f} s  ({bare / n * 1e3:.2f} ms per item)")
    print(
        f"pytest --oloproof cold: {cold:7.2f} s  ({cold / n * 1e3:.2f} ms per case)  "
        f"ratio {cold / bare:.2f}x (target <= 2.0x)"
    )
    print(
        f"pytest --oloproof warm: {warm:7.2f} s  ({warm / n * 1e3:.2f} ms per case)  "
        f"ratio {warm / bare:.2f}x (target <= 1.5x)"
    )


if __name__ == "__main__":
    main()
