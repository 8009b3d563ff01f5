"""Rate limits (issue 25 item 5): full jitter on retries, a client-side `rate_limit` shared by threads and
judges, and a concurrency that halves on 429 and climbs back; against a real HTTP server on 127.0.0.1.

Timing never decides an outcome here: request times are read at the server and counted in windows with
wide margins; nothing asserts a wall time (speed is benchmarks/bench_ratelimit.py's).
"""

from __future__ import annotations

import random
import re
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pytest_oloproof.engine.setup import RunSetup
from pytest_oloproof.errors import ConfigError
from pytest_oloproof.evaluators.base import ContextPassage, EvalInput
from pytest_oloproof.evaluators.judges import GroundednessJudge
from pytest_oloproof.evaluators.pacing import (
    AdaptiveConcurrency,
    LearnedWindow,
    RateLimiter,
    backoff_delay,
    shared_window,
)
from pytest_oloproof.evaluators.providers import OpenAIProvider
from tests.judge_server import Recorded, Reply, ScriptedServer


def case(i: int) -> EvalInput:
    return EvalInput(
        case_id=f"c{i}",
        input={"q": f"q{i}"},
        expected={},
        metadata={},
        output={"answer": f"answer number {i}"},
        context=[ContextPassage(doc_id="kb-1", chunk_id=None, text="a passage")],
    )


def judge(server: ScriptedServer, **kw: Any) -> GroundednessJudge:
    return GroundednessJudge(provider="openai", model=kw.pop("model", "m"), base_url=server.base_url, **kw)


def answer_of(request: Recorded) -> str:
    found = re.search(r"answer number \d+", request.json()["messages"][-1]["content"])
    assert found is not None
    return found.group(0)


# ------------------------------------------------------------------ full jitter


def test_backoff_is_uniform_below_the_exponential_ceiling_over_a_retry_after_floor() -> None:
    rng = random.Random(7)
    draws = [backoff_delay(2, 0.5, 20.0, rng) for _ in range(2000)]
    assert min(draws) >= 0.0 and max(draws) <= 2.0  # uniform(0, 0.5 * 2**2)
    assert 0.9 < sum(draws) / len(draws) < 1.1  # its mean is half the ceiling
    assert len({round(d, 6) for d in draws}) > 1900  # spread, not a handful of values
    with_floor = [backoff_delay(0, 0.5, 20.0, rng, retry_after=1.0) for _ in range(500)]
    assert min(with_floor) >= 1.0 and max(with_floor) <= 1.5  # never before the server said; spread after it
    assert backoff_delay(3, 0.5, 20.0, rng, retry_after=999.0) == 20.0  # the cap holds over any Retry-After
    # the same seed draws the same waits: a run's retries can be replayed
    assert [backoff_delay(1, 1.0, 9.0, random.Random(3)) for _ in range(3)] == [
        backoff_delay(1, 1.0, 9.0, random.Random(3)) for _ in range(3)
    ]


@pytest.mark.slow
def test_retries_after_a_shared_failure_reach_the_server_spread_out_not_in_lock_step() -> None:
    """Twelve verdicts fail together with 503; their retries (backoff 1 s) arrive at the server spread over
    most of that second. Without jitter every one waited exactly 1 s and they arrived within a few ms."""
    first_seen: set[str] = set()
    lock = threading.Lock()

    def responder(request: Recorded) -> Reply:
        with lock:
            fresh = answer_of(request) not in first_seen
            first_seen.add(answer_of(request))
        return Reply(503, body="busy") if fresh else Reply.verdict("pass")

    n = 12
    with ScriptedServer(responder=responder, hold_until_in_flight=n) as server:
        j = judge(server, concurrency=n, retries=2)
        j.provider.backoff_s = 1.0  # type: ignore[attr-defined]
        j.provider.rng = random.Random(2026)  # type: ignore[attr-defined]
        with ThreadPoolExecutor(n) as pool:
            values = list(pool.map(j.evaluate, [case(i) for i in range(n)]))
        times = [r.at for r in server.requests[n:]]
    assert all(v.status == "observed" for v in values)
    assert len(times) == n
    assert max(times) - min(times) > 0.3  # lock-step retries land within a few milliseconds of each other


# ------------------------------------------------------------------ a 429 storm loses no verdict


class Window:
    """A server-side limit: `per_s` accepted requests in any one second, 429 + Retry-After: 1 beyond."""

    def __init__(self, per_s: int, reply_s: float) -> None:
        self.per_s, self.reply_s = per_s, reply_s
        self.accepted: deque[float] = deque()
        self.too_many = 0
        self.lock = threading.Lock()

    def __call__(self, request: Recorded) -> Reply:
        with self.lock:
            while self.accepted and self.accepted[0] <= request.at - 1.0:
                self.accepted.popleft()
            if len(self.accepted) >= self.per_s:
                self.too_many += 1
                return Reply(429, {"Retry-After": "1"}, {"error": "rate limited"})
            self.accepted.append(request.at)
        return Reply.verdict("pass", delay=self.reply_s)


@pytest.mark.slow
def test_a_429_storm_at_high_concurrency_leaves_no_verdict_missing() -> None:
    """80 verdicts from 24 threads at a server allowing 10 requests a second: hundreds of 429s would
    exhaust 4 attempts of some verdicts; the concurrency halves instead, and a 429 while the endpoint
    serves others is a wait in line, so every verdict arrives."""
    window = Window(per_s=10, reply_s=0.1)
    with ScriptedServer(responder=window) as server:
        j = judge(server, concurrency=24)  # the default retries: 3
        with ThreadPoolExecutor(24) as pool:
            values = list(pool.map(j.evaluate, [case(i) for i in range(80)]))
    assert window.too_many > 0  # the storm happened
    missing = [v.reason for v in values if v.status != "observed"]
    assert missing == []
    assert j.provider._slots.cuts > 0  # type: ignore[attr-defined]


def test_an_endpoint_that_serves_nobody_still_fails_after_the_retries() -> None:
    """A 429 counts as a failed attempt when no request of the endpoint succeeded since the last one."""
    with ScriptedServer([Reply(429, {"Retry-After": "0"}, {"error": "quota"})]) as server:
        provider = OpenAIProvider(server.base_url, "m", retries=2, backoff_s=0.0)
        with pytest.raises(Exception, match=r"HTTP 429.*after 3 attempts"):
            provider.complete([{"role": "user", "content": "hi"}])
        assert len(server.requests) == 3


# ------------------------------------------------------------------ adaptive concurrency


def test_the_limit_halves_once_per_round_on_429_and_climbs_one_per_round_of_successes() -> None:
    now = [0.0]
    limiter = AdaptiveConcurrency(8, clock=lambda: now[0])
    held = [limiter.slot() for _ in range(8)]
    reports = [h.__enter__() for h in held]
    assert limiter.in_flight == 8
    for report, h in zip(reports, held, strict=True):  # eight requests of one round all answer 429
        report(False)
        h.__exit__(None, None, None)
    assert limiter.limit == 4.0 and limiter.cuts == 1  # one cut for the round, not 2**-8
    for _ in range(4):  # a round of four successes, 200 ms each
        with limiter.slot() as report:
            now[0] += 0.2
            report(True)
    assert 4.8 < limiter.limit < 5.0  # about one more per round trip
    before = limiter.limit
    with limiter.slot() as report:
        report(False)
    # the last second's successes held one request at a time (4 x 0.2 s in 0.8 s): halving wins
    assert limiter.limit == pytest.approx(before / 2) and limiter.cuts == 2


def test_a_cut_stops_at_what_the_endpoint_sustained() -> None:
    now = [0.0]
    limiter = AdaptiveConcurrency(6, clock=lambda: now[0])
    for _ in range(5):  # five rounds of five requests at once, 200 ms each: the endpoint held 5 at a time
        held = [limiter.slot() for _ in range(5)]
        reports = [h.__enter__() for h in held]
        now[0] += 0.2
        for report, h in zip(reports, held, strict=True):
            report(True)
            h.__exit__(None, None, None)
    assert limiter.limit == 6.0
    with limiter.slot() as report:
        report(False)
    assert limiter.limit == pytest.approx(5.0)  # its pace (25 x 0.2 s in 1 s), not half of 6


def test_slots_block_at_the_limit_and_free_on_release() -> None:
    limiter = AdaptiveConcurrency(2)
    a, b = limiter.slot(), limiter.slot()
    a.__enter__(), b.__enter__()
    entered = threading.Event()

    def third() -> None:
        with limiter.slot():
            entered.set()

    t = threading.Thread(target=third, daemon=True)
    t.start()
    assert not entered.wait(0.2)
    a.__exit__(None, None, None)
    assert entered.wait(5)
    b.__exit__(None, None, None)
    t.join(5)


# ------------------------------------------------------------------ the endpoint's learned window


def _sends(window: LearnedWindow, now: list[float], at: float, n: int) -> list[Any]:
    now[0] = at
    sends = [window.acquire() for _ in range(n)]
    for send in sends:
        window.sent(send)
    return sends


def _end(window: LearnedWindow, now: list[float], at: float, sends: list[Any], status: int) -> None:
    now[0] = at
    for send in sends:
        window.release(send, status, 1.0 if status == 429 else None)


def test_the_window_is_what_the_endpoint_accepted_when_it_refused_once_every_earlier_reply_is_in() -> None:
    now = [0.0]
    window = LearnedWindow(clock=lambda: now[0])
    first = _sends(window, now, 0.0, 3)
    _end(window, now, 0.2, first[:2], 200)
    second = _sends(window, now, 0.3, 3)
    _end(window, now, 0.31, second[:1], 429)
    assert window.cap is None  # three requests sent before the refusal have no reply yet: not known
    _end(window, now, 0.4, first[2:] + second[1:2], 200)
    assert window.cap is None
    _end(window, now, 0.5, second[2:], 429)  # the last reply: learned
    assert window.cap == 4 and window.window_s == 1.0 and window.learned == 1
    later = _sends(window, now, 1.5, 1)
    _end(window, now, 1.51, later, 429)  # a refusal under the cap: timing first (the margin widens)
    assert window.cap == 4 and window.margin_s == pytest.approx(0.002)


def test_a_refusal_while_every_accepted_request_is_in_flight_teaches_nothing() -> None:
    """A limit on requests at once refuses the third of three sent together before any reply: that is not a
    per-window count, and learning one would pace the endpoint at 2 requests a second."""
    now = [0.0]
    window = LearnedWindow(clock=lambda: now[0])
    sends = _sends(window, now, 0.0, 3)
    _end(window, now, 0.001, sends[2:], 429)
    _end(window, now, 0.2, sends[:2], 200)
    assert window.cap is None and window.learned == 0
    assert window.acquire() is not None  # nothing holds the next request


def test_refusals_at_the_cap_widen_the_margin_to_a_fiftieth_of_the_window_then_lower_the_cap() -> None:
    now = [0.0]
    window = LearnedWindow(clock=lambda: now[0])
    early = _sends(window, now, 0.0, 2)
    _end(window, now, 0.2, early[:1], 200)
    straggler = window.acquire()  # given its turn before the refusal, sent while the window is learned
    _end(window, now, 0.31, _sends(window, now, 0.3, 1), 429)
    now[0] = 0.32
    window.sent(straggler)
    _end(window, now, 0.5, early[1:], 200)  # every request sent before the refusal came back is answered
    assert window.cap == 2  # the straggler, sent after it, may have found room the window made since: not counted
    _end(window, now, 0.6, [straggler], 200)
    assert window.cap == 2 and window.margin_s == pytest.approx(0.001)
    first, second = _sends(window, now, 1.5, 1), _sends(window, now, 1.6, 1)
    _end(window, now, 1.61, first, 429)  # timing: the margin doubles
    _end(window, now, 1.7, second, 429)  # sent before that change: an echo of it, no change
    assert window.cap == 2 and window.margin_s == pytest.approx(0.002)
    t = 2.0
    margins = []
    for _ in range(5):
        t += 2.0
        _end(window, now, t + 0.01, _sends(window, now, t, 1), 429)
        margins.append(round(window.margin_s, 3))
    assert margins == [0.004, 0.008, 0.016, 0.02, 0.02]  # doubled up to a fiftieth of the window
    assert window.cap == 1  # the last refusal, with 20 ms to spare: the limit fell


def test_a_probe_that_holds_makes_the_next_twice_as_large_and_a_refused_one_takes_the_cap_back() -> None:
    now = [0.0]
    window = LearnedWindow(probe_windows=5.0, clock=lambda: now[0])
    early = _sends(window, now, 0.0, 2)
    _end(window, now, 0.2, early, 200)
    _end(window, now, 0.3, _sends(window, now, 0.3, 1), 429)
    assert window.cap == 2
    full = _sends(window, now, 9.0, 2)  # the window is full at the cap, and 5 windows have passed: a probe
    probe = _sends(window, now, 9.1, 1)
    assert window.cap == 3 and window.limit == 2  # on trial
    _end(window, now, 9.2, full + probe, 200)
    _end(window, now, 10.2, _sends(window, now, 10.15, 1), 200)  # a window at 3 without a refusal: it held
    assert window.cap == 3 and window.limit == 3
    full = _sends(window, now, 15.0, 3)  # full again 5 windows after the last probe: this one tries +2
    probe = _sends(window, now, 15.1, 1)
    assert window.cap == 5
    _end(window, now, 15.2, full, 200)
    _end(window, now, 15.2, probe, 429)  # refused: back to 3, the next probe +1 and 10 windows away
    assert window.cap == 3 and window.probe_windows == 10.0


def test_a_learned_window_holds_a_request_until_the_oldest_accepted_one_leaves_it() -> None:
    """Real time: with 2 accepted a window of 0.3 s, the third request of a new window waits for the first
    to age out (a lower bound only: a slow machine waits longer, never less)."""
    window = LearnedWindow()
    early = [window.acquire() for _ in range(2)]
    for send in early:
        window.release(send, 200, None)
    refused = window.acquire()
    window.release(refused, 429, 0.3)
    assert window.cap == 2 and window.window_s == 0.3
    first, second = window.acquire(), window.acquire()
    third = window.acquire()
    assert third.at - first.at >= 0.3
    for send in (first, second, third):
        window.release(send, 200, None)


def test_a_sessions_end_forgets_the_learned_windows() -> None:
    """A limit learned in one session does not pace the next (the endpoint may have changed, or the port
    now belongs to another server)."""
    from pytest_oloproof.evaluators.providers import close_clients

    key = ("http://127.0.0.1:9/v1", "forgotten", "")
    window = shared_window(key)
    early = window.acquire()
    window.release(early, 200, None)
    window.release(window.acquire(), 429, 1.0)
    assert shared_window(key).cap == 1
    close_clients()
    assert shared_window(key) is not window and shared_window(key).cap is None


@pytest.mark.slow
def test_after_its_first_429_the_client_stays_inside_the_endpoints_window() -> None:
    """60 verdicts from 8 threads at a server allowing 10 requests a second: once the first refusals have
    taught the window, requests wait for a turn in it. Before, the client went on crossing the limit (a
    429 costs that request at least Retry-After: 1 s): 20 to 30 refusals a run, against at most 8 here
    (the first second's) and a few of timing."""
    window = Window(per_s=10, reply_s=0.05)
    with ScriptedServer(responder=window) as server:
        j = judge(server, concurrency=8, model="learned")
        with ThreadPoolExecutor(8) as pool:
            values = list(pool.map(j.evaluate, [case(i) for i in range(60)]))
    assert [v.reason for v in values if v.status != "observed"] == []
    assert 0 < window.too_many <= 12
    assert shared_window((server.base_url, "learned", "")).limit == 10


# ------------------------------------------------------------------ the client-side rate limit


def test_requests_are_spaced_evenly_and_tokens_wait_off_their_debt() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(round(s, 6))

    limiter = RateLimiter(requests_per_second=4, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        limiter.wait()
    assert slept == [0.25, 0.5, 0.75, 1.0]  # each its own send time, a quarter second apart: no burst
    tokens = RateLimiter(tokens_per_minute=600, clock=lambda: now[0], sleep=sleep)
    slept.clear()
    tokens.wait()
    tokens.spend(900)  # the bucket held 600: 300 in debt, which 600/min repays in 30 s
    tokens.wait()
    assert slept and 29.9 < slept[0] < 30.2


@pytest.mark.slow
def test_a_rate_limit_holds_across_threads_and_judges_of_one_endpoint() -> None:
    """Two judges (one endpoint and model) asked from 12 threads with `requests_per_second: 5`: one limiter
    paces both; no one-second window the server saw holds much more than 5 requests (without the
    limiter all 24 arrive within a fraction of a second)."""
    with ScriptedServer([Reply.verdict("pass")]) as server:
        limit = {"requests_per_second": 5.0}
        a = judge(server, model="shared-rl", concurrency=12, rate_limit=limit)
        b = judge(server, model="shared-rl", concurrency=12, rate_limit=limit)
        assert a.provider._limiter is b.provider._limiter  # type: ignore[attr-defined]
        work = [(a if i % 2 else b, case(i)) for i in range(24)]
        with ThreadPoolExecutor(12) as pool:
            values = list(pool.map(lambda jc: jc[0].evaluate(jc[1]), work))
        times = sorted(r.at for r in server.requests)
    assert all(v.status == "observed" for v in values) and len(times) == 24
    busiest = max(sum(1 for t in times if start <= t < start + 1.0) for start in times)
    assert busiest <= 7  # 5 a second, with room for a late start and an early next one


# ------------------------------------------------------------------ configuration


CONFIG = """system:
  rag: {{object: "app:S"}}
cases: cases.jsonl
evaluators:
  - type: groundedness_judge
    model: m
    base_url: http://127.0.0.1:9/v1
{extra}store: .store
"""


def _load(tmp_path: Path, extra: str) -> RunSetup:
    (tmp_path / "app.py").write_text(
        "from pytest_oloproof import rag_system\n"
        "@rag_system(name='s', version='1', depth=1, top_k=1)\n"
        "class S:\n"
        "    def retrieve(self, input, depth): ...\n"
        "    def generate(self, input, context): ...\n"
    )
    (tmp_path / "cases.jsonl").write_text('{"id": "a", "input": {"q": "x"}}\n')
    path = tmp_path / "oloproof.yaml"
    path.write_text(CONFIG.format(extra=extra))
    return RunSetup.load(path, load_case_files=False)


def test_rate_limit_from_the_yaml_reaches_the_provider(tmp_path: Path) -> None:
    setup = _load(tmp_path, "    rate_limit: {requests_per_second: 20, tokens_per_minute: 90000}\n")
    limiter = setup.evaluators[0].provider._limiter  # type: ignore[attr-defined]
    assert limiter.requests_per_second == 20.0 and limiter.tokens_per_minute == 90000.0
    assert "rate_limit" not in str(setup.evaluators[0].settings())  # pacing is not part of a verdict's identity
    setup.caches.close()


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ("    rate_limit: {requests_per_secnd: 20}\n", r":8: evaluators\[0\]\.rate_limit\.requests_per_secnd: unknown "
         r"key; did you mean requests_per_second\?"),
        ("    rate_limit: {requests_per_second: 0}\n", r":8: evaluators\[0\]\.rate_limit\.requests_per_second: "
         r"expected .*greater than 0"),
        ("    rate_limit: {tokens_per_minute: lots}\n", r":8: evaluators\[0\]\.rate_limit\.tokens_per_minute: "
         r"expected a valid number"),
        ("    rate_limit: {}\n", r":8: evaluators\[0\]\.rate_limit: give requests_per_second, tokens_per_minute"),
        ("    rate_limit: 20\n", r":8: evaluators\[0\]\.rate_limit: "),
    ],
    ids=["misspelt", "zero", "not-a-number", "empty", "not-a-mapping"],
)  # fmt: skip
def test_a_bad_rate_limit_names_file_line_and_key(tmp_path: Path, extra: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, extra)
    assert re.search(re.escape(str(tmp_path / "oloproof.yaml")) + problem, str(info.value)), str(info.value)


def test_rate_limit_on_an_evaluator_that_asks_no_model_is_an_unknown_key(tmp_path: Path) -> None:
    extra = "  - {type: contains, criterion: c, rate_limit: {requests_per_second: 1}}\n"
    with pytest.raises(ConfigError, match=r"evaluators\[1\]\.rate_limit: unknown key for contains"):
        _load(tmp_path, extra)


def test_rate_limit_with_a_python_provider_is_refused(tmp_path: Path) -> None:
    (tmp_path / "fn.py").write_text('def judge(messages):\n    return \'{"verdict": "pass"}\'\n')
    extra = (
        "  - {type: groundedness_judge, criterion: g2, provider: python, object: 'fn:judge', "
        "rate_limit: {requests_per_second: 1}}\n"
    )
    with pytest.raises(ConfigError, match=r"evaluators\[1\]\.rate_limit: rate_limit paces the requests of provider"):
        _load(tmp_path, extra)


def test_the_shared_limiter_takes_the_stricter_of_two_declarations() -> None:
    from pytest_oloproof.evaluators.pacing import shared_limiter

    key = ("http://x/v1", "strict-test", "")
    first = shared_limiter(key, 20.0, None)
    second = shared_limiter(key, 5.0, 1000.0)
    assert first is second and first.requests_per_second == 5.0 and first.tokens_per_minute == 1000.0
