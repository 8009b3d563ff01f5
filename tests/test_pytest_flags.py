"""pytest's own flags and conventions with --oloproof: --collect-only runs nothing, --lf/--ff match
cases, path arguments select what runs, metadata markers never take a meaning pytest gives them, SIGTERM."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from staged_helpers import (
    RAG_SOURCE,
    assert_nothing_written,
    calls,
    case,
    cases_text,
    config_text,
    last_run,
    rag_project,
)

from tests.judge_server import Reply, ScriptedServer

N = 13
#: cases whose answer is wrong (the system answers "gamma" everywhere): they fail answer_correct
FAILING = ("c03", "c07", "c11")


def judged_project(pytester: pytest.Pytester, base_url: str, *, concurrency: int, extra: str = "") -> None:
    """13 cases of the logging system (calls.log), one contains check and one LLM judge on `base_url`."""
    cases = [case(f"c{i:02d}", answer="nowhere" if f"c{i:02d}" in FAILING else "gamma") for i in range(N)]
    evaluators = (
        "evaluators:\n"
        "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
        f"  - {{type: groundedness_judge, provider: openai, base_url: '{base_url}', model: m, retries: 0, "
        "timeout_s: 300}\n"
    )
    rag_project(pytester, cases, evaluators=evaluators, extra=f"concurrency: {concurrency}\nstore: .oloproof\n{extra}")


# ------------------------------------------------------------------ --collect-only


@pytest.mark.slow
@pytest.mark.parametrize("xdist", [False, True], ids=["one-process", "xdist-n2"])
@pytest.mark.parametrize("concurrency", [1, 8])
@pytest.mark.parametrize("flags", [("--collect-only",), ("--co", "-q")], ids=["collect-only", "co-q"])
def test_collect_only_executes_nothing_and_stores_nothing(
    pytester: pytest.Pytester, concurrency: int, xdist: bool, flags: tuple[str, ...]
) -> None:
    """With concurrency > 1 the cases used to run ahead of the items while pytest only listed them:
    13 generate() calls, 13 judge requests and a complete run stored."""
    with ScriptedServer([Reply.verdict("pass")]) as server:
        judged_project(pytester, server.base_url, concurrency=concurrency)
        args = ["--oloproof", "-p", "no:cacheprovider", *flags]
        if xdist:
            args += ["-p", "xdist", "-n", "2"]
        result = pytester.runpytest_subprocess(*args)
        requests = len(server.requests)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*oloproof.yaml::sys[[]c00[]]*" if "-q" in flags else "*c00*"])
    assert calls(pytester) == []
    assert requests == 0
    assert not (pytester.path / ".oloproof").exists()  # no run, and not even an empty cache


@pytest.mark.slow
def test_setup_only_executes_nothing_and_stores_nothing(pytester: pytest.Pytester) -> None:
    """--setup-only shows the fixtures and skips every test's call: no case may run ahead of it either."""
    with ScriptedServer([Reply.verdict("pass")]) as server:
        judged_project(pytester, server.base_url, concurrency=8)
        result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider", "--setup-only")
        requests = len(server.requests)
    assert result.ret == 0, result.stdout.str()
    assert calls(pytester) == [] and requests == 0
    assert_nothing_written(pytester.path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [
        ("-p", "no:cacheprovider", "--fixtures"),
        ("-p", "no:cacheprovider", "--fixtures-per-test"),
        ("-p", "no:cacheprovider", "--setup-plan"),
        ("-p", "no:cacheprovider", "--setup-only", "-p", "xdist", "-n", "2"),
        ("--cache-show",),
    ],
    ids=["fixtures", "fixtures-per-test", "setup-plan", "setup-only-n2", "cache-show"],
)
def test_listing_fixtures_or_the_cache_executes_nothing_and_creates_no_store(
    pytester: pytest.Pytester, flags: tuple[str, ...]
) -> None:
    """--fixtures and --fixtures-per-test collect the items to list fixtures: the evaluation used to run
    ahead of them (13 judge requests, a run stored); --setup-plan, --setup-only and --cache-show left an
    empty store folder behind (the store's write probe)."""
    with ScriptedServer([Reply.verdict("pass")]) as server:
        judged_project(pytester, server.base_url, concurrency=8)
        result = pytester.runpytest_subprocess("--oloproof", *flags)
        requests = len(server.requests)
    assert result.ret == 0, result.stdout.str()
    assert calls(pytester) == [] and requests == 0
    assert not (pytester.path / ".oloproof").exists()  # no run, no cache, not even an empty store


def test_listing_needs_no_store_that_can_be_created(pytester: pytest.Pytester) -> None:
    """A store that cannot be created (under a file here; under a read-only folder in a read-only checkout)
    is a configuration error for a run, never for --collect-only or --fixtures, which write nothing."""
    with ScriptedServer([Reply.verdict("pass")]) as server:
        judged_project(pytester, server.base_url, concurrency=8)
        (pytester.path / "blocker").write_text("a file where the store's folder would go\n")
        config = pytester.path / "oloproof.yaml"
        config.write_text(config.read_text().replace("store: .oloproof", "store: blocker/store"))
        for flags in (("--collect-only", "-q"), ("--fixtures",)):
            listed = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider", *flags)
            assert listed.ret == 0, listed.stdout.str()
        ran = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
        requests = len(server.requests)
    assert ran.ret == 2
    ran.stdout.fnmatch_lines(["*store: */blocker/store cannot be created: */blocker is a file; name a folder*"])
    assert calls(pytester) == [] and requests == 0


@pytest.mark.slow
def test_oloproof_run_collect_only_executes_nothing(pytester: pytest.Pytester) -> None:
    with ScriptedServer([Reply.verdict("pass")]) as server:
        judged_project(pytester, server.base_url, concurrency=8)
        done = subprocess.run(
            [sys.executable, "-m", "pytest_oloproof.cli", "run", "-p", "no:cacheprovider", "--collect-only", "-q"],
            cwd=pytester.path,
            env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
            capture_output=True,
            text=True,
            timeout=120,
        )
        requests = len(server.requests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "oloproof.yaml::sys[c12]" in done.stdout
    assert calls(pytester) == [] and requests == 0
    assert_nothing_written(pytester.path)


# ------------------------------------------------------------------ --lf / --ff


def _ran(result: pytest.RunResult) -> list[str]:
    """The case ids of the items that ran, in order (from -v lines)."""
    out = []
    for line in result.outlines:
        if line.startswith("oloproof.yaml::sys[") and (" PASSED" in line or " FAILED" in line):
            out.append(line.split("[", 1)[1].split("]", 1)[0])
    return out


def test_last_failed_and_failed_first_select_the_failed_cases(pytester: pytest.Pytester) -> None:
    """pytest 9.2 reads a saved node id `sys[c03]` as name plus parameter; the item must match it."""
    cases = [case(f"c{i:02d}", answer="nowhere" if f"c{i:02d}" in FAILING else "gamma") for i in range(N)]
    rag_project(pytester, cases, extra="concurrency: 4\nstore: .oloproof\n")
    pytester.makepyfile(test_ordinary="def test_ordinary():\n    pass\n")
    first = pytester.runpytest("--oloproof", "-p", "no:randomly", "-v")
    first.assert_outcomes(passed=N - len(FAILING) + 1, failed=len(FAILING))

    again = pytester.runpytest("--oloproof", "-p", "no:randomly", "-v", "--lf")
    again.assert_outcomes(failed=len(FAILING))
    again.stdout.fnmatch_lines([f"*rerun previous {len(FAILING)} failures*"])
    assert _ran(again) == list(FAILING)
    assert sorted(c["id"] for c in last_run(pytester)["cases"]) == list(FAILING)

    first_first = pytester.runpytest("--oloproof", "-p", "no:randomly", "-v", "--ff")
    first_first.assert_outcomes(passed=N - len(FAILING) + 1, failed=len(FAILING))
    ran = _ran(first_first)
    assert ran[: len(FAILING)] == list(FAILING) and len(ran) == N
    assert last_run(pytester)["status"] == "complete"

    # --stepwise matches the item the same way: the second run starts at the case that failed
    pytester.runpytest("--oloproof", "-p", "no:randomly", "-v", "--sw", "-k", "not ordinary")
    step = pytester.runpytest("--oloproof", "-p", "no:randomly", "-v", "--sw", "-k", "not ordinary")
    assert _ran(step)[0] == FAILING[0], step.stdout.str()


# ------------------------------------------------------------------ path arguments


def test_paths_on_the_command_line_select_whether_the_evaluation_runs(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("a"), case("b")], extra="store: .oloproof\n")
    pytester.makepyfile(test_normal="def test_normal():\n    pass\n")

    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "test_normal.py")
    result.assert_outcomes(passed=1)
    assert calls(pytester) == []
    assert_nothing_written(pytester.path)
    result.stdout.fnmatch_lines(["*no case ran: the paths given do not include oloproof.yaml*"])

    both = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "test_normal.py", "oloproof.yaml")
    both.assert_outcomes(passed=3)
    folder = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", str(pytester.path))
    folder.assert_outcomes(passed=3)
    one = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "oloproof.yaml::sys[b]")
    one.assert_outcomes(passed=1)
    assert [c["id"] for c in last_run(pytester)["cases"]] == ["b"]
    default = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")  # pytest picks the paths: everything
    default.assert_outcomes(passed=3)


@pytest.mark.slow
def test_a_path_argument_leaves_the_evaluation_out_under_xdist_too(pytester: pytest.Pytester) -> None:
    rag_project(pytester, [case("a"), case("b")], extra="store: .oloproof\n")
    pytester.makepyfile(test_normal="def test_normal():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "--oloproof", "-p", "no:cacheprovider", "-p", "xdist", "-n", "2", "test_normal.py"
    )
    result.assert_outcomes(passed=1)
    assert calls(pytester) == []
    assert_nothing_written(pytester.path)


# ------------------------------------------------------------------ metadata markers


@pytest.mark.parametrize("value", ["skip", "xfail"])
def test_a_metadata_value_naming_a_registered_marker_is_refused_before_anything_runs(
    pytester: pytest.Pytester, value: str
) -> None:
    """A topic `skip` made its case vanish (12 of 13 recorded); failing cases with topic `xfail` were
    reported xfailed and the run exited 0. Such a value is now a configuration error (exit 2)."""
    cases = [case(f"c{i:02d}", answer="nowhere", metadata={"topic": "billing"}) for i in range(4)]
    cases[2]["metadata"]["topic"] = value
    rag_project(pytester, cases, extra="markers: [topic]\nconcurrency: 4\nstore: .oloproof\n")
    pytester.makepyfile(test_ordinary="def test_ordinary():\n    open('ordinary.ran', 'w').close()\n")
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2, result.stdout.str()
    text = result.stdout.str()
    assert f"cases.jsonl:3: case 'c02': metadata.topic is '{value}'" in text, text
    assert "oloproof.yaml:" in text and "take the key out of `markers:`" in text, text
    assert calls(pytester) == []
    assert not (pytester.path / "ordinary.ran").exists()
    assert_nothing_written(pytester.path)


def test_metadata_markers_that_nothing_registers_still_select_cases(pytester: pytest.Pytester) -> None:
    cases = [case("a", metadata={"topic": "billing"}), case("b", metadata={"topic": "skip_me"})]
    rag_project(pytester, cases, extra="markers: [topic]\nstore: .oloproof\n")
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--strict-markers", "-m", "skip_me")
    result.assert_outcomes(passed=1)
    assert [c["id"] for c in last_run(pytester)["cases"]] == ["b"]


def test_a_marker_a_conftest_registers_is_refused_too(pytester: pytest.Pytester) -> None:
    """A conftest.py that skips `slow` tests unless asked (pytest's own documented recipe) would skip the case."""
    rag_project(pytester, [case("a", metadata={"speed": "slow"})], extra="markers: [speed]\nstore: .oloproof\n")
    pytester.makeconftest(
        "import pytest\n\n"
        "def pytest_configure(config):\n"
        "    config.addinivalue_line('markers', 'slow: a slow test, skipped unless --runslow')\n\n"
        "def pytest_collection_modifyitems(config, items):\n"
        "    for item in items:\n"
        "        if 'slow' in item.keywords:\n"
        "            item.add_marker(pytest.mark.skip(reason='slow'))\n"
    )
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2, result.stdout.str()
    result.stdout.fnmatch_lines(["*metadata.speed is 'slow', which would become the marker 'slow'*"])
    assert calls(pytester) == []


# ------------------------------------------------------------------ SIGTERM with a judge that never answers


@pytest.mark.slow
def test_sigterm_asks_no_more_judges_and_waits_for_none(tmp_path: Path) -> None:
    """After SIGTERM the completed cases used to be judged one at a time, so a judge that hangs kept the
    process alive for minutes. Now no judge request starts after the signal, none is waited for, and
    what completed is recorded as incomplete with the judge's criterion missing."""
    root = tmp_path
    with ScriptedServer([Reply.verdict("pass", delay=600)]) as server:
        (root / "pytest.ini").write_text("[pytest]\n")
        module = "sigterm_sys"
        (root / f"{module}.py").write_text(RAG_SOURCE.replace("{settings}", "depth=4, top_k=2"))
        pairs = list(itertools.permutations(["d1", "d2", "d3", "d4", "d5"], 2))  # a distinct context each
        cases = [case(f"c{i:02d}", input={"docs": list(pairs[i])}) for i in range(N)]
        (root / "cases.jsonl").write_text(cases_text(cases))
        evaluators = (
            "evaluators:\n"
            "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
            f"  - {{type: groundedness_judge, provider: openai, base_url: '{server.base_url}', model: m, "
            "retries: 0, timeout_s: 300, concurrency: 2}\n"
        )
        (root / "oloproof.yaml").write_text(
            config_text(module, evaluators=evaluators, extra="concurrency: 4\nstore: .oloproof\n")
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_oloproof.cli", "run", "-p", "no:cacheprovider", "-p", "no:randomly"],
            cwd=root,
            env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert server.wait_for_requests(2) == 2  # both judge threads wait on the judge
            deadline = time.monotonic() + 60
            log = root / "calls.log"
            while not log.exists() or len(log.read_text().splitlines()) < 2 * N:
                assert time.monotonic() < deadline, "the cases did not all execute"
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)  # a safety net, not a speed check
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        requests = len(server.requests)
    assert proc.returncode == 2, out
    assert requests == 2, out  # no judge was asked after the signal
    assert "no judge is asked" in out, out
    (run_dir,) = (root / ".oloproof" / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    recorded = [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    assert record["status"] == "incomplete", out
    assert len(recorded) == N, out  # every case completed before the signal, and is recorded
    assert all(c["criteria"]["answer_correct"]["status"] == "observed" for c in recorded)
    grounded = [c["criteria"]["grounded"] for c in recorded]
    assert all(g["status"] == "missing" and g["reason"] == "interrupted" for g in grounded), grounded


ANSWERING_SYSTEM = """
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="answering", version="1", depth=1, top_k=1)
class System:
    def retrieve(self, input, depth):
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1.0, "Refunds take 14 days."),))

    def generate(self, input, context):
        return {"answer": "answer to " + input["q"]}  # a distinct verdict to ask for each case
"""

# pytest renders the interruption after the plugins' own hook; this stretches that moment to 3 s
SLOW_INTERRUPT_CONFTEST = """
import time
from pathlib import Path

import pytest


@pytest.hookimpl(trylast=True)
def pytest_keyboard_interrupt(excinfo):
    Path("interrupt_seen.txt").write_text(repr(time.monotonic()))
    time.sleep(3)
"""


@pytest.mark.slow
def test_after_sigterm_the_judges_ahead_stop_at_once(tmp_path: Path) -> None:
    """The judge threads stopped only at session finish: while pytest reported the interruption they went
    on asking the judge (here for 3 s). Now no judge request starts once the signal is seen."""
    n = 300
    with ScriptedServer([Reply.verdict("pass", delay=0.05)]) as server:
        (tmp_path / "pytest.ini").write_text("[pytest]\n")
        (tmp_path / "answering_sys.py").write_text(ANSWERING_SYSTEM)
        (tmp_path / "conftest.py").write_text(SLOW_INTERRUPT_CONFTEST)
        (tmp_path / "cases.jsonl").write_text(cases_text([case(f"c{i:03d}", answer="answer to") for i in range(n)]))
        evaluators = (
            "evaluators:\n"
            "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
            f"  - {{type: groundedness_judge, provider: openai, base_url: '{server.base_url}', model: m, "
            "retries: 0, concurrency: 2}\n"
        )
        (tmp_path / "oloproof.yaml").write_text(
            config_text("answering_sys", evaluators=evaluators, extra="concurrency: 4\nstore: .oloproof\n")
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_oloproof.cli", "run", "-p", "no:cacheprovider", "-p", "no:randomly"],
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert server.wait_for_requests(5) >= 5  # more may arrive before the waiter wakes
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        seen = float((tmp_path / "interrupt_seen.txt").read_text())
        # a request sent just before the signal may be read a moment later; none starts in the 3 s after it
        late = [r for r in server.requests if r.at > seen + 1.0]
        total = len(server.requests)
    assert proc.returncode == 2, out
    assert total < n, out  # the run was still judging when the signal came
    assert late == [], f"{len(late)} judge requests started after SIGTERM\n{out}"
