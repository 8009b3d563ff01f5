"""Builds throw-away benchmark projects: a deterministic RAG system, N cases and an oloproof.yaml."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import Measured, measure

SYSTEM = """
import asyncio
import time

from pytest_oloproof import Passage, Retrieval, rag_system

RETRIEVE_S = {retrieve_s!r}
GENERATE_S = {generate_s!r}
BURN_S = {burn_s!r}
DISTINCT = {distinct!r}
TEXT = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore"


def burn(seconds):
    # CPU-bound work holding the GIL (a CPU-heavy stage or evaluator)
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def doc(n, i):
    return f"d{{n}}-{{i}}" if DISTINCT else f"d{{(n + i) % 97}}"


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
                Passage(doc_id=doc(n, i), score=float(depth - i), text=f"{{TEXT}} {{n}} {{i}}")
                for i in range(depth)
            ),
        )

    {async_}def generate(self, input, context):
        if GENERATE_S:
            {sleep_g}
        if BURN_S:
            burn(BURN_S)
        n = input["n"]
        first = context[0] if context else None
        answer = f"answer {{n}}" if DISTINCT else f"answer {{n % 5}}"
        return {{"answer": answer, "citations": [first.doc_id] if first else []}}
"""

#: A conftest for the gc benchmark: OLOPROOF_BENCH_OFF="gc" keeps a long session from calling
#: gc.freeze() (the long-session threshold is never reached), so the package is measured unchanged.
#: OLOPROOF_BENCH_REPORT_TIMES=PATH appends the seconds the session spent writing its JSON report
#: (`--oloproof-report`, RunRecorder.write_report) to PATH.
KNOBS = """
import os
import time

_OFF = {x.strip() for x in os.environ.get("OLOPROOF_BENCH_OFF", "").split(",") if x.strip()}
_REPORT_TIMES = os.environ.get("OLOPROOF_BENCH_REPORT_TIMES")

if "gc" in _OFF or "long" in _OFF:
    import pytest_oloproof.session.run as _plugin

    _plugin.LONG_SESSION_MIN_ITEMS = 10**12

if _REPORT_TIMES:
    import pytest_oloproof.engine.recorder as _runner

    _write_report = _runner.RunRecorder.write_report

    def _timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return _write_report(self, *args, **kwargs)
        finally:
            with open(_REPORT_TIMES, "a") as f:
                f.write(f"{time.perf_counter() - t0:.6f}\\n")

    _runner.RunRecorder.write_report = _timed
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
    burn_s: float = 0.0,
    use_async: bool = False,
    concurrency: int = 1,
    module: str = "bench_app",
    answers: str = "distinct",
    knobs: bool = False,
    extra_evaluators: Sequence[str] = (),
) -> Path:
    """Write the project into `root` (created) and return the path of oloproof.yaml.

    `answers="distinct"`: every case has its own answer and its own doc ids, so no verdict of a
    cold run can be a cache hit; `"repeated"`: answers take 5 values and doc ids 97, so most
    verdicts repeat (the easier "cold" of earlier versions of these benchmarks).
    `knobs`: add the conftest that lets OLOPROOF_BENCH_OFF switch gc.freeze off and
    OLOPROOF_BENCH_REPORT_TIMES time the JSON report (see KNOBS).
    """
    if answers not in ("distinct", "repeated"):
        raise ValueError(f"answers: 'distinct' or 'repeated', not {answers!r}")
    distinct = answers == "distinct"
    root.mkdir(parents=True, exist_ok=True)
    if use_async:
        sleep_r, sleep_g, async_ = "await asyncio.sleep(RETRIEVE_S)", "await asyncio.sleep(GENERATE_S)", "async "
    else:
        sleep_r, sleep_g, async_ = "time.sleep(RETRIEVE_S)", "time.sleep(GENERATE_S)", ""
    (root / f"{module}.py").write_text(
        SYSTEM.format(
            retrieve_s=retrieve_s,
            generate_s=generate_s,
            burn_s=burn_s,
            distinct=distinct,
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
                "expected": {
                    "answer": f"answer {i}" if distinct else f"answer {i % 5}",
                    "relevant": [{"doc_id": f"d{i}-1" if distinct else f"d{(i + 1) % 97}"}],
                },
                "metadata": {"topic": f"t{i % 4}"},
            }
            f.write(json.dumps(case) + "\n")
    (root / "pytest.ini").write_text("[pytest]\n")
    if knobs:
        (root / "conftest.py").write_text(KNOBS)
    cfg = root / "oloproof.yaml"
    text = CONFIG.format(module=module, depth=depth, top_k=top_k, concurrency=concurrency)
    if extra_evaluators:
        text = text.replace("slices:", "".join(f"  - {e}\n" for e in extra_evaluators) + "slices:")
    cfg.write_text(text)
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


def pytest_env(**extra: str) -> dict[str, str]:
    """The environment every benchmarked pytest runs in (no .pyc writes, no user PYTEST_ADDOPTS)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **extra)
    env.pop("PYTEST_ADDOPTS", None)
    for knob in ("OLOPROOF_BENCH_OFF", "OLOPROOF_BENCH_REPORT_TIMES"):
        if knob not in extra:
            env.pop(knob, None)
    return env


def pytest_command(*args: str) -> list[str]:
    """`python -m pytest -q -p no:cacheprovider args`: the command every benchmark times."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]


def run_pytest(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> Measured:
    """`python -m pytest args` in cwd, measured whole (wall, CPU and peak RSS of its process tree)."""
    return measure(pytest_command(*args), cwd=cwd, env=env if env is not None else pytest_env())


def bare(cwd: Path) -> Measured:
    """Bare pytest over the ids (-p no:oloproof: it pays nothing for the plugin being installed)."""
    return run_pytest(cwd, "-p", "no:oloproof")
