"""The store: runs, diagnoses and comparisons on disk, atomic writes, id and prefix lookup."""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO, cast

from ulid import ULID

from pytest_oloproof.errors import StoreError, WriteError
from pytest_oloproof.records import fastjson
from pytest_oloproof.records.identity import canonical_json, sha256_of
from pytest_oloproof.records.redaction import redact
from pytest_oloproof.records.shapes import CaseRecord, RunRecord, RunSummary

RUN_SCHEMA = "oloproof.run/1"
KIND_DIRS = {
    "run": "runs",
    "diagnosis": "diagnoses",
    "comparison": "comparisons",
    "judge_validation": "judge_validations",
    "decision": "decisions",
    "labels": "labels",
    "judge_probe": "judge_probes",
}
#: `latest` (the newest run) and `latest~N` (N runs before it), accepted wherever a run id is
LATEST = re.compile(r"latest(?:~(\d+))?")


def _cause(exc: OSError, *, besides: str | None = None) -> str:
    """What the OS said went wrong (`No space left on device`), with the file it names unless that is `besides`."""
    cause = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename and exc.strerror and str(exc.filename) != besides:
        cause += f": {exc.filename}"
    return cause


def output_problem(path: Path) -> str | None:
    """Why nothing can be written at `path` (None when it can): only a regular file is replaced, or a new one made.

    A FIFO, a device or a socket is never replaced by a file (as root, `/dev/null` would be), and a
    folder never emptied; a path under a regular file cannot exist.
    """
    try:
        mode = os.stat(path).st_mode  # through a symlink: what it points to counts
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        above = next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)
        return f"{above or 'a folder above it'} is a file, so nothing can be written under it"
    except OSError as exc:
        return f"it cannot be looked at ({_cause(exc, besides=str(path))})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "it is a folder"
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a character device"
        if stat.S_ISCHR(mode)
        else "a block device"
        if stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )
    return f"it is {kind}; only a regular file is replaced (or a new file created)"


@contextmanager
def atomic_file(path: Path) -> Iterator[TextIO]:
    """A whole file or nothing: write to a temp file in the same folder, fsync, then rename over `path`.

    Only a regular file (or nothing) at `path` is replaced; WriteError (exit 2) names the path and
    the cause when it cannot be written (a full disk, a read-only folder, a FIFO in its place).
    """
    problem = output_problem(path)
    if problem is not None:
        raise WriteError(f"cannot write {path}: {problem}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {_cause(exc)}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and not isinstance(exc, WriteError):
            raise WriteError(f"cannot write {path}: {_cause(exc, besides=tmp)}") from exc
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write a whole file atomically, with every secret from the environment redacted."""
    with atomic_file(path) as f:
        f.write(redact(text))


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


def write_json_stream(path: Path, head: Mapping[str, Any], key: str, items: Iterable[Any]) -> None:
    """Atomically write `head` plus one list-valued `key` whose items are serialised one at a time."""
    write_json_lines(path, head, key, (json.dumps(item, ensure_ascii=False, allow_nan=False) for item in items))


def write_json_lines(path: Path, head: Mapping[str, Any], key: str, lines: Iterable[str]) -> None:
    """As write_json_stream, for items that are already compact JSON text (one value per line, no newline).

    The lines are copied as they are (each passed through the redaction once more), not parsed and
    encoded again: the JSON report of a 10,000-case run is 18 MiB of such lines.
    """
    with atomic_file(path) as f:
        opening = json.dumps({**head, key: []}, indent=2, ensure_ascii=False, allow_nan=False)
        f.write(redact(opening[: opening.rindex("[]")] + "["))
        sep = "\n    "
        for line in lines:
            f.write(sep)
            f.write(redact(line))
            sep = ",\n    "
        f.write("\n  ]\n}\n")


def new_run_id() -> str:
    return f"run_{ULID()}"


class RunWriter:
    """Writes one run: the header at start, each case appended as it finishes, the record at the end.

    Cases go to cases.jsonl one line at a time (never a rewrite of the whole
    file), so a run of many cases stays linear and an interrupted run keeps
    every case that finished. A write the store refuses (a full disk, a read-only
    folder) is a WriteError naming the store and the cause; what was written stays.
    """

    def __init__(self, directory: Path, header: Mapping[str, Any]) -> None:
        self.directory = directory
        self.header = dict(header)
        self.store_root = directory.parent.parent
        self._path = directory / "cases.jsonl"
        self._bytes = 0  # what this writer wrote to cases.jsonl (a new file), in bytes
        self._count = 0  # case lines written whole
        self._intact = True  # no write of a line was interrupted part-way
        self._failure: WriteError | None = None  # the write the disk refused; nothing is appended after it
        try:
            directory.mkdir(parents=True, exist_ok=False)
        except OSError as exc:
            raise self._error(exc, directory) from exc
        try:
            self._cases: TextIO = open(self._path, "a", encoding="utf-8")
            write_json(directory / "run.json", {**self.header, "status": "incomplete"})
        except BaseException as exc:  # an empty run folder is not a run: nothing of it is left
            if getattr(self, "_cases", None) is not None:
                self._discard_quietly()
            for leftover in (self._path, directory / "run.json"):
                with contextlib.suppress(OSError):
                    leftover.unlink()
            with contextlib.suppress(OSError):
                directory.rmdir()
            if isinstance(exc, OSError):
                raise self._error(exc, directory / "run.json") from exc
            raise

    def _error(self, exc: OSError, doing: Path) -> WriteError:
        cause = str(exc).removeprefix(f"cannot write {doing}: ") if isinstance(exc, WriteError) else _cause(exc)
        return WriteError(f"the store {self.store_root} cannot be written ({cause}; writing {doing})")

    def _discard_quietly(self) -> None:
        """Close cases.jsonl, dropping what a full disk kept in its buffer (it was never written)."""
        try:
            self._cases.close()
        except OSError:  # the buffered bytes the disk refused: closed all the same
            pass

    @property
    def failure(self) -> WriteError | None:
        """The write the store refused, if one was (then this writer appends nothing more)."""
        return self._failure

    def add_case(self, rec: Mapping[str, Any]) -> None:
        if self._failure is not None:  # after a torn line nothing may follow it: the file stays readable
            raise self._failure
        line = redact(fastjson.dumps(rec)) + "\n"  # one JSON object; orjson escapes every newline in it
        size = len(line) if line.isascii() else len(line.encode("utf-8"))  # (a line not UTF-8 fails here)
        try:
            self._cases.write(line)
            self._cases.flush()  # a killed process keeps every case that finished (one write per case)
        except OSError as exc:  # a full disk, a folder gone read-only: part of the line may be in the file
            self._failure = self._error(exc, self._path)
            raise self._failure from exc
        except BaseException:
            self._intact = False  # part of the line may be in the file
            raise
        self._bytes += size
        self._count += 1

    def own_lines(self) -> Iterator[str] | None:
        """The lines of cases.jsonl without their newlines, if the file holds exactly what this writer wrote.

        Each was encoded from a case record and redacted by add_case, so a report can copy
        them as they are; None when the file is not (only) this writer's, so the caller
        reads it back record by record instead.
        """
        if not self._intact or self._failure is not None:
            return None
        self.flush()
        try:
            if self._path.stat().st_size != self._bytes:
                return None
        except OSError:
            return None
        return self._read_lines()

    def _read_lines(self) -> Iterator[str]:
        with self._path.open(encoding="utf-8", newline="\n") as f:  # "\n" alone ends a line
            for line in f:
                yield line[:-1]

    def flush(self) -> None:
        if self._failure is not None:  # what the disk refused stays unwritten; the file is as it was left
            return
        if not self._cases.closed:
            try:
                self._cases.flush()
            except OSError as exc:
                self._failure = self._error(exc, self._path)
                raise self._failure from exc

    def finish(self, record: Mapping[str, Any]) -> None:
        """Write the final run.json, once cases.jsonl is known to hold every case written to it.

        If that file was deleted or replaced during the run (the store removed, say), the
        record is lost: WriteError says so and nothing is written, since a run.json without
        its cases (or in a folder recreated for it) would be a record of cases that are not there.
        """
        if self._failure is not None:
            raise self._failure
        try:
            self._cases.flush()
            os.fsync(self._cases.fileno())
        except OSError as exc:
            self._failure = self._error(exc, self._path)
            raise self._failure from exc
        lost = self._lost()
        self.close()
        if lost is not None:
            raise WriteError(
                f"the record of run {self.directory.name} was lost: {lost} while the run was going "
                f"({self._count} case(s) had been recorded in it); nothing more is written (no run.json "
                "without its cases). Run again to record the run"
            )
        try:
            write_json(self.directory / "run.json", {**self.header, **record})
        except OSError as exc:
            raise self._error(exc, self.directory / "run.json") from exc

    def _lost(self) -> str | None:
        """How cases.jsonl no longer holds what this writer wrote to it (None when it does)."""
        try:
            on_disk = os.stat(self._path)
        except OSError:
            return f"{self._path} was deleted"
        mine = os.fstat(self._cases.fileno())
        if (on_disk.st_dev, on_disk.st_ino) != (mine.st_dev, mine.st_ino):
            return f"{self._path} was replaced by another file"
        if on_disk.st_size < self._bytes:
            return f"{self._path} was cut short ({on_disk.st_size} of {self._bytes} bytes)"
        return None

    def close(self) -> None:
        if not self._cases.closed:
            self._discard_quietly()


class Store:
    """A store folder: runs/, diagnoses/, comparisons/, cache/."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def check_writable(self) -> None:
        """Write, fsync and remove a probe file in the store's runs/ (made for the probe, then removed).

        Run before any case, so a full disk or a read-only store is one clear error (WriteError,
        exit 2) naming the store and the cause, not a failure at the first case's record.
        """
        runs = self.root / "runs"
        # the folders the probe makes are removed again: a session stopped later by a configuration
        # error leaves no store behind, and the run's writer makes them when it has a run to write
        made = [d for d in (runs, *runs.parents) if not d.exists()]
        try:
            runs.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".write-probe.", suffix=".tmp", dir=runs)
        except OSError as exc:
            raise WriteError(f"the store {self.root} cannot be written ({_cause(exc)})") from exc
        try:
            os.write(fd, b"oloproof write probe\n" * 200)  # a few KiB: a full disk refuses them
            os.fsync(fd)
        except OSError as exc:
            raise WriteError(f"the store {self.root} cannot be written ({_cause(exc)})") from exc
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(probe)
            for d in made:  # innermost first; only empty folders go
                with contextlib.suppress(OSError):
                    d.rmdir()

    def start_run(self, run_id: str, header: Mapping[str, Any]) -> RunWriter:
        return RunWriter(self.run_dir(run_id), {"schema": RUN_SCHEMA, "run_id": run_id, **header})

    # ----------------------------------------------------------- reading

    def run_ids(self) -> list[str]:
        """Run ids, newest first (ULIDs sort by time)."""
        d = self.root / "runs"
        if not d.is_dir():
            return []
        return sorted(
            (p.name for p in d.iterdir() if p.name.startswith("run_") and (p / "run.json").is_file()), reverse=True
        )

    def run_header(self, run_id: str) -> RunRecord:
        """run.json of a run, validated (RecordError naming the file and what is wrong)."""
        path = self.run_dir(run_id) / "run.json"
        try:
            text = path.read_text(encoding="utf-8")
            header = json.loads(text)
        except (OSError, ValueError) as exc:
            raise RecordError(path, None, f"not readable JSON: {exc}", run_id=run_id) from exc
        from pytest_oloproof.records.stored import check_run

        problem = check_run(header)
        if problem is None and header["run_id"] != run_id:
            problem = (
                f"run_id: {header['run_id']!r} is not the run its folder names ({run_id}); "
                "a copied or renamed run folder is not read as either run"
            )
        if problem is not None:
            raise RecordError(path, _line_of_key(text, problem), problem, run_id=run_id)
        return header  # type: ignore[no-any-return]

    def iter_cases(
        self, run_id: str, *, strict: bool = True, header: Mapping[str, Any] | None = None
    ) -> Iterator[CaseRecord]:
        """The case records of a run, in the order they were recorded.

        Each line is checked (RecordError naming file, line and what is wrong), except
        a torn last line of a run that did not complete (a process killed mid-write
        leaves one, without its newline). `strict=False` is for the run's own writer,
        re-reading what it has just written, and for best-effort readers: lines that
        are not JSON objects are skipped there, and the rest is not checked. `header` is the
        run.json the caller has read: the lines are judged against that one record, not against a
        run.json that a run still going may have rewritten since.
        """
        path = self.run_dir(run_id) / "cases.jsonl"
        if not path.is_file():
            if strict:
                self._check_count(run_id, path, 0, header)
            return
        check = None
        if strict:
            from pytest_oloproof.records.stored import check_case

            check = check_case
        with path.open(encoding="utf-8", errors="surrogateescape") as f:
            pending: tuple[int, str, str] | None = None  # a bad line, forgiven only if it is a torn last one
            read = 0
            seen: dict[str, int] = {}  # case id -> the line it is on
            for number, line in enumerate(f, start=1):
                if pending is not None:
                    raise RecordError(path, pending[0], pending[2], run_id=run_id)
                if not line.strip():
                    continue
                try:
                    rec = fastjson.loads(line)
                except ValueError as exc:
                    if not strict:
                        continue
                    pending = (number, line, f"not a JSON object: {exc}")
                    continue
                if check is None:
                    if isinstance(rec, dict):  # lenient: a line that is not a record is skipped
                        yield cast(CaseRecord, rec)
                    continue
                problem = check(rec)
                first = seen.setdefault(rec["id"], number) if problem is None else number
                if first != number:  # never collapsed into one case (a regression that does not exist)
                    twice = f'case id "{rec["id"]}" is recorded twice, on lines {first} and {number}'
                    raise RecordError(path, number, f"{twice} (a run records each case once)", run_id=run_id)
                if problem is not None:
                    pending = (number, line, problem)
                    continue
                read += 1
                yield rec
            if pending is not None:
                torn = not pending[1].endswith("\n") and self._status(run_id, header) not in ("complete", "partial")
                if not torn:
                    raise RecordError(path, pending[0], pending[2], run_id=run_id)
            if check is not None:
                self._check_count(run_id, path, read, header)

    def _check_count(self, run_id: str, path: Path, read: int, header: Mapping[str, Any] | None) -> None:
        """A complete run's cases.jsonl holds every case run.json counts: a lost line is damage, not fewer cases."""
        if header is None:
            try:
                header = self.run_header(run_id)
            except StoreError:
                return  # its own error is raised where run.json is read
        counted = (header.get("counts") or {}).get("cases") if header.get("status") in ("complete", "partial") else None
        if isinstance(counted, int) and counted != read:
            raise RecordError(path, None, f"holds {read} case records, but run.json counts {counted}", run_id=run_id)

    def _status(self, run_id: str, header: Mapping[str, Any] | None) -> str | None:
        if header is not None:
            return str(header.get("status"))
        try:
            return str(self.run_header(run_id).get("status"))
        except StoreError:
            return None

    def load_run(self, ref: str) -> RunRecord:
        """The whole run record (cases inline) for a run id, a unique prefix, or a run-record JSON file."""
        path = Path(ref)
        if ref.endswith(".json") and path.is_file():
            return load_run_file(path)
        _kind, full = self.resolve(ref, kinds=("run",))
        record = self.run_header(full)
        record["cases"] = list(self.iter_cases(full, header=record))
        from pytest_oloproof.records.stored import is_start_header

        if is_start_header(record):
            record.update(cast(RunRecord, _partial_summary(record, record["cases"])))  # a summary is part of a run
        return record

    def count_cases(self, run_id: str) -> int:
        """How many case records cases.jsonl holds so far (for a listing; a torn last line is not counted)."""
        return sum(1 for _ in self.iter_cases(run_id, strict=False))

    def doc_path(self, kind: str, doc_id: str) -> Path:
        """Where a content-addressed document (`sha256:<hex>` or the bare hex) of a kind lives."""
        return self.root / KIND_DIRS[kind] / f"{doc_id.removeprefix('sha256:')}.json"

    def save_doc(self, kind: str, doc: Mapping[str, Any]) -> str:
        """Store a diagnosis, comparison or decision content-addressed; returns `sha256:<hex>`."""
        digest = sha256_of(doc)
        path = self.doc_path(kind, digest)
        if not path.exists():
            atomic_write_text(path, canonical_json(doc) + "\n")
        return f"sha256:{digest}"

    def load_doc(self, kind: str, doc_id: str) -> dict[str, Any]:
        """A stored diagnosis, comparison or decision, validated (RecordError naming the file and what is wrong)."""
        path = self.doc_path(kind, doc_id)
        try:
            doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StoreError(f"{kind} {doc_id}: cannot read {path}: {exc}") from exc
        from pytest_oloproof.records.stored import check_doc

        problem = check_doc(kind, doc)
        if problem is not None:
            raise RecordError(path, None, problem)
        return doc

    def iter_docs(self, kind: str) -> Iterator[dict[str, Any]]:
        """Every stored document of a kind (unreadable ones skipped)."""
        for doc_id in self.docs(kind):
            try:
                yield self.load_doc(kind, doc_id)
            except StoreError:
                continue

    def docs(self, kind: str) -> list[str]:
        d = self.root / KIND_DIRS[kind]
        if not d.is_dir():
            return []
        return sorted(f"sha256:{p.stem}" for p in d.glob("*.json"))

    def latest_run(self, ref: str) -> str | None:
        """The run id `latest` / `latest~N` names (the newest run, or the one N before it), else None.

        Counted over the store's own runs, newest first; diagnosis child runs (their run.json names
        a `parent_run`) are left out, so `latest` after `oloproof diagnose` is still the run diagnosed.
        """
        m = LATEST.fullmatch(ref.strip())
        if m is None:
            return None
        back = int(m.group(1) or 0)
        runs = [r for r in self.run_ids() if not self._is_child_run(r)]
        if back >= len(runs):
            have = f"{len(runs)} run{'' if len(runs) == 1 else 's'}"
            raise StoreError(
                f"{ref.strip()!r} names the run {back} before the newest, but {self.root} holds {have} "
                "(diagnosis child runs not counted); list them with `oloproof runs`"
            )
        return runs[back]

    def _is_child_run(self, run_id: str) -> bool:
        try:
            return bool(self.run_header(run_id).get("parent_run"))
        except StoreError:
            return False  # a damaged run is still a run: reading it reports the damage

    def resolve(self, ref: str, kinds: tuple[str, ...] = tuple(KIND_DIRS)) -> tuple[str, str]:
        """(kind, full id) for an id, a unique prefix of one, or (runs) `latest` / `latest~N`."""
        ref = ref.strip()
        if not ref:
            raise StoreError("an empty id matches nothing")
        if "run" in kinds:
            latest = self.latest_run(ref)
            if latest is not None:
                return "run", latest
        matches: list[tuple[str, str]] = []
        for kind in kinds:
            ids = self.run_ids() if kind == "run" else self.docs(kind)
            for full in ids:
                bare = full.removeprefix("sha256:")
                if full.startswith(ref) or (kind != "run" and bare.startswith(ref.removeprefix("sha256:"))):
                    matches.append((kind, full))
        if not matches:
            what = " or ".join(kinds)
            raise StoreError(f"no {what} matches {ref!r} in {self.root} (list runs with `oloproof runs`)")
        if len(matches) > 1:
            shown = ", ".join(m[1] for m in matches[:5])
            raise StoreError(f"{ref!r} is ambiguous: it matches {len(matches)} ids ({shown}); give more characters")
        return matches[0]


class RunFolder(Store):
    """One run's folder read on its own, wherever it lies (a CI job's artifact): the store's readers over it."""

    def __init__(self, folder: Path) -> None:
        super().__init__(Path(folder).parent.parent)
        self.folder = Path(folder)

    def run_dir(self, run_id: str) -> Path:
        return self.folder


def load_run_file(path: Path) -> RunRecord:
    """A run record exported as JSON (e.g. a baseline committed to the repository), validated whole."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: not a readable run record: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != RUN_SCHEMA:
        raise StoreError(f"{path}: not an {RUN_SCHEMA} record (write one with --oloproof-report PATH)")
    from pytest_oloproof.records.stored import check_case, check_run

    problem = check_run(data)
    if problem is None and not isinstance(data.get("cases", []), list):
        problem = "cases: should be a list of case records"
    seen: dict[str, int] = {}  # case id -> its index in `cases`
    for i, case in enumerate(data.get("cases") or []):
        if problem is not None:
            break
        problem = check_case(case, prefix=f"cases[{i}]")
        if problem is None:
            first = seen.setdefault(case["id"], i)
            if first != i:
                lines = _lines_of_cases(text)
                at = f" (lines {lines[first]} and {lines[i]})" if len(lines) > i else ""
                problem = (
                    f'case id "{case["id"]}" is recorded twice, at cases[{first}] and cases[{i}]{at} '
                    "(a run records each case once)"
                )
    counted = (data.get("counts") or {}).get("cases") if data.get("status") in ("complete", "partial") else None
    if problem is None and counted is not None and counted != len(data.get("cases") or []):
        problem = f"cases: holds {len(data.get('cases') or [])} case records, but counts.cases is {counted}"
    if problem is not None:
        raise RecordError(path, None, problem)
    return cast(RunRecord, data)


def _lines_of_cases(text: str) -> list[int]:
    """The line each item of a JSON object's top-level `cases` list starts on ([] when there is none).

    json.loads keeps no positions; this walks the top level with raw_decode, only to name lines in an error.
    """
    try:
        return _walk_cases(text)
    except (ValueError, IndexError):
        return []


def _walk_cases(text: str) -> list[int]:
    decoder = json.JSONDecoder()
    ws = re.compile(r"[ \t\n\r]*")

    def skip(i: int) -> int:
        match = ws.match(text, i)
        return match.end() if match else i

    i = skip(0)
    if text[i : i + 1] != "{":
        return []
    i = skip(i + 1)
    while i < len(text) and text[i] == '"':
        key, i = decoder.raw_decode(text, i)
        i = skip(skip(i) + 1)  # past the colon
        if key != "cases" or text[i : i + 1] != "[":
            _, i = decoder.raw_decode(text, i)
            i = skip(i)
            i = skip(i + 1) if text[i : i + 1] == "," else i
            continue
        starts = []
        i = skip(i + 1)
        while i < len(text) and text[i] != "]":
            starts.append(text.count("\n", 0, i) + 1)
            _, i = decoder.raw_decode(text, i)
            i = skip(i)
            i = skip(i + 1) if text[i : i + 1] == "," else i
        return starts
    return []


def _partial_summary(header: Mapping[str, Any], cases: Sequence[CaseRecord]) -> RunSummary:
    """The summary of a run whose run.json holds only its start header, computed from the cases it recorded.

    The same computation a finishing run writes (metrics, slices, cache and case counts, tokens),
    with a note saying where it comes from: the run reads as incomplete, never as empty or complete.
    """
    from pytest_oloproof.stats.aggregate import summarize_run, summary_settings

    from .summary import slim_case, usage_fields

    slim = [slim_case(c) for c in cases]
    settings = summary_settings({k: v for k, v in header.items() if v is not None})  # null: the default
    out = summarize_run(slim, settings)
    out.update(cast(RunSummary, usage_fields(slim, header)))  # the header's budget holds only the limits
    out["note"] = (
        f"run.json holds only the header written when the run started (the run was stopped before it "
        f"finished, or is still going): this summary is computed from the {len(cases)} case(s) in cases.jsonl"
    )
    return out


def _line_of_key(text: str, problem: str) -> int | None:
    """The line of run.json holding the top-level key a problem names (`system: ...` -> the `"system":` line)."""
    key = re.split(r"[.\[:]", problem, maxsplit=1)[0]
    lines = [n for n, line in enumerate(text.splitlines(), 1) if line.startswith(f'  "{key}":')]
    return lines[0] if len(lines) == 1 else None


class RecordError(StoreError):
    """A stored record that cannot be read whole: names the file, the line (for JSONL) and what is wrong."""

    def __init__(self, path: Path, line: int | None, problem: str, *, run_id: str | None = None) -> None:
        self.path, self.line, self.problem, self.run_id = path, line, problem, run_id
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem} (the record is not read in part: {_fix_for(path)})")


def _fix_for(path: Path) -> str:
    """How to get a readable record again, by what kind of file it is."""
    if path.parent.name == KIND_DIRS["diagnosis"]:
        return "remove the file and run `oloproof diagnose` again"
    if path.parent.name == KIND_DIRS["comparison"]:
        return "remove the file and run `oloproof compare` again"
    if path.parent.name == KIND_DIRS["judge_probe"]:
        return "remove the file and run `oloproof judge probe` again"
    if path.name in ("run.json", "cases.jsonl"):
        return "restore the run folder from a copy, or record the run again with `oloproof run`"
    return "write the run record again with `--oloproof-report PATH`"
