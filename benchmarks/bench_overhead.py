"""Benchmark 1: `pytest --oloproof` against bare pytest over the same ids, measured whole.

    python benchmarks/bench_overhead.py [--cases 10000] [--rounds 3] [--order interleaved|sequential|both]
                                        [--answers distinct|repeated] [--report-json]

Every figure is of the whole process tree (the session and every helper process it
starts): wall time, CPU time (user + system, all processes) and peak resident memory
(the sampled sum over the tree); see _measure.py.

- cold: a fresh store. With `--answers distinct` (the default) every case has its own
  answer and doc ids, so not one verdict of a cold run is a cache hit; `--answers repeated`
  is the easier variant where answers take 5 values and most verdicts repeat (labelled so).
- warm: the same run again on the cache the cold run filled.
- bare: a trivially parametrized test over the same ids, `-p no:oloproof`.

Rounds: `interleaved` runs bare, cold, warm in each round (alternating which comes first)
and reports per-round ratios; `sequential` runs every bare round, then every cold/warm pair,
and reports median over median. Nothing runs beside a measured run.
Targets (issue 17): cold CPU <= 2.0x bare, warm CPU <= 1.5x; 1,000 cases cold wall <= 2.5x.
`--report-json` also times writing the JSON report (`--oloproof-report`) inside three more
cold sessions, as the session writes it (target <= 0.3 s; see _project.KNOBS).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import Series, load_average, spread
from _project import KNOBS, bare, make_bare, make_project, pytest_env, run_pytest

TARGETS = {"cold": ("CPU", 2.0), "warm": ("CPU", 1.5)}


def time_json_report(root: Path, store: Path, rounds: int = 3) -> tuple[list[float], int]:
    """Seconds each cold session spent writing its `--oloproof-report`, and the report's size."""
    (root / "conftest.py").write_text(KNOBS)  # times RunRecorder.write_report inside the session
    times = root / "report-times.txt"
    times.unlink(missing_ok=True)
    for _ in range(rounds):
        if store.exists():
            shutil.rmtree(store)
        run_pytest(
            root,
            "--oloproof",
            "--oloproof-report",
            "report.json",
            env=pytest_env(OLOPROOF_BENCH_REPORT_TIMES=str(times)),
        )
    (root / "conftest.py").unlink()
    return [float(x) for x in times.read_text().split()], (root / "report.json").stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--order", choices=("interleaved", "sequential", "both"), default="interleaved")
    ap.add_argument("--answers", choices=("distinct", "repeated"), default="distinct")
    ap.add_argument("--report-json", action="store_true", help="time writing the JSON report of a cold run")
    ap.add_argument("--verbose", action="store_true", help="print every run")
    args = ap.parse_args()
    n = args.cases
    print(f"cases: {n}, answers: {args.answers}, rounds: {args.rounds}, load average at start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
        root = Path(tmp)
        make_bare(root / "bare", n)
        make_project(root / "olo", n, answers=args.answers)
        store = root / "olo" / ".oloproof"

        def run(series: Series, kind: str) -> None:
            if kind == "cold" and store.exists():
                shutil.rmtree(store)
            m = bare(root / "bare") if kind == "bare" else run_pytest(root / "olo", "--oloproof")
            series.add(kind, m)
            if args.verbose:
                print(
                    f"  {kind}: wall {m.wall_s:.2f} s, CPU {m.cpu_s:.2f} s, peak {m.tree_peak_mib:.0f} MiB "
                    f"({m.peaks_text()})",
                    flush=True,
                )

        orders = ("interleaved", "sequential") if args.order == "both" else (args.order,)
        if args.rounds == 0:  # `--rounds 0 --report-json`: only the JSON report
            orders = ()
        for order in orders:
            series = Series({"bare": [], "cold": [], "warm": []})
            if order == "interleaved":
                for i in range(args.rounds):
                    for kind in ("bare", "cold", "warm") if i % 2 == 0 else ("cold", "warm", "bare"):
                        run(series, kind)
            else:
                for _ in range(args.rounds):
                    run(series, "bare")
                for _ in range(args.rounds):
                    run(series, "cold")
                    run(series, "warm")
            print(f"\n{order} rounds (load average now {load_average()}):")
            print(series.table("bare", paired=order == "interleaved", targets=TARGETS))
            cold = series.runs["cold"][-1]
            print(
                f"  processes of the last cold run, own peaks MiB: {cold.peaks_text()} "
                f"(sum {cold.sum_of_peaks_mib:.0f}, sampled tree peak {cold.tree_peak_mib:.0f})"
            )
            per = series.runs["cold"]
            print(
                f"  per case, cold: {min(m.wall_s for m in per) / n * 1e3:.2f} ms wall (best), "
                f"{min(m.cpu_s for m in per) / n * 1e3:.2f} ms CPU (best)"
            )
        if args.report_json:
            secs, size = time_json_report(root / "olo", store)
            print(
                f"\nJSON report of a cold run, written by the session ({n} cases, {size / 2**20:.1f} MiB): "
                f"{spread(secs, '{:.3f}')} s over {len(secs)} sessions (target <= 0.3 s; load {load_average()})"
            )


if __name__ == "__main__":
    main()
