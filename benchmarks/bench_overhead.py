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
`--report-json` also times writing the JSON report of the last cold run (target <= 0.3 s).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import Series, load_average
from _project import bare, make_bare, make_project, run_pytest

TARGETS = {"cold": ("CPU", 2.0), "warm": ("CPU", 1.5)}


def time_json_report(store_dir: Path, out: Path) -> tuple[float, int]:
    """Seconds to write the JSON report of the store's latest run, as `--oloproof-report` does."""
    from pytest_oloproof.store import Store, write_json_stream

    store = Store(store_dir)
    run_id = store.run_ids()[-1]
    record = store.load_run(run_id)
    head = {k: v for k, v in record.items() if k != "cases"}
    t0 = time.perf_counter()
    write_json_stream(out, head, "cases", store.iter_cases(run_id))
    return time.perf_counter() - t0, out.stat().st_size


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
            if store.exists():
                shutil.rmtree(store)
            run_pytest(root / "olo", "--oloproof")
            took = [time_json_report(store, root / f"report{i}.json") for i in range(3)]
            secs = sorted(t for t, _ in took)
            print(
                f"\nJSON report of the cold run ({n} cases, {took[0][1] / 2**20:.1f} MiB): "
                f"median {secs[1]:.3f} s of 3 (target <= 0.3 s)"
            )


if __name__ == "__main__":
    main()
