"""One pooled HTTP client per judge provider (issue 25 item 6): connections kept alive and counted at a real
server on 127.0.0.1 (TLS too), the attempt's deadline still held on a reused connection, certificates still
verified, and the client closed when the session ends (a real pytest session in a subprocess)."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_oloproof.evaluators.providers import OpenAIProvider, ProviderError
from tests.judge_server import Reply, ScriptedServer, self_signed_cert

HI = [{"role": "user", "content": "hi"}]

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")


def test_many_calls_share_one_kept_alive_connection() -> None:
    with ScriptedServer([Reply.verdict("pass")]) as server:
        provider = OpenAIProvider(server.base_url, "m", retries=0)
        for _ in range(6):
            provider.complete(HI)
        assert len(server.requests) == 6
        assert server.connections == 1  # a client per request opened six
        provider.close()


def test_threads_share_the_pool_and_never_open_more_than_the_concurrency() -> None:
    with ScriptedServer([Reply.verdict("pass", delay=0.02)]) as server:
        provider = OpenAIProvider(server.base_url, "m", retries=0, concurrency=3)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: provider.complete(HI), range(40)))
        assert len(server.requests) == 40
        assert 1 <= server.connections <= 3
        provider.close()


def test_the_deadline_holds_on_a_reused_connection() -> None:
    """The second call reuses the first one's connection and its reply is dripped a byte at a time (about
    20 s): the attempt still ends at its 1 s deadline, and a fresh connection serves the retry."""
    script = [Reply.verdict("pass"), Reply.verdict("fail", drip_s=0.05), Reply.verdict("pass")]
    with ScriptedServer(script) as server:
        provider = OpenAIProvider(server.base_url, "m", retries=1, timeout_s=1.0, backoff_s=0.0)
        assert '"pass"' in provider.complete(HI)
        assert '"pass"' in provider.complete(HI)  # the dripped attempt timed out; its retry answered
        assert len(server.requests) == 3
        assert server.requests[1].complete is False  # the dripped reply was never taken whole
        assert server.connections == 2  # the timed-out connection was dropped, not reused
        provider.close()


@needs_openssl
def test_https_calls_reuse_one_tls_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = self_signed_cert(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust this certificate (and only it)
    with ScriptedServer([Reply.verdict("pass")], tls=(cert, key)) as server:
        assert server.base_url.startswith("https://127.0.0.1:")
        provider = OpenAIProvider(server.base_url, "m", retries=0)
        for _ in range(5):
            assert '"pass"' in provider.complete(HI)
        assert server.connections == 1  # one TCP and TLS handshake for five calls
        provider.close()


@needs_openssl
def test_a_certificate_the_client_does_not_trust_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = self_signed_cert(tmp_path)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # the default CA bundle does not know it
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with ScriptedServer([Reply.verdict("pass")], tls=(cert, key)) as server:
        provider = OpenAIProvider(server.base_url, "m", retries=0)
        with pytest.raises(ProviderError, match=r"connection error \(ConnectError\)"):
            provider.complete(HI)
        assert server.requests == []  # nothing was sent over the unverified connection
        provider.close()


@needs_openssl
def test_a_certificate_for_another_host_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = self_signed_cert(tmp_path, host="127.0.0.2")  # trusted, but not 127.0.0.1's
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with ScriptedServer([Reply.verdict("pass")], tls=(cert, key)) as server:
        provider = OpenAIProvider(server.base_url, "m", retries=0)
        with pytest.raises(ProviderError, match=r"connection error"):
            provider.complete(HI)
        assert server.requests == []
        provider.close()


CONFTEST = """
import json, time, urllib.request
import pytest

@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # after Oloproof's session closed: ask the judge server how many connections are still open
    deadline = time.monotonic() + 10
    while True:
        req = urllib.request.Request(STATS_URL, data=b"{}", method="POST")
        with urllib.request.urlopen(req) as reply:
            still_open = json.load(reply)["open"] - 1  # less this request's own connection
        if still_open == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    with open("open_after_session.json", "w") as f:
        json.dump({"open": still_open}, f)
"""


def test_the_judges_connections_are_closed_when_the_session_ends(pytester: pytest.Pytester) -> None:
    """A real session in a subprocess judges 4 cases over one kept-alive connection; when the session has
    ended (a last hook, still in the process) the server sees no connection of it open."""
    pytester.makepyfile(
        app="""
from pytest_oloproof import Passage, Retrieval, rag_system

@rag_system(name="pooled", version="1", depth=1, top_k=1, index_version="i1")
class App:
    def retrieve(self, input, depth):
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage("a", 1.0, "Refunds take 14 days."),))

    def generate(self, input, context):
        return {"answer": "Refunds take 14 days " + input["q"]}
"""
    )
    (pytester.path / "cases.jsonl").write_text(
        "".join(json.dumps({"id": f"c{i}", "input": {"q": f"q{i}"}}) + "\n" for i in range(4))
    )

    def responder(request: object) -> Reply:
        if getattr(request, "path", "") == "/stats":
            return Reply(200, {}, {"open": server.open_connections})
        return Reply.verdict("pass")

    with ScriptedServer(responder=responder) as server:
        base = server.base_url
        (pytester.path / "oloproof.yaml").write_text(
            "system:\n  rag: {object: 'app:App'}\ncases: cases.jsonl\nevaluators:\n"
            f"  - {{type: groundedness_judge, model: m, base_url: '{base}', concurrency: 1}}\n"
            "store: .store\n"
        )
        pytester.makeconftest(CONFTEST.replace("STATS_URL", repr(base.rsplit("/v1", 1)[0] + "/stats")))
        result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=4)
        judged = [r for r in server.requests if r.path.endswith("/chat/completions")]
        assert len(judged) == 4
    assert json.loads((pytester.path / "open_after_session.json").read_text()) == {"open": 0}
    assert server.connections == 1 + sum(1 for r in server.requests if r.path == "/stats")
