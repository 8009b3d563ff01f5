"""Remote pytest-xdist hosts (issue 25 item 4), through execnet's socketserver on 127.0.0.1.

Each host is a real socketserver process started with this interpreter (so the plugin is importable
there) serving a deployed copy of the example project in another folder; the controller runs in its own
copy. The same revision gives the record a single process gives; a host that differs, a host with nothing
deployed, and a host that dies are each stopped with a message (exit 2).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import execnet
import pytest
from staged_helpers import run_records

pytest.importorskip("xdist")
pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support_rag"
COMMAND = [sys.executable, "-m", "pytest_oloproof.cli", "run", "-q", "-p", "no:cacheprovider"]
SERVER = Path(execnet.__file__).parent / "script" / "socketserver.py"

STALLING = '''
import os, time
from pathlib import Path
from app import SupportRag

class StallingRag(SupportRag):
    """The example system; with OLO_STALL_AFTER=N in the environment, the case after N writes OLO_STALLED and hangs."""

    done = 0

    def retrieve(self, input, depth):
        after = os.environ.get("OLO_STALL_AFTER")
        if after is not None and StallingRag.done >= int(after):
            Path(os.environ["OLO_STALLED"]).write_text("stalled")
            while True:
                time.sleep(1)
        StallingRag.done += 1
        return super().retrieve(input, depth)
'''


def deploy(root: Path) -> Path:
    """A copy of the example project (no store), as a deployment of one revision would leave it."""
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".oloproof", "__pycache__", "*.html"))
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Host:
    """execnet's socketserver on 127.0.0.1, serving one connection at a time until it is killed."""

    def __init__(self, tmp: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.log = (tmp / f"server-{self.port}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), f"127.0.0.1:{self.port}"],
            cwd=tmp,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        deadline = time.monotonic() + 60
        while True:  # until it accepts connections
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, "socketserver did not start"
                time.sleep(0.05)
        # that probe was a connection it served (it reads nothing and goes back to accepting)

    def tx(self, folder: Path) -> str:
        return f"socket=127.0.0.1:{self.port}//chdir={folder}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)
        self.log.close()


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[Host]]:
    started: list[Host] = []
    yield started
    for host in started:
        host.stop()


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def no_runs(project: Path) -> bool:
    runs = project / ".oloproof" / "runs"
    return not runs.exists() or not list(runs.iterdir())


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    cases = sorted(({k: c.get(k) for k in ("id", "criteria", "output", "digest")} for c in record["cases"]), key=str)
    return {
        **{k: record.get(k) for k in ("metrics", "slices", "counts", "case_set_digest", "status")},
        "cases": cases,
    }


def test_the_same_revision_on_a_remote_host_records_what_one_process_records(tmp_path: Path, hosts: list[Host]) -> None:
    single, controller, remote = deploy(tmp_path / "single"), deploy(tmp_path / "ctrl"), deploy(tmp_path / "host")
    one = run(single)
    assert one.returncode == 1, one.stdout + one.stderr  # 4 cases fail by design
    hosts.append(Host(tmp_path))
    proc = run(controller, "--tx", hosts[0].tx(remote), "--dist", "load")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [expected], [got] = run_records(single / ".oloproof"), run_records(controller / ".oloproof")
    assert got["status"] == "complete"
    assert comparable(got) == comparable(expected)


def test_a_host_with_another_app_or_case_file_is_refused_naming_the_host_and_the_field(
    tmp_path: Path, hosts: list[Host]
) -> None:
    controller, remote = deploy(tmp_path / "ctrl"), deploy(tmp_path / "host")
    with (remote / "app.py").open("a") as f:
        f.write("\n# edited on this host only\n")
    hosts.append(Host(tmp_path))
    tx = hosts[0].tx(remote)
    proc = run(controller, "--tx", tx, "--dist", "load")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert f"host gw0 (execmodel=main_thread_only//{tx}) differs from the controller:" in out
    assert "  system module source: this host sha256:" in out
    assert "case set:" not in out and "configuration" not in out
    assert no_runs(controller)

    shutil.copy(controller / "app.py", remote / "app.py")
    cases = (remote / "cases.jsonl").read_text().splitlines()
    (remote / "cases.jsonl").write_text("\n".join(cases[:-1]) + "\n")  # one case fewer on this host
    proc = run(controller, "--tx", tx, "--dist", "load")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "differs from the controller:\n  case set: this host sha256:" in out
    assert "system module source" not in out
    assert no_runs(controller)


def test_an_empty_host_folder_is_refused(tmp_path: Path, hosts: list[Host]) -> None:
    controller, empty = deploy(tmp_path / "ctrl"), tmp_path / "empty"
    empty.mkdir()
    hosts.append(Host(tmp_path))
    tx = hosts[0].tx(empty)
    proc = run(controller, "--tx", tx, "--dist", "load")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert f"Oloproof cannot start: host gw0 (execmodel=main_thread_only//{tx}) collected 0 of 13 cases" in out
    assert no_runs(controller)


def test_a_host_that_dies_leaves_an_incomplete_record_of_the_finished_cases(tmp_path: Path, hosts: list[Host]) -> None:
    controller, remote = deploy(tmp_path / "ctrl"), deploy(tmp_path / "host")
    for folder in (controller, remote):
        (folder / "app_stalling.py").write_text(STALLING)
        config = folder / "oloproof.yaml"
        config.write_text(config.read_text().replace("object: app:SupportRag", "object: app_stalling:StallingRag"))
    stalled = tmp_path / "stalled"
    hosts.append(Host(tmp_path, env={"OLO_STALL_AFTER": "3", "OLO_STALLED": str(stalled)}))
    ctl = subprocess.Popen(
        [*COMMAND, "--tx", hosts[0].tx(remote), "--dist", "load"],
        cwd=controller,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        while not stalled.exists():  # the host has finished three cases and hangs in the fourth
            assert ctl.poll() is None, ctl.communicate()[0]
            time.sleep(0.05)
        hosts[0].proc.kill()
        out = ctl.communicate(timeout=300)[0]
    finally:
        if ctl.poll() is None:
            ctl.kill()
    assert ctl.returncode == 2, out
    assert "INTERNALERROR" not in out
    assert f"Oloproof: host gw0 (execmodel=main_thread_only//{hosts[0].tx(remote)}) went down during the run" in out
    [record] = run_records(controller / ".oloproof")
    assert record["status"] == "incomplete"
    assert len(record["cases"]) == 3


def test_remote_hosts_without_distribution_or_with_rsync_are_warned_about(tmp_path: Path, hosts: list[Host]) -> None:
    controller, remote = deploy(tmp_path / "ctrl"), deploy(tmp_path / "host")
    hosts.append(Host(tmp_path))
    proc = run(controller, "--tx", hosts[0].tx(remote))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "without --dist: pytest-xdist distributes nothing and every case runs on this machine" in proc.stdout
    proc = run(controller, "--tx", hosts[0].tx(remote), "--dist", "load", "--rsyncdir", str(controller))
    assert "--rsyncdir is deprecated in pytest-xdist" in proc.stdout + proc.stderr
    assert "deploy the same revision of the project on each host" in proc.stdout + proc.stderr
