"""Pacing of requests to a rate-limited API: jittered backoff, a client-side rate limit, adaptive concurrency.

- `backoff_delay`: "full jitter" (Brooks, *Exponential Backoff And Jitter*, AWS Architecture Blog, 2015):
  wait uniform(0, min(cap, base * 2**attempt)), so clients that failed together do not retry together. A
  server's `Retry-After` is a floor: the wait is Retry-After plus the jitter (still at most `cap`), never
  less than the server asked, and never the same for every client that was told the same thing.
- `RateLimiter`: requests per second (evenly spaced, no bursts, so no one-second window the server counts
  ever holds more than the limit) and tokens per minute (a bucket of one minute's tokens, charged with each
  reply's reported usage; a request waits while the bucket is empty). One per endpoint and model in a process
  (`shared_limiter`), used by every thread and every judge that asks that model there.
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
