"""Benchmark 4: peak memory of a 100,000-case run with depth 10, of the whole process tree (target <= 1 GiB).

    python benchmarks/bench_memory.py [--cases 100000] [--depth 10] [--warm]

Runs `pytest --oloproof` (cold, distinct answers) and samples the resident sizes of the
session and every helper process it starts (see _measure.py): the peak of their sum is
the figure; each process's own peak, and their sum (the figure's upper bound), are printed
beside it, next to bare pytest over the same ids. `--warm` measures a second, warm run too.
`--off gc` runs without gc.freeze() (see bench_gc.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import Measured, load_average
from _project import bare, make_bare, make_project, pytest_env, run_pytest


def show(label: str, m: Measured) -> None:
    print(
        f"{label:22} tree peak {m.tree_peak_mib:7.0f} MiB   (own peaks: {m.peaks_text()}; "
        f"sum {m.sum_of_peaks_mib:.0f})   wall {m.wall_s:.1f} s, CPU {m.cpu_s:.1f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--off", default="", help="gc: no gc.freeze() (see bench_gc.py)")
    ap.add_argument("--skip-bare", action="store_true", help="no bare pytest run")
    args = ap.parse_args()
    print(f"cases: {args.cases}, depth {args.depth}, load average at start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
        root = Path(tmp)
        make_bare(root / "bare", args.cases)
        make_project(root / "olo", args.cases, depth=args.depth, top_k=min(4, args.depth), knobs=True)
        env = pytest_env(OLOPROOF_BENCH_OFF=args.off)
        off = f" (off: {args.off})" if args.off else ""
        show("pytest --oloproof cold" + off, run_pytest(root / "olo", "--oloproof", env=env))
        if args.warm:
            show("pytest --oloproof warm" + off, run_pytest(root / "olo", "--oloproof", env=env))
        if not args.skip_bare:
            show("bare pytest", bare(root / "bare"))
    print("target: tree peak <= 1024 MiB")


if __name__ == "__main__":
    main()
