"""Ctrl-C and SIGTERM mid-run: an incomplete record of what finished, and reuse on the next run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

N_CASES = 60  # enough that even 8 at a time are still running when the signal comes

SYSTEM = """
import os, time
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="sleepy-rag", version="1", depth=2, top_k=2, index_version="i1")
class System:
    def retrieve(self, input, depth):
        passages = (Passage("d1", 1.0, "one"), Passage("d2", 0.5, "two"))
        return Retrieval(query=input["q"], depth=depth, candidates=passages)

    def generate(self, input, context):
        if os.environ.get("SLEEPY_SLOW"):  # later cases slower, so a loaded machine still signals mid-run
            time.sleep(0.4 if int(input["q"][1:]) < 16 else 2.0)
        return {"answer": "yes " + input["q"]}
"""


JUDGE = """
import json, time

def judge(messages):
    time.sleep(0.2)
    return json.dumps({"verdict": "pass", "rationale": "slow but sure"})
"""


def make_project(root: Path, concurrency: int, judged: bool = False) -> None:
    (root / "sleepy_app.py").write_text(SYSTEM)
    (root / "sleepy_judge.py").write_text(JUDGE)
    with (root / "cases.jsonl").open("w") as f:
        for i in range(N_CASES):
            f.write(json.dumps({"id": f"c{i:02d}", "input": {"q": f"q{i}"}, "expected": {"answer": "yes"}}) + "\n")
    (root / "oloproof.yaml").write_text(
        "system:\n  rag:\n    object: sleepy_app:System\n"
        "cases: cases.jsonl\n"
        "evaluators:\n  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
        + ("  - {type: groundedness_judge, provider: python, object: 'sleepy_judge:judge'}\n" if judged else "")
        + f"concurrency: {concurrency}\n"
        "store: .oloproof\n"
    )
    (root / "pytest.ini").write_text("[pytest]\n")


def clean_env(slow: bool = False) -> dict[str, str]:
    """This process's environment without pytest's or the test system's knobs (SLEEPY_SLOW when `slow`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SLEEPY_"))}
    if slow:
        env["SLEEPY_SLOW"] = "1"
    return env


def _sigint_as_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def oloproof_run(root: Path, slow: bool) -> subprocess.Popen[str]:
    """`oloproof run` in a subprocess that gets SIGINT's default handling (so Python's Ctrl-C), whatever ours is:
    a suite started in the background of a script (`pytest &`, nohup) inherits SIGINT ignored, and a child
    that ignores it never sees the Ctrl-C the test sends."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest_oloproof.cli", "run", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=root,
        env=clean_env(slow),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_sigint_as_default,
    )


def wait_until(done: Callable[[], bool], proc: subprocess.Popen[str], deadline: float, what: str) -> None:
    """Poll until `done()`, failing if the run ends first or the deadline passes (`what` did not happen)."""
    while not done():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def recorded_lines(root: Path) -> list[str]:
    runs = root / ".oloproof" / "runs"
    if not runs.is_dir():
        return []
    lines: list[str] = []
    for d in runs.iterdir():
        path = d / "cases.jsonl"
        if path.is_file():
            lines += [ln for ln in path.read_text().splitlines() if ln.endswith("}")]
    return lines


@pytest.mark.parametrize(
    ("signum", "concurrency", "judged"),
    [(signal.SIGINT, 1, False), (signal.SIGTERM, 4, False), (signal.SIGINT, 8, False), (signal.SIGINT, 8, True)],
    ids=["sigint", "sigterm", "sigint-concurrency-8", "sigint-judged-ahead"],
)
def test_interrupted_run_is_incomplete_and_the_next_run_reuses_what_finished(
    tmp_path: Path, signum: int, concurrency: int, judged: bool
) -> None:
    make_project(tmp_path, concurrency, judged)
    proc = oloproof_run(tmp_path, slow=True)
    wait_until(lambda: len(recorded_lines(tmp_path)) >= 3, proc, time.monotonic() + 60, "no case recorded in 60 s")
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out  # pytest's "interrupted"

    (run_dir,) = (tmp_path / ".oloproof" / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    cases = [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    finished = len(cases)
    assert record["status"] == "incomplete", out
    assert 3 <= finished < N_CASES, out
    assert record["counts"]["cases"] == finished
    assert len({c["id"] for c in cases}) == finished
    assert all(c["criteria"]["answer_correct"]["status"] == "observed" for c in cases)
    if judged:  # judged ahead of the items (or, for those not judged yet, when recorded): never left out
        assert all(c["criteria"]["grounded"]["status"] == "observed" for c in cases), out

    again = oloproof_run(tmp_path, slow=False)
    out2, _ = again.communicate(timeout=120)
    assert again.returncode == 0, out2
    cache_line = re.search(r"Cache: execution (\d+) hit/(\d+) miss", out2)
    assert cache_line, out2
    # every case that finished is reused whole; nothing else claims to have finished
    assert (int(cache_line[1]), int(cache_line[2])) == (finished, N_CASES - finished), out2
    stages = re.search(r"Stages: retrieve (\d+) hit/(\d+) miss; generate (\d+) hit/(\d+) miss", out2)
    assert stages, out2
    assert int(stages[1]) + int(stages[2]) == N_CASES - finished
    assert int(stages[3]) == 0  # an interrupted generate never left an entry
    if judged:  # the recorded cases' verdicts are reused with them; the others are judged now
        judgments = re.search(r"judgment (\d+) hit/(\d+) miss", out2)
        assert judgments and (int(judgments[1]), int(judgments[2])) == (2 * finished, 2 * (N_CASES - finished)), out2


LINELESS_TEST = '''
def _raise_interrupt():
    raise KeyboardInterrupt


def _without_line_numbers(fn):
    """Give fn's code no line at any instruction, as CPython does for a `with` block's clean-up code."""
    units = len(fn.__code__.co_code) // 2
    table = bytearray()
    while units > 0:
        run = min(units, 8)
        table.append(0x80 | (15 << 3) | (run - 1))  # location entry "no location" (CPython 3.11+)
        units -= run
    fn.__code__ = fn.__code__.replace(co_linetable=bytes(table))
    return fn


def test_zz_ctrl_c_lands_where_there_is_no_line():
    _without_line_numbers(_raise_interrupt)()
'''


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the 3.11 location table format builds the lineless frame")
def test_ctrl_c_on_an_instruction_without_a_line_is_still_an_interruption(tmp_path: Path) -> None:
    """A signal can land where CPython records no line (tb_lineno None); pytest's rendering of the
    interrupt then failed with `None - 1`, and the run exited 1 with an internal traceback, not 2."""
    make_project(tmp_path, concurrency=1)
    (tmp_path / "test_stop.py").write_text(LINELESS_TEST)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--oloproof", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "TypeError" not in out, out
    assert "KeyboardInterrupt" in out, out
    (run_dir,) = (tmp_path / ".oloproof" / "runs").iterdir()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "incomplete"


MAIN_THREAD_JUDGE = """
import json, threading, time
from pathlib import Path

def judge(messages):
    if threading.current_thread() is threading.main_thread():  # judging what was left, as cases are recorded
        (Path(__file__).parent / "recording.txt").write_text("yes")
    time.sleep(1.0)
    return json.dumps({"verdict": "pass", "rationale": "slow but sure"})
"""


def test_a_second_ctrl_c_while_the_completed_cases_are_judged_still_records_them_all(tmp_path: Path) -> None:
    """After Ctrl-C, the completed cases not judged ahead yet are judged as they are recorded, one at a time.
    Pressing Ctrl-C again there (as Oloproof invites) used to crash pytest with a bare KeyboardInterrupt
    (exit -2): run.json without counts, fewer cases recorded than completed. Now the rest are recorded
    with the verdicts known and the others missing, reason `interrupted`; the run is incomplete, exit 2."""
    make_project(tmp_path, concurrency=8, judged=True)
    (tmp_path / "sleepy_judge.py").write_text(MAIN_THREAD_JUDGE)
    proc = oloproof_run(tmp_path, slow=False)
    deadline = time.monotonic() + 60
    wait_until(lambda: len(recorded_lines(tmp_path)) >= 1, proc, deadline, "no case was recorded within 60 s")
    proc.send_signal(signal.SIGINT)
    recording = tmp_path / "recording.txt"
    wait_until(recording.exists, proc, deadline, "nothing left was judged as it was recorded")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert "completed case(s), judging what was not judged ahead" in out, out  # the wait is announced

    (run_dir,) = (tmp_path / ".oloproof" / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    cases = [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    assert record["status"] == "incomplete", out
    assert record["counts"]["cases"] == len(cases) == len({c["id"] for c in cases}), out
    grounded = [c["criteria"]["grounded"] for c in cases]
    assert any(g["status"] == "missing" and g["reason"] == "interrupted" for g in grounded), out
    assert all(g["status"] == "observed" or g["reason"] == "interrupted" for g in grounded), out
    assert all(c["criteria"]["answer_correct"]["status"] == "observed" for c in cases), out

    again = oloproof_run(tmp_path, slow=False)
    out2, _ = again.communicate(timeout=180)
    cache_line = re.search(r"Cache: execution (\d+) hit/(\d+) miss", out2)
    assert cache_line, out2
    # every case that completed was recorded, and nothing else
    assert (int(cache_line[1]), int(cache_line[2])) == (len(cases), N_CASES - len(cases)), out2


# Ctrl-C again, landing while a completed case's record is being written (not while it is judged): sent by
# the process to itself from inside RunRecorder.add, once the completed cases are recorded after Ctrl-C.
CTRL_C_IN_RECORD_CONFTEST = """
import os, signal
from pathlib import Path
import pytest_oloproof.engine.recorder as runner

_original = runner.RunRecorder.add
HERE = Path(__file__).parent


def _add(self, rec):
    if (HERE / "recording.txt").exists() and not (HERE / "signalled.txt").exists():
        (HERE / "signalled.txt").write_text(rec["id"])
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10000):  # the interpreter runs the signal's handler between these instructions
            pass
    return _original(self, rec)


runner.RunRecorder.add = _add
"""


def test_a_second_ctrl_c_while_a_completed_case_is_being_recorded_loses_nothing(tmp_path: Path) -> None:
    """Only the judging of the completed cases is interruptible: a Ctrl-C landing while a record is written
    stops the judging from then on, and the record is written whole. It used to raise inside the write:
    that case and every one after it were lost and pytest crashed with a bare KeyboardInterrupt."""
    make_project(tmp_path, concurrency=8, judged=True)
    (tmp_path / "sleepy_judge.py").write_text(MAIN_THREAD_JUDGE)
    (tmp_path / "conftest.py").write_text(CTRL_C_IN_RECORD_CONFTEST)
    proc = oloproof_run(tmp_path, slow=False)
    wait_until(lambda: len(recorded_lines(tmp_path)) >= 1, proc, time.monotonic() + 60, "no case recorded in 60 s")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    assert "Traceback" not in out, out
    signalled = (tmp_path / "signalled.txt").read_text()

    (run_dir,) = (tmp_path / ".oloproof" / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    cases = [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    by_id = {c["id"]: c for c in cases}
    assert record["status"] == "incomplete", out
    assert record["counts"]["cases"] == len(cases) == len(by_id), out
    assert by_id[signalled]["criteria"]["grounded"]["status"] == "observed", out  # judged before the Ctrl-C
    grounded = [c["criteria"]["grounded"] for c in cases]
    assert any(g["status"] == "missing" and g["reason"] == "interrupted" for g in grounded), out
    assert all(g["status"] == "observed" or g["reason"] == "interrupted" for g in grounded), out

    (tmp_path / "conftest.py").unlink()
    (tmp_path / "sleepy_judge.py").write_text(JUDGE.replace("time.sleep(0.2)", "pass"))  # judging is not checked here
    again = oloproof_run(tmp_path, slow=False)
    out2, _ = again.communicate(timeout=180)
    cache_line = re.search(r"Cache: execution (\d+) hit/(\d+) miss", out2)
    assert cache_line, out2
    # every case that completed was recorded, and nothing else
    assert (int(cache_line[1]), int(cache_line[2])) == (len(cases), N_CASES - len(cases)), out2
