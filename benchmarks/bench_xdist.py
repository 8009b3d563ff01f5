"""Benchmark 7: when pytest-xdist (`-n`) pays, and when raising `concurrency` is the better lever.

    python benchmarks/bench_xdist.py [--workers 2] [--rounds 1] [--only cpu,latency,heavy]

Three systems, each run in one process and with `-n N`, whole process tree (wall, CPU of
every process, peak of the summed resident sizes), cold, distinct answers:

- cpu: the deterministic 10,000-case system (no waiting): Oloproof's own per-case work only;
- latency: 200 cases whose stages sleep 0.01 s + 0.1 s, at `concurrency` 1 and 32;
- heavy: 300 cases whose `generate` burns `--burn-s` (0.1 s) of CPU holding the GIL (a CPU-heavy stage or
  evaluator), at `concurrency` 1 and 8.

On xdist workers cases run one at a time; the process labels printed show what ran.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import Measured, load_average
from _project import make_project, run_pytest


def show(label: str, m: Measured, ref: Measured | None) -> None:
    rel = f"  wall {m.wall_s / ref.wall_s:.2f}x, CPU {m.cpu_s / ref.cpu_s:.2f}x of the first" if ref else ""
    print(
        f"  {label:34} wall {m.wall_s:6.2f} s  CPU {m.cpu_s:6.2f} s  peak {m.tree_peak_mib:5.0f} MiB"
        f"  [{m.peaks_text()}]{rel}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", default="cpu,latency,heavy")
    ap.add_argument("--burn-s", type=float, default=0.1, help="CPU seconds per case of the heavy system")
    args = ap.parse_args()
    only = {x.strip() for x in args.only.split(",")}
    w = str(args.workers)
    print(f"load average at start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
        plans: list[tuple[str, dict[str, object], list[tuple[str, list[str]]]]] = []
        if "cpu" in only:
            plans.append(
                ("cpu: 10,000 deterministic cases", {"n": 10_000}, [("one process", []), (f"-n {w}", ["-n", w])])
            )
        if "latency" in only:
            lat = {"n": 200, "retrieve_s": 0.01, "generate_s": 0.1}
            plans.append(
                (
                    "latency: 200 cases, 0.11 s each",
                    lat,
                    [
                        ("concurrency 1, one process", []),
                        (f"concurrency 1, -n {w}", ["-n", w]),
                        ("concurrency 32, one process", ["--oloproof-concurrency", "32"]),
                        (f"concurrency 32, -n {w}", ["--oloproof-concurrency", "32", "-n", w]),
                    ],
                )
            )
        if "heavy" in only:
            heavy = {"n": 300, "burn_s": args.burn_s}
            plans.append(
                (
                    f"heavy: 300 cases, {args.burn_s * 1e3:.0f} ms of CPU each",
                    heavy,
                    [
                        ("concurrency 1, one process", []),
                        (f"concurrency 1, -n {w}", ["-n", w]),
                        ("concurrency 8, one process", ["--oloproof-concurrency", "8"]),
                    ],
                )
            )
        for title, spec, variants in plans:
            n = int(spec.pop("n"))  # type: ignore[call-overload]
            root = Path(tmp) / title.split(":")[0]
            make_project(root, n, **spec)  # type: ignore[arg-type]
            print(f"\n{title}")
            for r in range(args.rounds):
                ref: Measured | None = None
                for label, extra in variants:
                    shutil.rmtree(root / ".oloproof", ignore_errors=True)
                    m = run_pytest(root, "--oloproof", *extra)
                    show(f"{label}" + (f" (round {r + 1})" if args.rounds > 1 else ""), m, ref)
                    ref = ref or m
    print(f"load average at the end: {load_average()}")


if __name__ == "__main__":
    main()
