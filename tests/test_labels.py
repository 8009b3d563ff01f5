"""`oloproof labels export|import`, the judge-corrected rate in inspect/report, and `corrected: true` in a
policy: real subprocesses on a copy of the example run with its local groundedness judge."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof.compare.policy import load_policy
from pytest_oloproof.errors import ConfigError
from pytest_oloproof.report.fmt import fmt_interval
from pytest_oloproof.stats.ppi import corrected_rate

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support_rag"
CONFIG = "oloproof-judges.yaml"


def oloproof(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args, "--config", CONFIG],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The example run once with its groundedness judge: (project folder, run id)."""
    root = tmp_path_factory.mktemp("example") / "support_rag"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".oloproof", "__pycache__", "*.html"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_oloproof.cli",
            "run",
            "--oloproof-config",
            CONFIG,
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the example fails 4 cases by design
    run_id = next((root / ".oloproof" / "runs").iterdir()).name
    return root, run_id


@pytest.fixture
def project(judged_run: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    """A fresh copy of the judged project per test (labels stored by one test never reach another)."""
    root, run_id = judged_run
    copy = tmp_path / "p"
    shutil.copytree(root, copy)
    for f in copy.glob("labels-*.jsonl"):
        f.unlink()
    shutil.rmtree(copy / ".oloproof" / "labels", ignore_errors=True)
    return copy, run_id


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _export(root: Path, run_id: str, n: int, seed: int | None = 7, out: str = "s.jsonl") -> list[dict[str, Any]]:
    extra = ["--seed", str(seed)] if seed is not None else []
    proc = oloproof(
        root, "labels", "export", run_id, "--criterion", "grounded", "--sample", str(n), "--out", out, *extra
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return _lines(root / out)


def _label(rows: list[dict[str, Any]], fail: set[str] = frozenset()) -> list[dict[str, Any]]:  # type: ignore[assignment]
    return [rows[0]] + [{**r, "label": "fail" if r["id"] in fail else "pass"} for r in rows[1:]]


def test_export_draws_a_recorded_sample_without_the_judges_verdict(project: tuple[Path, str]) -> None:
    root, run_id = project
    rows = _export(root, run_id, 5)
    head = rows[0]["oloproof_sample"]
    assert head["run_id"] == run_id and head["criterion"] == "grounded" and head["seed"] == 7
    assert head["frame"]["size"] == 13 and head["frame"]["digest"].startswith("sha256:")
    assert head["size"] == 5 and [r["id"] for r in rows[1:]] == head["cases"] and len(set(head["cases"])) == 5
    for r in rows[1:]:
        assert set(r) == {"id", "input", "context", "output", "label"} and r["label"] is None
        assert "question" in r["input"] and r["context"] and r["context"][0]["text"] and r["output"]["answer"]
        assert "rationale" not in json.dumps(r) and "criteria" not in r  # nothing of the judge's verdict
    assert _export(root, run_id, 5, out="again.jsonl")[0] == rows[0]  # the same seed, the same sample
    other = _export(root, run_id, 5, seed=None, out="fresh.jsonl")[0]["oloproof_sample"]
    assert isinstance(other["seed"], int)  # a seed was drawn and recorded


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--criterion", "grounded", "--sample", "14"], "more than the 13 cases"),
        (["--criterion", "answer_correct", "--sample", "3"], "not a judge criterion"),
    ],
)
def test_export_refuses_what_cannot_be_sampled(project: tuple[Path, str], args: list[str], message: str) -> None:
    root, run_id = project
    proc = oloproof(root, "labels", "export", run_id, *args, "--out", "x.jsonl")
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (root / "x.jsonl").exists()


def test_import_stores_labels_and_inspect_shows_the_corrected_rate(project: tuple[Path, str]) -> None:
    root, run_id = project
    rows = _export(root, run_id, 8)
    failed = {rows[1]["id"], rows[2]["id"]}
    _write(root / "s.jsonl", _label(rows, failed))
    proc = oloproof(root, "labels", "import", "s.jsonl")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stored = list((root / ".oloproof" / "labels").glob("*.json"))
    assert len(stored) == 1
    doc = json.loads(stored[0].read_text())
    assert doc["sample"]["seed"] == 7 and {r["id"] for r in doc["labels"] if r["label"] == "fail"} == failed
    # the judge passed all 13; people failed 2 of 8: 100% − 2/8 = 75.0%
    expected = corrected_rate([1.0] * 13, [0.0] * 2 + [1.0] * 6, [1.0] * 8)
    assert expected.value == 0.75
    inspected = oloproof(root, "inspect", run_id)
    line = next(x for x in inspected.stdout.splitlines() if x.startswith("grounded judge-corrected"))
    assert "75.0%" in line and "8 labels of a random sample of 13 judged" in line and "judge alone 100.0%" in line
    as_json = json.loads(oloproof(root, "inspect", run_id, "--json").stdout)
    got = as_json["corrected"]["grounded"]
    assert (got["value"], got["low"], got["high"]) == pytest.approx((expected.value, expected.low, expected.high))
    html = root / "r.html"
    assert oloproof(root, "report", run_id, "--html", str(html)).returncode == 0
    assert "grounded judge-corrected: 75.0%" in html.read_text()
    # the labelled file also validates the judge (its first line is skipped there)
    proc = oloproof(root, "validate-judge", "--criterion", "grounded", "--labels", "s.jsonl", "--min-labels", "5")
    assert proc.returncode in (0, 1) and "invalid judge labels" not in proc.stderr, proc.stderr


def _refused(root: Path, rows: list[dict[str, Any]], message: str) -> str:
    _write(root / "s.jsonl", rows)
    proc = oloproof(root, "labels", "import", "s.jsonl")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr, proc.stderr
    assert not list((root / ".oloproof").glob("labels/*.json"))  # nothing stored
    return proc.stderr


def test_import_refuses_an_unlabelled_case(project: tuple[Path, str]) -> None:
    root, run_id = project
    rows = _label(_export(root, run_id, 4))
    rows[3]["label"] = None
    err = _refused(root, rows, "s.jsonl:4: `label` of")
    assert 'set it to "pass" or "fail"' in err


def test_import_refuses_a_case_edited_out(project: tuple[Path, str]) -> None:
    root, run_id = project
    rows = _label(_export(root, run_id, 4))
    gone = rows.pop(2)["id"]
    _refused(root, rows, f"1 sampled case(s) have no line: {gone}; restore them")


def test_import_refuses_a_case_not_drawn_and_a_hand_picked_header(project: tuple[Path, str]) -> None:
    root, run_id = project
    rows = _label(_export(root, run_id, 4))
    drawn = set(rows[0]["oloproof_sample"]["cases"])
    stranger = next(
        c for c in ["money_back", "refund_annual", "sso_setup", "seat_count", "password_reset"] if c not in drawn
    )
    _refused(root, [*rows, {**rows[1], "id": stranger}], f"case {stranger!r} was not in the drawn sample")
    # swapping a drawn case for a chosen one in the header too: the seed no longer draws it
    head = json.loads(json.dumps(rows[0]))
    swapped = head["oloproof_sample"]["cases"]
    swapped[0] = stranger
    _refused(root, [head, {**rows[1], "id": stranger}, *rows[2:]], "are not the draw of seed 7")


def test_labels_not_drawn_by_oloproof_cannot_correct(project: tuple[Path, str]) -> None:
    root, _ = project
    shutil.copy(EXAMPLE / "judge_labels.jsonl", root / "s.jsonl")
    proc = oloproof(root, "labels", "import", "s.jsonl")
    assert proc.returncode == 2
    assert "s.jsonl:1: the first line is not a sample header" in proc.stderr
    assert "can validate a judge" in proc.stderr and "uniform random sample" in proc.stderr


def test_a_corrected_decision_needs_labels_and_then_reads_the_corrected_interval(project: tuple[Path, str]) -> None:
    root, run_id = project
    (root / "p.yaml").write_text(
        "decisions:\n  - {name: grounded-floor, criterion: grounded, test: minimum, threshold: 0.10, corrected: true}\n"
    )
    proc = oloproof(root, "gate", run_id, "--policy", "p.yaml", "--json")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    d = json.loads(proc.stdout)["decisions"][0]
    assert (d["outcome"], d["reason"]) == ("INSUFFICIENT_EVIDENCE", "no_correcting_labels")
    assert f"oloproof labels export {run_id} --criterion grounded --sample N" in d["plan"]
    _write(root / "s.jsonl", _label(_export(root, run_id, 8)))
    assert oloproof(root, "labels", "import", "s.jsonl").returncode == 0
    proc = oloproof(root, "gate", run_id, "--policy", "p.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = corrected_rate([1.0] * 13, [1.0] * 8, [1.0] * 8)
    assert expected.low > 0.10
    shown = fmt_interval("rate", expected.low, expected.high)
    assert f"judge-corrected {shown} (8 labels of 13 judged)  PASS" in proc.stdout
    # without `corrected`, the same judge is not validated: the judge's own rate cannot decide
    (root / "q.yaml").write_text("decisions:\n  - {name: g, criterion: grounded, test: minimum, threshold: 0.10}\n")
    assert "judge_not_validated" in oloproof(root, "gate", run_id, "--policy", "q.yaml").stdout


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        ("{name: a, criterion: grounded, test: max-failures, max_failures: 0, corrected: true}", "use it with minimum"),
        ("{name: a, criterion: grounded, test: non-inferiority, margin: 5, corrected: true}", "not non-inferiority"),
    ],
)
def test_corrected_only_with_minimum_or_maximum(tmp_path: Path, decision: str, message: str) -> None:
    (tmp_path / "p.yaml").write_text(f"decisions:\n  - {decision}\n")
    with pytest.raises(ConfigError, match=message):
        load_policy(tmp_path / "p.yaml")


# ------------------------------------------------------------------ the store layer, without subprocesses


def _run(values: list[float | None]) -> dict[str, Any]:
    cases = [
        {
            "id": f"c{i:02d}",
            "digest": {"input": f"i{i}", "expected": "e"},
            "criteria": {
                "grounded": {"status": "observed", "value": v}
                if v is not None
                else {"status": "missing", "reason": "x"}
            },
        }
        for i, v in enumerate(values)
    ]
    evaluators = [{"criterion": "grounded", "type": "groundedness_judge", "identity": "sha256:j"}]
    return {"run_id": "run_x", "confidence": 0.95, "evaluators": evaluators, "cases": cases}


def test_the_frame_is_the_observed_verdicts_and_the_largest_sample_corrects() -> None:
    from pytest_oloproof.store.labels import corrected_for, draw_sample, labels_doc

    run = _run([1.0] * 8 + [0.0] * 2 + [None])
    small = draw_sample(run, "grounded", 4, seed=3)
    assert small["frame"]["size"] == 10 and "c10" not in small["cases"]  # the missing case is not in the frame
    assert draw_sample(run, "grounded", 4, seed=3) == small
    big = draw_sample(run, "grounded", 6, seed=5)
    docs = [
        ("sha256:a", labels_doc(small, dict.fromkeys(small["cases"], False))),
        ("sha256:b", labels_doc(big, {c: c < "c08" for c in big["cases"]})),
    ]
    got = corrected_for(run, docs, "grounded")
    assert got is not None and got["labels_id"] == "sha256:b" and got["other_samples"] == 1
    human = [1.0 if c < "c08" else 0.0 for c in big["cases"]]
    judge = [1.0 if c < "c08" else 0.0 for c in big["cases"]]
    assert got["value"] == corrected_rate([1.0] * 8 + [0.0] * 2, human, judge).value == 0.8
    # the run's verdicts changed since the sample was drawn: the frame no longer matches
    changed = _run([1.0] * 7 + [0.0] * 3 + [None])
    assert "frame does not match" in (corrected_for(changed, docs, "grounded") or {})["missing"]
    # verdicts that are not 0/1 (means over repeats) cannot be corrected: missing, with the reason
    means = _run([0.5] * 10)
    sample = draw_sample(means, "grounded", 3, seed=1)
    found = corrected_for(means, [("sha256:c", labels_doc(sample, dict.fromkeys(sample["cases"], True)))], "grounded")
    assert found is not None and "0/1 verdicts" in found["missing"]


def test_every_renderer_shows_the_corrected_rate_beside_the_judges() -> None:
    from pytest_oloproof.report.markdown import run_markdown
    from pytest_oloproof.report.text import run_summary

    record = {
        "run_id": "run_x",
        "status": "complete",
        "metrics": {},
        "cache": {k: {"hit": 0, "miss": 1} for k in ("execution", "judgment", "retrieve", "generate")},
        "corrected": {
            "grounded": {
                "value": 0.75,
                "low": 0.3,
                "high": 0.95,
                "labelled": 8,
                "judged": 13,
                "judge_rate": 1.0,
                "rectifier": -0.25,
                "labels_id": "sha256:" + "a" * 64,
            }
        },
    }
    expected = "grounded judge-corrected: 75.0% [30.0%, 95.0%] · 8 labels of a random sample of 13 judged"
    assert any(line.startswith(expected) for line in run_summary(record))
    assert expected in run_markdown(record)


def test_a_broken_or_impossible_header_is_refused_with_its_line(tmp_path: Path) -> None:
    from pytest_oloproof.store.labels import LabelsFileError, check_against_run, draw_sample, read_labelled

    broken = tmp_path / "b.jsonl"
    broken.write_text('{"oloproof_sample": {"schema": \n{"id": "c01", "label": "pass"}\n')
    with pytest.raises(LabelsFileError, match=r"b.jsonl:1: restore the first line from the exported file"):
        read_labelled(broken)
    run = _run([1.0] * 5)
    sample = {**draw_sample(run, "grounded", 3, seed=2), "size": 9}
    with pytest.raises(LabelsFileError, match=r"b.jsonl:1: oloproof_sample.size: --sample: 9 is more than the 5"):
        check_against_run(run, sample, broken)
