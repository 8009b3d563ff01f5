"""LLM judges wired through the plugin and the CLI: caching, provider fixtures, secrets, validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.judge_server import Recorded, Reply, ScriptedServer

SECRET = "sk-test-DO-NOT-LEAK-7f3a9c1e"

SYSTEM = """
from pytest_oloproof import Passage, Retrieval, rag_system

DOCS = {"a": "Refunds take 14 days.", "b": "Seats cost 8 dollars."}

@rag_system(name="judged", version="1", depth=2, top_k=1, index_version="i1")
class Judged:
    def retrieve(self, input, depth):
        key = "a" if "refund" in input["q"] else "b"
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage(key, 1.0, DOCS[key]),))

    def generate(self, input, context):
        return {"answer": context[0].text, "citations": [context[0].doc_id]}
"""

JUDGE = """
import json, os
from pathlib import Path

def judge(messages):
    counter = Path(os.environ["JUDGE_COUNTER"])
    counter.write_text(str(int(counter.read_text() or 0) + 1) if counter.exists() else "1")
    answer = messages[-1]["content"].split("ANSWER:", 1)[1]
    ok = "14 days" in answer
    return json.dumps({"verdict": "pass" if ok else "fail", "rationale": "scripted"})
"""

CASES = "\n".join(
    json.dumps(c)
    for c in [
        {"id": "refund", "input": {"q": "refund time"}, "expected": {"answer": "14 days"}},
        {"id": "seats", "input": {"q": "seat price"}, "expected": {"answer": "8 dollars"}},
    ]
)


def _config(judge_line: str, module: str) -> str:
    return f"""
system:
  rag: {{object: "{module}:Judged"}}
cases: cases.jsonl
evaluators:
  - {{type: contains, criterion: answer_correct}}
  - {judge_line}
store: .store
"""


def _project(pytester: pytest.Pytester, judge_line: str, module: str) -> None:
    pytester.makepyfile(**{module: SYSTEM})
    pytester.makefile(".jsonl", cases=CASES)
    pytester.makefile(".yaml", oloproof=_config(judge_line, module))


def test_python_judge_is_cached_second_run_makes_no_calls(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = pytester.path / "calls.txt"
    monkeypatch.setenv("JUDGE_COUNTER", str(counter))
    pytester.makepyfile(judge_mod_a=JUDGE)
    _project(pytester, '{type: groundedness_judge, provider: python, object: "judge_mod_a:judge"}', "sys_judge_a")
    first = pytester.runpytest("--oloproof", "--oloproof-report", "r1.json")
    first.assert_outcomes(passed=1, failed=1)
    assert counter.read_text() == "2"
    report = json.loads((pytester.path / "r1.json").read_text())
    grounded = {c["id"]: c["criteria"]["grounded"] for c in report["cases"]}
    assert grounded["refund"]["value"] == 1.0 and grounded["seats"]["value"] == 0.0
    assert grounded["seats"]["detail"]["rationale"] == "scripted"
    second = pytester.runpytest("--oloproof")
    second.assert_outcomes(passed=1, failed=1)
    assert counter.read_text() == "2", "an identical second run must not call the judge"
    second.stdout.fnmatch_lines(["Cache: execution 2 hit/0 miss; judgment 4 hit/0 miss"])


def test_conftest_provider_fixture_replaces_the_configured_provider(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the configured provider points at a port nobody listens on; the fixture's provider answers instead
    _project(
        pytester,
        "{type: groundedness_judge, provider: openai, base_url: 'http://127.0.0.1:9/v1', model: m, retries: 0}",
        "sys_judge_b",
    )
    pytester.makeconftest(
        """
import json, pytest

class Always:
    def identity(self):
        return {"provider": "fixture", "model": "always-pass"}
    def complete(self, messages):
        return json.dumps({"verdict": "pass", "rationale": "from the fixture"})

@pytest.fixture(scope="session")
def oloproof_judge_provider():
    return Always()
"""
    )
    result = pytester.runpytest("--oloproof", "--oloproof-report", "r.json")
    result.assert_outcomes(passed=2)
    report = json.loads((pytester.path / "r.json").read_text())
    assert all(c["criteria"]["grounded"]["detail"]["rationale"] == "from the fixture" for c in report["cases"])


def _all_text(folder: Path) -> str:
    chunks = []
    for path in folder.rglob("*"):
        if path.is_file():
            chunks.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(chunks)


def test_openai_judge_over_http_never_leaks_the_api_key(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLOPROOF_TEST_KEY", SECRET)

    def respond(req: Recorded) -> Reply:
        body = req.json()
        ok = "14 days" in body["messages"][-1]["content"].split("ANSWER:", 1)[1]
        return Reply.verdict("pass" if ok else "fail", rationale="server says so")

    with ScriptedServer(responder=respond) as server:
        monkeypatch.setenv("JUDGE_URL", server.base_url)
        _project(
            pytester,
            "{type: groundedness_judge, provider: openai, base_url: '${JUDGE_URL}', model: tiny, "
            "api_key_env: OLOPROOF_TEST_KEY}",
            "sys_judge_c",
        )
        result = pytester.runpytest("--oloproof", "--oloproof-report", "r.json", "--junitxml", "j.xml")
        result.assert_outcomes(passed=1, failed=1)
        assert len(server.requests) == 2
        assert all(r.headers.get("Authorization") == f"Bearer {SECRET}" for r in server.requests)
    output = result.stdout.str() + result.stderr.str()
    assert SECRET not in output
    assert SECRET not in (pytester.path / "r.json").read_text()
    assert SECRET not in (pytester.path / "j.xml").read_text()
    assert SECRET not in _all_text(pytester.path / ".store")  # run records and every cache file


def test_unreachable_judge_is_missing_never_a_verdict(pytester: pytest.Pytester) -> None:
    with ScriptedServer([Reply(500, body="boom")]) as server:
        _project(
            pytester,
            f"{{type: groundedness_judge, provider: openai, base_url: '{server.base_url}', model: m, retries: 1}}",
            "sys_judge_d",
        )
        result = pytester.runpytest("--oloproof", "--oloproof-report", "r.json")
    report = json.loads((pytester.path / "r.json").read_text())
    for case in report["cases"]:
        c = case["criteria"]["grounded"]
        assert c["status"] == "missing" and c["reason"].startswith("judge_error: ")
    m = report["metrics"]["grounded"]
    assert (m["observed"], m["missing"]) == (0, 2)
    # nothing observed: with both missing cases at worst, the interval is all of [0, 1]
    result.stdout.fnmatch_lines(
        ["*grounded*0 / 0 observed · 2 missing · with missing at worst: ?0.0%, 100.0%? · 0 excluded*"]
    )
    # a missing judgment is never cached: a later run asks again
    assert report["cache"]["judgment"]["miss"] == 4


# ------------------------------------------------------------------ validate-judge


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JUDGE_COUNTER": str(cwd / "calls.txt")}
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, env=env
    )


def _labels(n_agree: int, n_disagree: int) -> str:
    rows = []
    for i in range(n_agree):
        ok = i % 2 == 0
        rows.append(
            {
                "id": f"agree-{i}",
                "output": {"answer": "14 days" if ok else "3 weeks"},
                "context": [{"doc_id": "a", "text": "Refunds take 14 days."}],
                "label": "pass" if ok else "fail",
            }
        )
    for i in range(n_disagree):
        rows.append(
            {
                "id": f"disagree-{i}",
                "output": {"answer": "two weeks"},
                "context": [{"doc_id": "a", "text": "Refunds take 14 days."}],
                "label": "pass",
            }
        )
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def test_validate_judge_records_agreement_and_exit_codes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(judge_mod_v=JUDGE)
    _project(pytester, '{type: groundedness_judge, provider: python, object: "judge_mod_v:judge"}', "sys_judge_v")
    (pytester.path / "good.jsonl").write_text(_labels(40, 0))
    (pytester.path / "poor.jsonl").write_text(_labels(20, 20))
    good = _cli(pytester.path, "validate-judge", "--criterion", "grounded", "--labels", "good.jsonl", "--json")
    assert good.returncode == 0, good.stderr
    doc = json.loads(good.stdout)
    assert doc["passed"] is True and doc["n"] == 40 and doc["agreement"]["accuracy"] == 1.0
    assert doc["id"].startswith("sha256:")
    stored = list((pytester.path / ".store" / "judge_validations").glob("*.json"))
    assert len(stored) == 1
    poor = _cli(pytester.path, "validate-judge", "--criterion", "grounded", "--labels", "poor.jsonl")
    assert poor.returncode == 1
    assert "Validation: NOT PASSED" in poor.stdout
    inspect = _cli(pytester.path, "inspect", doc["id"][:16])
    assert inspect.returncode == 0 and "Validation: PASSED" in inspect.stdout


def test_validate_judge_bad_input_exits_2_and_writes_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(judge_mod_w=JUDGE)
    _project(pytester, '{type: groundedness_judge, provider: python, object: "judge_mod_w:judge"}', "sys_judge_w")
    (pytester.path / "bad.jsonl").write_text('{"id": "x", "output": {}, "context": [], "label": "maybe"}\n{oops\n')
    bad = _cli(pytester.path, "validate-judge", "--criterion", "grounded", "--labels", "bad.jsonl")
    assert bad.returncode == 2
    assert "bad.jsonl:1" in bad.stderr and "bad.jsonl:2" in bad.stderr
    not_judge = _cli(pytester.path, "validate-judge", "--criterion", "answer_correct", "--labels", "bad.jsonl")
    assert not_judge.returncode == 2
    assert "'answer_correct' is not a judge criterion" in not_judge.stderr and "grounded" in not_judge.stderr
    assert not (pytester.path / ".store" / "judge_validations").exists()


LONE_SURROGATE_CASES = "\n".join(
    json.dumps(c)
    for c in [
        {
            "id": "refund",
            "input": {"q": "refund time"},
            "expected": {"answer": "14 days", "relevant": [{"doc_id": "a"}]},
        },
        {
            "id": "seats",
            "input": {"q": "seat price"},
            "expected": {"answer": "8 dollars", "relevant": [{"doc_id": "b"}]},
        },
    ]
)


@pytest.mark.parametrize("escaped", [True, False], ids=["escaped in the verdict", "raw in the reply"])
def test_a_lone_surrogate_in_a_rationale_costs_only_that_judges_criterion(
    pytester: pytest.Pytester, escaped: bool
) -> None:
    """`\\ud800` (no UTF-8 file can hold it) in one judge's rationale: that criterion is missing, with the
    reason; the case's other criteria (a retrieval metric, another judge) are recorded, never internal_error."""
    bad = '{"verdict": "pass", "rationale": "bad \\ud800 text"}' if escaped else None

    def respond(req: Recorded) -> Reply:
        if req.json()["model"] == "tiny":
            return Reply.verdict("pass", rationale="fine")
        if bad is not None:
            return Reply.chat(bad)
        return Reply(
            200,
            body=b'{"choices": [{"message": {"content": "{\\"verdict\\": \\"pass\\", '
            b'\\"rationale\\": \\"bad \\ud800 text\\"}"}}]}',
        )

    with ScriptedServer(responder=respond) as server:
        pytester.makepyfile(sys_judge_s=SYSTEM)
        pytester.makefile(".jsonl", cases=LONE_SURROGATE_CASES)
        pytester.makefile(
            ".yaml",
            oloproof=f"""
system:
  rag: {{object: "sys_judge_s:Judged"}}
cases: cases.jsonl
evaluators:
  - {{type: recall, k: 1}}
  - {{type: groundedness_judge, provider: openai, base_url: '{server.base_url}', model: tiny, retries: 0}}
  - {{type: groundedness_judge, criterion: grounded_b, provider: openai, base_url: '{server.base_url}',
      model: broken, retries: 0}}
store: .store
""",
        )
        result = pytester.runpytest_subprocess("--oloproof", "--oloproof-report", "r.json", "-p", "no:cacheprovider")
    report = json.loads((pytester.path / "r.json").read_text())
    assert len(report["cases"]) == 2, result.stdout.str()
    for case in report["cases"]:
        assert not case.get("error"), case["error"]
        criteria = case["criteria"]
        assert criteria["recall_at_1"] == {**criteria["recall_at_1"], "status": "observed", "value": 1.0}
        assert criteria["grounded"]["status"] == "observed" and criteria["grounded"]["value"] == 1.0
        broken = criteria["grounded_b"]
        assert broken["status"] == "missing" and "lone surrogate" in broken["reason"], broken
    assert "internal_error" not in result.stdout.str()


def _hostile_judge_run(tmp_path: Path, reply: Reply, signum: int) -> tuple[str, int, list[dict], list[Recorded]]:
    """`pytest --oloproof` (concurrency 2: judges asked ahead, on judge threads) against a judge sending
    `reply`, sent `signum` once the server answered its first request; (output, exit code, cases, requests).
    The hostile replies take minutes the way they used to be read: the run must end within one."""
    import signal

    (tmp_path / "sys_judge_drip.py").write_text(SYSTEM)
    (tmp_path / "cases.jsonl").write_text(CASES + "\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    with ScriptedServer([reply]) as server:
        (tmp_path / "oloproof.yaml").write_text(
            f"""
system:
  rag: {{object: "sys_judge_drip:Judged"}}
cases: cases.jsonl
concurrency: 2
evaluators:
  - {{type: groundedness_judge, provider: openai, base_url: '{server.base_url}', model: m, retries: 0, timeout_s: 1}}
store: .store
"""
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "--oloproof", "-p", "no:cacheprovider", "-p", "no:randomly"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            assert server.wait_for_requests(1) >= 1
            if not reply.drip_s:
                assert server.requests[0].answered.wait(ScriptedServer.PATIENCE_S)
            proc.send_signal(signum)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert all(r.answered.wait(ScriptedServer.PATIENCE_S) for r in server.requests)
    (run_dir,) = (tmp_path / ".store" / "runs").iterdir()
    cases = [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    return out, proc.returncode, cases, server.requests


def test_ctrl_c_does_not_wait_for_a_dripped_reply(tmp_path: Path) -> None:
    """A judge dripping its reply over about two minutes: after Ctrl-C the run records the case with the
    criterion missing (timed out at `timeout_s: 1`) and ends; it never waits for the reply's last byte
    (what the server sees: the client hung up mid-reply)."""
    import signal

    reply = Reply.verdict("pass", rationale="x" * 2000, drip_s=0.05)
    out, code, cases, requests = _hostile_judge_run(tmp_path, reply, signal.SIGINT)
    assert not any(r.complete for r in requests), out
    assert code == 2, out  # interrupted
    assert cases, out
    for case in cases:
        grounded = case["criteria"]["grounded"]
        assert grounded["status"] == "missing" and "timed out after 1s" in grounded["reason"], grounded


def test_sigterm_stops_a_run_whose_judge_sent_a_mebibyte_of_braces(tmp_path: Path) -> None:
    """Reading a verdict from 1 MiB of `{` took minutes of CPU on a judge thread, and the interrupted run
    waited for it: SIGTERM could not stop the run. It now takes milliseconds; the run ends, the criterion
    missing (not a verdict)."""
    import signal

    out, code, cases, _ = _hostile_judge_run(tmp_path, Reply.chat("{" * (1 << 20)), signal.SIGTERM)
    assert code in (1, 2), out  # failed (the run ended before the signal landed) or interrupted
    assert cases, out
    for case in cases:
        grounded = case["criteria"]["grounded"]
        assert grounded["status"] == "missing" and "not a JSON verdict" in grounded["reason"], grounded
