"""Benchmark 6: start-up, the 13-case example's `oloproof run` against bare pytest over the same 13 ids.

    python benchmarks/bench_startup.py [--rounds 5] [--imports 12]

A copy of examples/support_rag in a temporary folder: `oloproof run` cold (fresh store) and
warm, against bare pytest running a trivially parametrized test over the example's 13 ids,
in interleaved rounds; whole process tree (target: `oloproof run` <= 2.0x bare wall).
Then the slowest imports of one warm `oloproof run` (`-X importtime`, cumulative, top level
of each package) and `import scipy.stats` alone, so the start-up can be read off.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import Series, load_average, measure
from _project import make_bare, pytest_env

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support_rag"


def oloproof_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("oloproof")
    return [str(exe), "run"] if exe.exists() else [sys.executable, "-m", "pytest_oloproof.cli", "run"]


def import_times(cwd: Path, top: int) -> list[tuple[float, str]]:
    """(seconds, package) of the slowest packages imported by one run: the cumulative times of its
    top-level imports (nested imports folded in), added up per top-level package."""
    env = pytest_env(PYTHONPROFILEIMPORTTIME="1")
    proc = subprocess.run(oloproof_cmd(), cwd=cwd, env=env, capture_output=True, text=True)
    per: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if m and len(m.group(2)) <= 1:  # imported at top level: its cumulative time includes the rest
            root = m.group(3).split(".")[0]
            per[root] = per.get(root, 0.0) + int(m.group(1)) / 1e6
    return sorted(((t, name) for name, t in per.items()), reverse=True)[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--imports", type=int, default=12, help="how many of the slowest imports to show")
    args = ap.parse_args()
    print(f"load average at start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="oloproof-bench-") as tmp:
        root = Path(tmp)
        example = root / "example"
        shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
        ids = [json.loads(line)["id"] for line in (example / "cases.jsonl").read_text().splitlines() if line.strip()]
        make_bare(root / "bare", 0)
        (root / "bare" / "test_bare.py").write_text(
            "import pytest\n\n"
            f"IDS = {ids!r}\n\n\n"
            "@pytest.mark.parametrize('case_id', IDS, ids=IDS)\n"
            "def test_case(case_id):\n"
            "    assert case_id\n"
        )
        env = pytest_env()
        bare_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:oloproof"]
        series = Series({"bare": [], "run cold": [], "run warm": []})
        store = example / ".oloproof"
        for i in range(args.rounds):
            for kind in ("bare", "run cold", "run warm") if i % 2 == 0 else ("run cold", "run warm", "bare"):
                if kind == "bare":
                    series.add(kind, measure(bare_cmd, cwd=root / "bare", env=env))
                else:
                    if kind == "run cold" and store.exists():
                        shutil.rmtree(store)
                    series.add(kind, measure(oloproof_cmd(), cwd=example, env=env, ok_codes=None))
        print(f"13-case example, {args.rounds} interleaved rounds (load average now {load_average()}):")
        print(series.table("bare", paired=True, targets={"run cold": ("wall", 2.0), "run warm": ("wall", 2.0)}))
        print(f"\nslowest packages imported by one warm `oloproof run` (cumulative s, {os.cpu_count()} cores):")
        for secs, mod in import_times(example, args.imports):
            print(f"  {secs:6.3f}  {mod}")
        scipy = [measure([sys.executable, "-c", "import scipy.stats"], env=env) for _ in range(3)]
        special = [measure([sys.executable, "-c", "import scipy.special"], env=env) for _ in range(3)]
        python = [measure([sys.executable, "-c", "pass"], env=env) for _ in range(3)]
        print(f"python -c 'import scipy.stats'  : wall {sorted(m.wall_s for m in scipy)[1]:.2f} s (median of 3)")
        print(f"python -c 'import scipy.special': wall {sorted(m.wall_s for m in special)[1]:.2f} s")
        print(f"python -c pass                  : wall {sorted(m.wall_s for m in python)[1]:.2f} s")


if __name__ == "__main__":
    main()
