"""Shards (`--oloproof-shard I/N`) and `oloproof merge`: real processes, one job against N shard jobs.

The sharded CI recipe runs once per module (tests/ci_shards.py: one job, 3 shard jobs in their own checkouts and
stores, a merge job); the tests read what it left and run the refusals against it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import ci_shards
import pytest
from oloproof_project import make_project

from pytest_oloproof.config.values import parse_shard
from pytest_oloproof.records.identity import shard_of
from pytest_oloproof.records.stored import check_run
from pytest_oloproof.store.files import RunFolder, Store

SHARDS = 3


def oloproof(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


class Recipe:
    """What tests/ci_shards.py did, and its records read back."""

    def __init__(self, work: Path, summary: dict[str, Any]) -> None:
        self.work, self.summary = work, summary
        self.artifacts = [Path(s["folder"]) for s in summary["shards"]]
        self.merge_job = work / "merge-job"
        self.project = work / "project"
        one = summary["one_job"]
        self.one = Store(Path(one["store"])).load_run(one["run_id"])
        self.merged = Store(Path(summary["merged"]["store"])).load_run(summary["merged"]["run_id"])
        self.shards = [self.folder_run(f) for f in self.artifacts]

    @staticmethod
    def folder_run(folder: Path) -> dict[str, Any]:
        run_id = json.loads((folder / "run.json").read_text())["run_id"]
        header = RunFolder(folder).run_header(run_id)
        return {**header, "cases": list(RunFolder(folder).iter_cases(run_id, header=header))}

    def merge(self, *sources: Path, store: Path | None = None) -> subprocess.CompletedProcess[str]:
        target = store or (self.work / "refused-store")
        return oloproof(self.work, "merge", *map(str, sources), "--store", str(target))


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory) -> Recipe:
    work = tmp_path_factory.mktemp("ci")
    proc = subprocess.run(
        [sys.executable, str(Path(ci_shards.__file__)), str(work), "--shards", str(SHARDS), "--cases", "60"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.stdout, proc.stderr
    summary = json.loads(proc.stdout)
    assert proc.returncode == 0, summary["difference"]
    return Recipe(work, summary)


# ------------------------------------------------------------------ merged = one job


@pytest.mark.slow
def test_merged_shards_equal_one_job_field_by_field(recipe: Recipe) -> None:
    checkouts = (recipe.work / "one-job", *(recipe.work / f"shard-{i}" for i in range(1, SHARDS + 1)))
    one = ci_shards.strip_volatile(recipe.one, checkouts)
    merged = ci_shards.strip_volatile(recipe.merged, checkouts)
    assert merged.pop("merged_from") == [s["run_id"] for s in recipe.shards]
    # every aggregate, interval, slice, digest, the usage and cache counts, and every per-case record
    for key in ("metrics", "slices", "case_set_digest", "counts", "usage", "cache", "cache_misses", "cases"):
        assert key in one and merged[key] == one[key], key
    assert ci_shards.first_difference(one, merged) is None
    assert recipe.one["status"] == recipe.merged["status"] == "complete"
    assert len(recipe.merged["cases"]) == 60 and any(c["error"] for c in recipe.merged["cases"])


@pytest.mark.slow
def test_each_shard_is_partial_and_carries_its_shard_and_the_planned_set(recipe: Recipe) -> None:
    planned_ids = [c["id"] for c in recipe.one["cases"]]
    seen: list[str] = []
    for index, shard in enumerate(recipe.shards, start=1):
        assert shard["status"] == "partial"
        assert shard["shard"] == {"index": index, "count": SHARDS}
        assert shard["planned"] == {"case_set_digest": recipe.one["case_set_digest"], "cases": planned_ids}
        ids = [c["id"] for c in shard["cases"]]
        assert ids and all(shard_of(cid, SHARDS) == index for cid in ids)
        seen += ids
    assert sorted(seen) == sorted(planned_ids)  # disjoint, and together the whole set
    # cache statistics and the Tokens line are the shards' sums
    for cache in ("execution", "judgment", "retrieve", "generate"):
        for k in ("hit", "miss"):
            assert recipe.merged["cache"][cache][k] == sum(s["cache"][cache][k] for s in recipe.shards)
    for side in ("system", "judges"):
        for k in ("calls", "input_tokens", "output_tokens"):
            assert recipe.merged["usage"][side][k] == sum(s["usage"][side][k] for s in recipe.shards)
    assert recipe.merged["usage"]["system"]["calls"] > 0


@pytest.mark.slow
def test_averaging_the_shards_intervals_is_about_sqrt_n_too_wide(recipe: Recipe) -> None:
    ratio = ci_shards.averaged_width_ratio(recipe.shards, recipe.merged)
    # 3 shards: √3 ≈ 1.73 for a rate well inside (0, 1); the figure docs/guides/shards.md gives
    assert 1.5 < ratio["answer_correct"] < 2.0


@pytest.mark.slow
def test_the_merge_job_gates_the_merged_run_and_writes_the_step_summary(recipe: Recipe) -> None:
    assert recipe.summary["gate_exit"] == 0
    text = Path(recipe.summary["step_summary"]).read_text()
    assert f"`{recipe.merged['run_id']}` (complete)" in text
    assert "Oloproof gate · PASS" in text


@pytest.mark.slow
def test_the_merged_run_reads_in_runs_inspect_report_compare_and_gate(recipe: Recipe) -> None:
    job, run_id = recipe.merge_job, recipe.merged["run_id"]
    runs = oloproof(job, "runs", "--json")
    assert runs.returncode == 0 and [r["status"] for r in json.loads(runs.stdout)["runs"]] == ["complete"]
    inspect = oloproof(job, "inspect", run_id)
    assert inspect.returncode == 0 and "(complete, 60 cases)" in inspect.stdout
    page = recipe.work / "merged.html"
    assert oloproof(job, "report", run_id, "--html", str(page)).returncode == 0 and page.stat().st_size > 0
    # the one job's run copied into the merge job's store: the two compare as identical
    shutil.copytree(
        Path(recipe.summary["one_job"]["store"]) / "runs" / recipe.one["run_id"],
        job / ".oloproof" / "runs" / recipe.one["run_id"],
    )
    compared = oloproof(job, "compare", run_id, recipe.one["run_id"], "--json")
    assert compared.returncode == 0, compared.stderr
    doc = json.loads(compared.stdout)
    assert doc["paired_cases"] == 60 and all(c["estimate"] == 0.0 for c in doc["criteria"].values())
    assert oloproof(job, "gate", run_id, "--policy", "release.yaml").returncode == 0


# ------------------------------------------------------------------ refusals


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr
    return proc.stderr


@pytest.mark.slow
def test_a_missing_shard_is_refused_and_nothing_is_stored(recipe: Recipe) -> None:
    refused(recipe.merge(*recipe.artifacts[:2]), "shard 3/3 missing", "2 of 3 shards given")
    assert not (recipe.work / "refused-store" / "runs").exists()


@pytest.mark.slow
def test_a_shard_given_twice_is_refused(recipe: Recipe) -> None:
    refused(recipe.merge(*recipe.artifacts, recipe.artifacts[1]), "shard 2/3 is given twice")


@pytest.mark.slow
def test_overlapping_shards_are_refused_naming_both(recipe: Recipe, tmp_path: Path) -> None:
    one, two = recipe.artifacts[0], tmp_path / "shard-2"
    shutil.copytree(recipe.artifacts[1], two)
    line = (one / "cases.jsonl").read_text().splitlines()[0]
    with (two / "cases.jsonl").open("a") as f:
        f.write(line + "\n")
    run = json.loads((two / "run.json").read_text())
    run["counts"]["cases"] += 1
    (two / "run.json").write_text(json.dumps(run, indent=2))
    cid = json.loads(line)["id"]
    err = refused(recipe.merge(one, two, recipe.artifacts[2]), f"case {cid!r} is in shard 1/3", "and in shard 2/3")
    assert str(two) in err and run["run_id"] in err


@pytest.mark.slow
def test_a_shard_of_another_config_or_version_is_refused_naming_the_field(recipe: Recipe, tmp_path: Path) -> None:
    # a real shard job run with another seed
    job = tmp_path / "other-seed"
    shutil.copytree(recipe.project, job)
    config = job / "oloproof.yaml"
    config.write_text(config.read_text().replace("seed: 11", "seed: 12"))
    assert oloproof(job, "run", "-p", "no:cacheprovider", "-q", "--oloproof-shard=3/3").returncode in (0, 1)
    other = ci_shards.newest_run(job / ".oloproof")
    err = refused(recipe.merge(*recipe.artifacts[:2], job / ".oloproof"), "differs from shard 1/3", "in seed: 12 vs 11")
    assert other.name in err and str(job / ".oloproof") in err
    # a shard recorded by another Oloproof version (its run.json says so)
    older = tmp_path / "older"
    shutil.copytree(recipe.artifacts[2], older)
    run = json.loads((older / "run.json").read_text())
    run["oloproof_version"] = "0.0.9"
    (older / "run.json").write_text(json.dumps(run, indent=2))
    refused(recipe.merge(*recipe.artifacts[:2], older), 'in oloproof_version: "0.0.9" vs')


@pytest.mark.slow
def test_a_run_that_is_not_a_shard_is_refused(recipe: Recipe) -> None:
    one_store = Path(recipe.summary["one_job"]["store"])
    refused(recipe.merge(one_store / "runs" / recipe.one["run_id"], *recipe.artifacts[1:]), "is not a shard's run")
    refused(recipe.merge(one_store, *recipe.artifacts[1:]), "holds no shard's run")


@pytest.mark.slow
def test_a_shard_is_never_gated_nor_compared(recipe: Recipe) -> None:
    shard_store = recipe.work / "shard-1"
    shard_id = recipe.shards[0]["run_id"]
    err = refused(oloproof(shard_store, "gate", shard_id, "--policy", "release.yaml"), "shard 1/3", "oloproof merge")
    assert "status partial" in err
    refused(oloproof(shard_store, "diagnose", shard_id), "shard 1/3", "diagnose the merged run", "oloproof merge")
    # in the merge job's store beside the merged run: neither as candidate nor as baseline
    job = recipe.merge_job
    target = job / ".oloproof" / "runs" / shard_id
    if not target.exists():
        shutil.copytree(recipe.artifacts[0], target)
    merged = recipe.merged["run_id"]
    refused(oloproof(job, "compare", shard_id, merged), "candidate: run", "oloproof merge")
    refused(oloproof(job, "compare", merged, shard_id), "oloproof merge")
    # and a shard job is not gated at its finish: refused before any case runs
    for flag in (["--oloproof-policy", "release.yaml"], ["--oloproof-baseline", merged]):
        proc = oloproof(job, "run", "-p", "no:cacheprovider", "--oloproof-shard=1/3", *flag)
        assert proc.returncode == 2 and "oloproof merge" in proc.stdout + proc.stderr
        assert flag[0] in proc.stdout + proc.stderr
    shutil.rmtree(target)


# ------------------------------------------------------------------ the option


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("4/3", "I must be between 1 and N"),
        ("0/3", "counted from 1: 1/3 … 3/3"),
        ("2", "expected I/N (shard I of N, e.g. 1/4)"),
        ("a/b", "expected I/N"),
        ("1/0", "expected I/N"),
    ],
)
def test_a_bad_shard_is_a_usage_error_naming_the_option(tmp_path: Path, value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=r"I/N|between 1 and N"):
        parse_shard(value)
    proc = oloproof(tmp_path, "run", f"--oloproof-shard={value}")
    assert proc.returncode == 2
    assert "--oloproof-shard" in proc.stderr and problem in proc.stderr


def test_shards_are_chosen_by_case_id_whatever_the_file_order(pytester: pytest.Pytester) -> None:
    from oloproof_project import case

    cases = [case(f"q{i}", q=str(i)) for i in range(30)]
    make_project(pytester, cases, [{"type": "citation_validity"}])

    def shard(index: int) -> set[str]:
        result = pytester.runpytest(
            "--oloproof", "-p", "no:cacheprovider", "--collect-only", "-q", f"--oloproof-shard={index}/3"
        )
        return {line.split("[", 1)[1].rstrip("]") for line in result.outlines if "[" in line and "::" in line}

    before = [shard(i) for i in (1, 2, 3)]
    pytester.makefile(".jsonl", cases="\n".join(json.dumps(c) for c in reversed(cases[5:])) + "\n")  # reordered, fewer
    after = [shard(i) for i in (1, 2, 3)]
    assert all(before) and set().union(*before) == {c["id"] for c in cases}
    assert sum(len(s) for s in before) == 30  # disjoint
    assert [a == b - {f"q{i}" for i in range(5)} for a, b in zip(after, before, strict=True)] == [True] * 3


def test_a_partial_run_json_must_carry_its_shard_and_planned_set() -> None:
    run = {
        "schema": "oloproof.run/1",
        "run_id": "run_x",
        "status": "partial",
        "system": {"name": "s"},
        "metrics": {},
        "cache": {k: {"hit": 0, "miss": 0} for k in ("execution", "judgment", "retrieve", "generate")},
        "counts": {"cases": 0},
        "finished_at": "2026-12-02T00:00:00Z",
    }
    assert "no shard and planned case set" in (check_run(run) or "")
    shard = {"shard": {"index": 1, "count": 2}, "planned": {"case_set_digest": None, "cases": []}}
    assert check_run({**run, **shard}) is None
    assert "between 1 and count" in (check_run({**run, **shard, "shard": {"index": 3, "count": 2}}) or "")


def test_a_shard_run_says_what_it_is_and_an_empty_shard_is_still_recorded(pytester: pytest.Pytester) -> None:
    from oloproof_project import case, section

    cases = [case(f"q{i}", q=str(i)) for i in range(4)]
    make_project(pytester, cases, [{"type": "citation_validity"}])
    ours = sum(1 for c in cases if shard_of(c["id"], 2) == 1)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--oloproof-shard=1/2")
    assert (
        f"Shard 1/2: {ours} of 4 planned cases (not gated alone); combine every shard's run with `oloproof merge"
        in ("\n".join(section(result)))
    )
    # with more shards than cases some shard holds none: it is recorded all the same, so the merge sees every shard
    empty = next(i for i in range(1, 9) if not any(shard_of(c["id"], 8) == i for c in cases))
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", f"--oloproof-shard={empty}/8")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    store = Store(pytester.path / ".oloproof")
    header = store.run_header(store.run_ids()[0])
    assert header["status"] == "partial" and header["counts"]["cases"] == 0
    assert header["shard"] == {"index": empty, "count": 8} and len(header["planned"]["cases"]) == 4


@pytest.mark.slow
def test_a_shard_run_under_xdist_merges_with_one_run_without_it(pytester: pytest.Pytester) -> None:
    from oloproof_project import case

    cases = [case(f"q{i}", q=str(i), answer="yes" if i % 3 else "no") for i in range(12)]
    make_project(pytester, cases, [{"type": "citation_validity"}, {"type": "hit_rate", "k": 2}])
    for args in (["--oloproof-shard=1/2", "-n", "2"], ["--oloproof-shard=2/2"], []):
        pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider", *args)
    store = Store(pytester.path / ".oloproof")
    one_id, second, first = store.run_ids()  # newest first: the one job, shard 2/2, shard 1/2 (under xdist)
    assert store.run_header(first)["shard"] == {"index": 1, "count": 2}
    merged = oloproof(pytester.path, "merge", ".oloproof", "--json")
    assert merged.returncode == 0, merged.stderr
    record, one = store.load_run(json.loads(merged.stdout)["run_id"]), store.load_run(one_id)
    assert record["merged_from"] == [first, second]
    for key in ("metrics", "slices", "case_set_digest", "counts"):
        assert record[key] == one[key], key


@pytest.mark.slow
def test_an_interrupted_shard_is_refused(recipe: Recipe, tmp_path: Path) -> None:
    stopped = tmp_path / "stopped"
    shutil.copytree(recipe.artifacts[1], stopped)
    run = json.loads((stopped / "run.json").read_text())
    (stopped / "run.json").write_text(json.dumps({**run, "status": "incomplete"}, indent=2))  # as Ctrl-C leaves it
    refused(
        recipe.merge(recipe.artifacts[0], stopped, recipe.artifacts[2]),
        "shard 2/3",
        "is incomplete",
        "run that shard again",
    )
