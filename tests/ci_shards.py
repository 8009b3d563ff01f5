"""The sharded CI recipe (docs/guides/shards.md), run locally as separate processes, checked against one job.

    python tests/ci_shards.py WORKDIR [--shards N] [--cases M]

Writes a small project, runs it once as one job, then as N shard jobs the way the GitHub Actions matrix does:
each job in its own checkout with its own store, restoring and saving its cache folder (actions/cache) and
uploading its run folder (actions/upload-artifact). The merge job downloads the run folders, runs
`oloproof merge`, gates the merged run with the release policy and writes the step summary. Prints a JSON summary
and exits 0 when the merged run equals the one job's run field by field (ids, timestamps and durations aside),
1 with the first difference otherwise. tests/test_shards.py drives it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

SYSTEM = """
import hashlib, random
from pytest_oloproof import Passage, Retrieval, rag_system, report_usage


def rng(key):
    return random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))


@rag_system(name="sharded-rag", version="1", depth=5, top_k=3, token_budget=12, index_version="i1")
class System:
    def retrieve(self, input, depth):
        r = rng("retrieve" + input["q"])
        docs = r.sample(range(20), depth)
        report_usage(model="embed-1", input_tokens=r.randint(5, 50), output_tokens=0)
        return Retrieval(
            query=input["q"],
            depth=depth,
            candidates=tuple(Passage(f"d{d}", round(r.random(), 6), " ".join(["w"] * r.randint(1, 8))) for d in docs),
        )

    def generate(self, input, context):
        r = rng("generate" + input["q"])
        if r.random() < 0.05:
            raise RuntimeError("seeded failure for " + input["q"])
        report_usage(model="chat-1", input_tokens=r.randint(100, 400), output_tokens=r.randint(10, 80))
        answer = "yes" if r.random() < 0.7 else "no"
        return {"answer": answer, "citations": [p.doc_id for p in context][: r.randint(0, 2)]}

    def count_tokens(self, passage):
        return len(passage.text.split())
"""

CONFIG = """system:
  rag:
    object: shardsys:System
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: hit_rate, k: 3}
  - {type: ndcg, k: 5}
  - {type: citation_validity}
slices: [metadata.topic, relevant_position, context_truncated]
min_slice_support: 3
seed: 11
pricing:
  embed-1: {input: 0.02, output: 0.0}
  chat-1: {input: 0.5, output: 1.5}
store: .oloproof
"""

POLICY = """decisions:
  - {name: answer-floor, criterion: answer_correct, test: minimum, threshold: 0.50}
  - {name: citations-valid, criterion: citations_valid, test: max-failures, max_failures: 1}
missing: bound
"""

#: what differs between any two runs of the same cases: ids, timestamps, durations, where the config was
VOLATILE = {"run_id", "started_at", "finished_at", "timings", "duration_s", "config_path"}


def write_project(root: Path, cases: int) -> None:
    """The project every job checks out: a seeded system, `cases` cases, oloproof.yaml and release.yaml."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "shardsys.py").write_text(SYSTEM)
    with (root / "cases.jsonl").open("w") as f:
        for i in range(cases):
            case = {
                "id": f"case-{i:04d}",
                "input": {"q": f"question {i}"},
                # a second relevant document of its own gives every case its own expected data: no two cases
                # share a verdict in the judgment cache, so even the cache counts of one job and the shards agree
                "expected": {"answer": "yes", "relevant": [{"doc_id": f"d{i % 20}"}, {"doc_id": f"own{i}"}]},
                "metadata": {"topic": f"t{i % 4}"},
            }
            f.write(json.dumps(case) + "\n")
    (root / "oloproof.yaml").write_text(CONFIG)
    (root / "release.yaml").write_text(POLICY)
    (root / "pytest.ini").write_text("[pytest]\n")


def oloproof(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One `oloproof` command in its own process, as a CI step runs it."""
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def newest_run(store: Path) -> Path:
    return newest_run_folder(store / "runs")


def check(proc: subprocess.CompletedProcess[str], allowed: tuple[int, ...], what: str) -> None:
    if proc.returncode not in allowed:
        raise SystemExit(f"{what} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def shard_job(work: Path, project: Path, index: int, count: int) -> Path:
    """One matrix job: check out, restore the shard's cache, run the shard, save the cache, upload the run folder."""
    job = work / f"shard-{index}"
    shutil.copytree(project, job)
    cache = work / "actions-cache" / f"oloproof-shard-{index}"  # actions/cache: key oloproof-shard-<i>
    if cache.is_dir():
        shutil.copytree(cache, job / ".oloproof" / "cache")
    proc = oloproof(job, "run", "-p", "no:cacheprovider", "-q", f"--oloproof-shard={index}/{count}")
    check(proc, (0, 1), f"shard {index}/{count}")
    if cache.exists():
        shutil.rmtree(cache)
    shutil.copytree(job / ".oloproof" / "cache", cache)
    # upload-artifact of .oloproof/runs/ (a fresh checkout's store holds only this job's run), as
    # download-artifact gives it back: artifacts/oloproof-shard-<i>/run_<id>/
    artifact = work / "artifacts" / f"oloproof-shard-{index}"
    shutil.copytree(job / ".oloproof" / "runs", artifact)
    return newest_run_folder(artifact)


def newest_run_folder(folder: Path) -> Path:
    return sorted(folder.glob("run_*"))[-1]


def strip_volatile(value: Any, checkouts: tuple[Path, ...] = ()) -> Any:
    """`value` without the VOLATILE keys, each checkout's folder spelled `<checkout>` (a traceback names its file)."""
    if isinstance(value, dict):
        return {k: strip_volatile(v, checkouts) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [strip_volatile(v, checkouts) for v in value]
    if isinstance(value, str):
        for root in checkouts:
            value = value.replace(str(root), "<checkout>")
    return value


def first_difference(a: Any, b: Any, path: str = "$") -> str | None:
    """The first path at which two records differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        if sorted(a) != sorted(b):
            return f"{path}: keys differ: {sorted(set(a) ^ set(b))}"
        for k in a:
            found = first_difference(a[k], b[k], f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def averaged_width_ratio(shards: list[dict[str, Any]], merged: dict[str, Any]) -> dict[str, float]:
    """Per criterion: the width of the interval you get by averaging the shards' bounds, over the merged width."""
    out = {}
    for name, m in merged["metrics"].items():
        lows = [s["metrics"][name]["low"] for s in shards]
        highs = [s["metrics"][name]["high"] for s in shards]
        averaged = sum(highs) / len(highs) - sum(lows) / len(lows)
        out[name] = round(averaged / (m["high"] - m["low"]), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--cases", type=int, default=60)
    args = parser.parse_args(argv)
    work: Path = args.workdir.resolve()
    project = work / "project"
    write_project(project, args.cases)

    # one job: the whole case set in one process, its own store
    one = work / "one-job"
    shutil.copytree(project, one)
    check(oloproof(one, "run", "-p", "no:cacheprovider", "-q"), (0, 1), "the one job")

    # the matrix: N shard jobs
    artifacts = [shard_job(work, project, i, args.shards) for i in range(1, args.shards + 1)]

    # the merge job: download the run folders, merge, gate, step summary
    merge = work / "merge-job"
    shutil.copytree(project, merge)
    summary = work / "step-summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    downloaded = sorted(str(p) for p in (work / "artifacts").glob("*/run_*"))  # `oloproof merge shards/*/run_*`
    merged = oloproof(merge, "merge", *downloaded, "--json", env=env)
    check(merged, (0,), "oloproof merge")
    merged_doc = json.loads(merged.stdout)
    gate = oloproof(merge, "gate", merged_doc["run_id"], "--policy", "release.yaml", env=env)
    check(gate, (0, 3), "oloproof gate")

    from pytest_oloproof.store.files import RunFolder, Store

    one_store = Store(one / ".oloproof")
    one_record = one_store.load_run(one_store.run_ids()[0])
    merged_record = Store(Path(merged_doc["store"])).load_run(merged_doc["run_id"])
    shard_records = []
    for folder in artifacts:
        run_id = json.loads((folder / "run.json").read_text())["run_id"]
        shard_records.append(RunFolder(folder).run_header(run_id))
    checkouts = (one, *(work / f"shard-{i}" for i in range(1, args.shards + 1)))
    difference = first_difference(
        strip_volatile(one_record, checkouts),
        strip_volatile({k: v for k, v in merged_record.items() if k != "merged_from"}, checkouts),
    )
    print(
        json.dumps(
            {
                "one_job": {"store": str(one / ".oloproof"), "run_id": one_record["run_id"]},
                "merged": merged_doc,
                "shards": [
                    {"folder": str(f), "run_id": r["run_id"]} for f, r in zip(artifacts, shard_records, strict=True)
                ],
                "shard_stores": [str(work / f"shard-{i}" / ".oloproof") for i in range(1, args.shards + 1)],
                "gate_exit": gate.returncode,
                "step_summary": str(summary),
                "averaged_interval_width_ratio": averaged_width_ratio(shard_records, merged_record),
                "equal": difference is None,
                "difference": difference,
            },
            indent=2,
        )
    )
    return 0 if difference is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
