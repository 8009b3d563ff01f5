"""Tokens and cost: usage from judges (over loopback HTTP) and stages, pricing, saved-by-cache, budget guards."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof.config.settings import load_config
from pytest_oloproof.errors import ConfigError
from pytest_oloproof.evaluators.base import ContextPassage, EvalInput
from pytest_oloproof.evaluators.judges import GroundednessJudge
from pytest_oloproof.evaluators.providers import OpenAIProvider
from pytest_oloproof.report.text import _source_text, tokens_line
from pytest_oloproof.store import summary as usage_totals
from pytest_oloproof.store.files import Store
from pytest_oloproof.usage import accounting as usage
from tests.judge_server import Recorded, Reply, ScriptedServer, openai_usage

# ------------------------------------------------------------------ the context API


def test_report_usage_outside_an_oloproof_call_records_nothing() -> None:
    assert usage.report_usage(model="m", input_tokens=3, output_tokens=1) is False


def test_report_usage_inside_a_call_and_provider_usage_objects() -> None:
    with usage.collect() as got:
        assert usage.report_usage(model="gen", input_tokens=12, output_tokens=3)
        usage.report_usage(model="emb", usage={"prompt_tokens": 7, "completion_tokens": 0})
        usage.report_usage(model="claude", usage={"input_tokens": 9, "output_tokens": 4, "cache_read_input_tokens": 2})
        usage.report_usage(
            model="lc", usage={"input_tokens": 5, "output_tokens": 1, "input_token_details": {"cache_read": 3}}
        )
        usage.report_usage(model="opaque")  # a call whose size the provider did not say
    assert got == [
        {"model": "gen", "input_tokens": 12, "output_tokens": 3, "cached_input_tokens": None},
        {"model": "emb", "input_tokens": 7, "output_tokens": 0, "cached_input_tokens": None},
        {"model": "claude", "input_tokens": 9, "output_tokens": 4, "cached_input_tokens": 2},
        {"model": "lc", "input_tokens": 5, "output_tokens": 1, "cached_input_tokens": 3},
        {"model": "opaque", "input_tokens": None, "output_tokens": None, "cached_input_tokens": None},
    ]
    with usage.collect(), pytest.raises(ValueError, match="input_tokens must be a non-negative integer"):
        usage.report_usage(model="m", input_tokens=-1)


def test_collectors_are_per_thread_and_per_task() -> None:
    """Concurrent cases never see each other's usage: threads and asyncio tasks each have their own."""
    results: dict[int, list[dict[str, Any]]] = {}
    barrier = threading.Barrier(8)

    def one(i: int) -> None:
        with usage.collect() as got:
            barrier.wait()
            usage.report_usage(model="m", input_tokens=i, output_tokens=i)
        results[i] = got

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {i: [e["input_tokens"] for e in got] for i, got in results.items()} == {i: [i] for i in range(8)}

    async def task(i: int) -> list[int]:
        with usage.collect() as got:
            await asyncio.sleep(0.01 * (8 - i))
            await asyncio.to_thread(usage.report_usage, model="m", input_tokens=i, output_tokens=0)
            usage.report_usage(model="m", input_tokens=100 + i, output_tokens=0)
        return [e["input_tokens"] for e in got]

    async def main() -> list[list[int]]:
        return list(await asyncio.gather(*(task(i) for i in range(8))))

    assert asyncio.run(main()) == [[i, 100 + i] for i in range(8)]


# ------------------------------------------------------------------ pricing arithmetic

PRICING = {"judge-m": {"input": 2.5, "output": 10.0, "cached_input": 1.25}, "gen-m": {"input": 0.15, "output": 0.6}}


def test_pricing_arithmetic() -> None:
    # 1,000 input (400 of them cached) and 200 output tokens of judge-m:
    # 600 * 2.5 + 400 * 1.25 + 200 * 10 = 1500 + 500 + 2000 = 4000 micro-dollars
    e = {"model": "judge-m", "input_tokens": 1000, "output_tokens": 200, "cached_input_tokens": 400}
    assert usage.entry_cost(e, PRICING) == pytest.approx(0.004, abs=1e-12)
    # no cached_input price: cached tokens are charged at the input price
    g = {"model": "gen-m", "input_tokens": 1000, "output_tokens": 200, "cached_input_tokens": 400}
    assert usage.entry_cost(g, PRICING) == pytest.approx((1000 * 0.15 + 200 * 0.6) / 1e6, abs=1e-15)
    assert usage.entry_cost({**e, "model": "other"}, PRICING) is None  # never a guessed price
    partly: dict[str, list[int]] = {}
    usage_totals._tally_into(partly, [e, {**e, "model": "other"}])
    summary = usage.source_summary(partly, PRICING)
    assert (summary["cost"], summary["cost_missing"], summary["unpriced_models"]) == (None, "unpriced_model", ["other"])
    assert summary["models"]["judge-m"]["cost"] == pytest.approx(0.004, abs=1e-12)
    assert _source_text("judges", summary) == "judges 2 calls, 2,000 in / 400 out (800 cached in) (no price for other)"
    assert usage.entry_cost({**e, "input_tokens": None}, PRICING) is None
    assert usage.entry_cost(e, None) is None
    tally: dict[str, list[int]] = {}
    usage_totals._tally_into(tally, [e, e, g])
    s = usage.source_summary(tally, PRICING)
    assert (s["calls"], s["input_tokens"], s["output_tokens"], s["cached_input_tokens"]) == (3, 3000, 600, 1200)
    assert s["cost"] == pytest.approx(0.008 + (1000 * 0.15 + 200 * 0.6) / 1e6, abs=1e-12)
    assert usage.fmt_cost(0.0734) == "$0.07" and usage.fmt_cost(0.0012) == "$0.0012" and usage.fmt_cost(0) == "$0"
    assert usage.fmt_cost(0.000048) == "$0.000048" and usage.fmt_cost(1234.5) == "$1,234.50"


def test_unknown_usage_is_never_zero() -> None:
    tally: dict[str, list[int]] = {}
    usage_totals._tally_into(tally, [usage.make_entry("judge-m"), usage.make_entry("judge-m")])
    s = usage.source_summary(tally, PRICING)
    assert (s["calls"], s["input_tokens"], s["output_tokens"], s["cost"]) == (2, None, None, None)
    assert s["cost_missing"] == "usage_unknown"
    line = tokens_line(usage.summarize([{"usage_tally": {"judges": tally}}], PRICING))
    assert line == "Tokens: judges 2 calls, tokens unknown (not reported); system none reported; saved nothing"


def test_bad_pricing_config_names_file_line_and_key(tmp_path: Path) -> None:
    base = "system:\n  object: app:answer\ncases: cases.jsonl\n"
    cfg = tmp_path / "oloproof.yaml"
    cfg.write_text(base + "pricing:\n  judge-m: {input: -1, output: 10}\n")
    with pytest.raises(ConfigError) as bad:
        load_config(cfg)
    assert f"{cfg}:5: pricing.judge-m.input: " in str(bad.value) and "greater than or equal to 0" in str(bad.value)
    cfg.write_text(base + "pricing:\n  judge-m:\n    input: 1\n    outptu: 10\n")
    with pytest.raises(ConfigError) as typo:
        load_config(cfg)
    assert f"{cfg}:7: pricing.judge-m.outptu: unknown key; did you mean output?" in str(typo.value)
    cfg.write_text(base + "pricing:\n  judge-m: {input: 1}\n")
    with pytest.raises(ConfigError, match=r"oloproof.yaml:5: pricing.judge-m.output: required key is missing"):
        load_config(cfg)
    cfg.write_text(base + "max_cost: 0.5\n")
    with pytest.raises(ConfigError, match=r"oloproof.yaml:4: max_cost: needs a pricing: table"):
        load_config(cfg)
    cfg.write_text(base + "max_judge_calls: many\n")
    with pytest.raises(ConfigError, match=r"oloproof.yaml:4: max_judge_calls: expected a valid integer"):
        load_config(cfg)


# ------------------------------------------------------------------ the budget, at concurrency


def test_budget_never_issues_a_judge_call_past_max_judge_calls_under_racing_threads() -> None:
    budget = usage.Budget(max_judge_calls=10)
    granted = []
    barrier = threading.Barrier(16)

    def worker() -> None:
        barrier.wait()
        for _ in range(10):
            try:
                t = budget.reserve("judge")
            except usage.BudgetExhausted:
                continue
            granted.append(t)
            budget.settle(t, [])

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 10 and budget.refused == 150 and budget.stopped_by == "max_judge_calls"
    budget.reserve("generate")  # the judge-call limit does not stop the system


def _judge_input(i: int) -> EvalInput:
    return EvalInput(
        case_id=f"c{i}",
        input={"q": str(i)},
        expected={},
        metadata={},
        output={"answer": f"answer {i}"},
        retrieval=(),
        context=[ContextPassage("a", None, f"answer {i}")],
    )


def test_judges_over_http_stop_at_the_budget_with_eight_threads_in_flight() -> None:
    """No request reaches the server past max_judge_calls, however many judges ask at once."""
    # the first request is held until a second is in flight: the overlap does not depend on thread start-up
    reply = Reply.verdict("pass", usage=openai_usage(50, 5), delay=0.1)
    with ScriptedServer([reply], hold_until_in_flight=2) as server:
        judge = GroundednessJudge(provider=OpenAIProvider(server.base_url, "judge-m", concurrency=8, retries=0))
        budget = usage.Budget(max_judge_calls=7)

        def one(i: int) -> str:
            with usage.using_budget(budget):
                value = judge.evaluate(_judge_input(i))
            return value.reason or value.status

        with ThreadPoolExecutor(max_workers=8) as pool:
            outcomes = list(pool.map(one, range(20)))
        assert len(server.requests) == 7
        assert server.max_in_flight > 1  # the calls really were concurrent
    assert outcomes.count("observed") == 7 and outcomes.count("budget_exhausted") == 13


def test_max_cost_stops_before_the_call_expected_to_cross_it() -> None:
    # each reply: 1,000 in and 100 out of judge-m at $2.5/$10 per million = $0.0035 a call
    with ScriptedServer([Reply.verdict("pass", usage=openai_usage(1000, 100))]) as server:
        judge = GroundednessJudge(provider=OpenAIProvider(server.base_url, "judge-m", retries=0))
        budget = usage.Budget(max_cost=0.012, pricing=PRICING)  # room for 3 calls, not 4
        with usage.using_budget(budget):
            outcomes = [judge.evaluate(_judge_input(i)).reason or "observed" for i in range(6)]
        assert len(server.requests) == 3
    assert outcomes == ["observed"] * 3 + ["budget_exhausted"] * 3
    assert budget.spent == pytest.approx(0.0105, abs=1e-12)


# ------------------------------------------------------------------ whole runs through the plugin

SYSTEM = """
import asyncio
from pytest_oloproof import Passage, Retrieval, rag_system, report_usage

DOCS = {"a": "Refunds take 14 days.", "b": "Seats cost 8 dollars.", "c": "Plans renew yearly.",
        "d": "Support answers within a day."}

@rag_system(name="metered", version="1", depth=2, top_k=1, index_version="i1")
class Metered:
    async def retrieve(self, input, depth):
        q = input["q"]
        await asyncio.sleep(0.01 * (len(q) % 3))  # cases finish out of order
        report_usage(model="emb-m", input_tokens=len(q), output_tokens=0)  # an embedding call
        key = {"refund": "a", "seat": "b", "support": "d"}.get(q.split()[0], "c")
        return Retrieval(query=q, depth=depth, candidates=(Passage(key, 1.0, DOCS[key]),))

    def generate(self, input, context):
        report_usage(model="gen-m", usage={"prompt_tokens": 40 + len(input["q"]), "completion_tokens": 6})
        return {"answer": f"{context[0].text} ({input['q']})", "citations": [context[0].doc_id]}
"""

CASES = [
    {"id": "refund", "input": {"q": "refund time"}, "expected": {"answer": "14 days"}},
    {"id": "seats", "input": {"q": "seat price please"}, "expected": {"answer": "8 dollars"}},
    {"id": "renew", "input": {"q": "renewal"}, "expected": {"answer": "yearly"}},
    {"id": "support", "input": {"q": "support response time"}, "expected": {"answer": "a day"}},
]


def _respond(with_usage: bool = True) -> Any:
    def respond(req: Recorded) -> Reply:
        answer = req.json()["messages"][-1]["content"].split("ANSWER:", 1)[1].strip().splitlines()[0]
        u = openai_usage(100 + len(answer), 10, cached=20) if with_usage else None
        return Reply.verdict("pass", usage=u)

    return respond


def _judge_tokens(answer: str) -> tuple[int, int, int]:
    return 100 + len(answer), 10, 20


def _project(pytester: pytest.Pytester, extra: str = "", cases: list[dict[str, Any]] | None = None) -> None:
    pytester.makepyfile(sys_metered=SYSTEM)
    pytester.makefile(".jsonl", cases="\n".join(json.dumps(c) for c in cases or CASES))
    pytester.makefile(
        ".yaml",
        oloproof=f"""
system:
  rag: {{object: "sys_metered:Metered"}}
cases: cases.jsonl
evaluators:
  - {{type: contains, criterion: answer_correct}}
  - {{type: groundedness_judge, provider: openai, base_url: '${{JUDGE_URL}}', model: judge-m, retries: 0}}
concurrency: 4
store: .store
{extra}
""",
    )


DOC_OF = {"refund": "Refunds take 14 days.", "seats": "Seats cost 8 dollars.", "renew": "Plans renew yearly."}
DOC_OF["support"] = "Support answers within a day."
ANSWERS = {c["id"]: f"{DOC_OF[c['id']]} ({c['input']['q']})" for c in CASES}
PRICING_YAML = """
pricing:
  judge-m: {input: 2.5, output: 10.0, cached_input: 1.25}
  gen-m: {input: 0.15, output: 0.6}
  emb-m: {input: 0.02, output: 0}
"""


def _judge_cost(answer: str) -> float:
    inp, out, cached = _judge_tokens(answer)
    return ((inp - cached) * 2.5 + cached * 1.25 + out * 10.0) / 1e6


def _system_cost(q: str) -> float:
    return (len(q) * 0.02 + (40 + len(q)) * 0.15 + 6 * 0.6) / 1e6


def test_run_records_exact_tokens_per_case_and_run_and_what_the_cache_saved(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedServer(responder=_respond()) as server:
        monkeypatch.setenv("JUDGE_URL", server.base_url)
        _project(pytester, PRICING_YAML)
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step.md"))
        first = pytester.runpytest("--oloproof", "--oloproof-report", "r1.json")
        first.assert_outcomes(passed=4)
        assert len(server.requests) == 4
        second = pytester.runpytest("--oloproof", "--oloproof-report", "r2.json")
        second.assert_outcomes(passed=4)
        assert len(server.requests) == 4, "a cached re-run calls no judge"
    r1 = json.loads((pytester.path / "r1.json").read_text())
    by_id = {c["id"]: c for c in r1["cases"]}
    for case in CASES:
        u = by_id[case["id"]]["usage"]
        q = case["input"]["q"]
        inp, out, cached = _judge_tokens(ANSWERS[case["id"]])
        assert u["judges"] == {
            "grounded": [{"model": "judge-m", "input_tokens": inp, "output_tokens": out, "cached_input_tokens": cached}]
        }
        assert u["stages"] == {
            "retrieve": [{"model": "emb-m", "input_tokens": len(q), "output_tokens": 0, "cached_input_tokens": None}],
            "generate": [
                {"model": "gen-m", "input_tokens": 40 + len(q), "output_tokens": 6, "cached_input_tokens": None}
            ],
        }
        assert u["totals"]["spent"]["calls"] == 3 and u["totals"]["saved"] == {"calls": 0, "tokens": 0, "cost": 0.0}
        assert u["totals"]["spent"]["tokens"] == inp + out + len(q) + 40 + len(q) + 6
        want = _judge_cost(ANSWERS[case["id"]]) + _system_cost(q)
        assert u["totals"]["spent"]["cost"] == pytest.approx(want, abs=1e-11)
    judges, system = r1["usage"]["judges"], r1["usage"]["system"]
    j_in = sum(_judge_tokens(ANSWERS[c["id"]])[0] for c in CASES)
    s_in = sum(len(c["input"]["q"]) * 2 + 40 for c in CASES)
    assert (judges["calls"], judges["input_tokens"], judges["output_tokens"], judges["cached_input_tokens"]) == (
        4,
        j_in,
        40,
        80,
    )
    assert (system["calls"], system["input_tokens"], system["output_tokens"]) == (8, s_in, 24)
    judge_cost = sum(_judge_cost(ANSWERS[c["id"]]) for c in CASES)
    system_cost = sum(_system_cost(c["input"]["q"]) for c in CASES)
    assert judges["cost"] == pytest.approx(judge_cost, abs=1e-12)
    assert system["cost"] == pytest.approx(system_cost, abs=1e-12)
    assert r1["usage"]["saved"]["calls"] == 0
    first.stdout.fnmatch_lines(
        [
            "Cache: execution 0 hit/4 miss; judgment 0 hit/8 miss",
            "Stages: retrieve 0 hit/4 miss; generate 0 hit/4 miss",
            f"Tokens: judges 4 calls, {j_in:,} in / 40 out (80 cached in), ~{usage.fmt_cost(judge_cost)}; "
            f"system 8 calls, {s_in:,} in / 24 out, ~{usage.fmt_cost(system_cost)}; saved nothing",
        ]
    )
    # the re-run spent nothing and saved exactly what the first run spent
    r2 = json.loads((pytester.path / "r2.json").read_text())
    assert r2["usage"]["judges"]["calls"] == 0 and r2["usage"]["system"]["calls"] == 0
    saved = r2["usage"]["saved"]
    assert saved["judges"]["calls"] == 4 and saved["system"]["calls"] == 8
    assert saved["tokens"] == j_in + 40 + s_in + 24
    assert saved["cost"] == pytest.approx(judge_cost + system_cost, abs=1e-12)
    tokens_line = f"Tokens: judges 4 calls, {j_in:,} in / 40 out (80 cached in), ~{usage.fmt_cost(judge_cost)}"
    assert f"`{tokens_line}" in (pytester.path / "step.md").read_text()  # the Markdown step summary
    inspect = subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", "inspect", r1["run_id"]],
        cwd=pytester.path,
        capture_output=True,
        text=True,
    )
    assert inspect.returncode == 0 and tokens_line in inspect.stdout  # read back from the store
    refund = by_id["refund"]["usage"]["totals"]["spent"]
    assert f"  refund: answer_correct=pass, grounded=pass · 3 calls, {refund['tokens']:,} tokens, ~" in inspect.stdout
    second.stdout.fnmatch_lines(
        [
            "Cache: execution 4 hit/0 miss; judgment 8 hit/0 miss",
            f"Tokens: judges 0 calls; system none reported; saved 4 judge calls, 8 system calls, "
            f"{j_in + 40 + s_in + 24:,} tokens, ~{usage.fmt_cost(judge_cost + system_cost)}",
        ]
    )


def test_changed_generation_reuses_retrieval_and_counts_what_each_cache_saved(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedServer(responder=_respond()) as server:
        monkeypatch.setenv("JUDGE_URL", server.base_url)
        _project(pytester)
        pytester.runpytest("--oloproof").assert_outcomes(passed=4)
        cfg = pytester.path / "oloproof.yaml"
        cfg.write_text(cfg.read_text().replace('"sys_metered:Metered"}', '"sys_metered:Metered", version: "2"}'))
        second = pytester.runpytest("--oloproof", "--oloproof-report", "r2.json")
        second.assert_outcomes(passed=4)
        assert len(server.requests) == 4  # same outputs and context: the verdicts are reused
    r2 = json.loads((pytester.path / "r2.json").read_text())
    u = r2["usage"]
    # generation ran again (4 calls spent); retrieval and the judges were served by their caches
    assert (u["system"]["calls"], u["system"]["models"]["gen-m"]["calls"]) == (4, 4)
    assert u["saved"]["system"]["models"] == {
        "emb-m": {
            "calls": 4,
            "input_tokens": sum(len(c["input"]["q"]) for c in CASES),
            "output_tokens": 0,
            "unknown_calls": 0,
            "cost": None,
        }
    }
    assert u["saved"]["judges"]["calls"] == 4
    assert u["priced"] is False and u["system"]["cost"] is None and u["system"]["cost_missing"] == "no_pricing"
    second.stdout.fnmatch_lines(
        [
            "Tokens: *saved 4 judge calls, 4 system calls, * tokens "
            "(cost not computed: no `pricing` table in oloproof.yaml)"
        ]
    )


def test_provider_without_usage_is_unknown_never_zero(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedServer(responder=_respond(with_usage=False)) as server:
        monkeypatch.setenv("JUDGE_URL", server.base_url)
        _project(pytester, PRICING_YAML)
        result = pytester.runpytest("--oloproof", "--oloproof-report", "r.json")
        result.assert_outcomes(passed=4)
    report = json.loads((pytester.path / "r.json").read_text())
    judges = report["usage"]["judges"]
    assert (judges["calls"], judges["input_tokens"], judges["output_tokens"], judges["cost"]) == (4, None, None, None)
    assert judges["unknown_calls"] == 4 and judges["cost_missing"] == "usage_unknown"
    assert report["cases"][0]["usage"]["judges"]["grounded"] == [
        {"model": "judge-m", "input_tokens": None, "output_tokens": None, "cached_input_tokens": None}
    ]
    result.stdout.fnmatch_lines(["Tokens: judges 4 calls, tokens unknown (not reported); system 8 calls, *"])


def test_python_judge_returns_usage_with_its_reply(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        judge_fn="""
import json
from pytest_oloproof import report_usage

def judge(messages):
    return {"content": json.dumps({"verdict": "pass"}), "usage": {"input_tokens": 30, "output_tokens": 4}}

def judge_reporting(messages):
    report_usage(model="rules-v1", input_tokens=11, output_tokens=2)
    return json.dumps({"verdict": "pass"})
"""
    )
    pytester.makepyfile(sys_metered=SYSTEM)
    pytester.makefile(".jsonl", cases="\n".join(json.dumps(c) for c in CASES[:2]))
    pytester.makefile(
        ".yaml",
        oloproof="""
system:
  rag: {object: "sys_metered:Metered"}
cases: cases.jsonl
evaluators:
  - {type: groundedness_judge, provider: python, object: "judge_fn:judge", model: rules-v1}
  - {type: groundedness_judge, criterion: grounded2, provider: python, object: "judge_fn:judge_reporting"}
store: .store
""",
    )
    pytester.runpytest("--oloproof", "--oloproof-report", "r.json").assert_outcomes(passed=2)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["cases"][0]["usage"]["judges"] == {
        "grounded": [{"model": "rules-v1", "input_tokens": 30, "output_tokens": 4, "cached_input_tokens": None}],
        "grounded2": [{"model": "rules-v1", "input_tokens": 11, "output_tokens": 2, "cached_input_tokens": None}],
    }
    assert report["usage"]["judges"]["input_tokens"] == 2 * (30 + 11)


def test_max_judge_calls_stops_the_run_mid_way_at_concurrency_4(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = [
        {"id": f"c{i:02d}", "input": {"q": f"refund case {i}"}, "expected": {"answer": "14 days"}} for i in range(9)
    ]
    with ScriptedServer(responder=_respond()) as server:
        monkeypatch.setenv("JUDGE_URL", server.base_url)
        _project(pytester, "max_judge_calls: 5", cases=cases)
        result = pytester.runpytest("--oloproof", "--oloproof-report", "r.json")
        assert len(server.requests) == 5, "no judge call past the budget"
        # the next run judges only what the budget left unjudged (missing verdicts are never cached)
        again = pytester.runpytest("--oloproof")
        again.assert_outcomes(passed=9)
        assert len(server.requests) == 9
    result.assert_outcomes(passed=5, failed=4)  # never silently passed
    report = json.loads((pytester.path / "r.json").read_text())
    grounded = {c["id"]: c["criteria"]["grounded"] for c in report["cases"]}
    assert [i for i, g in sorted(grounded.items()) if g["status"] == "observed"] == [f"c{i:02d}" for i in range(5)]
    assert all(grounded[f"c{i:02d}"]["reason"] == "budget_exhausted" for i in range(5, 9))
    assert report["metrics"]["grounded"]["missing_reasons"] == {"budget_exhausted": 4}
    # the system was not the budget's business: every case executed and was checked
    assert all(c["criteria"]["answer_correct"]["status"] == "observed" for c in report["cases"])
    assert report["budget"] == {
        "max_cost": None,
        "max_judge_calls": 5,
        "exhausted": True,
        "cases_not_executed": [],
        "cases_not_judged": ["c05", "c06", "c07", "c08"],
        "criteria_missing": 4,
    }
    result.stdout.fnmatch_lines(
        [
            "*case 'c05' failed 1 criterion(s):*",
            "Budget: the budget (max_judge_calls 5) stopped the run: 4 case(s) not fully judged; "
            "4 criterion value(s) missing (budget_exhausted)",
        ]
    )


def test_max_cost_stops_system_and_judge_calls(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [{"id": f"c{i}", "input": {"q": f"refund {i}"}, "expected": {"answer": "14 days"}} for i in range(6)]
    with ScriptedServer(responder=_respond()) as server:
        monkeypatch.setenv("JUDGE_URL", server.base_url)
        per_case = _judge_cost("Refunds take 14 days. (refund 0)") + _system_cost("refund 0")
        _project(pytester, PRICING_YAML + f"max_cost: {per_case * 2.5!r}\n", cases=cases)
        # a sync system at concurrency 1: each case retrieves, generates and is judged before the next
        sync = SYSTEM.replace("async def retrieve", "def retrieve").replace("await asyncio.sleep", "(lambda s: s)")
        pytester.makepyfile(sys_metered=sync)
        cfg = pytester.path / "oloproof.yaml"
        cfg.write_text(cfg.read_text().replace("concurrency: 4", "concurrency: 1"))
        result = pytester.runpytest("--oloproof", "--oloproof-report", "r.json")
        assert len(server.requests) == 2
    result.assert_outcomes(passed=2, failed=4)
    report = json.loads((pytester.path / "r.json").read_text())
    spent = report["usage"]["judges"]["cost"] + report["usage"]["system"]["cost"]
    assert spent <= per_case * 2.5
    by_id = {c["id"]: c for c in report["cases"]}
    assert [by_id[f"c{i}"]["criteria"]["grounded"]["status"] for i in range(2)] == ["observed"] * 2
    # c2 executed (its system calls fitted), but its judge call would have crossed the budget
    assert by_id["c2"]["error"] is None and by_id["c2"]["criteria"]["grounded"]["reason"] == "budget_exhausted"
    assert by_id["c2"]["criteria"]["answer_correct"]["status"] == "observed"
    for i in range(3, 6):  # nothing more was called: these cases are missing for every criterion
        c = by_id[f"c{i}"]
        assert c["error"]["reason"] == "budget_exhausted" and "retrieve() was not called" in c["error"]["message"]
        assert {v["reason"] for v in c["criteria"].values()} == {"budget_exhausted"}
        assert "usage" not in c
    assert report["budget"]["cases_not_judged"] == ["c2"]
    assert report["budget"]["cases_not_executed"] == ["c3", "c4", "c5"]
    result.stdout.fnmatch_lines(
        [
            f"Budget: the budget (max_cost ~{usage.fmt_cost(per_case * 2.5)}) stopped the run: "
            "1 case(s) not fully judged, 3 case(s) not executed; 7 criterion value(s) missing (budget_exhausted)"
        ]
    )


def test_diagnosis_says_what_its_re_execution_cost(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    gold = [{"doc_id": "g", "text": "Plans renew monthly."}]
    cases = [
        CASES[0],
        {"id": "renew", "input": {"q": "renewal"}, "expected": {"answer": "monthly", "gold_context": gold}},
    ]
    with ScriptedServer(responder=_respond()) as server:
        monkeypatch.setenv("JUDGE_URL", server.base_url)
        _project(pytester, PRICING_YAML, cases=cases)
        pytester.runpytest("--oloproof").assert_outcomes(passed=1, failed=1)
        run_id = Store(pytester.path / ".store").run_ids()[0]
        before = len(server.requests)
        result = pytester.runpytest(
            "--oloproof",
            "--oloproof-diagnose",
            run_id,
            "--oloproof-criterion",
            "answer_correct",
            "--oloproof-report",
            "d.json",
        )
        assert len(server.requests) - before == 2  # the control's judgment and the gold context's
    doc = json.loads((pytester.path / "d.json").read_text())
    assert doc["counts"]["recovered"] == 1  # the gold passage put "monthly" in the answer
    u = doc["usage"]
    q = "renewal"
    control_answer, gold_answer = "Plans renew yearly. (renewal)", "Plans renew monthly. (renewal)"
    assert u["judges"]["calls"] == 2
    assert u["judges"]["input_tokens"] == _judge_tokens(control_answer)[0] + _judge_tokens(gold_answer)[0]
    # the control re-ran retrieval and generation; the gold-context run only generation
    assert u["system"]["models"]["emb-m"]["calls"] == 1 and u["system"]["models"]["gen-m"]["calls"] == 2
    assert u["system"]["input_tokens"] == len(q) + 2 * (40 + len(q))
    cost = _judge_cost(control_answer) + _judge_cost(gold_answer) + 2 * _system_cost(q)
    cost -= (len(q) * 0.02) / 1e6  # the gold-context run made no embedding call
    assert u["judges"]["cost"] + u["system"]["cost"] == pytest.approx(cost, abs=1e-12)
    result.stdout.fnmatch_lines(["Re-execution tokens: judges 2 calls, * ~$*; system 3 calls, *"])
    # the diagnosis's HTML page says the same, from the child runs in the store
    from html import escape

    from pytest_oloproof.report.html import page_for

    printed = next(ln for ln in result.stdout.lines if ln.startswith("Re-execution tokens:"))
    _, _, page = page_for(Store(pytester.path / ".store"), doc["id"])
    assert f'id="reexecution-cost"><code>{escape(printed)}</code>' in page


def test_comparison_reports_the_cost_difference_per_case(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_oloproof.compare.comparison import run_comparison
    from pytest_oloproof.report.text import comparison_lines as render

    with ScriptedServer(responder=_respond()) as server:
        monkeypatch.setenv("JUDGE_URL", server.base_url)
        metered = SYSTEM.replace('"completion_tokens": 6', '"completion_tokens": int(os.environ.get("GEN_OUT", 6))')
        _project(pytester, PRICING_YAML)
        pytester.makepyfile(sys_metered="import os\n" + metered)
        pytester.runpytest("--oloproof").assert_outcomes(passed=4)
        cfg = pytester.path / "oloproof.yaml"
        cfg.write_text(cfg.read_text().replace('"sys_metered:Metered"}', '"sys_metered:Metered", version: "2"}'))
        monkeypatch.setenv("GEN_OUT", "16")  # the new generation writes 10 more tokens per answer
        pytester.runpytest("--oloproof").assert_outcomes(passed=4)
    store = Store(pytester.path / ".store")
    candidate, baseline = store.run_ids()[:2]
    doc_id, doc = run_comparison(store, candidate, baseline)
    cost = doc["cost"]
    extra = 10 * 0.6 / 1e6  # per case: 10 output tokens of gen-m at $0.60 per million
    assert cost["pricing_from"] == "candidate" and cost["paired"] == 4
    assert cost["difference_per_case"]["cost"] == pytest.approx(extra, abs=1e-15)
    assert cost["difference"]["tokens"] == 40
    for cid in ANSWERS:
        row = cost["cases"][cid]
        assert row["difference"]["cost"] == pytest.approx(extra, abs=1e-15) and row["difference"]["tokens"] == 10
        # the candidate's judge verdicts came from the cache, but count at the cost recorded with them
        want = _judge_cost(ANSWERS[cid]) + _system_cost(CASES[[c["id"] for c in CASES].index(cid)]["input"]["q"])
        assert row["baseline"]["cost"] == pytest.approx(want, abs=1e-12)
    line = next(x for x in render(doc, doc_id) if x.startswith("Cost of the 4 paired cases"))
    assert line.endswith("difference +$0.000024 (+$0.0000060 per case)")
    from html import escape

    from pytest_oloproof.report import model
    from pytest_oloproof.report.html import render_page

    page = render_page(model.comparison_view(doc, doc_id))
    assert f'id="comparison-cost"><li><code>{escape(line)}</code></li>' in page


def test_max_judge_calls_holds_across_xdist_workers(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [{"id": f"c{i:02d}", "input": {"q": f"refund {i}"}, "expected": {"answer": "14 days"}} for i in range(10)]
    with ScriptedServer(responder=_respond()) as server:
        monkeypatch.setenv("JUDGE_URL", server.base_url)
        _project(pytester, "max_judge_calls: 4", cases=cases)
        result = pytester.runpytest("--oloproof", "-n", "2", "--oloproof-report", "r.json")
        assert len(server.requests) == 4, "the two workers share one budget"
    result.assert_outcomes(passed=4, failed=6)
    report = json.loads((pytester.path / "r.json").read_text())
    reasons = [c["criteria"]["grounded"].get("reason") for c in report["cases"]]
    assert reasons.count("budget_exhausted") == 6 and reasons.count(None) == 4
    assert len(report["budget"]["cases_not_judged"]) == 6
    assert not (pytester.path / ".store" / "budget").exists() or not any(
        (pytester.path / ".store" / "budget").iterdir()
    )


RETRIED = """
from pytest_oloproof import Transient, report_usage

CALLS = {}

def answer(input):
    n = CALLS[input["q"]] = CALLS.get(input["q"], 0) + 1
    report_usage(model="gen-m", input_tokens=10 * n, output_tokens=n)
    if n == 1:
        raise Transient("rate limited after the model answered")
    return {"answer": "ok"}
"""


@pytest.mark.parametrize("use_async", [False, True])
def test_a_retried_case_keeps_what_every_attempt_spent(tmp_path: Path, use_async: bool) -> None:
    from pytest_oloproof.engine.setup import RunSetup

    module = f"usage_retried_{int(use_async)}"
    (tmp_path / f"{module}.py").write_text(RETRIED)
    (tmp_path / "cases.jsonl").write_text(json.dumps({"id": "a", "input": {"q": "x"}}) + "\n")
    (tmp_path / "oloproof.yaml").write_text(
        f"system:\n  object: {module}:answer\ncases: cases.jsonl\nretries: 1\nstore: .store\n"
    )
    ev = RunSetup.load(tmp_path / "oloproof.yaml")
    ev.engine.backoff_s = 0.0
    try:
        case = ev.cases[0]
        rec = asyncio.run(ev.engine.aexecute(case)) if use_async else ev.execute(case)
    finally:
        ev.caches.close()
    assert rec["error"] is None and rec["attempts"] == 2
    assert [(e["input_tokens"], e["output_tokens"]) for e in rec["usage"]["stages"]["call"]] == [(10, 1), (20, 2)]


def test_max_cost_holds_exactly_under_racing_threads_once_a_call_cost_is_known() -> None:
    # every call: 100,000 input tokens at $1.25 per million = $0.125; max_cost $1.00 has room for exactly 8
    budget = usage.Budget(max_cost=1.0, pricing={"m": {"input": 1.25, "output": 0.0}})
    entry = [usage.make_entry("m", 100_000, 0)]
    budget.settle(budget.reserve("generate"), entry)  # the first call makes the cost of a call known
    granted: list[usage.Ticket] = []
    barrier = threading.Barrier(16)
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        try:
            t = budget.reserve("generate")
        except usage.BudgetExhausted:
            return
        with lock:
            granted.append(t)
        barrier_done.wait()
        budget.settle(t, entry)

    barrier_done = threading.Barrier(7, timeout=10)  # the 7 that may still start are in flight together
    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 7  # 1 + 7 = 8 calls, all in flight at once, none past the budget
    assert budget.spent == 1.0 and budget.stopped_by == "max_cost"
    with pytest.raises(usage.BudgetExhausted):
        budget.reserve("retrieve")  # once max_cost stopped the run, no paid call of any kind starts


def test_max_cost_stops_an_async_system_at_concurrency_4(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = [
        {"id": f"c{i:02d}", "input": {"q": f"refund {i:02d}"}, "expected": {"answer": "14 days"}} for i in range(12)
    ]
    per_case = _system_cost("refund 00")
    pytester.makepyfile(sys_metered=SYSTEM)
    pytester.makefile(".jsonl", cases="\n".join(json.dumps(c) for c in cases))
    pytester.makefile(
        ".yaml",
        oloproof=f"""
system:
  rag: {{object: "sys_metered:Metered"}}
cases: cases.jsonl
evaluators:
  - {{type: contains, criterion: answer_correct}}
concurrency: 4
store: .store
{PRICING_YAML}
max_cost: {per_case * 5.5!r}
""",
    )
    result = pytester.runpytest("--oloproof", "--oloproof-report", "r.json")
    report = json.loads((pytester.path / "r.json").read_text())
    executed = [c for c in report["cases"] if c["error"] is None]
    stopped = [c for c in report["cases"] if c["error"] is not None]
    assert all(c["error"]["reason"] == "budget_exhausted" for c in stopped) and stopped
    assert all(v["reason"] == "budget_exhausted" for c in stopped for v in c["criteria"].values())
    assert all(c["criteria"]["answer_correct"]["status"] == "observed" for c in executed)
    spent = report["usage"]["system"]["cost"]
    # the first wave starts before any cost is known (4 cases in flight); after that, never past the budget
    assert spent <= per_case * 5.5 + 4 * per_case
    assert len(executed) >= 5
    result.assert_outcomes(passed=len(executed), failed=len(stopped))
    result.stdout.fnmatch_lines(["*not executed, the run's budget stopped it*", "Budget: the budget (max_cost *"])
