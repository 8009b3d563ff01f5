"""Benchmark 2: a latency-bound system through a whole `pytest --oloproof` session, against the ideal.

    python benchmarks/bench_throughput.py [--cases 1000] [--concurrency 32] [--retrieve-s 0.1] [--generate-s 1.0]
                                          [--judge-cases 1000] [--judge-s 0.5] [--judge-concurrency 16]
                                          [--only stages|judges] [--rounds 1] [--disable-plugin NAME ...]

Each case's stages sleep `retrieve_s` + `generate_s` (realistic: 0.1 s and 1.0 s), at
`concurrency` 32. The ideal wall time is cases x (retrieve_s + generate_s) / concurrency
(about 34 s at the defaults); the figure is ideal / measured wall of the whole session,
start-up, collection, reporting and the summary included (target >= 0.9). Threads (a sync
system) and the event loop (an async system) are both run.

With judges: the same system plus a groundedness judge whose model is an OpenAI-compatible
server on 127.0.0.1 (tests/judge_server.py) answering after `judge_s` (0.5 s), at judge
`concurrency` 16, threads and event loop again. Its ideal is the larger of the stages' ideal and
cases x judge_s / judge_concurrency (the judges of prefetched cases run ahead of their items,
overlapping the stages). Every answer is distinct, so every case asks the judge once.
A fresh store every run (cold). Whole process tree: wall, CPU, peak RSS.
`--disable-plugin langsmith_plugin` runs the sessions with `-p no:langsmith_plugin`: a third-party
pytest plugin that this venv has (the LangChain integration pulls it in) and that costs about a
second of start-up, which the ideal does not count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from _measure import Measured, load_average, spread
from _project import make_project, run_pytest
from judge_server import Reply, ScriptedServer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--retrieve-s", type=float, default=0.1)
    ap.add_argument("--generate-s", type=float, default=1.0)
    ap.add_argument("--judge-cases", type=int, default=None, help="cases of the judged run (default: --cases)")
    ap.add_argument("--judge-s", type=float, default=0.5)
    ap.add_argument("--judge-concurrency", type=int, default=16)
    ap.add_argument("--only", choices=("stages", "judges"), default=None)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--disable-plugin", action="append", default=[], metavar="NAME", help="-p no:NAME")
    args = ap.parse_args()
    extra = [a for name in args.disable_plugin for a in ("-p", f"no:{name}")]
    conc = args.concurrency
    print(
        f"stages sleep {args.retrieve_s} s + {args.generate_s} s, concurrency {conc}, "
        f"extra pytest arguments {extra}, load average at start: {load_average()}"
    )
    with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
        if args.only != "judges":
            n = args.cases
            ideal = n * (args.retrieve_s + args.generate_s) / conc
            print(f"\nstages only: {n} cases, ideal {ideal:.2f} s")
            for use_async in (False, True):
                root = _project(Path(tmp), "async_app" if use_async else "sync_app", n, args, use_async)
                ms = [run_pytest(root, "--oloproof", "--oloproof-cache=off", *extra) for _ in range(args.rounds)]
                _print("event loop (async)" if use_async else "threads (sync)", ms, ideal)
        if args.only != "stages":
            n = args.judge_cases or args.cases
            stage_ideal = n * (args.retrieve_s + args.generate_s) / conc
            judge_ideal = n * args.judge_s / args.judge_concurrency
            ideal = max(stage_ideal, judge_ideal)
            print(
                f"\nwith a judge at {args.judge_s} s, judge concurrency {args.judge_concurrency}: {n} cases, "
                f"ideal {ideal:.2f} s (stages {stage_ideal:.2f} s, judge calls {judge_ideal:.2f} s)"
            )
            with ScriptedServer([Reply.verdict("pass", delay=args.judge_s)]) as server:
                judge = (
                    f"{{type: groundedness_judge, provider: openai, base_url: '{server.base_url}', "
                    f"model: bench, concurrency: {args.judge_concurrency}}}"
                )
                for use_async in (False, True):
                    name = "judged_async_app" if use_async else "judged_app"
                    root = _project(Path(tmp), name, n, args, use_async, [judge])
                    ms = []
                    for _ in range(args.rounds):
                        before = len(server.requests)
                        server.max_in_flight = 0
                        ms.append(run_pytest(root, "--oloproof", "--oloproof-cache=off", *extra))
                        print(
                            f"  judge requests: {len(server.requests) - before}, "
                            f"most in flight at once: {server.max_in_flight}"
                        )
                    _print("event loop + judge" if use_async else "threads + judge", ms, ideal)
    print(f"load average at the end: {load_average()}")


def _project(
    tmp: Path, name: str, n: int, args: argparse.Namespace, use_async: bool, evaluators: Sequence[str] = ()
) -> Path:
    """The latency-bound project of `n` cases in tmp/name, with the stage sleeps and concurrency of `args`."""
    root = tmp / name
    make_project(
        root,
        n,
        retrieve_s=args.retrieve_s,
        generate_s=args.generate_s,
        use_async=use_async,
        concurrency=args.concurrency,
        module=name,
        extra_evaluators=evaluators,
    )
    return root


def _print(label: str, ms: list[Measured], ideal: float) -> None:
    walls = [m.wall_s for m in ms]
    print(
        f"  {label:20}: wall {spread(walls)} s -> {ideal / statistics.median(walls):.2f} of the ideal "
        f"(target >= 0.9); CPU {spread([m.cpu_s for m in ms])} s; "
        f"peak {spread([m.tree_peak_mib for m in ms], '{:.0f}')} MiB"
    )


if __name__ == "__main__":
    main()
