"""LLM judges, providers and judge validation, against a scripted server on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import random
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof.errors import ConfigError
from pytest_oloproof.evaluate.judge_validation import (
    JudgeLabelsError,
    judge_identity,
    passing_validation,
    validate_judge,
)
from pytest_oloproof.evaluators.base import ContextPassage, CriterionValue, EvalInput
from pytest_oloproof.evaluators.judges import (
    GROUNDEDNESS_PROMPT_V1,
    JUDGE_TYPES,
    AmbiguousVerdict,
    CitationSupportJudge,
    GroundednessJudge,
    JudgeReplyError,
    claim_for,
    parse_verdict,
)
from pytest_oloproof.evaluators.providers import (
    OpenAIProvider,
    ProviderError,
    PythonProvider,
    build_provider,
    load_object,
)
from tests.judge_server import Reply, ScriptedServer

KEY_ENV = "OLOPROOF_TEST_JUDGE_KEY"
SECRET = "sk-olo-SECRET-7f3a9c0d51e2"

CONTEXT = (
    ContextPassage("kb-01", None, "Refunds for annual plans are issued within 14 days.", 1),
    ContextPassage("kb-07", "c2", "Monthly plans renew on the first of the month.", 2),
)


def case(output: Any = None, context: Any = CONTEXT) -> EvalInput:
    return EvalInput(
        case_id="refund_annual",
        input={"question": "How long do refunds take?"},
        expected={"answer": "14 days"},
        metadata={},
        output={"answer": "Refunds take 14 days."} if output is None else output,
        context=context,
    )


class Top(random.Random):
    """A jitter source that always draws the top of the range: the backoff's ceiling, exactly."""

    def uniform(self, a: float, b: float) -> float:
        return b


class Bottom(random.Random):
    """A jitter source that always draws 0: only the server's Retry-After is waited."""

    def uniform(self, a: float, b: float) -> float:
        return a


def http_judge(server: ScriptedServer, cls: type = GroundednessJudge, **kw: Any) -> Any:
    """A judge against the scripted server, with backoff sleeps recorded, not slept (jitter at its ceiling)."""
    settings: dict[str, Any] = {
        "provider": "openai",
        "model": "judge-model",
        "base_url": server.base_url,
        "api_key_env": KEY_ENV,
        "retries": 2,
        "timeout_s": 5.0,
    }
    settings.update(kw)
    judge = cls(**settings)
    judge.sleeps = []
    judge.provider._sleep = judge.sleeps.append
    judge.provider.rng = Top()
    return judge


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


# --- OpenAI-compatible provider over HTTP -------------------------------------


def test_good_verdict_and_request_shape() -> None:
    with ScriptedServer([Reply.verdict("pass", "The context states 14 days.")]) as server:
        judge = http_judge(server)
        value = judge.evaluate(case())
    assert value.status == "observed" and value.value == 1.0
    assert value.detail == {"rationale": "The context states 14 days."}
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    body = request.json()
    assert body["model"] == "judge-model" and body["temperature"] == 0.0
    user = body["messages"][-1]["content"]
    assert "Refunds take 14 days." in user and "[kb-01] Refunds for annual plans" in user
    assert "[kb-07#c2]" in user


def test_fail_verdict_fills_expected_and_actual() -> None:
    with ScriptedServer([Reply.verdict("fail", "14 days is not in the context.")]) as server:
        value = http_judge(server).evaluate(case())
    assert value.status == "observed" and value.value == 0.0
    assert value.expected == "answer grounded in the context"
    assert "14 days is not in the context." in value.actual


def test_429_then_success_honours_retry_after() -> None:
    script = [Reply(429, {"Retry-After": "3"}, {"error": "slow down"}), Reply.verdict("pass")]
    with ScriptedServer(script) as server:
        judge = http_judge(server)
        value = judge.evaluate(case())
    assert value.status == "observed" and value.value == 1.0
    assert len(server.requests) == 2
    assert judge.sleeps == [3.5]  # Retry-After 3 s is the floor; the jitter (at most 0.5 s here) comes on top


def test_retry_after_is_capped_and_backoff_is_exponential() -> None:
    script = [Reply(503, {"Retry-After": "999"}), Reply(502), Reply(500), Reply.chat("x")]
    with ScriptedServer(script) as server:
        provider = OpenAIProvider(server.base_url, "m", retries=3, backoff_s=0.25, max_backoff_s=20.0, rng=Top())
        sleeps: list[float] = []
        provider._sleep = sleeps.append
        assert provider.complete([{"role": "user", "content": "hi"}]) == "x"
    assert sleeps == [20.0, 0.5, 1.0]


def test_real_retry_after_wait_on_the_wire() -> None:
    """The provider really sleeps the server's Retry-After (0.3 s), not its own backoff (5 s), between attempts.

    What it asked to sleep is recorded (the sleep itself is real); the wait is seen on the wire as the gap
    between the two requests the server read, a lower bound that a slow machine can only lengthen."""
    with ScriptedServer([Reply(429, {"Retry-After": "0.3"}), Reply.chat("ok")]) as server:
        provider = OpenAIProvider(server.base_url, "m", retries=1, backoff_s=5.0, rng=Bottom())
        slept: list[float] = []

        def sleep(seconds: float, real: Any = provider._sleep) -> None:
            slept.append(seconds)
            real(seconds)

        provider._sleep = sleep
        assert provider.complete([{"role": "user", "content": "hi"}]) == "ok"
    assert slept == [0.3]
    first, second = server.requests
    assert second.at - first.at >= 0.25


def test_500s_until_retries_are_exhausted_is_missing() -> None:
    with ScriptedServer([Reply(500, body="upstream exploded")]) as server:
        judge = http_judge(server, retries=2)
        value = judge.evaluate(case())
    assert value.status == "missing"
    assert value.reason.startswith("judge_error: ProviderError:")
    assert "HTTP 500" in value.reason and "after 3 attempts" in value.reason
    assert len(server.requests) == 3
    assert judge.sleeps == [0.5, 1.0]


def test_client_error_is_not_retried() -> None:
    with ScriptedServer([Reply(400, body={"error": "bad request"})]) as server:
        value = http_judge(server).evaluate(case())
    assert value.status == "missing" and "HTTP 400" in value.reason
    assert len(server.requests) == 1


def test_slow_reply_past_the_timeout_is_missing() -> None:
    with ScriptedServer([Reply.verdict("pass", delay=3.0)]) as server:
        value = http_judge(server, timeout_s=0.2, retries=1).evaluate(case())
        # the client gave up on the last request 0.2 s after sending it: the server may not have read it yet
        requests = server.wait_for_requests(2)
    assert value.status == "missing"
    assert "timed out after 0.2s" in value.reason
    assert requests == len(server.requests) == 2  # timeouts are retried too


def test_connection_refused_is_missing() -> None:
    server = ScriptedServer([])
    url = server.base_url
    server._httpd.server_close()  # nothing listens on the port any more
    judge = GroundednessJudge(provider="openai", model="m", base_url=url, retries=0)
    value = judge.evaluate(case())
    assert value.status == "missing" and "connection error" in value.reason


@pytest.mark.parametrize(
    ("reply", "fragment"),
    [
        (Reply(200, body="this is {not json"), "not valid JSON"),
        (Reply(200, body={"choices": []}), "no choices[0].message.content"),
        (Reply(200, body={"choices": [{"message": {"content": None}}]}), "not a string"),
        (Reply.chat("I think the answer is fine."), "not a JSON verdict"),
        (Reply.chat('{"verdict": "maybe", "rationale": "unsure"}'), "must be 'pass' or 'fail'"),
        (Reply.chat('{"rationale": "no verdict key"}'), "not a JSON verdict"),
    ],
)
def test_bad_replies_are_judge_errors_not_verdicts(reply: Reply, fragment: str) -> None:
    with ScriptedServer([reply]) as server:
        value = http_judge(server).evaluate(case())
    assert value.status == "missing" and value.value is None
    assert value.reason.startswith("judge_error: ") and fragment in value.reason


def test_parse_verdict_tolerates_fences_and_surrounding_text() -> None:
    fenced = 'Sure!\n```json\n{"verdict": "FAIL", "rationale": "no {braces} here"}\n```\nDone.'
    assert parse_verdict(fenced) == (False, "no {braces} here")
    assert parse_verdict('Verdict follows {"verdict": "pass", "rationale": "ok"} bye') == (True, "ok")
    assert parse_verdict('{"verdict": "pass"}') == (True, "")


def test_one_clear_verdict_parses_wherever_it_stands() -> None:
    assert parse_verdict('Here it is: {"verdict": "pass", "rationale": "ok"}, as asked.') == (True, "ok")
    assert parse_verdict('{"meta": {"n": 1}, "rationale": "r", "verdict": "fail"}') == (False, "r")
    assert parse_verdict('Unbalanced { prose { then {"verdict": "pass"}') == (True, "")
    assert parse_verdict('{"verdict": "pass", "rationale": "the prompt said \\"verdict\\": pass"}')[0] is True


AMBIGUOUS_REPLIES = {
    "draft then a different final": 'Draft: {"verdict": "pass"}. On reflection: {"verdict": "fail", "rationale": "no"}',
    "a fail then a fenced format example": '{"verdict": "fail", "rationale": "14 days is not stated"}\n'
    'Format used:\n```json\n{"verdict": "pass" or "fail", "rationale": "..."}\n```',
    "a pass nested in another object": '{"result": {"verdict": "pass", "rationale": "ok"}}',
    "a pass inside an array": '[{"verdict": "pass"}]',
    "a verdict inside the verdict": '{"verdict": "pass", "checks": [{"verdict": "fail"}]}',
    "a duplicate key": '{"verdict": "pass", "verdict": "fail"}',
    "a key written with a JSON escape": '{"\\u0076erdict": "fail"} {"verdict": "pass"}',
    "a key in another case": '{"Verdict": "fail"} then {"verdict": "pass"}',
    "a verdict nested after a string holding a brace": '{"note": "{", "final": {"verdict": "pass"}}',
    "a Python-style draft": "{'verdict': 'fail'} -- no wait: {\"verdict\": \"pass\"}",
    "a JS-style final after a draft": 'Draft: {"verdict": "fail"}. On reflection: {verdict: pass}',
    "a verdict in prose, then JSON": 'Verdict: FAIL\n{"verdict": "pass", "rationale": "ok"}',
    "a key padded inside its quotes": '{" verdict ": "fail", "verdict": "pass"}',
}


@pytest.mark.parametrize("content", AMBIGUOUS_REPLIES.values(), ids=AMBIGUOUS_REPLIES.keys())
def test_a_reply_holding_more_than_one_verdict_is_missing_as_ambiguous(content: str) -> None:
    with ScriptedServer([Reply.chat(content)]) as server:
        grounded = http_judge(server).evaluate(case())
        cited = http_judge(server, CitationSupportJudge).evaluate(case({"answer": "14 days.", "citations": ["kb-01"]}))
    for value in (grounded, cited):
        assert value.status == "missing" and value.value is None
        assert value.reason == "ambiguous_verdict", value.reason
        assert value.detail["message"]
    assert len(server.requests) == 2  # a reply, not a transient failure: never asked again


HUGE_REPLIES = {
    "a mebibyte of {": ("{" * (1 << 20), "not a JSON verdict"),
    "a mebibyte of { before a verdict": ("{" * (1 << 20) + '{"verdict": "pass"}', (True, "")),
    "a mebibyte of [ around a verdict": ("[" * (1 << 20) + '{"verdict": "pass"}]', "ambiguous_verdict"),
    "a verdict 50,000 objects deep": ('{"a":' * 50_000 + '{"verdict": "pass"}' + "}" * 50_000, "ambiguous_verdict"),
}


@pytest.mark.parametrize(("content", "outcome"), HUGE_REPLIES.values(), ids=HUGE_REPLIES.keys())
def test_reading_a_mebibyte_reply_ends(content: str, outcome: Any) -> None:
    """A hang guard, not a speed measurement (benchmarks/bench_verdict.py measures it: milliseconds).

    Reading a verdict used to try a JSON parse at every `{`, each costing the length of the reply before
    it: a mebibyte of braces ran for minutes. Judged on a thread, so the guard can give up on it."""
    got: list[Any] = []

    def read() -> None:
        try:
            got.append(parse_verdict(content))
        except AmbiguousVerdict:
            got.append("ambiguous_verdict")
        except JudgeReplyError as exc:
            got.append("not a JSON verdict" if "not a JSON verdict" in str(exc) else str(exc))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(60)
    assert got, "reading the verdict of a 1 MiB reply did not end within a minute"
    assert got == [outcome]


def test_concurrency_limit_per_provider() -> None:
    for limit in (2, 4):
        # requests are answered only once `limit` were in flight together, so the peak is reached however
        # slowly the threads start; a provider that let more through would still show a higher peak
        with ScriptedServer([Reply.chat("ok", delay=0.05)], hold_until_in_flight=limit) as server:
            provider = OpenAIProvider(server.base_url, "m", concurrency=limit)
            results: list[str] = []

            def ask(p: OpenAIProvider = provider, out: list[str] = results) -> None:
                out.append(p.complete([{"role": "user", "content": "q"}]))

            threads = [threading.Thread(target=ask) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert results == ["ok"] * 8
        assert server.max_in_flight == limit


def test_authorization_header_is_sent() -> None:
    with ScriptedServer([Reply.verdict("pass")]) as server:
        http_judge(server).evaluate(case())
        provider = OpenAIProvider(server.base_url, "m")  # no api_key_env: no header
        provider.complete([{"role": "user", "content": "q"}])
    assert server.requests[0].headers["Authorization"] == f"Bearer {SECRET}"
    assert "Authorization" not in server.requests[1].headers


def test_api_key_never_leaks(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    echo = {"error": {"message": f"Incorrect API key provided: {SECRET}"}}
    with ScriptedServer([Reply(500, body=echo), Reply(401, body=echo)]) as server:
        judge = http_judge(server, retries=1)
        value = judge.evaluate(case())
        provider = OpenAIProvider(server.base_url, "m", api_key_env=KEY_ENV, retries=0)
        with pytest.raises(ProviderError) as info:
            provider.complete([{"role": "user", "content": "q"}])
    assert value.status == "missing" and "HTTP 401" in value.reason and "***" in value.reason
    exposed = [
        json.dumps(value.to_json()),
        value.reason,
        repr(value),
        json.dumps(judge.settings()),
        json.dumps(judge.provider.identity()),
        repr(judge),
        repr(judge.provider),
        judge_identity(judge),
        str(info.value),
        repr(info.value),
        caplog.text,
    ]
    for text in exposed:
        assert SECRET not in text
    assert server.requests[0].headers["Authorization"] == f"Bearer {SECRET}"


def test_missing_key_variable_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with ScriptedServer([Reply.verdict("pass")]) as server:
        value = http_judge(server).evaluate(case())
    assert value.status == "missing" and KEY_ENV in value.reason
    assert server.requests == []


def test_identity_redacts_credentials_in_base_url() -> None:
    provider = OpenAIProvider("http://user:pw@127.0.0.1:9/v1/", "m", extra={"seed": 1})
    identity = provider.identity()
    assert identity == {
        "provider": "openai",
        "model": "m",
        "base_url": "http://127.0.0.1:9/v1",
        "temperature": 0.0,
        "extra": {"seed": 1},
    }
    assert "pw" not in repr(provider)


# --- settings(): what enters the judgment identity ----------------------------


def test_settings_capture_everything_that_changes_a_verdict(tmp_path: Path) -> None:
    base: dict[str, Any] = {
        "provider": "openai",
        "model": "m1",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": KEY_ENV,
    }
    judge = GroundednessJudge(**base)
    settings = judge.settings()
    assert settings["judge"] == "groundedness_judge"
    assert settings["prompt_version"] == "groundedness/1"
    assert settings["provider"]["model"] == "m1"
    assert judge_identity(judge) == judge_identity(GroundednessJudge(**base))
    # timeouts, retries, concurrency and the key's variable do not change verdicts
    same = GroundednessJudge(**{**base, "api_key_env": "OTHER"}, timeout_s=5, retries=0, concurrency=1)
    assert judge_identity(same) == judge_identity(judge)
    for change in ({"model": "m2"}, {"temperature": 0.7}, {"base_url": "http://127.0.0.1:8/v1"}, {"field": "text"}):
        assert judge_identity(GroundednessJudge(**{**base, **change})) != judge_identity(judge)
    assert judge_identity(CitationSupportJudge(**base)) != judge_identity(judge)


def test_prompt_override_text_and_file(tmp_path: Path) -> None:
    base: dict[str, Any] = {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"}
    default = GroundednessJudge(**base)
    text = GroundednessJudge(**base, prompt="Context: {context}\nAnswer: {answer}\nJSON verdict?")
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "g.txt").write_text("C={context} A={answer}", encoding="utf-8")
    from_file = GroundednessJudge(**base, prompt="prompts/g.txt", base_dir=tmp_path)
    assert text.settings()["prompt_version"] == "custom"
    hashes = {j.settings()["prompt_sha256"] for j in (default, text, from_file)}
    assert len(hashes) == 3
    assert from_file.template == "C={context} A={answer}"
    with pytest.raises(ConfigError, match=r"lacks placeholder\(s\) \{answer\}"):
        GroundednessJudge(**base, prompt="only {context}")
    with pytest.raises(ConfigError, match="prompt file"):
        GroundednessJudge(**base, prompt="nope.txt", base_dir=tmp_path)


def test_custom_prompt_is_what_is_sent() -> None:
    with ScriptedServer([Reply.verdict("pass")]) as server:
        http_judge(server, prompt='CTX<{context}> ANS<{answer}> reply {"verdict": ...}').evaluate(case())
    sent = server.requests[0].json()["messages"][-1]["content"]
    assert sent.startswith("CTX<[kb-01] Refunds") and 'ANS<Refunds take 14 days.> reply {"verdict"' in sent


# --- Python provider ----------------------------------------------------------


def write_module(tmp_path: Path, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")


def test_python_provider_from_object_spec(tmp_path: Path) -> None:
    write_module(
        tmp_path,
        "olo_judge_rules_a",
        (
            "import json\n"
            "def judge(messages):\n"
            "    ok = '14 days' in messages[-1]['content'].split('ANSWER:')[-1]\n"
            "    return json.dumps({'verdict': 'pass' if ok else 'fail', 'rationale': 'rule'})\n"
        ),
    )
    judge = GroundednessJudge(provider="python", object="olo_judge_rules_a:judge", model="rules-1", base_dir=tmp_path)
    assert judge.settings()["provider"] == {
        "provider": "python",
        "object": "olo_judge_rules_a:judge",
        "model": "rules-1",
    }
    assert judge.evaluate(case()).value == 1.0
    assert judge.evaluate(case({"answer": "Refunds take 30 days."})).value == 0.0
    relabelled = GroundednessJudge(
        provider="python", object="olo_judge_rules_a:judge", model="rules-2", base_dir=tmp_path
    )
    assert judge_identity(relabelled) != judge_identity(judge)


def test_python_provider_failures_are_missing() -> None:
    def boom(messages: list[dict[str, str]]) -> str:
        raise RuntimeError("model offline")

    value = GroundednessJudge(provider=PythonProvider(boom)).evaluate(case())
    assert value.status == "missing" and "model offline" in value.reason
    value = GroundednessJudge(provider=PythonProvider(lambda m: {"verdict": "pass"})).evaluate(case())
    assert value.status == "missing" and "expected str" in value.reason


def test_python_object_may_already_be_a_provider(tmp_path: Path) -> None:
    write_module(
        tmp_path,
        "olo_judge_rules_b",
        (
            "class Judge:\n"
            "    def identity(self):\n"
            "        return {'provider': 'custom', 'v': 3}\n"
            "    def complete(self, messages):\n"
            '        return \'{"verdict": "fail", "rationale": "custom"}\'\n'
            "provider = Judge()\n"
        ),
    )
    provider = build_provider({"provider": "python", "object": "olo_judge_rules_b:provider"}, tmp_path)
    assert provider.identity() == {"provider": "custom", "v": 3}
    assert GroundednessJudge(provider=provider).evaluate(case()).value == 0.0


def test_load_object_errors_name_the_spec(tmp_path: Path) -> None:
    write_module(tmp_path, "olo_judge_rules_c", "x = 1\n")
    assert load_object("olo_judge_rules_c:x", tmp_path) == 1
    with pytest.raises(ConfigError, match=r"'no_colon'.*module:attribute"):
        load_object("no_colon", tmp_path)
    with pytest.raises(ConfigError, match=r"'olo_missing_mod:f'.*cannot import"):
        load_object("olo_missing_mod:f", tmp_path)
    with pytest.raises(ConfigError, match=r"'olo_judge_rules_c:y'.*no attribute"):
        load_object("olo_judge_rules_c:y", tmp_path)


def test_build_provider_registry() -> None:
    provider = build_provider({"provider": "openai", "model": "m", "retries": 1})
    assert isinstance(provider, OpenAIProvider)
    assert provider.identity()["base_url"] == "https://api.openai.com/v1"
    with pytest.raises(ConfigError, match="unknown judge provider 'anthropic'"):
        build_provider({"provider": "anthropic"})
    with pytest.raises(ConfigError, match="`model` is required"):
        build_provider({"provider": "openai"})
    with pytest.raises(ConfigError, match="object"):
        build_provider({"provider": "python"})


# --- applicability and citation support ----------------------------------------


def verdicts(rule: Any) -> PythonProvider:
    """A python provider deciding from the user prompt with `rule(text) -> bool`."""
    calls: list[str] = []

    def fn(messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        calls.append(text)
        return json.dumps({"verdict": "pass" if rule(text) else "fail", "rationale": "r"})

    provider = PythonProvider(fn, model="test")
    provider.calls = calls  # type: ignore[attr-defined]
    return provider


def test_no_context_is_excluded_and_empty_context_is_judged() -> None:
    provider = verdicts(lambda text: "(no passages)" in text)
    judge = GroundednessJudge(provider=provider)
    assert judge.evaluate(case(context=None)) == CriterionValue.excluded("no_context")
    assert judge.evaluate(case(context=())).value == 1.0
    assert judge.evaluate(case(output={"text": "x"})).status == "missing"
    assert judge.evaluate(case(output="plain string answer")).status == "observed"
    assert judge.needs_rag and judge.asserts and judge.reads == {"output", "context"}
    assert set(JUDGE_TYPES) == {"groundedness_judge", "citation_support_judge"}


def test_citation_support_per_cited_passage() -> None:
    provider = verdicts(lambda text: "14 days" in text.split("CLAIM:")[0] and "14 days" in text.split("CLAIM:")[1])
    judge = CitationSupportJudge(provider=provider)
    assert judge.criterion == "citations_supported"
    output = {
        "answer": "Refunds take 14 days [kb-01]. Plans renew monthly [kb-07].",
        "citations": ["kb-01", "kb-07", "kb-01"],
    }
    value = judge.evaluate(case(output))
    assert value.value == 0.0 and value.actual == "unsupported: kb-07"
    assert [c["verdict"] for c in value.detail["citations"]] == ["pass", "fail"]
    assert len(provider.calls) == 2  # the repeated citation is judged once
    assert "CLAIM:\nRefunds take 14 days [kb-01]." in provider.calls[0]

    value = judge.evaluate(case({"answer": "Refunds take 14 days.", "citations": [{"doc_id": "kb-01"}]}))
    assert value.value == 1.0
    value = judge.evaluate(case({"answer": "14 days", "citations": ["kb-99"]}))
    assert value.value == 0.0 and "not in the context" in value.detail["rationale"]
    assert judge.evaluate(case({"answer": "x", "citations": []})).reason == "no_citations"
    assert judge.evaluate(case({"answer": "x"})).reason == "no_citations"
    assert judge.evaluate(case(context=None)).reason == "no_context"


def test_citation_judge_error_makes_the_case_missing() -> None:
    with ScriptedServer([Reply.verdict("pass"), Reply(500)]) as server:
        judge = http_judge(server, CitationSupportJudge, retries=0)
        value = judge.evaluate(case({"answer": "a", "citations": ["kb-01", "kb-07"]}))
    assert value.status == "missing" and value.reason.startswith("judge_error: kb-07: ")


def test_claim_for_picks_sentences_naming_the_doc() -> None:
    answer = "First fact [a]. Second fact [b]! Third, also [a]."
    assert claim_for(answer, "a") == "First fact [a]. Third, also [a]."
    assert claim_for(answer, "zzz") == answer


# --- validation against human labels -------------------------------------------


def write_labels(path: Path, labels: list[str]) -> Path:
    lines = []
    for i, label in enumerate(labels):
        answer = f"answer {i} " + ("GOOD" if label == "pass" else "BAD")
        lines.append(
            json.dumps(
                {
                    "id": f"ex{i}",
                    "input": {"question": f"q{i}"},
                    "output": {"answer": answer},
                    "context": [{"doc_id": "kb-01", "text": "Refunds take 14 days."}],
                    "label": label,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    return path


def test_validate_judge_perfect_agreement(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.jsonl", ["pass", "fail"] * 20)
    judge = GroundednessJudge(provider=verdicts(lambda text: "GOOD" in text))
    record = validate_judge(judge, labels)
    assert record["schema"] == "oloproof.judge_validation/1"
    assert record["passed"] is True and record["reasons"] == []
    assert record["n"] == 40 and record["judged"] == 40 and record["judge_failures"] == 0
    assert record["agreement"]["accuracy"] == 1.0
    assert record["agreement"]["low"] == pytest.approx(0.9119, abs=1e-4)  # Clopper-Pearson 40/40
    assert record["kappa"]["value"] == 1.0
    assert record["judge"]["identity"] == judge_identity(judge)
    assert record["judge"]["type"] == "groundedness_judge" and record["judge"]["criterion"] == "grounded"
    json.dumps(record)  # JSON-ready
    assert passing_validation([{"schema": "x"}, record], judge_identity(judge)) is record
    assert passing_validation([record], "sha256:other") is None


def test_validate_judge_chance_agreement_fails(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.jsonl", ["pass", "fail"] * 20)
    always = validate_judge(GroundednessJudge(provider=verdicts(lambda t: True)), labels)
    assert always["passed"] is False
    assert always["kappa"]["value"] == 0.0 and always["agreement"]["accuracy"] == 0.5
    assert any(r.startswith("low_kappa") for r in always["reasons"])
    assert any(r.startswith("low_accuracy") for r in always["reasons"])
    # verdicts independent of the labels: pass on every other pair
    coin = validate_judge(
        GroundednessJudge(provider=verdicts(lambda t: int(re.search(r"answer (\d+) ", t).group(1)) % 4 < 2)),
        labels,
        seed=7,
    )
    assert coin["kappa"]["value"] == pytest.approx(0.0)
    assert coin["kappa"]["low"] < 0 < coin["kappa"]["high"]
    assert coin["passed"] is False and coin["seed"] == 7
    again = validate_judge(
        GroundednessJudge(provider=verdicts(lambda t: int(re.search(r"answer (\d+) ", t).group(1)) % 4 < 2)),
        labels,
        seed=7,
    )
    assert again["kappa"] == coin["kappa"]  # reproducible


def test_validate_judge_small_perfect_agreement_is_never_a_zero_width_interval(tmp_path: Path) -> None:
    # 5 of 5 agreements: a bootstrap printed kappa [1.000, 1.000]; the data cannot say that much
    labels = write_labels(tmp_path / "five.jsonl", ["pass", "fail", "pass", "fail", "pass"])
    record = validate_judge(GroundednessJudge(provider=verdicts(lambda t: "GOOD" in t)), labels)
    kappa, acc = record["kappa"], record["agreement"]
    assert kappa["value"] == 1.0 and kappa["method"] == "bonferroni-clopper-pearson"
    assert kappa["high"] == 1.0 and kappa["low"] < 0.5
    assert acc["method"] == "clopper-pearson" and acc["high"] == 1.0
    assert acc["low"] == pytest.approx(0.025 ** (1 / 5), abs=1e-9)  # Clopper-Pearson 5/5
    assert record["passed"] is False


def test_validate_judge_degenerate_and_small_sets(tmp_path: Path) -> None:
    one_class = write_labels(tmp_path / "one.jsonl", ["pass"] * 35)
    record = validate_judge(GroundednessJudge(provider=verdicts(lambda t: True)), one_class)
    assert record["kappa"]["value"] is None and "undefined" in record["kappa"]["note"]
    assert record["passed"] is False
    assert any(r.startswith("one_class_labels") for r in record["reasons"])
    small = write_labels(tmp_path / "small.jsonl", ["pass", "fail"] * 5)
    record = validate_judge(GroundednessJudge(provider=verdicts(lambda t: "GOOD" in t)), small)
    assert record["passed"] is False and record["reasons"][0].startswith("too_few_labels")


def test_validate_judge_counts_judge_failures_separately(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.jsonl", ["pass", "fail"] * 20)

    def flaky(messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        if "answer 3 " in text or "answer 5 " in text or "answer 7 " in text:
            return "I cannot decide"
        if "answer 9 " in text:
            raise TimeoutError("slow")
        return json.dumps({"verdict": "pass" if "GOOD" in text else "fail", "rationale": "r"})

    record = validate_judge(GroundednessJudge(provider=PythonProvider(flaky)), labels)
    assert record["judge_failures"] == 4 and record["judged"] == 36
    assert record["agreement"]["accuracy"] == 1.0
    assert record["passed"] is True  # 4 of 40 = 10%, at the limit
    strict = validate_judge(GroundednessJudge(provider=PythonProvider(flaky)), labels, max_failure_rate=0.05)
    assert strict["passed"] is False and strict["reasons"][0].startswith("judge_failures")
    failed = [c for c in record["cases"] if c["status"] == "missing"]
    assert {c["id"] for c in failed} == {"ex3", "ex5", "ex7", "ex9"}


def test_bad_label_lines_are_reported_with_file_and_line(tmp_path: Path) -> None:
    good = {"id": "a", "output": {"answer": "x"}, "context": [], "label": "pass"}
    path = tmp_path / "bad.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps(good),
                '{"id": "b", "output": ',
                json.dumps({**good, "id": "c", "label": "yes"}),
                json.dumps(good),
                json.dumps({**good, "id": "d", "context": [{"doc_id": "kb"}]}),
                json.dumps({"id": "e", "label": "fail", "context": "kb-01", "colour": 1}),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    judge = GroundednessJudge(provider=verdicts(lambda t: True))
    with pytest.raises(JudgeLabelsError) as info:
        validate_judge(judge, path)
    errors = info.value.errors
    assert errors[0].startswith(f"{path}:2:") and "invalid JSON" in errors[0]
    assert errors[1] == f'{path}:3: `label` must be "pass" or "fail", got \'yes\''
    assert errors[2] == f"{path}:4: duplicate id 'a' (first on line 1)"
    assert errors[3] == f"{path}:5: context[0] needs a string `text`"
    assert f"{path}:6: `output` is required" in errors
    assert f"{path}:6: unknown key(s) colour" in errors
    assert isinstance(info.value, ConfigError)
    with pytest.raises(JudgeLabelsError, match="cannot read"):
        validate_judge(judge, tmp_path / "absent.jsonl")


def test_default_prompt_is_versioned_and_values_are_not_re_rendered() -> None:
    assert "{context}" in GROUNDEDNESS_PROMPT_V1 and "{answer}" in GROUNDEDNESS_PROMPT_V1
    provider = verdicts(lambda t: True)
    tricky = (ContextPassage("kb-01", None, "literal {answer} in a passage", 1),)
    GroundednessJudge(provider=provider).evaluate(case({"answer": "A {context}"}, tricky))
    sent = provider.calls[0]
    assert "literal {answer} in a passage" in sent and "A {context}" in sent


def test_an_evaluator_returning_text_no_file_can_hold_costs_only_its_criterion(tmp_path: Path) -> None:
    """Any evaluator, not only a judge: a lone surrogate in its value is a missing criterion, not a verdict
    that breaks the case's record (and every other criterion of it) when it is written."""
    from pytest_oloproof.cache.caches import Caches
    from pytest_oloproof.evaluate.record import judge_one
    from pytest_oloproof.evaluators.base import Evaluator

    class Odd(Evaluator):
        type = "odd"
        reads = frozenset({"output"})

        def evaluate(self, x: EvalInput) -> CriterionValue:
            return CriterionValue.observed(True, actual="half a pair: \ud800")

    caches = Caches(tmp_path / "cache")
    try:
        value = judge_one(Odd("odd"), case(), caches)
    finally:
        caches.close()
    assert value.status == "missing" and value.reason.startswith("evaluator_error: ValueError:")
    assert "actual: '\\ud800' at character 13 is a lone surrogate, which no UTF-8 file can hold" in value.reason
    json.dumps(value.to_json()).encode("utf-8")  # the missing value itself is storable


# --- one deadline per attempt, and a limit on the reply's size ----------------------------------


@pytest.mark.parametrize("body_only", [False, True], ids=["status line, headers and body", "body"])
def test_a_reply_dripped_byte_by_byte_is_timed_out_at_the_deadline(body_only: bool) -> None:
    """Every byte arrives well within `timeout_s` of the one before (what httpx's own timeouts bound), but
    the reply would take about 20 s: the attempt ends at its deadline, missing, never the dripped pass."""
    reply = Reply.verdict("pass", drip_s=0.05, drip_body_only=body_only)
    with ScriptedServer([reply]) as server:
        value = http_judge(server, timeout_s=1.0, retries=0).evaluate(case())
        (request,) = server.requests
        assert request.answered.wait(ScriptedServer.PATIENCE_S)
    assert value.status == "missing" and value.reason.startswith("judge_error: ProviderError:")
    assert "timed out after 1s" in value.reason
    assert not request.complete and request.sent < len(reply.encoded())  # the client hung up mid-reply


def test_a_deadline_passed_is_retried_like_any_timeout() -> None:
    with ScriptedServer([Reply.verdict("fail", drip_s=0.05), Reply.verdict("pass")]) as server:
        judge = http_judge(server, timeout_s=1.0, retries=1)
        value = judge.evaluate(case())
    assert value.status == "observed" and value.value == 1.0
    assert len(server.requests) == 2 and judge.sleeps == [0.5]
    assert not server.requests[0].complete


def test_a_reply_over_the_limit_is_refused_on_the_wire() -> None:
    """A plain reply of 5 MiB: refused without a retry, whether its length is declared or not."""
    from pytest_oloproof.evaluators.providers import MAX_REPLY_BYTES

    padding = "x" * (MAX_REPLY_BYTES + (1 << 20))
    big = {"choices": [{"message": {"content": '{"verdict": "pass"}'}}], "padding": padding}
    for declared in (True, False):
        with ScriptedServer([Reply(200, body=big, length=declared)]) as server:
            value = http_judge(server).evaluate(case())
        assert value.status == "missing", value
        assert "reply" in value.reason and f"{MAX_REPLY_BYTES:,} bytes" in value.reason and "refused" in value.reason
        assert len(server.requests) == 1  # not asked again: the same reply would come back


def test_a_gzip_bomb_is_refused_and_memory_stays_bounded() -> None:
    """200 MiB of zeros in about 200 KiB of gzip: refused once decompressed past the limit, and reading it
    never holds much more than the limit (measured with tracemalloc: every bytes object is counted)."""
    import tracemalloc

    from pytest_oloproof.evaluators.providers import MAX_REPLY_BYTES
    from tests.judge_server import gzip_bomb

    bomb = gzip_bomb(200 << 20)
    assert len(bomb) < MAX_REPLY_BYTES
    with ScriptedServer([Reply(200, {"Content-Encoding": "gzip"}, bomb)]) as server:
        judge = http_judge(server)
        tracemalloc.start()
        try:
            value = judge.evaluate(case())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert value.status == "missing"
    assert f"reply larger than {MAX_REPLY_BYTES:,} bytes once decompressed refused" in value.reason
    assert peak < 3 * MAX_REPLY_BYTES, f"peak {peak / 2**20:.0f} MiB"
    assert len(server.requests) == 1


def test_a_compressed_reply_within_the_limit_is_read() -> None:
    import gzip
    import zlib

    body = json.dumps({"choices": [{"message": {"content": '{"verdict": "fail", "rationale": "no"}'}}]}).encode()
    for encoding, data in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        with ScriptedServer([Reply(200, {"Content-Encoding": encoding}, data)]) as server:
            value = http_judge(server).evaluate(case())
        assert value.status == "observed" and value.value == 0.0, (encoding, value)
        assert server.requests[0].headers["Accept-Encoding"] == "gzip, deflate"
    with ScriptedServer([Reply(200, {"Content-Encoding": "br"}, b"\x00\x01")]) as server:
        value = http_judge(server).evaluate(case())
    assert value.status == "missing" and "Content-Encoding 'br'" in value.reason


def _pieces(secret: str, size: int = 6) -> list[str]:
    """Every run of `size` characters of a secret: what a cut through it would leave."""
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


@pytest.mark.parametrize("cut", [80, 200], ids=["verdict reply cut at 80", "error reply cut at 200"])
def test_a_reply_echoing_the_key_is_redacted_before_it_is_cut(cut: int) -> None:
    """The key straddles the point where the reply is cut for the missing reason: redacted first, no half of
    it survives (the redactor no longer sees a key cut in two)."""
    text = "Incorrect API key provided: ".ljust(cut - len(SECRET) // 2, ".") + SECRET + " -- check your settings."
    reply = Reply.chat(text) if cut == 80 else Reply(400, body=text)
    with ScriptedServer([reply]) as server:
        value = http_judge(server).evaluate(case())
    assert value.status == "missing" and "Incorrect API key provided" in value.reason, value.reason
    shown = json.dumps(value.to_json())
    for piece in _pieces(SECRET):
        assert piece not in shown, f"{piece!r} of the key survived in {value.reason!r}"
