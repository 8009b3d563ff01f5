"""Issue 22 §7, §8, §9 and §19: the store and the reports on a full disk, a read-only folder, a deleted store.

The disks are real: a small tmpfs (filled by a file, or by the system under test in the middle
of a run) and read-only bind mounts, made with `mount` where the machine allows it (root with
CAP_SYS_ADMIN); elsewhere those tests are skipped, saying why. Commands run as real subprocesses.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from staged_helpers import case, rag_project

from pytest_oloproof.cache.caches import Caches
from pytest_oloproof.errors import WriteError
from pytest_oloproof.store.files import Store, atomic_write_text, new_run_id

# The system writes calls.log beside itself, can fill a disk to its last page (`fill`) or remove
# a folder (`remove`) when it generates a case, and answers with more than a memory page of text,
# so each case record needs new room on the disk.
SYSTEM = """
import os, shutil
from pathlib import Path
from pytest_oloproof import Passage, Retrieval, rag_system

HERE = Path(__file__).parent


@rag_system({settings})
class System:
    def retrieve(self, input, depth):
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage(doc_id="d1", score=1.0, text="gamma"),))

    def generate(self, input, context):
        with open(HERE / "calls.log", "a", encoding="utf-8") as f:
            f.write(input["q"] + "\\n")
        if input.get("fill"):
            fd = os.open(input["fill"], os.O_WRONLY | os.O_CREAT)
            try:
                while os.write(fd, b"x" * 4096):
                    pass
            except OSError:
                pass
            finally:
                os.close(fd)
        if input.get("remove"):
            shutil.rmtree(input["remove"])
        return {"answer": "gamma " + "padding " * 700, "citations": ["d1"]}
"""


def oloproof(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def run(cwd: Path, *args: str) -> tuple[int, str]:
    proc = oloproof(cwd, "run", "-p", "no:cacheprovider", *args)
    return proc.returncode, proc.stdout + proc.stderr


def project(pytester: pytest.Pytester, store: Path, cases: list[dict[str, object]]) -> None:
    rag_project(pytester, cases, source=SYSTEM, extra=f"store: {store}\nconcurrency: 1\n")


def generated(pytester: pytest.Pytester) -> list[str]:
    log = pytester.path / "calls.log"
    return log.read_text(encoding="utf-8").split() if log.exists() else []


def whole_lines(path: Path) -> list[dict[str, object]]:
    """The case records of a cases.jsonl, without a torn last line (one a full disk cut short)."""
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.split("\n")[:-1]]


def _mount(*args: str) -> str | None:
    """Run `mount ARGS`; the reason it failed, or None."""
    if shutil.which("mount") is None:
        return "no mount command"
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"mount exited {proc.returncode}")


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    done: list[Path] = []
    yield done
    for point in reversed(done):
        # lazily: a file a failed test left open must not leave the mount behind
        subprocess.run(["umount", "--lazy", str(point)], capture_output=True)


@pytest.fixture
def tmpfs(tmp_path_factory: pytest.TempPathFactory, mounts: list[Path]) -> Callable[[str], Path]:
    """A fresh tmpfs of the given size (`64k`), unmounted after the test."""

    def make(size: str) -> Path:
        point = tmp_path_factory.mktemp("tmpfs")
        why = _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point))
        if why is not None:
            pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {why}")
        mounts.append(point)
        return point

    return make


@pytest.fixture
def read_only(mounts: list[Path]) -> Callable[[Path], None]:
    """Make a folder read-only for everyone, root included: a read-only bind mount of it onto itself."""

    def make(folder: Path) -> None:
        why = _mount("--bind", str(folder), str(folder))
        if why is not None:
            pytest.skip(f"cannot bind-mount here (needs root with CAP_SYS_ADMIN): {why}")
        mounts.append(folder)
        why = _mount("-o", "remount,ro,bind", str(folder))
        if why is not None:
            pytest.skip(f"cannot remount read-only here: {why}")

    return make


def fill(folder: Path) -> None:
    """Fill the disk holding `folder` to its last byte."""
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while f.write(b"x" * 4096):
                pass
        except OSError:
            pass


# ------------------------------------------------------------------ §7 checked before any case runs


def test_a_full_disk_stops_the_run_before_any_case_runs(
    pytester: pytest.Pytester, tmpfs: Callable[[str], Path]
) -> None:
    disk = tmpfs("64k")
    store = disk / "store"
    fill(disk)
    project(pytester, store, [case("c0"), case("c1")])
    code, out = run(pytester.path)
    assert code == 2, out
    assert f"Oloproof cannot start: the store {store} cannot be written (No space left on device)" in out
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    assert generated(pytester) == []  # no case ran
    runs = store / "runs"
    assert not runs.exists() or not any(runs.iterdir())  # and no run folder, empty or not, was left


@pytest.mark.slow
def test_a_read_only_store_stops_the_run_before_any_case_runs_and_keeps_its_runs(
    pytester: pytest.Pytester, read_only: Callable[[Path], None]
) -> None:
    store = pytester.path / "store"
    project(pytester, store, [case("c0"), case("c1")])
    assert run(pytester.path)[0] == 0
    before = sorted(p.name for p in (store / "runs").iterdir())
    (pytester.path / "calls.log").unlink()
    read_only(store)
    code, out = run(pytester.path)
    assert code == 2, out
    assert f"Oloproof cannot start: the store {store} cannot be written (Read-only file system" in out
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    assert generated(pytester) == []
    assert sorted(p.name for p in (store / "runs").iterdir()) == before


# ------------------------------------------------------------------ §7 the disk fills during the run


def test_a_disk_filling_mid_run_stops_the_run_cleanly_keeping_every_recorded_case(
    pytester: pytest.Pytester, tmpfs: Callable[[str], Path]
) -> None:
    disk = tmpfs("2m")
    store = disk / "store"
    cases = [case(f"c{i}") for i in range(6)]
    cases[3]["input"]["fill"] = str(disk / "filler")  # type: ignore[index]
    project(pytester, store, cases)
    code, out = run(pytester.path)
    assert code == 2, out
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    assert f"the store {store} cannot be written (No space left on device" in out
    assert "the 3 case(s) recorded before that are kept in" in out
    assert f"the cache at {store / 'cache'} stopped taking writes (" in out
    assert "(complete" not in out
    assert generated(pytester) == ["c0", "c1", "c2", "c3"]  # the run stopped: no case started after that
    [run_dir] = (store / "runs").iterdir()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "incomplete"
    assert [c["id"] for c in whole_lines(run_dir / "cases.jsonl")] == ["c0", "c1", "c2"]


def test_a_run_folder_whose_header_cannot_be_written_is_not_left_behind(tmpfs: Callable[[str], Path]) -> None:
    disk = tmpfs("64k")
    store = Store(disk / "store")
    store.check_writable()
    fill(disk)
    full = r"the store .* cannot be written \(No space left on device; writing .*run\.json"
    with pytest.raises(WriteError, match=full):
        store.start_run(new_run_id(), {"purpose": "run", "system": {"name": "s"}})
    assert list((disk / "store" / "runs").iterdir()) == []
    with pytest.raises(WriteError, match=r"cannot be written \(No space left on device\)"):
        store.check_writable()


def test_a_cache_the_disk_stops_taking_turns_writes_off_and_fails_nothing(tmpfs: Callable[[str], Path]) -> None:
    disk = tmpfs("1m")
    caches = Caches(disk / "cache")
    caches.hold_writes()
    assert caches.put("generate", "before", {"output": "x"})
    caches.flush()
    fill(disk)
    with caches.batch():
        for i in range(200):  # more than the database's free pages can take
            caches.put("generate", f"k{i}", {"output": "y" * 2000})
    caches.flush()  # no exception: the cache's own failure costs only the cache
    assert caches.write_failure is not None and "full" in caches.write_failure
    assert caches.put("generate", "after", {"output": "z"}) is False
    assert caches.get("generate", "before") == {"output": "x"}  # what was committed stays readable
    assert caches.get("generate", "k0") is None  # a miss, never a wrong value
    caches.close()


# ------------------------------------------------------------------ §9 the store deleted during the run


def test_a_store_deleted_mid_run_is_a_lost_record_never_a_complete_one(pytester: pytest.Pytester) -> None:
    store = pytester.path / "store"
    cases = [case(f"c{i}") for i in range(5)]
    cases[2]["input"]["remove"] = str(store)  # type: ignore[index]
    project(pytester, store, cases)
    code, out = run(pytester.path)
    assert code == 2, out
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    assert "was lost: " in out and "cases.jsonl was deleted while the run was going" in out
    assert "(complete" not in out and "stored in" not in out
    assert not (store / "runs").exists()  # nothing recreated: no run.json without its cases


def test_a_writer_whose_cases_file_went_missing_writes_no_run_json(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    run_id = new_run_id()
    writer = store.start_run(run_id, {"purpose": "run", "system": {"name": "s"}})
    writer.add_case({"id": "a", "criteria": {}})
    shutil.rmtree(store.run_dir(run_id))
    with pytest.raises(WriteError, match=r"was lost: .*cases\.jsonl was deleted .*\(1 case\(s\) had been recorded"):
        writer.finish({"status": "complete", "counts": {"cases": 1}})
    assert not store.run_dir(run_id).exists()


def test_a_writer_whose_cases_file_was_replaced_writes_no_run_json(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    run_id = new_run_id()
    writer = store.start_run(run_id, {"purpose": "run", "system": {"name": "s"}})
    writer.add_case({"id": "a", "criteria": {}})
    cases = store.run_dir(run_id) / "cases.jsonl"
    cases.unlink()
    cases.write_text("")
    with pytest.raises(WriteError, match="was replaced by another file"):
        writer.finish({"status": "complete", "counts": {"cases": 1}})
    assert json.loads((store.run_dir(run_id) / "run.json").read_text())["status"] == "incomplete"


# ------------------------------------------------------------------ §7 `report` onto a full disk


@pytest.mark.slow
def test_report_onto_a_full_disk_exits_2_naming_the_file_and_the_cause(
    pytester: pytest.Pytester, tmpfs: Callable[[str], Path]
) -> None:
    project(pytester, pytester.path / "store", [case("c0")])
    assert run(pytester.path)[0] == 0
    disk = tmpfs("64k")
    fill(disk)
    page = oloproof(pytester.path, "report", "run_", "--html", str(disk / "r.html"))
    assert page.returncode == 2, page.stderr
    assert f"cannot write {disk / 'r.html'}: No space left on device" in page.stderr
    index = oloproof(pytester.path, "report", "--html", str(disk / "site"))
    assert index.returncode == 2, index.stderr
    assert "No space left on device" in index.stderr and "Traceback" not in index.stderr
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no page, no temp file, no empty folder


# ------------------------------------------------------------------ §19 outputs only onto regular files


def _special(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
        return
    try:  # a character device with /dev/null's numbers: writing to it would be harmless
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError as exc:
        pytest.skip(f"cannot make a character device here: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "chardev"])
def test_no_output_option_replaces_a_fifo_or_a_device(pytester: pytest.Pytester, kind: str) -> None:
    project(pytester, pytester.path / "store", [case("c0")])
    assert run(pytester.path)[0] == 0
    (pytester.path / "calls.log").unlink()
    special = pytester.path / "special"
    _special(kind, special)
    is_kind = stat.S_ISFIFO if kind == "fifo" else stat.S_ISCHR
    what = "a FIFO" if kind == "fifo" else "a character device"

    page = oloproof(pytester.path, "report", "run_", "--html", str(special))
    assert page.returncode == 2, page.stderr
    assert f"--html: cannot write {special}: it is {what}" in page.stderr
    for option in ("--oloproof-report", "--oloproof-html"):
        code, out = run(pytester.path, option, str(special))
        assert code == 2, out
        assert f"Oloproof cannot start: {option}: cannot write {special}: it is {what}" in out
    assert generated(pytester) == []  # refused before any case ran
    assert is_kind(os.lstat(special).st_mode)  # still what it was


@pytest.mark.slow
def test_an_output_path_under_a_regular_file_exits_2(pytester: pytest.Pytester) -> None:
    project(pytester, pytester.path / "store", [case("c0")])
    assert run(pytester.path)[0] == 0
    (pytester.path / "file").write_text("x")
    for args in (("report", "run_", "--html", "file/r.html"), ("report", "--html", "file/site")):
        proc = oloproof(pytester.path, *args)
        assert proc.returncode == 2, proc.stderr
        assert f"cannot write file/{Path(args[-1]).name}: file is a file, so nothing can be written under it" in (
            proc.stderr
        )
    assert (pytester.path / "file").read_text() == "x"


def test_an_atomic_write_never_replaces_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(WriteError, match="it is a FIFO; only a regular file is replaced"):
        atomic_write_text(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["fifo"]


# ------------------------------------------------------------------ §8 cache clear deletes nothing


@pytest.mark.slow
def test_cache_clear_on_a_read_only_cache_deletes_nothing_and_exits_2(
    pytester: pytest.Pytester, read_only: Callable[[Path], None], mounts: list[Path]
) -> None:
    store = pytester.path / "store"
    project(pytester, store, [case("c0"), case("c1")])
    assert run(pytester.path)[0] == 0
    before = json.loads(oloproof(pytester.path, "cache", "stats", "--json").stdout)["entries"]
    assert before["execution"] == 2
    files = sorted(str(p.relative_to(store)) for p in (store / "cache").rglob("*"))
    read_only(store / "cache")
    clear = oloproof(pytester.path, "cache", "clear")
    assert clear.returncode == 2, clear.stdout + clear.stderr
    assert f"cannot clear the cache at {store / 'cache'}: Read-only file system; nothing was deleted" in clear.stderr
    assert "Traceback" not in clear.stderr
    subprocess.run(["umount", str(mounts.pop())], check=True)
    assert sorted(str(p.relative_to(store)) for p in (store / "cache").rglob("*")) == files
    after = json.loads(oloproof(pytester.path, "cache", "stats", "--json").stdout)["entries"]
    assert after == before
