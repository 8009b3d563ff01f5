"""Where the CPU time of a 10,000-case session goes, beside bare pytest: a sampling profile, by phase.

    python benchmarks/bench_breakdown.py [--cases 10000] [--rounds 3] [--rate 250] [--py-spy PATH]

Runs bare pytest, a cold and a warm `pytest --oloproof` session over the same ids (the
bench_overhead.py workload) under py-spy (`py-spy record -f raw`, installed separately:
`pip install py-spy`; it is not a dependency of the project), sorts every sample into the
phase it belongs to, and prints each phase's share scaled to the session's own CPU time
(the median of `--rounds` interleaved rounds in the same run, whole tree, without the profiler). This is what bounds the
cold and warm ratios of bench_overhead.py: the phases are the per-case work a session does
beyond bare pytest. A sampling profile of one run is a share, not a timing: take the
ratios from bench_overhead.py.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import load_average
from _project import bare, make_bare, make_project, pytest_command, pytest_env, run_pytest

#: (phase, test on a sample's stack); the first phase that matches takes the sample
PHASES: list[tuple[str, Callable[[str], bool]]] = [
    ("cache commits (SQLite, one upsert per group)", lambda s: "Caches._commit" in s or "write_group" in s),
    ("collection (cases read, items built)", lambda s: "pytest_collection (" in s),
    ("stages: system code, contract checks, keys, entries", lambda s: "Evaluation.execute (" in s),
    ("evaluators: verdicts, keys, entries, bundle", lambda s: "Evaluation.evaluate (" in s),
    ("rest of the item (properties, outcome)", lambda s: "run_item (pytest_oloproof" in s),
    ("recording: cases.jsonl line, slim case", lambda s: "pytest_runtest_logreport (pytest_oloproof" in s),
    ("run record: metrics, intervals, summary", lambda s: "pytest_sessionfinish (pytest_oloproof" in s),
    ("imports", lambda s: "_find_and_load" in s),
    ("pytest's own per-item work and the rest", lambda s: True),
]
#: the phases a bare session does not have at all (collection and imports it has, with less in them)
OWN = [name for name, _ in PHASES if not name.startswith(("collection", "imports", "pytest's own"))]


def phases(raw: Path) -> collections.Counter[str]:
    """Samples per phase of one `py-spy record -f raw` file (one `stack count` line per stack)."""
    out: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        for name, matches in PHASES:
            if matches(stack):
                out[name] += int(count)
                break
    return out


def profile(py_spy: str, cwd: Path, args: list[str], raw: Path, rate: int) -> collections.Counter[str]:
    cmd = [py_spy, "record", "-r", str(rate), "-f", "raw", "-o", str(raw), "--", *pytest_command(*args)]
    subprocess.run(cmd, cwd=cwd, env=pytest_env(), check=True, capture_output=True)
    return phases(raw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3, help="unprofiled rounds whose median CPU scales the shares")
    ap.add_argument("--rate", type=int, default=250, help="samples per second")
    ap.add_argument("--py-spy", default=shutil.which("py-spy"), help="the py-spy executable")
    args = ap.parse_args()
    if not args.py_spy:
        sys.exit("bench_breakdown.py needs py-spy on PATH (pip install py-spy) or --py-spy PATH")
    print(f"cases: {args.cases}, load average at start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
        root = Path(tmp)
        make_bare(root / "bare", args.cases)
        make_project(root / "olo", args.cases)
        store = root / "olo" / ".oloproof"
        runs: dict[str, list[float]] = {"bare": [], "cold": [], "warm": []}
        for _ in range(max(1, args.rounds)):
            if store.exists():
                shutil.rmtree(store)
            runs["bare"].append(bare(root / "bare").cpu_s)
            runs["cold"].append(run_pytest(root / "olo", "--oloproof").cpu_s)
            runs["warm"].append(run_pytest(root / "olo", "--oloproof").cpu_s)
        cpu = {kind: statistics.median(v) for kind, v in runs.items()}
        shutil.rmtree(store)
        shares = {"bare": profile(args.py_spy, root / "bare", ["-p", "no:oloproof"], root / "bare.raw", args.rate)}
        shares["cold"] = profile(args.py_spy, root / "olo", ["--oloproof"], root / "cold.raw", args.rate)
        shares["warm"] = profile(args.py_spy, root / "olo", ["--oloproof"], root / "warm.raw", args.rate)
    seconds = {kind: {name: n / sum(c.values()) * cpu[kind] for name, n in c.items()} for kind, c in shares.items()}
    print(
        f"load average at end: {load_average()}; median CPU s (whole tree, unprofiled) [min–max]: "
        + ", ".join(f"{k} {v:.2f} [{min(runs[k]):.2f}–{max(runs[k]):.2f}]" for k, v in cpu.items())
    )
    print(f"\n{'phase':54s} {'bare':>6s} {'cold':>6s} {'+cold':>6s} {'warm':>6s} {'+warm':>6s}")
    for name, _ in PHASES:
        b, c, w = (seconds[k].get(name, 0.0) for k in ("bare", "cold", "warm"))
        print(f"{name:54s} {b:6.2f} {c:6.2f} {c - b:+6.2f} {w:6.2f} {w - b:+6.2f}")
    print(
        f"{'total':54s} {cpu['bare']:6.2f} {cpu['cold']:6.2f} {cpu['cold'] - cpu['bare']:+6.2f} "
        f"{cpu['warm']:6.2f} {cpu['warm'] - cpu['bare']:+6.2f}"
    )
    for kind in ("cold", "warm"):
        mine = sum(seconds[kind].get(name, 0.0) for name in OWN)
        print(
            f"  {kind}: Oloproof's own phases ({len(OWN)} rows) {mine:.2f} s, {mine / args.cases * 1e6:.0f} µs a case"
        )


if __name__ == "__main__":
    main()
