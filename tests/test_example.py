"""The example project on a copy: first run, unchanged re-run, larger budget, new index, new version."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from staged_helpers import by_id, run_records

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support_rag"


def set_setting(config: Path, key: str, value: str) -> None:
    text = config.read_text(encoding="utf-8")
    new, n = re.subn(rf"(?m)^(\s+{key}:) .*$", rf"\1 {value}", text)
    assert n == 1, key
    config.write_text(new, encoding="utf-8")


def context_of(rec: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    by_pos = {c["position"]: c for c in rec["retrieval"]}
    return [(by_pos[p]["doc_id"], by_pos[p]["chunk_id"], by_pos[p]["text"]) for p in rec["context"]]


def test_the_example_walk_through(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(
        EXAMPLE, pytester.path, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".oloproof", "__pycache__")
    )
    monkeypatch.delitem(sys.modules, "app", raising=False)  # the example's module name is generic
    config = pytester.path / "oloproof.yaml"
    store = pytester.path / ".oloproof"

    def run() -> tuple[pytest.RunResult, dict[str, Any]]:
        result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=9, failed=4)
        return result, run_records(store)[-1]

    # first run: everything executes
    result, first = run()
    result.stdout.fnmatch_lines(
        [
            "Cache: execution 0 hit/13 miss; judgment 0 hit/65 miss",
            "Stages: retrieve 0 hit/13 miss; generate 0 hit/13 miss",
        ]
    )
    assert first["status"] == "complete"
    assert first["metrics"]["answer_correct"]["passed"] == 9
    assert first["metrics"]["hit_rate_at_2"]["passed"] == 12
    assert first["metrics"]["citations_valid"]["passed"] == 13
    failed = sorted(c["id"] for c in first["cases"] if c["criteria"]["answer_correct"]["value"] < 1)
    assert len(failed) == 4
    for cid in failed:
        result.stdout.fnmatch_lines([f"FAILED oloproof.yaml::support-rag[[]{cid}[]]*"])

    # unchanged: the execution cache serves every case, the stages are not consulted
    result, second = run()
    result.stdout.fnmatch_lines(
        [
            "Cache: execution 13 hit/0 miss; judgment 65 hit/0 miss",
            "Stages: retrieve 0 hit/0 miss; generate 0 hit/0 miss",
        ]
    )
    assert second["cache"]["retrieve"] == {"hit": 0, "miss": 0}
    assert first["wiring"] == second["wiring"] == []  # a healthy project: no wiring check speaks, cached or not

    # a larger budget: every retrieval reused, only the cases whose context changed regenerated
    set_setting(config, "token_budget", "120")
    result, wider = run()
    before, after = by_id(second), by_id(wider)
    changed = sorted(cid for cid in before if context_of(before[cid]) != context_of(after[cid]))
    n = len(changed)
    assert 0 < n < 13
    result.stdout.fnmatch_lines(
        [
            "Cache: execution 0 hit/13 miss; *",
            f"Stages: retrieve 13 hit/0 miss; generate {13 - n} hit/{n} miss",
            f"Cache misses (against the previous run {second['run_id']}):",
            "  execution 13 miss: token_budget 40 → 120 (13)",
            f"  generate {n} miss: context changed ({n}; token_budget 40 → 120)",
        ]
    )
    assert wider["cache_misses"]["previous_run"] == second["run_id"]
    assert sorted(cid for cid, c in after.items() if c["cache"]["generate"] == "miss") == changed
    assert n == 6  # as the walk-through states; computed above from the recorded contexts
    assert all(after[cid]["context_truncated"] is False for cid in changed)

    # a new index: everything re-retrieved; the same contexts reuse their generations
    set_setting(config, "index_version", "kb-2026-10-01")
    result, reindexed = run()
    assert reindexed["system"]["index_version"] == "kb-2026-10-01"
    result.stdout.fnmatch_lines(
        [
            "Stages: retrieve 0 hit/13 miss; generate 13 hit/0 miss",
            "  execution 13 miss: index_version kb-2026-09-16 → kb-2026-10-01 (13)",
            "  retrieve 13 miss: index_version kb-2026-09-16 → kb-2026-10-01 (13)",
        ]
    )

    # a new version: nothing re-retrieved, everything regenerated
    set_setting(config, "version", "slice-c")
    result, regenerated = run()
    result.stdout.fnmatch_lines(
        [
            "Stages: retrieve 13 hit/0 miss; generate 0 hit/13 miss",
            "  execution 13 miss: version slice-b-example → slice-c (13)",
            "  generate 13 miss: version slice-b-example → slice-c (13)",
        ]
    )
    assert regenerated["system"]["version"] == "slice-c"
    assert [r["status"] for r in run_records(store)] == ["complete"] * 5
