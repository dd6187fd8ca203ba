"""How fast a run sends: as fast as the service allows, which it learns from the service's refusals.

A 429 is backpressure, not failure. The real service's limits are undocumented, so the pace starts unlimited
(the run's `concurrency` is the only bound) and, at the first refusal, becomes a rate: the answers the service
accepted over the last second, times a margin. Then AIMD, as TCP paces a connection: every accepted answer adds a
little (about `INCREASE` of the rate a second), every burst of refusals cuts it (`DECREASE`, at most once per
`CUT_GAP`: the refusals of one burst are one signal). So the pace settles just under what the service allows,
refusals stay a small share of requests, and it climbs again when the service allows more. A known limit
(`rate_limit.per_second` in the spec) is a ceiling from the start.

A refused request waits what the service asked (`Retry-After`) or a backoff, then takes its turn again; it is not
one of the client's attempts. The run gives up waiting only when the service accepted nothing for `max_wait`
seconds (`RateLimited`): the queries then stop resumably, as at a budget stop.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

INCREASE = 0.04
"""Growth of the rate per second of accepted answers, as a share of the rate (additive in requests a second)."""
DECREASE = 0.75
"""The rate after a burst of refusals, as a share of what the service accepted over the last second."""
CUT_GAP = 1.0
"""Seconds during which further refusals do not cut the rate again: they answer requests sent before the cut."""
MIN_RATE = 0.2
"""Requests a second the pace never goes below (one every five seconds)."""
BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
"""Seconds a refused request waits when the service names no `Retry-After`, by how often it was refused."""
DEFAULT_MAX_WAIT = 900.0
"""How long a run keeps asking while the service accepts nothing: 15 minutes, then it stops resumably."""


class RateLimitedTooLong(Exception):
    """The service accepted nothing for `max_wait` seconds: stop waiting (`connectors.errors.RateLimited`)."""

    def __init__(self, waited: float) -> None:
        super().__init__(f"the service accepted no request for {waited:.0f} s")
        self.waited = waited


@dataclass(frozen=True)
class PaceReport:
    """What the run met so far, for progress and the run summary."""

    requests: int
    refused: int
    per_second: float | None
    """The pace now (None: not limited, no refusal yet and no known limit)."""
    limit: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        rate = None if self.per_second is None else round(self.per_second, 2)
        return {"requests": self.requests, "refused": self.refused, "per_second": rate, "limit": self.limit}


class Pace:
    """The run's sending pace, shared by every query of one client (one event loop)."""

    def __init__(
        self,
        per_second: float | None = None,
        max_wait: float = DEFAULT_MAX_WAIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if per_second is not None and per_second <= 0:
            raise ValueError(f"per_second must be > 0, got {per_second}")
        self.limit = per_second
        self.rate = per_second
        self.max_wait = max_wait
        self._clock = clock
        self._next = 0.0
        self._cut_at = -math.inf
        self._accepted_at: deque[float] = deque()
        self._last_accepted = clock()
        self.requests = 0
        self.refused = 0

    def report(self) -> PaceReport:
        return PaceReport(self.requests, self.refused, self.rate, self.limit)

    async def turn(self) -> None:
        """Wait until this request may leave (at once while the pace is unlimited)."""
        self.requests += 1
        if self.rate is None:
            return
        now = self._clock()
        at = max(now, self._next)
        self._next = at + 1 / self.rate
        if at > now:
            await asyncio.sleep(at - now)

    def accepted(self) -> None:
        """The service answered a request (any answer but a 429)."""
        now = self._clock()
        self._last_accepted = now
        self._accepted_at.append(now)
        self._forget(now)
        if self.rate is not None and len(self._accepted_at) >= 0.8 * self.rate:
            # per answer: ~INCREASE * rate a second at `rate` answers a second; only while the pace is what
            # holds the run back (else it would grow past anything the run sends)
            grown = self.rate + INCREASE
            self.rate = grown if self.limit is None else min(self.limit, grown)

    def refused_one(self) -> None:
        """The service answered 429: slow down, once per burst."""
        now = self._clock()
        self.refused += 1
        if now - self._cut_at < CUT_GAP:
            return
        self._forget(now)
        seen = len(self._accepted_at)  # what the service accepted over the last second
        if self.rate is None and not seen:
            return  # nothing to measure a rate by yet: the refused requests wait what the service asks
        base = seen if self.rate is None else min(self.rate, seen) if seen else self.rate
        self.rate = max(MIN_RATE, base * DECREASE)
        if self.limit is not None:
            self.rate = min(self.rate, self.limit)
        self._cut_at = now
        self._next = max(self._next, now + 1 / self.rate)

    def wait_after_refusal(self, retry_after: float | None, refusals: int, cap: float = math.inf) -> float:
        """Seconds a refused request waits before its next turn: `Retry-After`, or a backoff by how often it was
        refused, at most `cap` (the client's longest wait). Raises `RateLimitedTooLong` when that would pass
        `max_wait` without an accepted answer."""
        wait = retry_after if retry_after is not None else BACKOFF[min(refusals, len(BACKOFF) - 1)]
        wait = min(wait, cap)
        idle = self._clock() - self._last_accepted
        if idle + wait > self.max_wait:
            raise RateLimitedTooLong(idle)
        return wait

    def _forget(self, now: float) -> None:
        while self._accepted_at and self._accepted_at[0] < now - 1.0:
            self._accepted_at.popleft()
