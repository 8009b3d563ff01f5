"""Issue 12 §3: a value taken from the environment never reaches anything Oloproof writes or prints.

The judge server below is hostile: it echoes the Authorization header (Bearer and
Basic) and the request path (which holds a token from `${TOKEN}`) in error bodies
and in verdict rationales. Every file the session leaves and every byte it prints
is searched for the secrets in every form they take on the wire.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_oloproof.records import redaction
from tests.judge_server import Recorded, Reply, ScriptedServer

API_KEY = "sk-live-7Hq2ZpXw9vKc3LmN"
PATH_TOKEN = "tok-Q8r4Ys1Vb6Nd"
PASSWORD = "pw-Gz5Hj2Kl8Mn"
ROTATED_KEY = "sk-live-ROTATED-0000aaaa"

SYSTEM = """
from pytest_oloproof import Passage, Retrieval, rag_system

DOCS = {"a": "Refunds take 14 days.", "b": "Seats cost 8 dollars."}

@rag_system(name="leaky", version="1", depth=2, top_k=1, index_version="i1")
class Leaky:
    def retrieve(self, input, depth):
        key = "a" if "refund" in input["q"] else "b"
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage(key, 1.0, DOCS[key]),))

    def generate(self, input, context):
        return {"answer": context[0].text}
"""

CASES = "\n".join(
    json.dumps(c)
    for c in [
        {"id": "refund", "input": {"q": "refund time"}, "expected": {"answer": "14 days"}},
        {"id": "seats", "input": {"q": "seat price"}, "expected": {"answer": "8 dollars"}},
    ]
)


def _forms() -> list[str]:
    """Each secret as text, as base64 (Basic credentials), and the Basic pair itself."""
    out = []
    for s in (API_KEY, PATH_TOKEN, PASSWORD, ROTATED_KEY):
        out += [s, base64.b64encode(s.encode()).decode()]
    out.append(base64.b64encode(f"judge:{PASSWORD}".encode()).decode())
    return out


def _echo(req: Recorded) -> Reply:
    """Seats: an error page quoting the request; refunds: a verdict whose rationale quotes it."""
    auth = req.headers.get("Authorization", "")
    prompt = req.json()["messages"][-1]["content"]
    if "8 dollars" in prompt.split("ANSWER:", 1)[1]:
        return Reply(403, body=f"forbidden: {auth} on {req.path}")
    return Reply.verdict("pass", rationale=f"I was called with {auth} at {req.path}")


def _all_text(folder: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file())


def _project(pytester: pytest.Pytester, port_url: str) -> None:
    host = port_url.removeprefix("http://")
    pytester.makepyfile(leaky_sys=SYSTEM)
    pytester.makefile(".jsonl", cases=CASES)
    pytester.makefile(
        ".yaml",
        oloproof=f"""
system:
  rag: {{object: "leaky_sys:Leaky"}}
cases: cases.jsonl
evaluators:
  - type: groundedness_judge
    criterion: bearer_judge
    provider: openai
    model: tiny
    retries: 0
    base_url: "http://{host}/${{TOKEN}}"
    api_key_env: OLO_API_KEY
  - type: groundedness_judge
    criterion: basic_judge
    provider: openai
    model: tiny
    retries: 0
    base_url: "http://judge:${{JUDGE_PW}}@{host}"
store: .store
""",
    )


@pytest.fixture(autouse=True)
def _fresh_redactor() -> object:
    redaction.clear()
    yield None
    redaction.clear()


def test_no_secret_from_the_environment_reaches_any_output(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLO_API_KEY", API_KEY)
    monkeypatch.setenv("TOKEN", PATH_TOKEN)
    monkeypatch.setenv("JUDGE_PW", PASSWORD)
    step = pytester.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    with ScriptedServer(responder=_echo) as server:
        _project(pytester, server.base_url.removesuffix("/v1"))
        result = pytester.runpytest_subprocess(
            "--oloproof", "--oloproof-report", "r.json", "--junitxml", "j.xml", "-p", "no:cacheprovider", "-rA"
        )
        # the server really saw every secret: the test can fail
        seen = " ".join(r.path + " " + r.headers.get("Authorization", "") for r in server.requests)
        assert f"Bearer {API_KEY}" in seen and PATH_TOKEN in seen
        assert base64.b64encode(f"judge:{PASSWORD}".encode()).decode() in seen
        (pytester.path / "labels.jsonl").write_text(
            json.dumps(
                {
                    "id": "l1",
                    "output": {"answer": "14 days"},
                    "context": [{"doc_id": "a", "text": "Refunds take 14 days."}],
                    "label": "pass",
                }
            )
            + "\n"
        )
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest_oloproof.cli",
                "validate-judge",
                "--criterion",
                "bearer_judge",
                "--labels",
                "labels.jsonl",
                "--min-labels",
                "1",
                "--json",
            ],
            cwd=pytester.path,
            capture_output=True,
            text=True,
            env=dict(os.environ),
        )
        runs = subprocess.run(
            [sys.executable, "-m", "pytest_oloproof.cli", "inspect", "run_", "--json"],
            cwd=pytester.path,
            capture_output=True,
            text=True,
            env=dict(os.environ),
        )
    assert result.ret == 1, result.stdout.str()
    printed = result.stdout.str() + result.stderr.str() + cli.stdout + cli.stderr + runs.stdout + runs.stderr
    assert "judge_error" in printed  # the failed call was reported (its message is where the echo was)
    assert "${OLO_API_KEY}" in _all_text(pytester.path / ".store")  # redacted, not dropped
    assert (pytester.path / ".store" / "judge_validations").is_dir(), cli.stdout + cli.stderr
    written = {
        "terminal and CLI": printed,
        "store (runs, cache, judge_validations)": _all_text(pytester.path / ".store"),
        "JSON report": (pytester.path / "r.json").read_text(),
        "JUnit XML": (pytester.path / "j.xml").read_text(),
        "step summary": step.read_text(),
    }
    for where, text in written.items():
        for form in _forms():
            assert form not in text, f"{form!r} leaked into the {where}"


def test_judgment_cache_keys_hash_the_reference_not_the_secret(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rotating a key or a URL token changes nothing Oloproof identifies: the second run reuses every verdict."""
    monkeypatch.setenv("OLO_API_KEY", API_KEY)
    monkeypatch.setenv("TOKEN", PATH_TOKEN)
    monkeypatch.setenv("JUDGE_PW", PASSWORD)
    with ScriptedServer(responder=lambda req: Reply.verdict("pass")) as server:
        _project(pytester, server.base_url.removesuffix("/v1"))
        first = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
        assert "judgment 0 hit/4 miss" in first.stdout.str()
        calls = len(server.requests)
        monkeypatch.setenv("OLO_API_KEY", ROTATED_KEY)
        monkeypatch.setenv("TOKEN", "tok-ROTATED-5555")  # a token inside base_url, part of the judge's identity
        second = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
        assert "judgment 4 hit/0 miss" in second.stdout.str(), second.stdout.str()
        assert len(server.requests) == calls
    assert ROTATED_KEY not in _all_text(pytester.path / ".store")


def test_unset_api_key_env_is_a_config_error_before_any_case(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OLO_API_KEY", raising=False)
    monkeypatch.setenv("TOKEN", PATH_TOKEN)
    monkeypatch.setenv("JUDGE_PW", PASSWORD)
    with ScriptedServer(responder=lambda req: Reply.verdict("pass")) as server:
        _project(pytester, server.base_url.removesuffix("/v1"))
        result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
        assert not server.requests
    assert result.ret == 2
    out = result.stdout.str()
    assert "oloproof.yaml:11: evaluators[0].api_key_env: environment variable OLO_API_KEY is not set" in out
    assert not (pytester.path / ".store").exists()


def test_redactor_catches_json_escaped_and_base64_forms() -> None:
    redaction.register('p@ss"wörd\\x', "PW")
    text = json.dumps({"a": 'p@ss"wörd\\x'}) + base64.b64encode('p@ss"wörd\\x'.encode()).decode()
    assert redaction.redact(text) == '{"a": "${PW}"}${PW}'
    redaction.register("6", "DEPTH")  # too short to be a secret: "6" elsewhere stays
    redaction.register("0.95", "CONF")
    assert redaction.redact("depth 6, confidence 0.95") == "depth 6, confidence 0.95"


LOUD = """
import os

def answer(input):
    token = os.environ["TOKEN"]
    print(f"calling the backend with {token}")
    if input["q"] == "boom":
        raise RuntimeError(f"backend refused token {token}")
    return {"answer": "ok"}
"""


def test_captured_output_and_tracebacks_of_the_system_are_redacted(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOKEN", PATH_TOKEN)
    pytester.makepyfile(loud_sys=LOUD)
    pytester.makefile(
        ".jsonl",
        cases='{"id": "fine", "input": {"q": "x"}, "expected": {"answer": "nope"}}\n'
        '{"id": "boom", "input": {"q": "boom"}, "expected": {"answer": "ok"}}\n',
    )
    pytester.makefile(
        ".yaml",
        oloproof="system:\n  object: loud_sys:answer\n  version: 'v-${TOKEN}'\ncases: cases.jsonl\n"
        "evaluators:\n  - {type: contains, criterion: c}\nstore: .store\n",
    )
    result = pytester.runpytest_subprocess(
        "--oloproof", "--junitxml", "j.xml", "-o", "junit_logging=all", "-rA", "-p", "no:cacheprovider"
    )
    assert result.ret == 1
    out = result.stdout.str() + result.stderr.str()
    assert "calling the backend with ${TOKEN}" in out  # the captured output is shown, redacted
    junit = (pytester.path / "j.xml").read_text()
    assert "backend refused token ${TOKEN}" in junit
    store = _all_text(pytester.path / ".store")
    assert "backend refused token ${TOKEN}" in store
    for text in (out, junit, store):
        assert PATH_TOKEN not in text


def test_a_version_from_the_environment_is_redacted_but_still_invalidates_the_stage_caches(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`version: ${GIT_SHA}` is written as `${GIT_SHA}`, yet a new commit is a new identity (never a stale reuse)."""
    pytester.makepyfile(leaky_sys_v=SYSTEM)
    pytester.makefile(".jsonl", cases=CASES)
    pytester.makefile(
        ".yaml",
        oloproof='system:\n  version: "${OLO_GIT_SHA}"\n  rag: {object: "leaky_sys_v:Leaky"}\n'
        "cases: cases.jsonl\nevaluators:\n  - {type: contains, criterion: c}\nstore: .store\n",
    )
    monkeypatch.setenv("OLO_GIT_SHA", "commit-aaaa1111")
    first = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
    assert "Stages: retrieve 0 hit/2 miss; generate 0 hit/2 miss" in first.stdout.str()
    same = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
    assert "Cache: execution 2 hit/0 miss" in same.stdout.str()
    monkeypatch.setenv("OLO_GIT_SHA", "commit-bbbb2222")
    changed = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
    assert "Stages: retrieve 2 hit/0 miss; generate 0 hit/2 miss" in changed.stdout.str(), changed.stdout.str()
    store = _all_text(pytester.path / ".store")
    assert "commit-aaaa1111" not in store and "commit-bbbb2222" not in store
    assert '"version": "${OLO_GIT_SHA}"' in store


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_the_http_libraries_own_log_lines_are_redacted(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, level: str
) -> None:
    """httpx logs each request's URL at INFO (httpcore its response headers at DEBUG): with pytest's live
    logs on, a password in the URL, a token in its path and a key a server echoes in a header print redacted."""
    monkeypatch.setenv("OLO_API_KEY", API_KEY)
    monkeypatch.setenv("TOKEN", PATH_TOKEN)
    monkeypatch.setenv("JUDGE_PW", PASSWORD)

    def echo_in_a_header(req: Recorded) -> Reply:
        reply = Reply.verdict("pass")
        reply.headers["X-Echo"] = req.headers.get("Authorization", "")
        return reply

    with ScriptedServer(responder=echo_in_a_header) as server:
        _project(pytester, server.base_url.removesuffix("/v1"))
        result = pytester.runpytest_subprocess(
            "--oloproof", "-p", "no:cacheprovider", "-o", "log_cli=true", f"--log-cli-level={level}", "-rA"
        )
        assert any(
            PASSWORD in base64.b64decode(r.headers["Authorization"][6:]).decode()
            for r in server.requests
            if r.headers.get("Authorization", "").startswith("Basic ")
        )
    out = result.stdout.str() + result.stderr.str()
    assert "HTTP Request: POST http://judge:${JUDGE_PW}@" in out  # httpx's line is there, redacted
    assert "/${TOKEN}/chat/completions" in out
    for form in _forms():
        assert form not in out, f"{form!r} leaked into the live log"


def test_a_password_a_url_must_percent_encode_is_redacted_in_the_http_log(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx logs the URL percent-encoded: a password or a path token holding `"`, `<` or `^` shows as
    `%22`, `%3C`, `%5E` in its `HTTP Request:` line, and that form is redacted too."""
    password, token = 'pw"Gz5^Hj2', 'tok"Q8r4<Ys1>'
    monkeypatch.setenv("OLO_API_KEY", API_KEY)
    monkeypatch.setenv("TOKEN", token)
    monkeypatch.setenv("JUDGE_PW", password)
    with ScriptedServer([Reply.verdict("pass")]) as server:
        _project(pytester, server.base_url.removesuffix("/v1"))
        result = pytester.runpytest_subprocess(
            "--oloproof", "-p", "no:cacheprovider", "-o", "log_cli=true", "--log-cli-level=INFO"
        )
        assert server.requests  # the judges were asked: the log lines exist
    out = result.stdout.str() + result.stderr.str()
    assert "HTTP Request: POST http://judge:${JUDGE_PW}@" in out
    assert "/${TOKEN}/chat/completions" in out
    for leaked in ("Gz5", "Q8r4"):
        assert leaked not in out, f"{leaked!r} leaked into the live log"


QUOTED_SECRET = "p'w\"Gz5-Hj2\\Kl8"

QUOTING = """
import os

def answer(input):
    token = os.environ["TOKEN"]
    if input["q"] == "boom":
        raise RuntimeError(repr({"token": token}))
    return {"answer": f"token {token}", "seen": [token], "nested": repr([token])}
"""


def test_a_secret_with_both_quotes_is_redacted_in_every_form_it_takes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value holding ' and " (and a backslash) is escaped by repr (\\' and \\\\) and by JSON (\\" and \\\\):
    pytest's failure text and the JUnit XML show it in those forms, and each is redacted."""
    monkeypatch.setenv("TOKEN", QUOTED_SECRET)
    pytester.makepyfile(quoting_sys=QUOTING)
    pytester.makefile(
        ".jsonl",
        cases='{"id": "fine", "input": {"q": "x"}, "expected": {"answer": "nope"}}\n'
        '{"id": "boom", "input": {"q": "boom"}, "expected": {"answer": "ok"}}\n',
    )
    pytester.makefile(
        ".yaml",
        oloproof="system:\n  object: quoting_sys:answer\n  version: 'v-${TOKEN}'\ncases: cases.jsonl\n"
        "evaluators:\n  - {type: contains, criterion: c}\nstore: .store\n",
    )
    result = pytester.runpytest_subprocess(
        "--oloproof", "--junitxml", "j.xml", "-o", "junit_logging=all", "-rA", "-p", "no:cacheprovider", "-vv"
    )
    assert result.ret == 1
    out = result.stdout.str() + result.stderr.str()
    junit = (pytester.path / "j.xml").read_text()
    store = _all_text(pytester.path / ".store")
    forms = {QUOTED_SECRET, repr(QUOTED_SECRET)[1:-1], json.dumps(QUOTED_SECRET)[1:-1], repr(repr(QUOTED_SECRET))}
    forms |= {"Gz5-Hj2"}  # the middle of the value, in whatever form it is shown
    for where, text in {"terminal": out, "JUnit XML": junit, "store": store}.items():
        for form in forms:
            assert form not in text, f"{form!r} leaked into the {where}"
    assert "${TOKEN}" in out and "${TOKEN}" in junit
