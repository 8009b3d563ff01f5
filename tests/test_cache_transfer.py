"""`oloproof cache export|merge` (issue 25 item 3): caches carried between jobs, through real subprocesses.

The example project runs in separate folders, each with its own store, as CI jobs would; diskcache on disk.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import diskcache
import pytest
from staged_helpers import run_records

from pytest_oloproof.cache.caches import Caches
from pytest_oloproof.cache.transfer import CacheConflict, merge_into

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support_rag"


def oloproof(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def project(root: Path) -> Path:
    """A copy of the example project without its store."""
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".oloproof", "__pycache__", "*.html"))
    return root


def run(root: Path, *args: str) -> dict[str, Any]:
    proc = oloproof(root, "run", "-q", "-p", "no:cacheprovider", *args)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # the example fails 4 cases by design
    return run_records(root / ".oloproof")[-1]


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_shards_caches_exported_and_merged_make_a_later_job_all_hits(tmp_path: Path) -> None:
    one, two, later = project(tmp_path / "one"), project(tmp_path / "two"), project(tmp_path / "later")
    first = run(one, "-k", "money_back or seat_count")
    second = run(two, "-k", "not (money_back or seat_count)")
    assert first["cache"]["execution"] == {"hit": 0, "miss": 2}
    assert second["cache"]["execution"] == {"hit": 0, "miss": 11}

    exported = as_json(oloproof(one, "cache", "export", str(tmp_path / "art-one"), "--json"))
    assert exported["added"] == {"execution": 2, "retrieve": 2, "generate": 2, "judgment": 10}
    assert exported["added_total"] == 16 and exported["skipped"] == 0
    as_json(oloproof(two, "cache", "export", str(tmp_path / "art-two"), "--json"))

    merged = as_json(oloproof(later, "cache", "merge", str(tmp_path / "art-one"), str(tmp_path / "art-two"), "--json"))
    assert [s["added_total"] for s in merged["sources"]] == [16, 88]
    assert [s["already_present"] for s in merged["sources"]] == [0, 0]
    record = run(later)
    assert record["cache"]["execution"] == {"hit": 13, "miss": 0}
    assert record["cache"]["judgment"] == {"hit": 65, "miss": 0}

    # merging again adds nothing; a store folder is a source too
    again = oloproof(later, "cache", "merge", str(tmp_path / "art-one"), str(two / ".oloproof"))
    assert again.returncode == 0, again.stderr
    assert "art-one: added 0 (execution 0, retrieve 0, generate 0, judgment 0); 16 already present" in again.stdout
    assert "added 0 (execution 0, retrieve 0, generate 0, judgment 0); 88 already present" in again.stdout


@pytest.mark.slow
def test_an_entry_with_other_content_is_refused_naming_the_key_and_nothing_is_merged(tmp_path: Path) -> None:
    one, later = project(tmp_path / "one"), project(tmp_path / "later")
    run(one)
    art = tmp_path / "art"
    as_json(oloproof(one, "cache", "export", str(art), "--json"))
    bad = diskcache.Cache(str(art))
    key = next(k for k in bad.iterkeys() if k.startswith("generate:"))
    entry = json.loads(bad.get(key))
    entry["value"]["output"] = {"answer": "tampered"}
    bad.set(key, json.dumps(entry))
    bad.close()
    (tmp_path / "empty").mkdir()
    # an empty store exports an empty cache folder
    as_json(oloproof(tmp_path / "empty", "cache", "export", str(tmp_path / "nothing"), "--json"))

    proc = oloproof(later, "cache", "merge", str(tmp_path / "nothing"), str(one / ".oloproof"), str(art), "--json")
    assert proc.returncode == 2
    message = json.loads(proc.stdout)["error"]["message"]
    assert f"cache entry {key} differs between {one / '.oloproof'} and {art}; nothing was merged" in message
    stats = as_json(oloproof(later, "cache", "stats", "--json"))
    assert sum(stats["entries"].values()) == 0


@pytest.mark.slow
def test_export_refuses_a_folder_in_use_and_merge_a_folder_that_is_no_cache(tmp_path: Path) -> None:
    one = project(tmp_path / "one")
    run(one, "-k", "money_back")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    proc = oloproof(one, "cache", "export", str(tmp_path / "full"))
    assert proc.returncode == 2 and "is not empty; export writes a new cache folder" in proc.stderr
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"

    proc = oloproof(one, "cache", "merge", str(tmp_path / "full"))
    assert proc.returncode == 2
    assert "is neither a cache folder (with cache.db) nor a store (with cache/cache.db)" in proc.stderr
    assert not (tmp_path / "full" / "cache.db").exists()  # nothing created in a source
    proc = oloproof(one, "cache", "merge", str(one / ".oloproof"))
    assert proc.returncode == 2 and "is this store's own cache" in proc.stderr
    proc = oloproof(one, "cache", "export")
    assert proc.returncode == 2 and "oloproof cache export takes one folder, got 0" in proc.stderr


def _execution(caches: Caches, key: str, verdicts: dict[str, Any], output: str = "x") -> None:
    caches.put("execution", key, {"output": {"answer": output}, "verdicts": verdicts})
    caches.close()


def test_execution_entries_join_the_verdicts_filed_in_either_copy(tmp_path: Path) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    _execution(Caches(mine), "k", {"set-a": {"criteria": {"c": 1}, "usage": {"c": [{"calls": 1}]}}})
    _execution(Caches(theirs), "k", {"set-a": {"criteria": {"c": 1}}, "set-b": {"criteria": {"d": 0}}})
    [count] = merge_into(mine, [theirs])
    assert count.updated == 1 and sum(count.added.values()) == 0
    joined = Caches(mine)
    assert joined.get("execution", "k") == {
        "output": {"answer": "x"},
        "verdicts": {"set-a": {"criteria": {"c": 1}, "usage": {"c": [{"calls": 1}]}}, "set-b": {"criteria": {"d": 0}}},
    }
    joined.close()

    other = tmp_path / "other"
    _execution(Caches(other), "k", {"set-a": {"criteria": {"c": 0}}})  # another verdict for the same set
    with pytest.raises(CacheConflict, match="cache entry execution:k differs between this store's cache and"):
        merge_into(mine, [other])
    differs = tmp_path / "differs"
    _execution(Caches(differs), "k", {}, output="y")  # another output for the same execution key
    with pytest.raises(CacheConflict, match="execution:k"):
        merge_into(mine, [differs])
