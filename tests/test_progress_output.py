"""The progress line never breaks pytest's own output (issue 18 §6).

Real pytest subprocesses, under -q, the default and -v, with the output on a pseudo-terminal
(a pty, as in a developer's shell) and on a pipe (as in CI). The assertions read the output
line by line: every line is either one of pytest's, whole, or a progress line of its own.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

N_CASES = 240
COLUMNS = 80
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PROGRESS = re.compile(r"^oloproof: \d+/\d+ cases · \d+ cache hits · \d+ errors · [\d.]+ cases/s$")
DOTS = re.compile(r"^(oloproof\.yaml )?[.F]+ +\[ *\d+%\]$")
VERBOSE = re.compile(r"^oloproof\.yaml::progress-sys\[c\d{3}\] (PASSED|FAILED) +\[ *\d+%\]$")

SYSTEM = """
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="progress-sys", version="1", depth=1, top_k=1)
class System:
    def retrieve(self, input, depth):
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1.0, "text"),))

    def generate(self, input, context):
        return {"answer": "no" if input["n"] % 7 == 3 else "yes"}
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("progress")
    (root / "progress_app.py").write_text(SYSTEM)
    with (root / "cases.jsonl").open("w") as f:
        for i in range(N_CASES):
            f.write(json.dumps({"id": f"c{i:03d}", "input": {"q": f"q{i}", "n": i}, "expected": {"answer": "yes"}}))
            f.write("\n")
    (root / "oloproof.yaml").write_text(
        "system:\n  rag: {object: 'progress_app:System'}\ncases: cases.jsonl\n"
        "evaluators:\n  - {type: contains, criterion: answer_correct}\nstore: .oloproof\n"
    )
    (root / "pytest.ini").write_text("[pytest]\noloproof_progress_interval = 0\n")
    return root


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
    env.update(COLUMNS=str(COLUMNS), LINES="40", TERM="xterm", PYTHONUNBUFFERED="1")
    return env


ARGS = ["--oloproof", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly"]


def run_in_pty(cwd: Path, *args: str) -> str:
    """Run pytest with stdout and stderr on a pseudo-terminal of COLUMNS columns; return what it showed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, COLUMNS, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *ARGS, *args], cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=_env()
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError as exc:  # EIO: the child closed the terminal
            if exc.errno != errno.EIO:
                raise
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    proc.wait(timeout=120)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def run_in_pipe(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *ARGS, *args], cwd=cwd, capture_output=True, text=True, env=_env(), timeout=120
    )
    return done.stdout


def item_lines(output: str) -> list[str]:
    """The lines pytest printed while the items ran: after the header, before the first `====` section."""
    # what a terminal shows: after a carriage return (pytest's "collecting ..." rewrite) only what follows
    lines = [ANSI.sub("", line).rsplit("\r", 1)[-1].rstrip() for line in output.split("\n")]
    start = next((i for i, line in enumerate(lines) if re.search(r"collected \d+ items", line)), -1)  # -q: none
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith("====="))
    return [line for line in lines[start + 1 : end] if line]


def check_dots(lines: list[str], prefix: bool) -> int:
    """Every line is a whole line of dots ending in its [xx%], or a progress line; returns the progress lines."""
    progress = [line for line in lines if PROGRESS.match(line)]
    dots = [line for line in lines if not PROGRESS.match(line)]
    for line in dots:
        assert DOTS.match(line), f"a broken line of pytest's output: {line!r}\n" + "\n".join(lines)
    assert sum(line.count(".") - line.count("oloproof.yaml") + line.count("F") for line in dots) == N_CASES
    assert sum(line.startswith("oloproof.yaml ") for line in dots) == (1 if prefix else 0), "\n".join(lines)
    return len(progress)


def check_verbose(lines: list[str]) -> int:
    progress = [line for line in lines if PROGRESS.match(line)]
    items = [line for line in lines if not PROGRESS.match(line)]
    for line in items:
        assert VERBOSE.match(line), f"a node id parted from its outcome: {line!r}"
    assert len(items) == N_CASES
    return len(progress)


@pytest.mark.parametrize(("flag", "prefix"), [("-q", False), (None, True)])
def test_progress_in_a_terminal_never_breaks_a_line_of_dots(project: Path, flag: str | None, prefix: bool) -> None:
    output = run_in_pty(project, *([flag] if flag else []))
    assert "FAILED" in output  # the planted failures are reported as usual
    assert check_dots(item_lines(output), prefix) >= 2  # shown, between pytest's lines


def test_progress_in_a_terminal_under_v_sits_between_whole_item_lines(project: Path) -> None:
    output = run_in_pty(project, "-v")
    assert check_verbose(item_lines(output)) >= 10


@pytest.mark.parametrize("flag", ["-q", None, "-v"])
def test_progress_is_off_without_a_terminal(project: Path, flag: str | None) -> None:
    output = run_in_pipe(project, *([flag] if flag else []))
    assert "cases/s" not in output
    lines = item_lines(output)
    assert check_verbose(lines) == 0 if flag == "-v" else check_dots(lines, prefix=flag is None) == 0


@pytest.mark.parametrize("flag", ["-q", None, "-v"])
def test_progress_asked_for_without_a_terminal_keeps_pytests_lines_whole(project: Path, flag: str | None) -> None:
    output = run_in_pipe(project, "-o", "oloproof_progress=on", *([flag] if flag else []))
    lines = item_lines(output)
    shown = check_verbose(lines) if flag == "-v" else check_dots(lines, prefix=flag is None)
    assert shown >= 2


def test_a_refused_write_is_retried_on_the_next_tick_not_after_another_interval() -> None:
    from pytest_oloproof.engine.progress import Progress, ProgressDisplay

    now = [0.0]
    progress = Progress(10, clock=lambda: now[0])
    can_write = [False]
    written: list[str] = []

    def write(line: str) -> bool:
        if can_write[0]:
            written.append(line)
        return can_write[0]

    display = ProgressDisplay(progress, write, every_s=2.0, after_s=2.0, clock=lambda: now[0])
    now[0] = 3.0
    display.tick()  # due, but pytest is mid-line
    assert written == [] and display.shown == 0
    now[0] = 3.1
    can_write[0] = True
    display.tick()  # the next line boundary: written at once
    assert len(written) == 1 and display.shown == 1
    now[0] = 3.2
    display.tick()  # and then throttled again
    assert len(written) == 1
