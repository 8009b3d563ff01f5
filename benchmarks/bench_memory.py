"""Benchmark 4: peak RSS of a 100,000-case run with depth 10 (target <= 1 GiB).

    python benchmarks/bench_memory.py [--cases 100000] [--depth 10]

Runs `pytest --oloproof` in a subprocess and reads the child's peak RSS
(resource.getrusage(RUSAGE_CHILDREN).ru_maxrss), next to bare pytest over the same ids.
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
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--depth", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
        root = Path(tmp)
        make_bare(root / "bare", args.cases)
        make_project(root / "olo", args.cases, depth=args.depth, top_k=min(4, args.depth))
        wall, _, rss = run_pytest(root / "olo", "--oloproof")
        bare_wall, _, bare_rss = run_pytest(root / "bare", "-p", "no:oloproof")
    print(f"cases: {args.cases}, depth {args.depth}")
    print(f"pytest --oloproof: peak RSS {rss:8.1f} MiB in {wall:.1f} s (target <= 1024 MiB)")
    print(f"bare pytest:       peak RSS {bare_rss:8.1f} MiB in {bare_wall:.1f} s (same ids)")


if __name__ == "__main__":
    main()
