"""Both LLM judges are configured from oloproof.yaml alike (issue 18 §2): the same settings, the same checks,
errors naming file, line and key, and both runnable, validatable and gateable against a loopback server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_oloproof.engine.setup import RunSetup
from pytest_oloproof.errors import ConfigError
from pytest_oloproof.evaluators.judges import CitationSupportJudge, GroundednessJudge
from pytest_oloproof.evaluators.registry import _options_of
from tests.judge_server import Recorded, Reply, ScriptedServer

SYSTEM = """
from pytest_oloproof import Passage, Retrieval, rag_system

DOCS = {"a": "Refunds take 14 days [a].", "b": "Seats cost 8 dollars [b]."}

@rag_system(name="two-judges", version="1", depth=2, top_k=1, index_version="i1")
class TwoJudges:
    def retrieve(self, input, depth):
        key = "a" if "refund" in input["q"] else "b"
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage(key, 1.0, DOCS[key]),))

    def generate(self, input, context):
        return {"answer": context[0].text, "citations": [context[0].doc_id]}
"""

N_CASES = 30  # enough pairs for a 25-point non-inferiority margin to pass with no changed verdict


def _cases() -> str:
    rows = []
    for i in range(N_CASES):
        q = "refund time" if i % 3 else "seat price"
        rows.append({"id": f"c{i:02d}", "input": {"q": q}, "expected": {"answer": "14 days"}})
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def _config(module: str, judges: str) -> str:
    return f"""system:
  rag: {{object: "{module}:TwoJudges"}}
cases: cases.jsonl
evaluators:
  - {{type: contains, criterion: answer_correct}}
{judges}store: .store
"""


def _judge_lines(url: str = "${JUDGE_URL}") -> str:
    shared = f"provider: openai, model: tiny, base_url: '{url}', api_key_env: JUDGE_KEY, retries: 0"
    return (
        f"  - {{type: groundedness_judge, {shared}, temperature: 0.0, concurrency: 2, timeout_s: 5}}\n"
        f"  - {{type: citation_support_judge, {shared}, temperature: 0.0, concurrency: 2, timeout_s: 5, "
        "citations_field: citations}\n"
    )


def _write(root: Path, module: str, judges: str) -> Path:
    (root / f"{module}.py").write_text(SYSTEM)
    (root / "cases.jsonl").write_text(_cases())
    path = root / "oloproof.yaml"
    path.write_text(_config(module, judges))
    return path


# ------------------------------------------------------------------ the settings and their checks


def test_citation_judge_takes_every_setting_of_the_groundedness_judge_plus_its_own() -> None:
    grounded, citations = _options_of(GroundednessJudge), _options_of(CitationSupportJudge)
    assert set(citations) == set(grounded) | {"citations_field"}
    assert {"provider", "model", "base_url", "api_key_env", "prompt", "temperature", "concurrency", "timeout_s"} <= set(
        citations
    )


@pytest.mark.parametrize("judge", ["groundedness_judge", "citation_support_judge"])
def test_full_openai_settings_build_for_both_judges(
    tmp_path: Path, judge: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K", "sk-test")  # api_key_env must name a set variable before anything runs
    prompt = "{passage} {claim}" if judge == "citation_support_judge" else "{context} {answer}"
    (tmp_path / "p.txt").write_text(f"Judge this: {prompt}\n")
    path = _write(
        tmp_path,
        f"cfg_{judge}",
        f"  - {{type: {judge}, provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', api_key_env: K, "
        "temperature: 0.2, concurrency: 3, timeout_s: 7.5, retries: 1, prompt: p.txt}\n",
    )
    ev = RunSetup.load(path, load_case_files=False)
    built = ev.evaluators[1]
    assert built.type == judge
    identity = built.settings()["provider"]
    assert identity == {
        "provider": "openai",
        "model": "m",
        "base_url": "http://127.0.0.1:9/v1",
        "temperature": 0.2,
        "extra": {},
    }
    assert built.settings()["prompt_version"] == "custom"
    assert built.provider.concurrency == 3 and built.provider.timeout_s == 7.5  # type: ignore[attr-defined]
    ev.caches.close()


def _error(tmp_path: Path, line: str) -> str:
    path = _write(tmp_path, "cfg_err", line)
    with pytest.raises(ConfigError) as info:
        RunSetup.load(path, load_case_files=False)
    return str(info.value)


@pytest.mark.parametrize("judge", ["groundedness_judge", "citation_support_judge"])
def test_judge_setting_errors_name_file_line_and_key(tmp_path: Path, judge: str) -> None:
    where = re.escape(str(tmp_path / "oloproof.yaml")) + r":6: evaluators\[1\]"
    msg = _error(tmp_path, f"  - {{type: {judge}}}\n")
    assert re.match(where + r"\.model: provider openai: `model` is required", msg), msg
    msg = _error(tmp_path, f"  - {{type: {judge}, model: m, concurency: 2}}\n")
    assert re.match(where + r"\.concurency: unknown key for " + judge + "; did you mean concurrency", msg), msg
    msg = _error(tmp_path, f"  - {{type: {judge}, model: m, concurrency: many}}\n")
    assert re.match(where + r"\.concurrency: expected a valid integer", msg), msg
    msg = _error(tmp_path, f"  - {{type: {judge}, model: m, concurrency: 0}}\n")
    assert re.match(where + r"\.concurrency: openai provider: concurrency must be >= 1", msg), msg
    msg = _error(tmp_path, f"  - {{type: {judge}, provider: python}}\n")
    assert re.match(where + r"\.object: provider python: `object: module:function` is required", msg), msg
    msg = _error(tmp_path, f"  - {{type: {judge}, model: m, prompt: nowhere.txt}}\n")
    assert re.match(where + r"\.prompt: " + judge + ": prompt file .*nowhere.txt' not found", msg), msg


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("127.0.0.1:8000/v1", "has no scheme; write it with http:// or https:// (e.g. http://127.0.0.1:8000/v1)"),
        ("ftp://127.0.0.1/v1", "scheme 'ftp://' is not http:// or https://"),
        ("http://127.0.0.1:8000/v1 ", "contains whitespace; write the URL without spaces"),
        ("judge server", "contains whitespace"),
        ("http:///v1", "names no host"),
        ("http://127.0.0.1:80000/v1", "the port is not a number from 1 to 65535"),
        ("http://127.0.0.1:8000/v1?key=1", "has a query or fragment"),
        ("", "base_url is empty; give the endpoint's URL"),
    ],
    ids=["no-scheme", "ftp", "trailing-space", "not-a-url", "no-host", "bad-port", "query", "empty"],
)
@pytest.mark.parametrize("judge", ["groundedness_judge", "citation_support_judge"])
def test_a_judge_base_url_that_is_not_an_http_url_is_an_error_naming_the_key(
    tmp_path: Path, judge: str, url: str, problem: str
) -> None:
    msg = _error(tmp_path, f"  - {{type: {judge}, model: m, base_url: '{url}'}}\n")
    where = str(tmp_path / "oloproof.yaml") + ":6: evaluators[1].base_url: openai provider: base_url"
    assert msg.startswith(where), msg
    assert problem in msg, msg


def test_a_bad_judge_base_url_stops_the_session_before_any_case_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the check every judge call of the run failed (retried), and every judged criterion was missing."""
    monkeypatch.setenv("JUDGE_KEY", "sk-loopback")
    with ScriptedServer(responder=_respond) as server:
        monkeypatch.setenv("JUDGE_URL", server.base_url.removeprefix("http://"))  # the scheme left out
        _write(pytester.path, "bad_url_sys", _judge_lines())
        result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
        assert result.ret == 2, result.stdout.str()
        result.stdout.fnmatch_lines(
            ["*oloproof.yaml:6: evaluators[[]1[]].base_url: openai provider: base_url '${JUDGE_URL}' has no scheme*"]
        )
        assert server.requests == []
        assert not (pytester.path / ".store" / "runs").exists()


def test_citations_field_is_type_checked(tmp_path: Path) -> None:
    msg = _error(tmp_path, "  - {type: citation_support_judge, model: m, citations_field: [a]}\n")
    assert "evaluators[1].citations_field: expected a valid string" in msg


# ------------------------------------------------------------------ both judges end to end over HTTP


def _respond(req: Recorded) -> Reply:
    """Grounded when the answer says 14 days; a citation supported when its claim does."""
    text = req.json()["messages"][-1]["content"]
    judged = text.split("ANSWER:", 1)[1] if "ANSWER:" in text else text.split("CLAIM:", 1)[1]
    judged = judged.split("Reply with JSON", 1)[0]
    return Reply.verdict("pass" if "14 days" in judged else "fail", rationale="loopback")


def _labels(path: Path, criterion: str) -> None:
    rows = []
    for i in range(40):
        ok = i % 2 == 0
        answer = ("Refunds take 14 days [a]." if ok else "Refunds take 3 weeks [a].") + " Thanks."
        rows.append(
            {
                "id": f"{criterion}-{i}",
                "output": {"answer": answer, "citations": ["a"]},
                "context": [{"doc_id": "a", "text": "Refunds take 14 days."}],
                "label": "pass" if ok else "fail",
            }
        )
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, env=os.environ
    )


POLICY = """decisions:
  - {name: grounded-not-worse, criterion: grounded, test: non-inferiority, margin: 25}
  - {name: citations-not-worse, criterion: citations_supported, test: non-inferiority, margin: 25}
min_pairs: 10
"""


def test_both_judges_run_validate_and_gate_from_yaml(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUDGE_KEY", "sk-loopback")
    with ScriptedServer(responder=_respond) as server:
        monkeypatch.setenv("JUDGE_URL", server.base_url)
        _write(pytester.path, "two_judges_sys", _judge_lines())
        first = pytester.runpytest("--oloproof", "-p", "no:cacheprovider", "--oloproof-report", "r1.json")
        assert first.ret == 1  # the seat cases fail answer_correct and both judges
        report = json.loads((pytester.path / "r1.json").read_text())
        for case in report["cases"]:
            refund = case["id"] != "c00" and int(case["id"][1:]) % 3 != 0
            for name in ("grounded", "citations_supported"):
                assert case["criteria"][name]["status"] == "observed"
                assert case["criteria"][name]["value"] == (1.0 if refund else 0.0), (case["id"], name)
        assert report["cases"][1]["criteria"]["citations_supported"]["detail"]["citations"][0]["doc_id"] == "a"
        assert all(r.headers.get("Authorization") == "Bearer sk-loopback" for r in server.requests)
        baseline = report["run_id"]
        (pytester.path / "compare.yaml").write_text(POLICY)

        # not validated yet: neither judge may gate
        gated = pytester.runpytest(
            "--oloproof", "-p", "no:cacheprovider", "--oloproof-baseline", baseline, "--oloproof-policy", "compare.yaml"
        )
        assert gated.ret == 3
        gated.stdout.fnmatch_lines(
            [
                "*grounded-not-worse  grounded  *INSUFFICIENT_EVIDENCE  judge_not_validated*",
                "*citations-not-worse  citations_supported  *INSUFFICIENT_EVIDENCE  judge_not_validated*",
            ]
        )

        for criterion in ("grounded", "citations_supported"):
            labels = pytester.path / f"{criterion}.jsonl"
            _labels(labels, criterion)
            done = _cli(pytester.path, "validate-judge", "--criterion", criterion, "--labels", labels.name)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "Validation: PASSED" in done.stdout

        # validated: the same judges now gate, and pass (no verdict changed)
        gated = pytester.runpytest(
            "--oloproof", "-p", "no:cacheprovider", "--oloproof-baseline", baseline, "--oloproof-policy", "compare.yaml"
        )
        gated.stdout.fnmatch_lines(
            [
                "Gate: PASS (exit 0)",
                "*grounded-not-worse  grounded  *PASS*",
                "*citations-not-worse  citations_supported  *PASS*",
            ]
        )
        assert gated.ret == 0


def test_validate_judge_text_output_has_the_confusion_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        conf_rules="""
import json

def judge(messages):
    claim = messages[-1]["content"].split("CLAIM:", 1)[1]
    return json.dumps({"verdict": "pass" if "14 days" in claim or "two weeks" in claim else "fail"})
"""
    )
    _write(
        pytester.path, "conf_sys", '  - {type: citation_support_judge, provider: python, object: "conf_rules:judge"}\n'
    )
    labels = pytester.path / "labels.jsonl"
    _labels(labels, "citations_supported")
    extra = {
        "id": "wrong",
        "output": {"answer": "Refunds take two weeks [a].", "citations": ["a"]},
        "context": [{"doc_id": "a", "text": "Refunds take 14 days."}],
        "label": "fail",
    }
    labels.write_text(labels.read_text() + json.dumps(extra) + "\n")
    done = _cli(pytester.path, "validate-judge", "--criterion", "citations_supported", "--labels", "labels.jsonl")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = lines.index("Confusion (human label × judge verdict, judged examples only):")
    table = [line.split() for line in lines[start + 1 : start + 5]]
    assert table == [
        ["judge", "pass", "judge", "fail", "total"],
        ["human", "pass", "20", "0", "20"],
        ["human", "fail", "1", "20", "21"],
        ["total", "21", "20", "41"],
    ]
    as_json = json.loads(
        _cli(
            pytester.path, "validate-judge", "--criterion", "citations_supported", "--labels", "labels.jsonl", "--json"
        ).stdout
    )
    assert as_json["confusion"] == {
        "human_pass_judge_pass": 20,
        "human_pass_judge_fail": 0,
        "human_fail_judge_pass": 1,
        "human_fail_judge_fail": 20,
    }


def test_every_judge_example_in_the_judges_guide_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    import yaml

    from pytest_oloproof.config.settings import EvaluatorSettings
    from pytest_oloproof.evaluators.registry import Registry

    section = (Path(__file__).parents[1] / "docs" / "guides" / "judges.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)
    entries = []
    for block in blocks:
        text = block if block.startswith("evaluators:") else "evaluators:\n" + block
        entries += yaml.safe_load(text)["evaluators"]
    assert {e["type"] for e in entries} == {"groundedness_judge", "citation_support_judge"}
    (tmp_path / "my_judges.py").write_text('def grounded(messages):\n    return \'{"verdict": "pass"}\'\n')
    registry = Registry()
    for i, entry in enumerate(entries):
        built = registry.build(EvaluatorSettings.model_validate(entry), i, "judges.md", tmp_path, is_rag=True)
        assert built.settings()["provider"]["model"] == entry.get("model")


def test_a_subclass_forwarding_kwargs_keeps_its_bases_settings_and_their_checks() -> None:
    from typing import Any

    from pytest_oloproof.config.settings import EvaluatorSettings
    from pytest_oloproof.evaluators import CriterionValue, EvalInput, Evaluator
    from pytest_oloproof.evaluators.registry import Registry

    class Base(Evaluator):
        type = "base_eval"

        def __init__(self, criterion: str = "b", asserts: bool | None = None, *, threshold: float = 0.5) -> None:
            super().__init__(criterion, asserts)
            self.threshold = threshold

        def evaluate(self, x: EvalInput) -> CriterionValue:
            return CriterionValue.observed(True)

    class Sub(Base):
        type = "sub_eval"

        def __init__(self, criterion: str = "s", asserts: bool | None = None, *, extra: int = 1, **kw: Any) -> None:
            super().__init__(criterion, asserts, **kw)
            self.extra = extra

    registry = Registry({"sub_eval": Sub})
    built = registry.build(
        EvaluatorSettings.model_validate({"type": "sub_eval", "threshold": "0.25", "extra": 3}),
        0,
        "f.yaml",
        None,
        is_rag=False,
    )
    assert isinstance(built, Sub) and built.threshold == 0.25 and built.extra == 3
    with pytest.raises(ConfigError, match=r"f.yaml: evaluators\[0\].threshold: expected a valid number"):
        registry.build(
            EvaluatorSettings.model_validate({"type": "sub_eval", "threshold": "high"}), 0, "f.yaml", None, is_rag=False
        )
    with pytest.raises(
        ConfigError, match=r"evaluators\[0\].treshold: unknown key for sub_eval; did you mean threshold"
    ):
        registry.build(
            EvaluatorSettings.model_validate({"type": "sub_eval", "treshold": 1}), 0, "f.yaml", None, is_rag=False
        )
