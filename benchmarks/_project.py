"""Builds throw-away benchmark projects: a deterministic RAG system, N cases and an oloproof.yaml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

SYSTEM = """
import asyncio
import time

from pytest_oloproof import Passage, Retrieval, rag_system

RETRIEVE_S = {retrieve_s!r}
GENERATE_S = {generate_s!r}
TEXT = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore"


@rag_system(name="bench-rag", version="1", depth={depth}, top_k={top_k}, index_version="i1")
class BenchRag:
    {async_}def retrieve(self, input, depth):
        if RETRIEVE_S:
            {sleep_r}
        n = input["n"]
        return Retrieval(
            query=input["question"],
            depth=depth,
            candidates=tuple(
                Passage(doc_id=f"d{{(n + i) % 97}}", score=float(depth - i), text=f"{{TEXT}} {{n}} {{i}}")
                for i in range(depth)
            ),
        )

    {async_}def generate(self, input, context):
        if GENERATE_S:
            {sleep_g}
        first = context[0] if context else None
        return {{"answer": f"answer {{input['n'] % 5}}", "citations": [first.doc_id] if first else []}}
"""

CONFIG = """\
system:
  rag:
    object: {module}:BenchRag
cases: cases.jsonl
evaluators:
  - {{type: contains, criterion: answer_correct, field: answer, expected_field: answer}}
  - {{type: hit_rate, k: {top_k}}}
  - {{type: ndcg, k: {depth}}}
slices: [metadata.topic]
concurrency: {concurrency}
store: .oloproof
"""


def make_project(
    root: Path,
    n: int,
    *,
    depth: int = 3,
    top_k: int = 2,
    retrieve_s: float = 0.0,
    generate_s: float = 0.0,
    use_async: bool = False,
    concurrency: int = 1,
    module: str = "bench_app",
) -> Path:
    """Write the project into `root` (created) and return the path of oloproof.yaml."""
    root.mkdir(parents=True, exist_ok=True)
    if use_async:
        sleep_r, sleep_g, async_ = "await asyncio.sleep(RETRIEVE_S)", "await asyncio.sleep(GENERATE_S)", "async "
    else:
        sleep_r, sleep_g, async_ = "time.sleep(RETRIEVE_S)", "time.sleep(GENERATE_S)", ""
    (root / f"{module}.py").write_text(
        SYSTEM.format(
            retrieve_s=retrieve_s,
            generate_s=generate_s,
            depth=depth,
            top_k=top_k,
            async_=async_,
            sleep_r=sleep_r,
            sleep_g=sleep_g,
        )
    )
    with (root / "cases.jsonl").open("w") as f:
        for i in range(n):
            case = {
                "id": f"c{i:06d}",
                "input": {"question": f"question number {i}?", "n": i},
                "expected": {"answer": f"answer {i % 5}", "relevant": [{"doc_id": f"d{(i + 1) % 97}"}]},
                "metadata": {"topic": f"t{i % 4}"},
            }
            f.write(json.dumps(case) + "\n")
    (root / "pytest.ini").write_text("[pytest]\n")
    cfg = root / "oloproof.yaml"
    cfg.write_text(CONFIG.format(module=module, depth=depth, top_k=top_k, concurrency=concurrency))
    return cfg


def make_bare(root: Path, n: int) -> Path:
    """A trivially parametrized test over the same ids, for the bare-pytest baseline."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    test = root / "test_bare.py"
    test.write_text(
        "import pytest\n\n"
        f"IDS = [f'c{{i:06d}}' for i in range({n})]\n\n\n"
        "@pytest.mark.parametrize('case_id', IDS, ids=IDS)\n"
        "def test_case(case_id):\n"
        "    assert case_id.startswith('c')\n"
    )
    return test


_MEASURE = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
    "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "print(r.returncode, u.ru_maxrss, u.ru_utime + u.ru_stime, file=sys.stderr)"
)


def pytest_env() -> dict[str, str]:
    """The environment every benchmarked pytest runs in (no .pyc writes, no user PYTEST_ADDOPTS)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)
    return env


def pytest_command(*args: str) -> list[str]:
    """`python -m pytest -q -p no:cacheprovider args`: the command every benchmark times."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]


def run_pytest(cwd: Path, *args: str) -> tuple[float, int, float]:
    """(wall seconds, exit code, peak RSS MiB) of `python -m pytest args` in cwd; see `run_pytest_cpu`."""
    wall, code, rss, _ = run_pytest_cpu(cwd, *args)
    return wall, code, rss


def run_pytest_cpu(cwd: Path, *args: str) -> tuple[float, int, float, float]:
    """(wall seconds, exit code, peak RSS MiB, CPU seconds) of `python -m pytest args` in cwd.

    The child runs under a small parent of its own, whose RUSAGE_CHILDREN figures
    are then exactly that child's. CPU time (user + system) varies less than wall
    time on a shared virtual machine.
    """
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, *pytest_command(*args)],
        cwd=cwd,
        env=pytest_env(),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    code_s, maxrss_s, cpu_s = proc.stderr.strip().splitlines()[-1].split()
    code = int(code_s)
    if code not in (0, 1):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"pytest {' '.join(args)} exited {code}")
    return wall, code, int(maxrss_s) / 1024.0, float(cpu_s)
