"""Stage caches (SPEC §5): what does and does not invalidate, errors, corrupt entries, and the cache modes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import diskcache
import pytest
from staged_helpers import RAG_SOURCE, by_id, calls, case, cases_text, clear_calls, config_text, last_run, unique_module

from pytest_oloproof.cache import CacheMode, Caches, parse_mode

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

    def configure(self, **changes: Any) -> None:
        rag = {k: v for k, v in {**SETTINGS, **changes}.items() if k != "name"}
        text = config_text(self.module, rag=rag, name=SETTINGS["name"])
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
