"""Benchmark 5: what gc.freeze() buys a long session, measured on the whole process tree.

    python benchmarks/bench_gc.py [--cases 1000,10000] [--rounds 3] [--answers distinct|repeated]

From plugin.LONG_SESSION_MIN_ITEMS (1,000) case items up, a session freezes the garbage
collector's view of what collection built (see the README's "Long sessions"). Two variants,
switched through a conftest written into the throw-away project (OLOPROOF_BENCH_OFF, see
_project.KNOBS); nothing in the package changes:

- default: what the package does;
- no-gc-freeze: the long-session threshold never reached, so no gc.freeze().

(The cache-writer process and the stats worker this benchmark used to measure were removed;
their figures are in the README.) Each variant runs cold (fresh store, distinct answers) then
warm, in interleaved rounds whose order rotates; ratios are per round, to that round's default
run. Whole tree: wall, CPU of every process, peak of the sampled sum of resident sizes.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import Measured, load_average, spread
from _project import make_project, pytest_env, run_pytest

#: variant -> OLOPROOF_BENCH_OFF
VARIANTS = {"default": "", "no-gc-freeze": "gc"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="1000,10000", help="comma-separated case counts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--answers", choices=("distinct", "repeated"), default="distinct")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if "default" not in variants:
        variants.insert(0, "default")
    for n in (int(x) for x in args.cases.split(",")):
        print(f"\ncases: {n}, answers: {args.answers}, rounds: {args.rounds}, load average: {load_average()}")
        with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
            root = Path(tmp) / "olo"
            make_project(root, n, answers=args.answers, knobs=True)
            store = root / ".oloproof"
            runs: dict[tuple[str, str], list[Measured]] = {}
            for r in range(args.rounds):
                k = r % len(variants)
                for variant in variants[k:] + variants[:k]:
                    env = pytest_env(OLOPROOF_BENCH_OFF=VARIANTS[variant])
                    if store.exists():
                        shutil.rmtree(store)
                    for phase in ("cold", "warm"):
                        m = run_pytest(root, "--oloproof", env=env)
                        runs.setdefault((variant, phase), []).append(m)
                        if args.verbose:
                            print(
                                f"  round {r + 1} {variant} {phase}: wall {m.wall_s:.2f} s, CPU {m.cpu_s:.2f} s, "
                                f"peak {m.tree_peak_mib:.0f} MiB ({m.peaks_text()})",
                                flush=True,
                            )
            for phase in ("cold", "warm"):
                print(
                    f"{phase}: {'':10} {'wall s':>20} {'CPU s':>20} {'peak MiB':>16}   "
                    f"{'wall/default':>18} {'CPU/default':>18} {'peak/default':>18}"
                )
                base = runs[("default", phase)]
                for variant in variants:
                    ms = runs[(variant, phase)]

                    def ratio(attr: str, ms: list[Measured] = ms, base: list[Measured] = base) -> str:
                        return spread([getattr(a, attr) / getattr(b, attr) for a, b in zip(ms, base, strict=False)])

                    print(
                        f"  {variant:14} {spread([m.wall_s for m in ms]):>20} {spread([m.cpu_s for m in ms]):>20} "
                        f"{spread([m.tree_peak_mib for m in ms], '{:.0f}'):>16}   {ratio('wall_s'):>18} "
                        f"{ratio('cpu_s'):>18} {ratio('tree_peak_mib'):>18}"
                    )
                last = base[-1]
                print(
                    f"  default {phase}, own peaks MiB: {last.peaks_text()} (median tree peak "
                    f"{statistics.median(m.tree_peak_mib for m in base):.0f})"
                )
    print(f"\nload average at the end: {load_average()}")


if __name__ == "__main__":
    main()
