"""Two sessions on one store at once share their work (issue 25 item 3): real processes, one diskcache on disk.

The order is fixed by barrier files, not sleeps: the second session starts, loads the cache's keys and
stops inside its first case (it writes `ready` and waits for `go`); the first session then runs every case
and exits; only then is `go` written, and the second session's remaining cases must all be cache hits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from staged_helpers import run_records

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support_rag"

WAITING = '''
import os, time
from pathlib import Path
from app import SupportRag

class WaitingRag(SupportRag):
    """The example system; with OLO_READY set, its first retrieval writes that file and waits for OLO_GO."""

    waited = False

    def retrieve(self, input, depth):
        ready = os.environ.get("OLO_READY")
        if ready and not WaitingRag.waited:
            WaitingRag.waited = True
            Path(ready).write_text("in the first case")
            deadline = time.monotonic() + 240
            while not Path(os.environ["OLO_GO"]).exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("no go file")
                time.sleep(0.01)
        return super().retrieve(input, depth)
'''


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest_oloproof.cli", "run", "-q", "-p", "no:cacheprovider", *args]


@pytest.mark.slow
def test_a_session_gets_hits_for_entries_another_process_wrote_after_it_started(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".oloproof", "__pycache__", "*.html"))
    (root / "app_waiting.py").write_text(WAITING)
    config = root / "oloproof.yaml"
    config.write_text(config.read_text().replace("object: app:SupportRag", "object: app_waiting:WaitingRag"))
    ready, go = tmp_path / "ready", tmp_path / "go"

    env = {**os.environ, "OLO_READY": str(ready), "OLO_GO": str(go)}
    # one case at a time, so every later case looks its entries up after the barrier
    second = subprocess.Popen(
        command("--oloproof-concurrency", "1"), cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        while not ready.exists():
            assert second.poll() is None, second.communicate()[0].decode()
            time.sleep(0.02)  # polling the barrier file, not waiting for time to pass
        first = subprocess.run(command(), cwd=root, capture_output=True, text=True, timeout=300)
        assert first.returncode == 1, first.stdout + first.stderr  # the example fails 4 cases by design
        assert "Cache: execution 0 hit/13 miss" in first.stdout  # nothing was there when it started
        go.write_text("go")
        out = second.communicate(timeout=300)[0].decode()
    finally:
        if second.poll() is None:
            second.kill()
    assert second.returncode == 1, out
    # the first case was computed before the other session wrote; the other twelve were its entries
    assert "Cache: execution 12 hit/1 miss" in out, out
    records = run_records(root / ".oloproof")
    assert sorted(r["cache"]["execution"]["hit"] for r in records) == [0, 12]
    assert all(r["status"] == "complete" for r in records)
