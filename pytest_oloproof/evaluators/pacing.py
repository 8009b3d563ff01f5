"""Pacing of requests to a rate-limited API: jittered backoff, a client-side rate limit, adaptive concurrency.

- `backoff_delay`: "full jitter" (Brooks, *Exponential Backoff And Jitter*, AWS Architecture Blog, 2015):
  wait uniform(0, min(cap, base * 2**attempt)), so clients that failed together do not retry together. A
  server's `Retry-After` is a floor: the wait is Retry-After plus the jitter (still at most `cap`), never
  less than the server asked, and never the same for every client that was told the same thing.
- `RateLimiter`: requests per second (evenly spaced, no bursts, so no one-second window the server counts
  ever holds more than the limit) and tokens per minute (a bucket of one minute's tokens, charged with each
  reply's reported usage; a request waits while the bucket is empty). One per endpoint and model in a process
  (`shared_limiter`), used by every thread and every judge that asks that model there.
- `LearnedWindow`: the endpoint's own limit, learned from its 429s (how many requests it accepted in the
  Retry-After window when it refused), then kept: a request waits for a turn in that window instead of
  drawing another 429, which would cost it at least Retry-After. One per endpoint and model in a process
  (`shared_window`), like `RateLimiter`.
- `AdaptiveConcurrency`: at most `limit` requests in flight, the limit halved on a 429 (once per round
  trip: replies to requests sent before the last cut do not cut again), but not below the concurrency the
  last second's successes sustained, and raised by one per `limit` successes, up to the configured
  concurrency (additive increase, multiplicative decrease).
"""

from __future__ import annotations

import collections
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def backoff_delay(
    attempt: int, base_s: float, cap_s: float, rng: random.Random, retry_after: float | None = None
) -> float:
    """Seconds to wait before retry `attempt + 1` (attempt 0 is the first failure): full jitter over a
    `Retry-After` floor, at most `cap_s`."""
    jitter = rng.uniform(0.0, min(cap_s, base_s * 2.0**attempt))
    floor = 0.0 if retry_after is None else retry_after
    return min(cap_s, floor + jitter)


class RateLimiter:
    """Requests per second and tokens per minute for one endpoint and model, shared by threads.

    `wait()` reserves the next free send time under a lock and sleeps until it (each thread its own
    time: no herd wakes at once); `spend(tokens)` charges a reply's reported tokens.
    """

    def __init__(
        self,
        requests_per_second: float | None = None,
        tokens_per_minute: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.requests_per_second = requests_per_second
        self.tokens_per_minute = tokens_per_minute
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next = 0.0  # the earliest time the next request may be sent
        self._tokens = float(tokens_per_minute or 0.0)  # the bucket starts full
        self._filled_at = clock()

    def tighten(self, requests_per_second: float | None, tokens_per_minute: float | None) -> None:
        """Another judge declared a limit for the same endpoint and model: the stricter of each applies."""
        with self._lock:
            self.requests_per_second = _stricter(self.requests_per_second, requests_per_second)
            if tokens_per_minute is not None and self.tokens_per_minute is None:
                self._tokens = float(tokens_per_minute)
            self.tokens_per_minute = _stricter(self.tokens_per_minute, tokens_per_minute)
            if self.tokens_per_minute is not None:
                self._tokens = min(self._tokens, self.tokens_per_minute)

    def _refill(self, now: float) -> None:
        if self.tokens_per_minute is not None:
            gained = (now - self._filled_at) * self.tokens_per_minute / 60.0
            self._tokens = min(self.tokens_per_minute, self._tokens + gained)
        self._filled_at = now

    def wait(self) -> float:
        """Sleep until this request may be sent; return the seconds slept."""
        with self._lock:
            now = self._clock()
            at = max(now, self._next)
            if self.tokens_per_minute is not None:
                self._refill(now)
                if self._tokens <= 0:  # in debt: wait until the bucket is positive again
                    at = max(at, now + (1e-3 - self._tokens) * 60.0 / self.tokens_per_minute)
            if self.requests_per_second is not None:
                self._next = at + 1.0 / self.requests_per_second
        if at > now:
            self._sleep(at - now)
        return max(0.0, at - now)

    def spend(self, tokens: int) -> None:
        """Charge `tokens` a reply used (the bucket may go into debt: later requests wait it off)."""
        if self.tokens_per_minute is None or tokens <= 0:
            return
        with self._lock:
            self._refill(self._clock())
            self._tokens -= tokens


def _stricter(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


_LIMITERS: dict[tuple[str, ...], RateLimiter] = {}
_LIMITERS_LOCK = threading.Lock()


def shared_limiter(
    key: tuple[str, ...], requests_per_second: float | None, tokens_per_minute: float | None
) -> RateLimiter:
    """The process's limiter for `key` (endpoint, model, key variable): created once, tightened by later
    declarations, so every judge and thread asking that model there shares one limit."""
    with _LIMITERS_LOCK:
        limiter = _LIMITERS.get(key)
        if limiter is None:
            limiter = _LIMITERS[key] = RateLimiter(requests_per_second, tokens_per_minute)
        else:
            limiter.tighten(requests_per_second, tokens_per_minute)
        return limiter


class AdaptiveConcurrency:
    """A concurrency limit that halves on a 429 and climbs back by one per round trip of successes.

    The cut never goes below what the last second's successes show the endpoint sustains (Little's law:
    successes per second times their mean latency), so a limit one above the endpoint's pace comes back
    to that pace, not to half of it. `clock` is replaceable in tests.
    """

    def __init__(self, maximum: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.maximum = maximum
        self.limit = float(maximum)  # the configured concurrency, until the endpoint answers 429
        self.in_flight = 0
        self.cuts = 0  # how many times the limit was cut (each cut starts a new round)
        self.served = 0  # successes so far
        self._clock = clock
        self._cond = threading.Condition()
        self._recent: collections.deque[tuple[float, float]] = collections.deque()  # (ended, latency) of successes

    def sustained(self, now: float) -> float:
        """Requests the endpoint held at once over the last second: successes per second x mean latency."""
        while self._recent and self._recent[0][0] < now - 1.0:
            self._recent.popleft()
        return sum(latency for _, latency in self._recent)  # (n / 1 s) * (sum / n)

    @contextmanager
    def slot(self) -> Iterator[Callable[[bool | None], None]]:
        """Hold one of `limit` slots; the caller reports its outcome: True (success), False (a 429) or None."""
        with self._cond:
            self._cond.wait_for(lambda: self.in_flight < max(1, int(self.limit)))
            self.in_flight += 1
            round_ = self.cuts
        outcome: list[bool | None] = [None]
        started = self._clock()
        try:
            yield lambda ok: outcome.__setitem__(0, ok)
        finally:
            now = self._clock()
            with self._cond:
                self.in_flight -= 1
                if outcome[0] is False and round_ == self.cuts:
                    floor = min(self.sustained(now), self.limit - 1.0)
                    self.limit = max(1.0, self.limit / 2.0, floor)
                    self.cuts += 1
                elif outcome[0] is True:
                    self.served += 1
                    self._recent.append((now, now - started))
                    if self.limit < self.maximum:
                        self.limit = min(float(self.maximum), self.limit + 1.0 / self.limit)
                self._cond.notify_all()


class _Send:
    """One request through a `LearnedWindow`: when it was sent and how it ended (None while in flight)."""

    __slots__ = ("at", "ended", "outcome")

    def __init__(self, at: float) -> None:
        self.at = at
        self.ended = float("inf")  # when its reply came
        self.outcome: str | None = None  # "ok", "refused" (a 429) or "failed"


class LearnedWindow:
    """The endpoint's own rate limit, learned from its 429s: at most `cap` accepted sends in any `window_s`.

    Off until the first 429. Then no new request is sent until every request sent before the refusal came
    back has its reply, and `cap` becomes how many of those sent in the R seconds before it were accepted
    (R: the 429's Retry-After, 1 s without one): what the endpoint held when it refused. From then on a
    request is sent only while fewer than `cap` sends that were not refused lie in the last R seconds plus
    `margin_s` (the trip to the endpoint varies), so the client keeps the endpoint's window full without
    crossing it, and a thread back from a 429 finds a turn instead of another 429. A send counts from its
    last byte written (`sent`).

    - A 429 while every accepted request was still in flight teaches nothing: that is also what a limit on
      requests at once looks like, which the concurrency limit handles.
    - A 429 at the learned cap doubles `margin_s` (timing), up to a fiftieth of the window; one beyond
      that lowers the cap by one (the limit fell, another client shares it, or the count came out high).
    - While the cap holds requests back, every `probe_windows` windows it rises by one (the limit may have
      grown, or was counted short); a probe that holds makes the next one twice as large, and a refused
      one takes the cap back, starts again from one and doubles the wait before the next.
    - 429s of requests sent before the last change echo it and teach nothing.
    """

    def __init__(
        self, margin_s: float = 0.001, probe_windows: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.cap: int | None = None
        self.window_s = 1.0
        self.margin_s = margin_s
        self.probe_windows = probe_windows  # windows between probes (doubled by each refused probe)
        self.learned = 0  # how many times the cap was learned from a 429
        self._clock = clock
        self._cond = threading.Condition()
        self._sends: collections.deque[_Send] = collections.deque()
        self._learning: float | None = None  # when the 429 that is being learned from arrived
        self._refused_at = 0.0  # when that refused request was sent
        self._learned_at = float("-inf")  # sends before this do not teach again (their 429s echo the last one)
        self._probe_from: int | None = None  # the cap before a probe, while the probe is on trial
        self._step = 1  # how far the next probe raises the cap
        self._since = 0.0  # when the cap last changed

    @property
    def limit(self) -> int | None:
        """The learned cap that held (not a probe still on trial); None before a 429 taught one."""
        return self._probe_from if self._probe_from is not None else self.cap

    def _keep(self, now: float) -> None:
        horizon = now - self.window_s - self.margin_s
        if self._learning is not None:
            horizon = min(horizon, self._refused_at - self.window_s)
        while self._sends and self._sends[0].at < horizon and self._sends[0].outcome is not None:
            self._sends.popleft()

    def _counted(self, now: float) -> list[_Send]:
        """The sends the endpoint's window still holds: not refused, sent within the last window (+ margin)."""
        start = now - self.window_s - self.margin_s
        return [s for s in self._sends if s.at > start and s.outcome != "refused"]

    def acquire(self) -> _Send:
        """Wait until a request may be sent under the learned cap; record and return its send."""
        with self._cond:
            while True:
                now = self._clock()
                self._keep(now)
                if self._learning is None:
                    if self.cap is None:
                        break
                    counted = self._counted(now)
                    if len(counted) < self.cap:
                        break
                    if self._probe_from is None and now - self._since >= self.probe_windows * self.window_s:
                        self._probe_from, self.cap, self._since = self.cap, self.cap + self._step, now
                        continue
                    frees = counted[len(counted) - self.cap].at + self.window_s + self.margin_s  # its turn's start
                    self._cond.wait(max(1e-3, frees - now))
                else:
                    self._cond.wait(1.0)
            send = _Send(self._clock())
            self._sends.append(send)
            return send

    def sent(self, send: _Send) -> None:
        """`send` leaves now (after waiting for a concurrency slot): its window is counted from now."""
        with self._cond:
            send.at = self._clock()

    def release(self, send: _Send, status: int | None, retry_after: float | None) -> None:
        """Record how `send` ended (its HTTP status, None for no reply) and learn from a 429 with Retry-After."""
        with self._cond:
            now = self._clock()
            send.outcome = "ok" if status == 200 else "refused" if status == 429 else "failed"
            send.ended = now
            if status == 429 and self._learning is None and send.at >= self._learned_at:
                if self.cap is None:
                    self._learning, self._refused_at = now, send.at
                    self.window_s = retry_after or 1.0  # no Retry-After: most limits count per second
                elif self._probe_from is not None:  # the probe crossed the limit: back to the cap that held
                    self.cap, self._probe_from, self._since, self._step = self._probe_from, None, now, 1
                    self._learned_at = now
                    self.probe_windows *= 2.0
                elif self.margin_s < self.window_s / 50:  # timing: the trip to the endpoint varies more than the margin
                    self.margin_s = min(self.margin_s * 2.0, self.window_s / 50)
                    self._learned_at = now
                else:  # refused with a fiftieth of the window to spare: the limit is lower
                    self.cap, self._since, self._learned_at = max(1, self.cap - 1), now, now
            elif status == 200 and self._probe_from is not None and now - self._since >= self.window_s:
                self._probe_from = None  # a whole window at the raised cap without a refusal: the probe held
                self._step *= 2  # and the next one tries twice as far
            if self._learning is not None and all(s.outcome is not None for s in self._sends if s.at <= self._learning):
                # what the endpoint's window held when it refused: the sends accepted from R before the refused
                # one until its reply came (a later one may have found room the window made since: not counted;
                # a count one short is what the probes correct)
                start, q = self._refused_at - self.window_s, self._learning
                accepted = [s for s in self._sends if start < s.at <= q and s.outcome == "ok"]
                # a refusal while every accepted request was still in flight may be a limit on requests at
                # once, not per window: nothing to learn (the concurrency limit handles that)
                if any(s.ended <= self._refused_at for s in accepted):
                    self.cap, self._since = len(accepted), now
                    self.learned += 1
                self._learning, self._learned_at = None, now
            self._cond.notify_all()


_WINDOWS: dict[tuple[str, ...], LearnedWindow] = {}


def shared_window(key: tuple[str, ...]) -> LearnedWindow:
    """The process's learned window for `key` (endpoint, model, key variable), shared like `shared_limiter`."""
    with _LIMITERS_LOCK:
        window = _WINDOWS.get(key)
        if window is None:
            window = _WINDOWS[key] = LearnedWindow()
        return window


def forget_windows() -> None:
    """Drop every learned window (a session's end): a later provider of the same endpoint learns afresh."""
    with _LIMITERS_LOCK:
        _WINDOWS.clear()
