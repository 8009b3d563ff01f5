"""Stage caches: what does and does not invalidate, errors, corrupt entries, and the cache modes."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import diskcache
import pytest
from staged_helpers import RAG_SOURCE, by_id, calls, case, cases_text, clear_calls, config_text, last_run, unique_module

from pytest_oloproof.cache.caches import CacheMode, Caches, parse_mode

SETTINGS = {"name": "cached", "version": "v1", "depth": 4, "top_k": 2, "token_budget": 100, "index_version": "i1"}

# one candidate (context cannot change with top_k), two candidates, three candidates
CASES = [
    case("one", input={"docs": ["d2"]}),
    case("two", input={"docs": ["d1", "d2"]}),
    case("three", input={"docs": ["d2", "d4", "d3"]}),
]


class Project:
    """A RAG project whose oloproof.yaml can be rewritten between runs."""

    def __init__(self, pytester: pytest.Pytester, cases: list[dict[str, Any]] | None = None) -> None:
        self.pytester = pytester
        self.module = unique_module()
        pytester.makepyfile(**{self.module: RAG_SOURCE.replace("{settings}", "depth=1")})
        pytester.makefile(".jsonl", cases=cases_text(cases or CASES))
        self.configure()

    evaluators: str | None = None  # the evaluators: block; None is config_text's default

    def configure(self, evaluators: str | None = None, **changes: Any) -> None:
        rag = {k: v for k, v in {**SETTINGS, **changes}.items() if k != "name"}
        text = config_text(self.module, rag=rag, name=SETTINGS["name"], evaluators=evaluators or self.evaluators)
        self.pytester.makefile(".yaml", oloproof=text)

    def run(self, *args: str) -> tuple[pytest.RunResult, dict[str, Any], Counter[str]]:
        clear_calls(self.pytester)
        result = self.pytester.runpytest("--oloproof", "-p", "no:cacheprovider", *args)
        assert result.ret in (0, 1), result.stdout.str()
        stages = Counter(stage for stage, _ in calls(self.pytester))
        return result, last_run(self.pytester), stages

    @property
    def cache_dir(self) -> Path:
        return self.pytester.path / ".oloproof" / "cache"


def counts(record: dict[str, Any], kind: str) -> tuple[int, int]:
    return record["cache"][kind]["hit"], record["cache"][kind]["miss"]


def lines(result: pytest.RunResult, record: dict[str, Any]) -> None:
    """The two printed lines match the recorded counts."""
    ex, ju, re_, ge = (counts(record, k) for k in ("execution", "judgment", "retrieve", "generate"))
    result.stdout.fnmatch_lines(
        [
            f"Cache: execution {ex[0]} hit/{ex[1]} miss; judgment {ju[0]} hit/{ju[1]} miss",
            f"Stages: retrieve {re_[0]} hit/{re_[1]} miss; generate {ge[0]} hit/{ge[1]} miss",
        ]
    )


def test_first_run_misses_and_an_unchanged_rerun_is_all_execution_hits(pytester: pytest.Pytester) -> None:
    p = Project(pytester)
    result, record, stages = p.run()
    assert counts(record, "execution") == (0, 3)
    assert counts(record, "retrieve") == (0, 3) and counts(record, "generate") == (0, 3)
    assert counts(record, "judgment") == (0, 3)
    assert stages == {"retrieve": 3, "generate": 3}
    lines(result, record)

    result, record, stages = p.run()
    assert counts(record, "execution") == (3, 0)
    assert counts(record, "retrieve") == (0, 0) and counts(record, "generate") == (0, 0)
    assert counts(record, "judgment") == (3, 0)
    assert stages == {}
    result.stdout.fnmatch_lines(
        ["Cache: execution 3 hit/0 miss; judgment 3 hit/0 miss", "Stages: retrieve 0 hit/0 miss; generate 0 hit/0 miss"]
    )
    # a served case is the same record
    assert by_id(record)["two"]["context"] == [1, 2]


def test_index_version_re_retrieves_everything(pytester: pytest.Pytester) -> None:
    p = Project(pytester)
    p.run()
    p.configure(index_version="i2")
    result, record, stages = p.run()
    assert counts(record, "retrieve") == (0, 3)
    assert counts(record, "generate") == (3, 0)  # same contexts: generation is reused
    assert stages == {"retrieve": 3}
    lines(result, record)


def test_depth_re_retrieves(pytester: pytest.Pytester) -> None:
    p = Project(pytester)
    p.run()
    p.configure(depth=3)
    _, record, stages = p.run()
    assert counts(record, "retrieve") == (0, 3)
    assert stages["retrieve"] == 3


def test_version_re_generates_everything_and_re_retrieves_nothing(pytester: pytest.Pytester) -> None:
    p = Project(pytester)
    p.run()
    p.configure(version="v2")
    result, record, stages = p.run()
    assert counts(record, "execution") == (0, 3)
    assert counts(record, "retrieve") == (3, 0)
    assert counts(record, "generate") == (0, 3)
    assert stages == {"generate": 3}
    lines(result, record)


def changed_contexts(before: dict[str, Any], after: dict[str, Any]) -> int:
    """Cases whose assembled context (the doc ids, in order) differs between two runs."""

    def ctx(rec: dict[str, Any]) -> list[str]:
        by_pos = {c["position"]: c["doc_id"] for c in rec["retrieval"]}
        return [by_pos[p] for p in rec["context"]]

    a, b = by_id(before), by_id(after)
    return sum(ctx(a[i]) != ctx(b[i]) for i in a)


@pytest.mark.parametrize(
    "change, expected_changed",
    [({"top_k": 3}, {"three"}), ({"top_k": 1}, {"two", "three"}), ({"token_budget": 2}, {"two", "three"})],
)
def test_top_k_and_budget_re_generate_only_cases_whose_context_changed(
    pytester: pytest.Pytester, change: dict[str, int], expected_changed: set[str]
) -> None:
    p = Project(pytester)
    _, before, _ = p.run()
    p.configure(**change)
    result, after, stages = p.run()
    n = changed_contexts(before, after)
    assert n == len(expected_changed)
    assert counts(after, "retrieve") == (3, 0)
    assert counts(after, "generate") == (3 - n, n)
    assert {q for stage, q in calls(pytester) if stage == "generate"} == expected_changed
    assert stages == {"generate": n}
    lines(result, after)


def test_errors_are_never_cached(pytester: pytest.Pytester) -> None:
    p = Project(pytester, [case("flaky", input={"docs": ["d2"]})])
    (pytester.path / "fail_once").write_text("")
    result, record, _ = p.run()
    result.assert_outcomes(failed=1)
    assert by_id(record)["flaky"]["error"]["type"] == "RuntimeError"
    assert counts(record, "generate") == (0, 0)  # the failed stage counts neither hit nor miss
    assert counts(record, "retrieve") == (0, 1)  # the retrieval before it ran, and is cached
    assert counts(record, "execution") == (0, 1)

    result, record, stages = p.run()
    result.assert_outcomes(passed=1)
    assert by_id(record)["flaky"]["error"] is None
    assert counts(record, "execution") == (0, 1)
    assert counts(record, "retrieve") == (1, 0)
    assert counts(record, "generate") == (0, 1)
    assert stages == {"generate": 1}


def test_a_corrupt_entry_is_a_miss_and_gets_overwritten(pytester: pytest.Pytester) -> None:
    p = Project(pytester)
    p.run()
    with diskcache.Cache(str(p.cache_dir)) as raw:
        keys = [str(k) for k in raw.iterkeys()]
        executions = [k for k in keys if k.startswith("execution:")]
        generates = [k for k in keys if k.startswith("generate:")]
        assert len(executions) == 3 and len(generates) == 3
        for k in executions:
            raw.set(k, "{not json")  # torn write
        raw.set(generates[0], b"\x00\xff garbage bytes")
        raw.set(generates[1], json.dumps({"schema": "something-else/9", "value": 1}))  # foreign entry
    result, record, stages = p.run()
    assert result.ret in (0, 1)
    assert counts(record, "execution") == (0, 3)
    assert counts(record, "retrieve") == (3, 0)
    assert counts(record, "generate") == (1, 2)
    assert stages == {"generate": 2}
    # the corrupt entries were replaced by good ones
    _, record, stages = p.run()
    assert counts(record, "execution") == (3, 0)
    assert stages == {}


# ------------------------------------------------------------------ modes


def outputs(record: dict[str, Any]) -> dict[str, Any]:
    return {cid: rec["output"]["tag"] for cid, rec in by_id(record).items()}


def tag(pytester: pytest.Pytester, value: str) -> None:
    (pytester.path / "tag.txt").write_text(value)


def entries(p: Project) -> int:
    if not p.cache_dir.exists():
        return 0
    caches = Caches(p.cache_dir)
    try:
        return sum(caches.stats().values())
    finally:
        caches.close()


def test_mode_off_neither_reads_nor_writes(pytester: pytest.Pytester) -> None:
    p = Project(pytester)
    _, record, stages = p.run("--oloproof-cache=off")
    assert entries(p) == 0
    p.run()
    stored = entries(p)
    _, record, stages = p.run("--oloproof-cache=off")
    assert counts(record, "execution") == (0, 3)
    assert stages == {"retrieve": 3, "generate": 3}
    assert entries(p) == stored
    assert record["cache_mode"] == "off"


def test_mode_read_reuses_and_stores_nothing(pytester: pytest.Pytester) -> None:
    p = Project(pytester)
    _, record, stages = p.run("--oloproof-cache=read")
    assert counts(record, "execution") == (0, 3)
    assert entries(p) == 0
    p.run()
    stored = entries(p)
    tag(pytester, "new")
    _, record, stages = p.run("--oloproof-cache=read")
    assert counts(record, "execution") == (3, 0)
    assert stages == {}
    assert set(outputs(record).values()) == {None}
    assert entries(p) == stored


def test_mode_write_never_reuses_and_keeps_existing_entries(pytester: pytest.Pytester) -> None:
    p = Project(pytester)
    tag(pytester, "old")
    p.run()
    tag(pytester, "new")
    _, record, stages = p.run("--oloproof-cache=write")
    assert counts(record, "execution") == (0, 3)
    assert stages == {"retrieve": 3, "generate": 3}
    assert set(outputs(record).values()) == {"new"}
    _, record, _ = p.run()
    assert counts(record, "execution") == (3, 0)
    assert set(outputs(record).values()) == {"old"}  # existing entries were kept


def test_mode_write_stores_what_is_new(pytester: pytest.Pytester) -> None:
    p = Project(pytester)
    p.run("--oloproof-cache=write")
    _, record, stages = p.run()
    assert counts(record, "execution") == (3, 0)
    assert stages == {}


def test_mode_refresh_never_reuses_and_overwrites(pytester: pytest.Pytester) -> None:
    p = Project(pytester)
    tag(pytester, "old")
    p.run()
    tag(pytester, "new")
    _, record, stages = p.run("--oloproof-cache=refresh")
    assert counts(record, "execution") == (0, 3)
    assert stages == {"retrieve": 3, "generate": 3}
    _, record, _ = p.run()
    assert counts(record, "execution") == (3, 0)
    assert set(outputs(record).values()) == {"new"}


def test_a_bad_mode_is_a_usage_error(pytester: pytest.Pytester) -> None:
    Project(pytester)
    result = pytester.runpytest("--oloproof", "--oloproof-cache=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--oloproof-cache: 'sometimes' is not one of off, read, write, refresh*"])
    assert not (pytester.path / ".oloproof").exists()


@pytest.mark.parametrize(
    "value, mode", [("off", CacheMode.OFF), ("read", CacheMode.READ), ("refresh", CacheMode.REFRESH)]
)
def test_parse_mode(value: str, mode: CacheMode) -> None:
    assert parse_mode(value) is mode


def test_caches_unit(tmp_path: Path) -> None:
    caches = Caches(tmp_path / "c")
    try:
        assert caches.get("generate", "k") is None
        caches.put("generate", "k", {"output": {"a": 1}})
        assert caches.get("generate", "k") == {"output": {"a": 1}}
        assert caches.get("retrieve", "k") is None  # kinds never collide
        caches.put("generate", "bad", {"output": object()})  # not JSON: never stored
        assert caches.get("generate", "bad") is None
        assert caches.stats()["generate"] == 1
        assert caches.clear() == 1
    finally:
        caches.close()


# ------------------------------------------------------------------ held writes, tracked keys, verdict bundles


@pytest.fixture
def open_caches(tmp_path: Path) -> Iterator[Callable[[], Caches]]:
    """Opens Caches on one directory, as separate processes would; closes them all afterwards."""
    opened: list[Caches] = []

    def open_one() -> Caches:
        opened.append(Caches(tmp_path / "c"))
        return opened[-1]

    yield open_one
    for caches in opened:
        caches.close()


def test_held_writes_are_readable_at_once_and_committed_by_flush(open_caches: Callable[[], Caches]) -> None:
    writer, other = open_caches(), open_caches()
    writer.hold_writes(max_entries=1000, max_age_s=3600)
    with writer.batch():
        writer.put("generate", "k", {"output": 1})
    assert writer.get("generate", "k") == {"output": 1}  # from memory
    assert other.get("generate", "k") is None  # not committed yet
    writer.flush()
    assert other.get("generate", "k") == {"output": 1}


def test_held_writes_commit_when_the_group_is_full_and_on_close(open_caches: Callable[[], Caches]) -> None:
    writer, other = open_caches(), open_caches()
    writer.hold_writes(max_entries=3, max_age_s=3600)
    for i in range(2):
        with writer.batch():
            writer.put("judgment", f"k{i}", i)
    assert other.get("judgment", "k0") is None
    with writer.batch():
        writer.put("judgment", "k2", 2)  # the third entry fills the group
    assert [other.get("judgment", f"k{i}") for i in range(3)] == [0, 1, 2]
    with writer.batch():
        writer.put("judgment", "k3", 3)
    writer.close()  # commits what is held
    assert other.get("judgment", "k3") == 3


def test_held_writes_commit_when_the_group_is_old(open_caches: Callable[[], Caches]) -> None:
    writer, other = open_caches(), open_caches()
    writer.hold_writes(max_entries=1000, max_age_s=0.0)
    with writer.batch():
        writer.put("judgment", "k", 1)
    assert other.get("judgment", "k") == 1


def test_without_holding_each_outer_batch_commits(open_caches: Callable[[], Caches]) -> None:
    writer, other = open_caches(), open_caches()
    with writer.batch():
        with writer.batch():
            writer.put("judgment", "k", 1)
        assert other.get("judgment", "k") is None  # the inner block joins the outer one
    assert other.get("judgment", "k") == 1


def test_tracked_keys_see_their_own_writes_and_entries_another_writer_adds(open_caches: Callable[[], Caches]) -> None:
    open_caches().put("retrieve", "old", [1])
    tracked, other = open_caches(), open_caches()
    tracked.RECHECK_S = 0.0  # check the entry count on every lookup of an absent key
    tracked.hold_writes(max_entries=2, max_age_s=3600)
    assert tracked.track_keys() is True
    assert tracked.get("retrieve", "old") == [1]  # present when tracking started
    with tracked.batch():
        tracked.put("retrieve", "mine", [3])
    assert tracked.get("retrieve", "mine") == [3]  # held, read from memory
    with tracked.batch():
        tracked.put("retrieve", "mine2", [4])  # the group is full: committed
    assert tracked.get("retrieve", "absent") is None
    assert tracked._known is not None  # its own commits are not taken for another writer's
    other.put("retrieve", "late", [2])  # written by another process after tracking started
    assert tracked.get("retrieve", "late") == [2]
    assert tracked._known is None  # from now on every lookup asks SQLite


def test_keys_are_not_tracked_above_the_limit(tmp_path: Path, open_caches: Callable[[], Caches]) -> None:
    caches, other = open_caches(), open_caches()
    for i in range(3):
        caches.put("retrieve", f"k{i}", i)
    assert caches.track_keys(limit=2) is False
    other.put("retrieve", "late", 9)
    assert caches.get("retrieve", "late") == 9
    assert Caches(tmp_path / "off", CacheMode.OFF).track_keys() is False


def test_a_later_group_overrides_an_earlier_one(open_caches: Callable[[], Caches]) -> None:
    writer, other = open_caches(), open_caches()
    writer.hold_writes(max_entries=1, max_age_s=3600)
    for value in ("first", "second", "third"):
        with writer.batch():
            writer.put("generate", "k", {"output": value})
        assert writer.get("generate", "k") == {"output": value}
    writer.flush()
    assert other.get("generate", "k") == {"output": "third"}


EVALUATORS = (
    "evaluators:\n"
    "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
    "  - {type: hit_rate, k: 2}\n"
    "  - {type: citation_validity, criterion: citations_valid}\n"
)


class BundleProject(Project):
    """Three evaluators, so a bundle covers several verdicts."""

    evaluators = EVALUATORS


def drop_entries(p: Project, prefix: str) -> None:
    """Delete the cache entries whose key starts with `prefix` (e.g. every single verdict)."""
    with diskcache.Cache(str(p.cache_dir)) as raw:
        for k in list(raw.iterkeys()):
            if str(k).startswith(prefix):
                del raw[k]


def bundle_cases() -> list[dict[str, Any]]:
    return [case(c["id"], input=c["input"], expected={"answer": "beta", "relevant": [{"doc_id": "d2"}]}) for c in CASES]


def execution_entries(p: Project) -> dict[str, Any]:
    with diskcache.Cache(str(p.cache_dir)) as raw:
        return {str(k): json.loads(raw[k])["value"] for k in raw.iterkeys() if str(k).startswith("execution:")}


def test_an_unchanged_case_reuses_all_its_verdicts_from_one_bundle(pytester: pytest.Pytester) -> None:
    p = BundleProject(pytester, bundle_cases())
    _, cold, _ = p.run()
    assert counts(cold, "judgment") == (0, 9)
    entries = execution_entries(p)
    assert len(entries) == 3 and all(len(e["verdicts"]) == 1 for e in entries.values())
    for run in (pytester.path / ".oloproof" / "runs").iterdir():  # never part of a stored record
        for line in (run / "cases.jsonl").read_text().splitlines():
            assert not {"verdicts", "_execution_entry"} & set(json.loads(line))
    # served by the bundles alone: the single verdicts are gone
    drop_entries(p, "judgment:")
    _, warm, _ = p.run()
    assert counts(warm, "judgment") == (9, 0)
    assert {c["id"]: c["criteria"] for c in warm["cases"]} == {c["id"]: c["criteria"] for c in cold["cases"]}
    # the bundle also carries where the relevant document was ranked
    positions = {c["id"]: c["relevant_position"] for c in warm["cases"]}
    assert positions == {c["id"]: c["relevant_position"] for c in cold["cases"]}
    assert positions == {"one": 1, "two": 2, "three": 1}


def test_changing_one_evaluator_re_judges_only_its_criterion(pytester: pytest.Pytester) -> None:
    p = BundleProject(pytester, bundle_cases())
    p.run()
    p.configure(evaluators=EVALUATORS.replace("{type: hit_rate, k: 2}", "{type: hit_rate, k: 1}"))
    _, record, _ = p.run()
    # the bundle no longer matches; the two unchanged verdicts come from the judgment cache one by one
    assert counts(record, "judgment") == (6, 3)
    assert counts(record, "execution") == (3, 0)
    # the entry now holds a bundle for each set of evaluators, so going back is one lookup again
    assert all(len(e["verdicts"]) == 2 for e in execution_entries(p).values())
    p.configure()
    drop_entries(p, "judgment:")
    _, record, _ = p.run()
    assert counts(record, "judgment") == (9, 0)


def test_a_refreshed_execution_entry_starts_without_bundles(pytester: pytest.Pytester) -> None:
    p = BundleProject(pytester, bundle_cases())
    p.run()
    p.configure(evaluators=EVALUATORS.replace("{type: hit_rate, k: 2}", "{type: hit_rate, k: 1}"))
    p.run()
    assert all(len(e["verdicts"]) == 2 for e in execution_entries(p).values())
    tag(pytester, "new")
    p.run("--oloproof-cache=refresh")
    entries = execution_entries(p)
    assert all(len(e["verdicts"]) == 1 for e in entries.values())  # only what was judged on the new output
    assert {e["output"]["tag"] for e in entries.values()} == {"new"}


def test_a_corrupt_bundle_falls_back_to_single_verdicts(pytester: pytest.Pytester) -> None:
    p = BundleProject(pytester, bundle_cases())
    _, cold, _ = p.run()
    with diskcache.Cache(str(p.cache_dir)) as raw:
        for k in list(raw.iterkeys()):
            if str(k).startswith("execution:"):
                entry = json.loads(raw[k])
                entry["value"]["verdicts"] = {bid: {"criteria": {}} for bid in entry["value"]["verdicts"]}
                raw[k] = json.dumps(entry)
    _, warm, _ = p.run()
    assert counts(warm, "execution") == (3, 0)
    assert counts(warm, "judgment") == (9, 0)
    assert {c["id"]: c["criteria"] for c in warm["cases"]} == {c["id"]: c["criteria"] for c in cold["cases"]}


# ------------------------------------------------------------------ a group written in one statement


def _rows(directory: Path) -> dict[str, tuple[Any, ...]]:
    """Every row diskcache holds, by key, without its timestamps (what a group write must reproduce)."""
    import sqlite3

    con = sqlite3.connect(directory / "cache.db")
    try:
        query = "SELECT key, raw, expire_time, access_count, tag, size, mode, filename IS NOT NULL, value FROM Cache"
        return {str(r[0]): r[1:] for r in con.execute(query)}
    finally:
        con.close()


def test_a_group_write_leaves_the_rows_cache_set_leaves(tmp_path: Path) -> None:
    from pytest_oloproof.cache.caches import open_diskcache, write_group

    big = "x" * 40_000  # diskcache keeps this in a file
    before = {"retrieve:small": "old", "retrieve:filed": big, "retrieve:stays": "kept"}
    group = {f"judgment:k{i}": f'{{"v":{i}}}' for i in range(1200)}  # more than one IN (...) chunk
    group.update({"retrieve:small": "new", "retrieve:filed": "now small", "generate:large": big + "y"})
    directories = {}
    for how in ("cache.set", "write_group"):
        directory = tmp_path / how.replace(".", "_")
        cache = open_diskcache(directory)
        for k, v in before.items():
            cache.set(k, v)
        if how == "cache.set":
            with cache.transact():
                for k, v in group.items():
                    cache.set(k, v)
        else:
            write_group(cache, group)
        assert len(cache) == len(before) + len(group) - 2  # diskcache's own count, kept by its triggers
        assert {k: cache.get(k) for k in [*before, *group]} == {**before, **group}
        cache.close()
        directories[how] = directory
    assert _rows(directories["write_group"]) == _rows(directories["cache.set"])
    # the file of the value that was replaced is gone, as with Cache.set; only the new large one is left
    files = {how: sorted(p.name for p in d.rglob("*.val")) for how, d in directories.items()}
    assert len(files["write_group"]) == len(files["cache.set"]) == 1


@pytest.mark.parametrize("mode", list(CacheMode))
def test_a_mode_changed_after_opening_takes_effect(tmp_path: Path, mode: CacheMode) -> None:
    """`Caches.mode` can be reassigned (a cache found unusable is turned off): lookups and writes follow it."""
    caches = Caches(tmp_path / "cache")
    assert caches.put("judgment", "k1", {"v": 1})
    caches.mode = mode
    assert caches.mode is mode
    assert (caches.get("judgment", "k1") == {"v": 1}) is mode.reads
    assert caches.put("judgment", "k2", {"v": 2}) is mode.writes  # k2 is new, so WRITE stores it too
    caches.mode = CacheMode.READWRITE
    assert caches.get("judgment", "k2") == ({"v": 2} if mode.writes else None)
    caches.close()


_WRITER = """
import sys
from pathlib import Path

from pytest_oloproof.cache.caches import Caches

directory, worker, held = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "held"
caches = Caches(directory)
if held:
    caches.hold_writes(max_entries=64, max_age_s=3600)  # a session's groups; the others commit each case
for case in range(300):
    with caches.batch():
        for kind in ("retrieve", "generate", "execution"):
            assert caches.put(kind, f"{worker}-{case}", {"worker": worker, "case": case, "pad": "x" * case})
    assert caches.put("judgment", "shared", {"worker": worker, "case": case})
caches.close()
"""


def test_processes_writing_one_cache_at_once_lose_no_entry(tmp_path: Path) -> None:
    """pytest-xdist workers (and concurrent runs) share one cache: every entry each one wrote is there, whole."""
    import subprocess
    import sys

    directory = tmp_path / "cache"
    Caches(directory).close()  # created once, as a session's controller does before its workers start
    workers = {str(w): "held" if w % 2 else "each" for w in range(4)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(directory), w, how], stderr=subprocess.PIPE, text=True)
        for w, how in workers.items()
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    caches = Caches(directory)
    for w in workers:
        for n in range(300):
            for kind in ("retrieve", "generate", "execution"):
                assert caches.get(kind, f"{w}-{n}") == {"worker": w, "case": n, "pad": "x" * n}
    # the key every worker wrote holds one worker's last value, never a mix
    assert caches.get("judgment", "shared") in [{"worker": w, "case": 299} for w in workers]
    assert caches.stats() == {"execution": 1200, "retrieve": 1200, "generate": 1200, "judgment": 1}
    caches.close()
