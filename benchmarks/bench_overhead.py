"""Benchmark 1: per-case overhead of `pytest --oloproof` against bare pytest over the same ids.

    python benchmarks/bench_overhead.py [--cases 10000]

Prints wall times and the ratios (targets: cold <= 2.0x, warm <= 1.5x bare pytest).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _project import make_bare, make_project, run_pytest_cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the best time of each is reported")
    ap.add_argument("--verbose", action="store_true", help="print every round")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
        root = Path(tmp)
        make_bare(root / "bare", args.cases)
        make_project(root / "olo", args.cases)
        # rounds of bare, cold, warm back to back, so all three see the same machine load;
        # -p no:oloproof: bare pytest pays nothing for the plugin being installed
        bares, colds, warms = [], [], []
        for i in range(args.repeat):
            bares.append(run_pytest_cpu(root / "bare", "-p", "no:oloproof"))
            store = root / "olo" / ".oloproof"
            if store.exists():
                shutil.rmtree(store)
            colds.append(run_pytest_cpu(root / "olo", "--oloproof"))
            warms.append(run_pytest_cpu(root / "olo", "--oloproof"))
            if args.verbose:
                print(
                    f"round {i + 1}: wall bare {bares[-1][0]:.2f} cold {colds[-1][0]:.2f} warm {warms[-1][0]:.2f}; "
                    f"cpu bare {bares[-1][3]:.2f} cold {colds[-1][3]:.2f} warm {warms[-1][3]:.2f}",
                    flush=True,
                )
    n = args.cases
    print(f"cases: {n}, best of {args.repeat} rounds (wall clock; CPU time in brackets)")
    bare, bare_cpu = min(b[0] for b in bares), min(b[3] for b in bares)
    print(f"bare pytest:            {bare:7.2f} s  ({bare / n * 1e3:.2f} ms per item)  [cpu {bare_cpu:.2f} s]")
    for label, runs, target in (("cold", colds, 2.0), ("warm", warms, 1.5)):
        wall, cpu = min(r[0] for r in runs), min(r[3] for r in runs)
        print(
            f"pytest --oloproof {label}: {wall:7.2f} s  ({wall / n * 1e3:.2f} ms per case)  "
            f"ratio {wall / bare:.2f}x (target <= {target}x)  [cpu {cpu:.2f} s, ratio {cpu / bare_cpu:.2f}x]"
        )


if __name__ == "__main__":
    main()
