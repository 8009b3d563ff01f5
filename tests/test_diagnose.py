"""Diagnosis: labels, control/UNSTABLE, replays, reuse, errors, the CLI and inspect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof import cli
from pytest_oloproof.diagnose.diagnosis import Diagnoser, DiagnosisError, Request, implicated
from pytest_oloproof.engine.setup import RunSetup
from pytest_oloproof.report.text import diagnosis_lines as render
from tests.diagnose_project import EXPECTED_LABELS, Project, finished

HYPOTHESIS = "This is a hypothesis to test, not an established cause."


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def diagnoser(project: Project, request: Request) -> Diagnoser:
    ev = RunSetup.load(project.root / "oloproof.yaml", load_case_files=False)
    return Diagnoser(ev, request)


def main(project: Project, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`oloproof ARGS` in-process, for output checks (exit codes are checked in real processes too)."""
    code = cli.main([*args, "--config", str(project.root / "oloproof.yaml")])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_label_is_reachable_and_printed(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = project.run()
    code, out, err = main(project, capsys, "diagnose", run_id, "--intervention", "gold-context")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:4] == [
        "Selected: 7 failed cases with gold context (observed; no population claim)",
        "Undiagnosable: 1 failed case(s) without gold context: nogold",
        "Control: 1 of 7 passed when re-executed without the intervention",
        "UNSTABLE: 1 of 7, passed in the control; not diagnosed",
    ]
    assert lines[4:11] == [
        "Recovered under gold context: 5 of 6",
        "RETRIEVAL_MISS: 1 of 6, recovered; no relevant evidence was retrieved",
        "RANKED_OUT: 1 of 6, recovered; relevant evidence was retrieved but ranked below the top-k cut",
        "CONTEXT_ASSEMBLY_LOSS: 1 of 6, recovered; relevant evidence within top-k was left out of the context",
        "CONTEXT_DISTRACTION: 1 of 6, recovered; relevant evidence was in the context, "
        "and recovered without the other passages",
        "RECOVERED_UNLABELED: 1 of 6, recovered; the case has no relevance labels to place the failure",
        "GENERATION_FAILURE: 1 of 6, still failed with the gold context",
    ]
    # a five-way tie: every factor is implicated with its share, never called a cause
    implicated_line = lines[11]
    assert implicated_line.startswith("Implicated: retrieval, in 1 of the 5 recovered failures; ranking cut, in 1 of")
    assert "generation, in 1 of the 6 diagnosed failures." in implicated_line
    assert "cause" not in implicated_line
    experiments = [line for line in lines if line.startswith("Candidate experiment: ")]
    assert all(line.endswith(HYPOTHESIS) for line in experiments)
    assert "Candidate experiment: a change of prompt or model. " + HYPOTHESIS in experiments
    assert lines[-3].startswith("Diagnosis sha256:") and len(lines[-3].split(":")[1]) == 64
    assert lines[-2].startswith("Child runs: gold context run_") and ", control run_" in lines[-2]
    assert lines[-1] == f"Cases: oloproof inspect {lines[-3].split()[1]}"

    doc_id = lines[-3].split()[1]
    code, out, _ = main(project, capsys, "inspect", doc_id[:16])
    assert code == 0
    by_case = {line.split(":")[0]: line for line in out.splitlines()}
    for cid, (label, reason, strength, pos) in EXPECTED_LABELS.items():
        shown = "n/a" if pos is None else pos
        assert by_case[cid] == f"{cid}: {label}, {reason}, strength {strength}, best relevant position {shown}"
    assert by_case["Undiagnosable"] == "Undiagnosable: 1 failed case(s) without gold context: nogold"


@pytest.mark.parametrize("control_first", [True, False])
def test_flaky_case_is_unstable_whatever_the_order(project: Project, control_first: bool) -> None:
    run_id = project.run()
    d = diagnoser(project, Request(run=run_id))
    d.select()
    outcome = d.run_case("flaky", control_first=control_first)
    assert outcome["entry"]["label"] == "UNSTABLE"
    assert project.calls("generate", "flaky") == 3  # the run, then control and intervention


def test_diagnosis_document_holds_every_count(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = project.run()
    code, out, _ = main(project, capsys, "diagnose", run_id, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "oloproof.diagnosis/1"
    assert doc["run_id"] == run_id and doc["criterion"] == "answer_correct"
    assert doc["intervention"] == {"name": "gold-context", "settings": {}}
    c = doc["counts"]
    assert (c["selected"], c["control_passed"], c["unstable"], c["diagnosed"], c["recovered"]) == (7, 1, 1, 6, 5)
    assert c["undiagnosable"] == 1 and doc["undiagnosable"] == ["nogold"]
    assert c["labels"]["RANKED_OUT"] == 1
    assert {e["id"]: e["label"] for e in doc["cases"]} == {k: v[0] for k, v in EXPECTED_LABELS.items()}
    gen = next(e for e in doc["cases"] if e["id"] == "gen")
    assert gen["control"] == {"status": "observed", "value": 0.0}
    assert gen["intervention"] == {"status": "observed", "value": 0.0}
    # stored as-is, content addressed; child runs are ordinary runs with their purpose and parent
    stored = json.loads((project.store / "diagnoses" / f"{doc['id'].split(':')[1]}.json").read_text())
    assert stored == {k: v for k, v in doc.items() if k != "id"}
    for key, purpose in (("gold_context", "diagnosis-gold-context"), ("control", "diagnosis-control")):
        header = json.loads((project.store / "runs" / doc["child_runs"][key] / "run.json").read_text())
        assert header["purpose"] == purpose and header["parent_run"] == run_id
        assert header["status"] == "complete" and header["schema"] == "oloproof.run/1"


def test_control_bypasses_every_cache_and_gold_makes_no_retriever_call(project: Project) -> None:
    run_id = project.run()
    retrieves, generates = project.calls("retrieve"), project.calls("generate")
    d = diagnoser(project, Request(run=run_id))
    result = d.run_all()
    d.ev.caches.close()
    # 7 selected cases: the control retrieves and generates each again (the caches hold all of them);
    # the gold-context run generates each once and never calls the retriever
    assert project.calls("retrieve") - retrieves == 7
    assert project.calls("generate") - generates == 14
    control = d.ev.store.load_run(result.doc["child_runs"]["control"])
    assert all(c["cache"]["retrieve"] == "miss" and c["cache"]["generate"] == "miss" for c in control["cases"])
    assert all(c["cache"]["judgment"]["hit"] == 0 for c in control["cases"])
    gold = d.ev.store.load_run(result.doc["child_runs"]["gold_context"])
    # citation checks see the gold passages
    assert all(c["criteria"]["citations_valid"]["status"] == "observed" for c in gold["cases"])
    assert {c["id"]: c["criteria"]["citations_valid"]["value"] for c in gold["cases"]}["miss"] == 1.0


def test_top_k_replay_makes_no_retriever_call_and_carries_labels(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = project.run()
    retrieves = project.calls("retrieve")
    code, out, err = main(project, capsys, "diagnose", run_id, "--intervention", "top-k", "--top-k", "3")
    assert code == 0, err
    assert "running it first" in err  # no gold-context diagnosis existed
    # the gold-context diagnosis ran first (its control retrieves 7 times); the replay itself retrieves nothing
    assert project.calls("retrieve") - retrieves == 7
    lines = out.splitlines()
    assert "Recovered under top-k 3: 1 of 6" in lines
    assert "Confirmed under top-k 3: 1 of 1 RANKED_OUT cases also recovered" in lines
    labels_line = next(line for line in lines if line.startswith("Labels from gold context (diagnosis sha256:"))
    assert labels_line.endswith("): 5 of 6 recovered")
    assert "RANKED_OUT: 1 of 6, recovered; relevant evidence was retrieved but ranked below the top-k cut" in lines
    assert not any(line.startswith(("Implicated", "Candidate")) for line in lines)
    child = lines[-2]
    assert (
        child.startswith("Child runs: gold context run_")
        and ", top-k 3 run_" in child
        and ", replay control run_" in child
    )

    retrieves, generates = project.calls("retrieve"), project.calls("generate")
    code, out, _ = main(project, capsys, "diagnose", run_id, "--intervention", "top-k", "--top-k", "3")
    assert code == 0
    assert project.calls("retrieve") == retrieves  # replays re-generate only
    assert project.calls("generate") - generates == 14  # replay + replay control, the gold diagnosis reused
    doc_id = out.splitlines()[-3].split()[1]
    code, out, _ = main(project, capsys, "inspect", doc_id)
    assert (
        "ranked: RANKED_OUT, relevant_ranked_below_top_k, strength intervention_recovery, "
        "best relevant position 3; under top-k 3: recovered" in out.splitlines()
    )


def test_reranker_recovers_ranked_out_and_budget_lost_cases(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = project.run()
    main(project, capsys, "diagnose", run_id)
    retrieves = project.calls("retrieve")
    spec = f"{project.module}:to_top"
    code, out, err = main(project, capsys, "diagnose", run_id, "--intervention", "reranker", "--reranker", spec)
    assert code == 0, err
    assert project.calls("retrieve") == retrieves
    lines = out.splitlines()
    assert f"Recovered under reranker {spec}: 3 of 6" in lines  # ranked, budget and distract
    assert f"Confirmed under reranker {spec}: 2 of 2 RANKED_OUT or CONTEXT_ASSEMBLY_LOSS cases also recovered" in lines
    doc = json.loads(main(project, capsys, "inspect", lines[-3].split()[1], "--json")[1])
    recovered = {e["id"] for e in doc["cases"] if e["replay"].get("value") == 1.0 and not e["unstable"]}
    assert recovered == {"ranked", "budget", "distract"}
    header = json.loads((project.store / "runs" / doc["child_runs"]["replay"] / "run.json").read_text())
    assert header["purpose"] == "diagnosis-reranker" and header["parent_run"] == run_id
    header = json.loads((project.store / "runs" / doc["child_runs"]["replay_control"] / "run.json").read_text())
    assert header["purpose"] == "diagnosis-replay-control"


def test_reuse_of_identical_child_runs_and_fresh(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = project.run()
    first = main(project, capsys, "diagnose", run_id)[1].splitlines()
    generates, retrieves = project.calls("generate"), project.calls("retrieve")
    runs = sorted(p.name for p in (project.store / "runs").iterdir())
    again = main(project, capsys, "diagnose", run_id[:-3])[1].splitlines()  # a unique prefix
    assert again == first  # same child runs, so the same diagnosis id
    assert (project.calls("generate"), project.calls("retrieve")) == (generates, retrieves)
    assert sorted(p.name for p in (project.store / "runs").iterdir()) == runs
    fresh = main(project, capsys, "diagnose", run_id, "--fresh")[1].splitlines()
    assert project.calls("generate") > generates
    assert fresh[-2] != first[-2] and fresh[-3] != first[-3]
    assert fresh[:-3] == first[:-3]


def test_no_failed_cases_prints_selected_zero(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = project.run()
    listing = project.listing()
    code, out, _ = main(project, capsys, "diagnose", run_id, "--criterion", "citations_valid")
    assert code == 0
    assert out.splitlines() == ["Selected: 0 failed cases with gold context (observed; no population claim)"]
    assert project.listing() == listing


def test_errors_exit_2_and_write_nothing(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = project.run()
    plain_id = project.run("callable.yaml")
    broken_id = project.run(status="incomplete")
    listing = project.listing()
    cases = {
        "unknown run": (["diagnose", "run_nope"], "no run matches 'run_nope'"),
        "incomplete run": (["diagnose", broken_id], f"run {broken_id} is incomplete"),
        "non-RAG system": (
            ["diagnose", plain_id, "--config", str(project.root / "callable.yaml")],
            "is a plain callable, not a RAG",
        ),
        "unknown criterion": (["diagnose", run_id, "--criterion", "nope"], "--criterion 'nope': run"),
        "top-k beyond depth": (["diagnose", run_id, "--intervention", "top-k", "--top-k", "5"], "--top-k 5: run"),
        "top-k missing": (["diagnose", run_id, "--intervention", "top-k"], "needs --top-k N"),
        "bad reranker": (
            ["diagnose", run_id, "--intervention", "reranker", "--reranker", "no_such_module:f"],
            "cannot import module 'no_such_module'",
        ),
    }
    for name, (args, message) in cases.items():
        code = cli.main(args if "--config" in args else [*args, "--config", str(project.root / "oloproof.yaml")])
        out, err = capsys.readouterr()
        assert code == 2, (name, out, err)
        assert message in err, (name, err)
        assert out == ""
    assert project.listing() == listing


def test_cli_exit_codes_in_real_processes(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = project.run()
    listing = project.listing()
    error = project.cli("diagnose", run_id, "--intervention", "top-k", "--top-k", "9")
    ok = project.cli("diagnose", run_id, "--criterion", "answer_correct")
    code, out, err = finished(error)
    assert code == 2 and "recorded 4 candidates per case (depth 4)" in err and out == ""
    code, out, err = finished(ok)
    assert code == 0, err
    assert [p for p in project.listing() if p not in listing]  # the child runs and the diagnosis
    doc_id = out.splitlines()[-3].split()[1]
    code, out, _ = main(project, capsys, "inspect", doc_id.removeprefix("sha256:")[:10])
    assert code == 0
    assert out.splitlines()[0] == (
        "budget: CONTEXT_ASSEMBLY_LOSS, relevant_dropped_from_context, "
        "strength intervention_recovery, best relevant position 2"
    )
    code, out, _ = main(project, capsys, "inspect", run_id[:-3], "--json")  # a unique prefix of a run id
    assert code == 0 and json.loads(out)["run_id"] == run_id
    code, _, err = main(project, capsys, "inspect", "run_")
    assert code == 2 and "ambiguous" in err


def test_system_settings_that_differ_from_the_run_warn(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = project.run()
    cfg = project.root / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("version: v1", "version: v2"))
    code, _, err = main(project, capsys, "diagnose", run_id)
    assert code == 0
    assert "version: run 'v1', config 'v2'" in err and "diagnosing with the run's recorded settings" in err
    doc = json.loads(main(project, capsys, "diagnose", run_id, "--json")[1])
    assert doc["system"]["version"] == "v1"
    cfg.write_text(cfg.read_text().replace("name: diag-rag", "name: other"))
    with pytest.raises(DiagnosisError, match=r"system\.name is 'other' but run"):
        diagnoser(project, Request(run=run_id))


def test_implicated_picks_the_largest_factor() -> None:
    counts = {"CONTEXT_ASSEMBLY_LOSS": 2, "RETRIEVAL_MISS": 1, "GENERATION_FAILURE": 1}
    assert implicated(counts, recovered=3, diagnosed=4) == [
        {"factor": "context budget", "label": "CONTEXT_ASSEMBLY_LOSS", "count": 2, "of": 3, "basis": "recovered"}
    ]
    assert implicated({"RECOVERED_UNLABELED": 2}, recovered=2, diagnosed=2) == []


def test_render_needs_only_the_document() -> None:
    doc: dict[str, Any] = {
        "counts": {"selected": 0},
        "undiagnosable": ["a", "b"],
        "intervention": {"name": "gold-context"},
    }
    assert render(doc, None) == [
        "Selected: 0 failed cases with gold context (observed; no population claim)",
        "Undiagnosable: 2 failed case(s) without gold context: a, b",
    ]


NO_COUNT_APP = """
from pytest_oloproof import rag_system
from {module} import DiagRag


@rag_system(name="diag-rag", version="v1", depth=4, top_k=2, index_version="ix-1")
class NoCount:
    '''The same retriever and generator, without count_tokens (so without a token budget).'''

    def retrieve(self, input, depth):
        return DiagRag().retrieve(input, depth)

    def generate(self, input, context):
        return DiagRag().generate(input, context)
"""


def no_count_config(project: Project) -> Path:
    """nocount.yaml: the project's system without count_tokens."""
    (project.root / f"{project.module}_nocount.py").write_text(NO_COUNT_APP.format(module=project.module))
    cfg = project.root / "nocount.yaml"
    text = (
        (project.root / "oloproof.yaml")
        .read_text()
        .replace(f"{project.module}:DiagRag", f"{project.module}_nocount:NoCount")
    )
    cfg.write_text(text)
    return cfg


def test_token_budget_replay_makes_no_retriever_call_and_carries_labels(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = project.run()
    main(project, capsys, "diagnose", run_id)  # the gold-context diagnosis, reused by the replay
    retrieves, generates = project.calls("retrieve"), project.calls("generate")
    args = ("diagnose", run_id, "--intervention", "token-budget", "--token-budget", "20")
    code, out, err = main(project, capsys, *args)
    assert code == 0, err
    assert project.calls("retrieve") == retrieves  # re-assembled from the recorded candidates
    assert project.calls("generate") - generates == 14  # 7 cases: the replay and its control
    lines = out.splitlines()
    # at 20 tokens the long relevant passage (10 tokens, after a 3-token one) enters the context: only `budget`
    assert "Recovered under token budget 20: 1 of 6" in lines
    assert "Confirmed under token budget 20: 1 of 1 CONTEXT_ASSEMBLY_LOSS cases also recovered" in lines
    labels_line = next(line for line in lines if line.startswith("Labels from gold context (diagnosis sha256:"))
    assert labels_line.endswith("): 5 of 6 recovered")
    assert ", token budget 20 run_" in lines[-2] and ", replay control run_" in lines[-2]
    doc = json.loads(main(project, capsys, "inspect", lines[-3].split()[1], "--json")[1])
    assert doc["intervention"] == {"name": "token-budget", "settings": {"token_budget": 20}}
    replay = d_run(project, doc["child_runs"]["replay"])
    assert replay["purpose"] == "diagnosis-token-budget" and replay["parent_run"] == run_id
    budget = next(c for c in replay["cases"] if c["id"] == "budget")
    assert budget["context"] == [1, 2] and budget["dropped"] == [] and budget["cache"]["retrieve"] is None
    control = next(c for c in d_run(project, doc["child_runs"]["replay_control"])["cases"] if c["id"] == "budget")
    assert control["context"] == [1] and control["dropped"] == [{"position": 2, "reason": "token_budget"}]
    code, out, _ = main(project, capsys, "inspect", doc["id"])
    assert "best relevant position 2; under token budget 20: recovered" in out


def d_run(project: Project, run_id: str) -> dict[str, Any]:
    from pytest_oloproof.store.files import Store

    return dict(Store(project.store).load_run(run_id))


def test_token_budget_replay_counts_what_the_run_did_not(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    """A run recorded without token counts (its system had no count_tokens): the replay counts the recorded
    passages with the configured system's count_tokens, and still calls no retriever."""
    run_id = project.run(no_count_config(project).name)
    retrieves = project.calls("retrieve")
    code, out, err = main(project, capsys, "diagnose", run_id, "--intervention", "token-budget", "--token-budget", "3")
    assert code == 0, err
    assert "diagnosing with the run's recorded settings" in err  # the run had no budget
    doc = json.loads(main(project, capsys, "inspect", out.splitlines()[-3].split()[1], "--json")[1])
    # without a budget `budget` passed: 6 selected, and only the gold-context diagnosis's control retrieved
    assert doc["counts"]["selected"] == 6 and project.calls("retrieve") - retrieves == 6
    assert all(c["tokens"] is None for rec in d_run(project, run_id)["cases"] for c in rec["retrieval"] or [])
    distract = next(c for c in d_run(project, doc["child_runs"]["replay"])["cases"] if c["id"] == "distract")
    assert [c["tokens"] for c in distract["retrieval"]] == [4, 4]  # "the answer is ANSWER-…"
    assert distract["context"] == [] and [d["position"] for d in distract["dropped"]] == [1, 2]


def test_token_budget_replay_errors_exit_2_and_write_nothing(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = project.run()
    nocount = no_count_config(project)
    listing = project.listing()
    config = str(project.root / "oloproof.yaml")
    cases = {
        "budget missing": (["diagnose", run_id, "--intervention", "token-budget"], "needs --token-budget N"),
        "budget zero": (
            ["diagnose", run_id, "--intervention", "token-budget", "--token-budget", "0"],
            "--token-budget",
        ),
        "budget not a number": (
            ["diagnose", run_id, "--intervention", "token-budget", "--token-budget", "1.5"],
            "--token-budget",
        ),
        "budget for top-k": (
            ["diagnose", run_id, "--intervention", "top-k", "--top-k", "3", "--token-budget", "20"],
            "--token-budget is for --intervention token-budget, not top-k",
        ),
        "no count_tokens": (
            ["diagnose", run_id, "--intervention", "token-budget", "--token-budget", "20", "--config", str(nocount)],
            "has no count_tokens(passage)",
        ),
    }
    for name, (args, message) in cases.items():
        code = cli.main(args if "--config" in args else [*args, "--config", config])
        out, err = capsys.readouterr()
        assert code == 2, (name, out, err)
        assert message in err, (name, err)
        assert out == ""
    assert project.listing() == listing
    with pytest.raises(DiagnosisError, match="a whole number of tokens, at least 1"):
        diagnoser(project, Request(run=run_id, intervention="token-budget", token_budget=0))
