"""`oloproof judge probe`: a judge on the loopback server whose replies vary by request, asked again K times.

The example project (13 cases) is judged by an OpenAI-compatible judge served on 127.0.0.1. The judge
passes every answer, except that on answers mentioning "refund" it alternates fail, pass, fail, … per
prompt: those cases flip, the others do not. Every command runs as a real subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from pytest_oloproof.records.identity import judgment_probe_key
from pytest_oloproof.stats.intervals import clopper_pearson
from tests.judge_server import Recorded, Reply, ScriptedServer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "support_rag"


class Alternating:
    """The scripted judge: per distinct prompt, answers on "refund" alternate fail/pass; the rest pass."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, request: Recorded) -> Reply:
        prompt = request.json()["messages"][-1]["content"]
        answer = prompt.split("ANSWER:\n", 1)[1]
        with self.lock:
            n = self.seen[prompt]
            self.seen[prompt] += 1
        if "refund" in answer.lower():
            return Reply.verdict("fail" if n % 2 == 0 else "pass", f"ask {n}")
        return Reply.verdict("pass", "grounded")


@pytest.fixture
def server() -> ScriptedServer:
    with ScriptedServer(responder=Alternating()) as s:
        yield s


@pytest.fixture
def project(tmp_path: Path, server: ScriptedServer) -> Path:
    return make_project(tmp_path, server)


def make_project(tmp_path: Path, server: ScriptedServer) -> Path:
    """A copy of the example with judges.yaml: its evaluators plus a groundedness judge on the server."""
    root = tmp_path / "support_rag"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".oloproof", "__pycache__", ".pytest_cache"))
    config = (root / "oloproof.yaml").read_text(encoding="utf-8")
    judge = (
        "  - {type: groundedness_judge, provider: openai, model: probe-m, "
        f"base_url: '{server.base_url}', api_key_env: PROBE_KEY, retries: 0, concurrency: 2}}\n"
    )
    config = config.replace("slices:", judge + "slices:", 1)
    (root / "judges.yaml").write_text(config, encoding="utf-8")
    return root


def oloproof(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PROBE_KEY": "k-test"}
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def run_cases(root: Path) -> subprocess.CompletedProcess[str]:
    return oloproof(root, "run", "-p", "no:cacheprovider", "--oloproof-config", "judges.yaml")


def test_probe_counts_flips_bypasses_the_cache_and_is_stored(project: Path, server: ScriptedServer) -> None:
    r = run_cases(project)
    assert r.returncode == 1, r.stdout + r.stderr  # 4 answer_correct failures, as in the walk-through
    ran = len(server.requests)
    assert ran == 13  # one verdict per case: every prompt asked once

    r = oloproof(
        project,
        "judge",
        "probe",
        "latest",
        "--criterion",
        "grounded",
        "--times",
        "2",
        "--config",
        "judges.yaml",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert "26 asks, 0 already in the judgment cache, 26 to send" in r.stderr  # said before asking
    # the run's verdicts are in the judgment cache, yet every probe was asked: 13 cases x 2
    assert len(server.requests) - ran == 26
    assert server.max_in_flight <= 2  # the judge's `concurrency: 2` holds for the probe's asks too
    doc = json.loads(r.stdout)
    by_id = {e["id"]: e for e in doc["cases"]}
    refund = {i for i, e in by_id.items() if e["verdicts"][0] == "fail"}
    assert refund  # the answers on refunds: fail (run), pass, fail
    for cid, e in by_id.items():
        assert e["verdicts"] == (["fail", "pass", "fail"] if cid in refund else ["pass"] * 3)
        assert e["flipped"] is (cid in refund) and e["missing"] == []
    low, high = clopper_pearson(len(refund), 13, 0.95)
    assert doc["flip_rate"] == {
        "flipped": len(refund),
        "of": 13,
        "rate": len(refund) / 13,
        "low": low,
        "high": high,
        "method": "clopper-pearson",
        "confidence": 0.95,
    }
    assert doc["counts"]["asks"] == 26 and doc["counts"]["asks_cached"] == 0
    # stored content-addressed, with the judge's identity
    stored = json.loads((project / ".oloproof" / "judge_probes" / f"{doc['id'].split(':')[1]}.json").read_text())
    assert stored == {k: v for k, v in doc.items() if k != "id"}
    assert stored["judge"]["identity"].startswith("sha256:") and stored["judge"]["type"] == "groundedness_judge"
    shown = oloproof(project, "inspect", doc["id"][:14], "--config", "judges.yaml")
    assert shown.returncode == 0, shown.stderr
    flips = [line for line in shown.stdout.splitlines() if line.endswith("— flipped")]
    assert sorted(line.split(":")[0].strip() for line in flips) == sorted(refund)

    # the same probe again: its asks come from the cache (filed under their probe index)
    before = len(server.requests)
    again = oloproof(
        project,
        "judge",
        "probe",
        "latest",
        "--criterion",
        "grounded",
        "--times",
        "2",
        "--config",
        "judges.yaml",
        "--json",
    )
    assert again.returncode == 0 and len(server.requests) == before
    assert "26 asks, 26 already in the judgment cache, 0 to send" in again.stderr
    assert json.loads(again.stdout)["counts"]["asks_cached"] == 26
    # one more ask reuses probes 1 and 2 and asks only the third
    three = oloproof(
        project,
        "judge",
        "probe",
        "latest",
        "--criterion",
        "grounded",
        "--times",
        "3",
        "--config",
        "judges.yaml",
        "--json",
    )
    assert three.returncode == 0 and len(server.requests) - before == 13

    # the run's own verdicts kept their keys and values: a run of a new system version executes every case
    # again (same answers, same contexts) and takes each verdict from the judgment cache, not from a probe
    before = len(server.requests)
    cfg = project / "judges.yaml"
    cfg.write_text(cfg.read_text().replace("version: slice-b-example", "version: slice-b2"), encoding="utf-8")
    r = run_cases(project)
    assert r.returncode == 1 and len(server.requests) == before
    assert "judgment 78 hit/0 miss" in r.stdout  # 13 cases x 6 evaluators
    latest = json.loads(oloproof(project, "inspect", "latest", "--json", "--config", "judges.yaml").stdout)
    grounded = {c["id"]: c["criteria"]["grounded"]["value"] for c in latest["cases"]}
    assert {i for i, v in grounded.items() if v == 0.0} == refund


def test_validate_judge_shows_the_latest_probe_of_that_judge(project: Path, server: ScriptedServer) -> None:
    run_cases(project)
    labels = project / "labels.jsonl"
    ctx = [{"doc_id": "kb-01", "text": "Annual plans can be refunded within 30 days."}]
    rows = [
        {
            "id": "a",
            "output": {"answer": "Annual plans can be refunded within 30 days."},
            "context": ctx,
            "label": "pass",
        },
        {"id": "b", "output": {"answer": "Plans renew monthly."}, "context": ctx, "label": "fail"},
    ]
    labels.write_text("".join(json.dumps(x) + "\n" for x in rows), encoding="utf-8")
    args = ("validate-judge", "--config", "judges.yaml", "--criterion", "grounded", "--labels", str(labels))
    r = oloproof(project, *args, "--min-labels", "1")
    assert "Consistency: not probed (oloproof judge probe RUN --criterion C --times K)" in r.stdout.splitlines()
    first = oloproof(
        project, "judge", "probe", "latest", "--criterion", "grounded", "--times", "1", "--config", "judges.yaml"
    )
    second = oloproof(
        project, "judge", "probe", "latest", "--criterion", "grounded", "--times", "2", "--config", "judges.yaml"
    )
    assert first.returncode == second.returncode == 0
    probe_id = second.stdout.splitlines()[-1].split()[1]
    consistency = next(line for line in second.stdout.splitlines() if line.startswith("Consistency: "))
    r = oloproof(project, *args, "--min-labels", "1")
    line = next(line for line in r.stdout.splitlines() if line.startswith("Consistency ("))
    assert line.startswith(f"Consistency (probe {probe_id} of run run_")
    assert line.endswith(consistency.removeprefix("Consistency:"))
    doc = json.loads(oloproof(project, *args, "--min-labels", "1", "--json").stdout)
    assert doc["consistency"]["probe"] == probe_id and doc["consistency"]["times"] == 2


def test_bad_probes_exit_2_and_ask_nothing(project: Path, server: ScriptedServer) -> None:
    run_cases(project)
    before = len(server.requests)
    listing = sorted(p.name for p in (project / ".oloproof").iterdir())
    bad = {
        ("--criterion", "grounded", "--times", "0"): "--times",
        ("--criterion", "answer_correct", "--times", "2"): "not a judge criterion",
    }
    for extra, message in bad.items():
        r = oloproof(project, "judge", "probe", "latest", *extra, "--config", "judges.yaml")
        assert r.returncode == 2 and message in r.stderr, r.stderr
    other = project / "other.yaml"
    other.write_text((project / "judges.yaml").read_text().replace("probe-m", "probe-other"), encoding="utf-8")
    r = oloproof(
        project, "judge", "probe", "latest", "--criterion", "grounded", "--times", "2", "--config", "other.yaml"
    )
    assert r.returncode == 2 and "is not the one run" in r.stderr, r.stderr
    assert len(server.requests) == before
    assert sorted(p.name for p in (project / ".oloproof").iterdir()) == listing
    assert not (project / ".oloproof" / "judge_probes").exists()


def test_probe_keys_are_separate_from_the_verdict_key() -> None:
    base = "a" * 64
    keys = {judgment_probe_key(base, i) for i in (1, 2, 3)}
    assert len(keys) == 3 and base not in keys
    assert judgment_probe_key(base, 1) == judgment_probe_key(base, 1)
    assert judgment_probe_key("b" * 64, 1) not in keys


class BrokenOnInvoices(Alternating):
    """As Alternating, but the first probe ask on an answer about invoices gets a reply with no verdict."""

    def __call__(self, request: Recorded) -> Reply:
        prompt = request.json()["messages"][-1]["content"]
        if "invoice" in prompt.split("ANSWER:\n", 1)[1].lower():
            with self.lock:
                n = self.seen[prompt]
                self.seen[prompt] += 1
            return Reply.chat("I would rather not say.") if n == 1 else Reply.verdict("pass")
        return super().__call__(request)


def test_an_ask_without_a_verdict_is_missing_not_stable(tmp_path: Path) -> None:
    with ScriptedServer(responder=BrokenOnInvoices()) as server:
        root = make_project(tmp_path, server)
        assert run_cases(root).returncode == 1
        r = oloproof(
            root,
            "judge",
            "probe",
            "latest",
            "--criterion",
            "grounded",
            "--times",
            "2",
            "--config",
            "judges.yaml",
            "--json",
        )
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        broken = [e for e in doc["cases"] if e["missing"]]
        assert [e["id"] for e in broken] == ["invoice_download"]
        (e,) = broken
        assert e["verdicts"] == ["pass", None, "pass"] and e["flipped"] is None
        assert e["missing"][0]["probe"] == 1 and e["missing"][0]["reason"].startswith("judge_error")
        assert doc["counts"]["with_missing_asks"] == 1 and doc["counts"]["asks_missing"] == 1
        assert doc["flip_rate"]["of"] == 12  # left out, never counted as stable
        text = oloproof(root, "inspect", doc["id"], "--config", "judges.yaml").stdout
        assert "  invoice_download: pass, missing, pass — missing (ask 1: judge_error" in text
        assert "Missing: 1 case(s) with an ask that returned no verdict; left out of the flip rate (see below)" in text


def test_an_edited_probe_document_is_an_error_naming_its_file(tmp_path: Path) -> None:
    from pytest_oloproof.store.files import Store

    store = Store(tmp_path / ".oloproof")
    doc = {
        "schema": "oloproof.judge_probe/1",
        "run_id": "run_x",
        "criterion": "grounded",
        "judge": {"type": "groundedness_judge", "criterion": "grounded", "identity": "sha256:ab"},
        "times": 1,
        "counts": {"probed": 1},
        "flip_rate": {"flipped": 0, "of": 1, "rate": 0.0, "low": 0.0, "high": 0.975, "confidence": 0.95},
        "cases": [{"id": "a", "verdicts": ["pass", "pass"], "flipped": False, "missing": []}],
    }
    good = store.save_doc("judge_probe", doc)
    assert store.load_doc("judge_probe", good) == doc
    bad = store.save_doc("judge_probe", {**doc, "cases": [{**doc["cases"][0], "verdicts": ["pass", "maybe"]}]})
    r = subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", "inspect", bad, "--store", str(store.root)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 2 and "judge_probes" in r.stderr and "cases" in r.stderr, r.stderr
    assert "remove the file and run `oloproof judge probe` again" in r.stderr


def test_the_flip_rate_interval_is_printed_rounded_outward() -> None:
    """Like every printed interval, the flip rate's never claims more than the data: 0 of 13 has an exact upper
    bound of 24.705%, printed 24.8% (plain rounding would print 24.7%, a bound the data does not reach)."""
    from scipy.stats import binomtest

    from pytest_oloproof.report.text import judge_probe_summary

    iv = binomtest(0, 13).proportion_ci(method="exact")
    doc = {"times": 3, "flip_rate": {"flipped": 0, "of": 13, "rate": 0.0, "low": iv.low, "high": iv.high,
                                     "confidence": 0.95}}  # fmt: skip
    assert judge_probe_summary(doc) == (
        "verdict flipped on 0 of 13 cases asked 4 times: 0.0% [0.0%, 24.8%] (95% Clopper–Pearson)"
    )
