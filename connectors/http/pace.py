"""How fast a run sends: as fast as the service allows, which it learns from the service's refusals.

A 429 is backpressure, not failure, and one burst of them is not yet a limit. The real service's limits are
undocumented, so the pace starts unlimited (the run's `concurrency` is the only bound). At a burst of refusals
it becomes a rate, `DECREASE` times what the service accepted over the last second: a real limit stops refusing
at once. Then, while answers come and requests wait for their turn, it climbs back fast (`CLIMB`: e-fold a
second, never more than `AHEAD` times what the service accepted), and once no request has waited for
`RELEASE_S` it lifts: the run is at its concurrency again. A blip costs the night the refused requests'
`Retry-After` and a second or two of climbing, not its pace.

A refusal here and there is no burst: a service (or its gateway) may refuse a request at random, whatever the
pace, and slowing down would not make it refuse fewer. Only dense refusals (`DENSE_COUNT`, `DENSE_SHARE` of the
answers of the last `DENSE_WINDOW_S` seconds, since the last cut) slow the pace; a sparse one costs its request's
`Retry-After`, nothing more. A limit refuses everything sent past it, so a run above one meets dense refusals at
once.

A service that refuses again once the pace has slowed, or soon after it lifted (`REMEMBER_S`: the rate that held
is remembered that long), has a real limit. From then on each burst sets the pace just under what the service
accepted (`SETTLE`), and it grows slowly (`INCREASE` a second) while requests wait for their turn: it settles just
under the limit with few refusals, and climbs if the service comes to allow more. Once a limit is found, a sparse
refusal slows the pace too, but only once the pace is back at what the service accepted before the last cut
(`_cut_from`): below it the limit held, and the refusal was not the pace's. A known limit (`rate_limit.per_second`
in the spec) is a limit from the start and a ceiling.

A burst is one signal: refusals until the service accepts a request sent after the cut answer requests spaced
at the pace before it, or say the service refuses whatever comes for now. Turns given before a cut are taken
again, so what leaves after a cut leaves at the new pace.

A night opens in waves: the requests given their turn together, before any of them is answered. Until a wave
of two or more has been answered (at most `OPENING_S` after the night's first answer), a request asking for its
turn while a wave is being answered waits for the wave's last answer, and the wave's refusals are weighed then:
a fast service answers the accepted part of a wave before its refusals, and the client read each accepted answer,
and sent its query's next page, before the first refusal (16 of a night's 25 refusals at 10 a second and
concurrency 16 were those next pages and the wave's excess: `docs/performance.md`, Rate limits).

A refused request waits what the service asked (`Retry-After`) or a backoff, then takes its turn again: that
wait is the refused request's, not the run's pace. The run gives up waiting only when the service accepted
nothing for `max_wait` seconds (`RateLimited`): the queries then stop resumably, as at a budget stop. The run's
summary says how long it went below its concurrency (requests waiting for their turn or after a refusal), and
why: a blip, a limit the service showed, or the spec's.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

DECREASE = 0.75
"""The pace after a first burst of refusals at full speed, as a share of what the service accepted over the last
second: low enough that a real limit stops refusing at once."""
CLIMB = 1.0
"""Growth of the pace per accepted answer while no limit is known: e-fold a second (back from 75% in 0.3 s, if
the service accepts that fast)."""
AHEAD = 2.0
"""While it climbs, the pace stays within this many times what the service accepted over the last second."""
RELEASE_S = 1.0
"""Seconds the pace must hold no request back (the run sends less than it allows) before it lifts."""
REMEMBER_S = 30.0
"""A burst this soon after the pace lifted is the same limit again: a real one, not a blip."""
SETTLE = 0.8
"""The pace after a burst at a known limit, as a share of what the service accepted over the last second."""
INCREASE = 0.02
"""Growth of the pace per second of accepted answers at a known limit (additive: about this share a second)."""
CUT_GAP = 1.0
"""Seconds during which further refusals do not cut the rate again: they answer requests sent before the cut."""
DENSE_WINDOW_S = 5.0
"""Seconds of answers over which refusals are weighed (since the last cut, if sooner); the last `DENSE_ANSWERS`
answers when those span longer (a slow service's window would otherwise never hold enough to tell)."""
DENSE_COUNT = 3
DENSE_SHARE = 0.1
DENSE_ANSWERS = 40
"""Refusals are dense when at least `DENSE_COUNT` of them make at least `DENSE_SHARE` of the window's answers,
and of what the pace sends in `DENSE_WINDOW_S` (at most `DENSE_ANSWERS`) while the window holds fewer: a few
answers after a cut are too few to tell. Why: each refusal cut the pace, those cuts came faster than it grew
back, and a crawl of 1,200 pages whose service refused 2.5% of requests at random, at no limit, took 100 times as
long as a quiet one (1,933 s against 18.5 s on virtual time; 1% 4.4 times), and `make soak` (20% faults of every
kind) paged at one request every 2.7 seconds. Now 1-2.5% of requests refused at random leave a crawl at 0.7-0.96
of the quiet pace, the refused requests' own waits in it, and 5% at 0.5-0.84 (`tests/test_pace.py`); a service
that answers a few requests a second still slows to 0.1-0.4 at 5% (0.05 before)."""
HELD_CUTS = 15
"""Cuts at a limit whose `_cut_from` the run's summary weighs for the limit a spec can give (the median: one cut
soon after another, over few answers, judges the service to hold far less or more than it does)."""
HELD_LEAST = 2
HELD_WINDOW_S = 2.0
"""Cuts at a limit, each over a window of at least `HELD_WINDOW_S` of answers, before the summary gives a limit for
the spec: a cut soon after another judges from a few answers (2 a second where the service held 10)."""
OPENING_S = 1.0
"""Seconds after the night's first answer at which its opening ends, whatever its waves: a service whose pages
take seconds answers a wave over seconds, and the night must not wait for its slowest pages."""
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
    """The pace now (None: not limited: no refusal yet, or the pace lifted after a blip, and no known limit)."""
    limit: float | None
    slowed_s: float = 0.0
    """Seconds during which requests waited for their turn or after a refusal: the run below its concurrency."""
    limited: bool = False
    """Whether the service refused again once the pace had slowed: a real limit, not a blip."""
    held: float | None = None
    """At a limit the service showed, what it accepted a second before its cuts (the median of `Pace._held`), two
    digits: the `rate_limit.per_second` that starts a night there. None otherwise."""

    def as_dict(self) -> dict[str, float | int | bool | None]:
        rate = None if self.per_second is None else round(self.per_second, 2)
        return {
            "requests": self.requests, "refused": self.refused, "per_second": rate, "limit": self.limit,
            "slowed_s": round(self.slowed_s, 1), "limited": self.limited, "held": self.held,
        }  # fmt: skip


def two_digits_down(rate: float) -> float:
    """`rate` cut to two significant digits, never up: a limit to write in a spec is better just under what the
    service accepted than just over it (9.96 -> 9.9, 47.3 -> 47, 0.537 -> 0.53)."""
    step = 10 ** (math.floor(math.log10(rate)) - 1)
    return round(math.floor(rate / step + 1e-9) * step, 10)


class _Slowed:
    """The union of the intervals during which a request waited: they start in time order, end in any."""

    def __init__(self) -> None:
        self.total = 0.0
        self._start = self._end = -math.inf

    def add(self, start: float, end: float) -> None:
        if end <= start:
            return
        if start <= self._end:
            self._end = max(self._end, end)
            return
        if self._end > self._start:
            self.total += self._end - self._start
        self._start, self._end = start, end

    def upto(self, now: float) -> float:
        return self.total + max(0.0, min(self._end, now) - self._start)


class Pace:
    """The run's sending pace, shared by every query of one client (one event loop)."""

    def __init__(
        self,
        per_second: float | None = None,
        max_wait: float = DEFAULT_MAX_WAIT,
        clock: Callable[[], float] = time.monotonic,
        idle_for: float = 0.0,
    ) -> None:
        """`idle_for`: seconds the run has gone without an accepted answer when this pace starts (a Dask round's:
        the rounds before it), so `max_wait` counts them and a storm of 429s ends the run `rate_limited` on Dask
        as it does locally, not each round anew."""
        if per_second is not None and per_second <= 0:
            raise ValueError(f"per_second must be > 0, got {per_second}")
        self.limit = per_second
        self.rate = per_second
        self.limited = per_second is not None
        """A real limit is known (the spec's, or the service refused again after a cut): settle under it."""
        self.max_wait = max_wait
        self._clock = clock
        self._next = 0.0
        self._cut_at = -math.inf
        self._burst_over = True
        self._lifted_at = -math.inf
        self._waited_at = -math.inf
        self._accepted_at: deque[float] = deque()
        self._last_accepted = clock() - idle_for
        self._slowed = _Slowed()
        self._answers: deque[tuple[float, bool]] = deque()
        """When each answer of the window came (`DENSE_WINDOW_S`, since the last cut), and whether it was a 429."""
        self._cut_from = 0.0
        """The pace the last cut judged the service to hold: the lower of the cut's base and what it accepted a
        second over the window (`_accepted_rate`). At a limit, a sparse refusal slows the pace again only once it
        is back there."""
        self._held: deque[float] = deque(maxlen=HELD_CUTS)
        """`_cut_from` at each cut at a limit the service showed: their median is the limit a spec can give."""
        self.requests = 0
        self.refused = 0
        self._out = 0
        """Turns given during the opening not answered yet: the wave being answered."""
        self._wave = 0
        self._answering = False
        """Whether an answer of the wave has come while others are still out: a turn asked now waits."""
        self._opening_until = math.inf
        self._opening_over = per_second is not None
        """A known limit spaces the first pages as it spaces the rest: no wave to answer before the next ones."""
        self._wave_answered = asyncio.Event()

    def report(self) -> PaceReport:
        slowed = self._slowed.upto(self._clock())
        found = self.limited and self.limit is None and len(self._held) >= HELD_LEAST
        held = two_digits_down(statistics.median(self._held)) if found else None
        return PaceReport(self.requests, self.refused, self.rate, self.limit, slowed, self.limited, held)

    async def turn(self) -> float:
        """Wait until this request may leave (at once while the pace is unlimited); returns when its turn was
        given, on the pace's clock (`refused_one(sent_at)`). A turn given before a cut was spaced at the pace
        before it: the request takes a new one, so that what leaves after a cut leaves at the new pace."""
        self.requests += 1
        await self._in_the_opening()
        while True:
            given = self._clock()
            wait = self.delay()
            if wait > 0:
                await asyncio.sleep(wait)
            if self._cut_at <= given:
                return given

    async def _in_the_opening(self) -> None:
        """A turn asked while a wave of the opening is being answered waits for its last answer (and the cut its
        refusals make); then it joins the next wave (module docstring)."""
        if self._opening_over:
            return
        if self._answering:
            left = self._opening_until - self._clock()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wave_answered.wait(), max(0.0, left))
            if self._answering:  # the wave's last answers are late: the opening is over, weigh what came
                self._end_opening()
                self._weigh_wave(self._clock())
            if self._opening_over:
                return
        self._out += 1
        self._wave += 1

    def _answered_in_opening(self, now: float) -> bool | None:
        """None once the opening is over; False while the answer's wave is still out (its refusals wait for its
        last answer); True at that last answer (weigh them now)."""
        if self._opening_over or not self._wave:
            return None  # (an answer to no turn: a test's, or a request that went out without one)
        self._opening_until = min(self._opening_until, now + OPENING_S)
        self._out = max(0, self._out - 1)
        if self._out > 0:
            self._answering = True
            return False
        if self._wave >= 2 or now >= self._opening_until:
            self._end_opening()
        self._wave, self._answering = 0, False
        wave_answered, self._wave_answered = self._wave_answered, asyncio.Event()
        wave_answered.set()
        return True

    def _end_opening(self) -> None:
        self._opening_over, self._answering = True, False
        self._wave_answered.set()

    def delay(self) -> float:
        """Seconds until the next turn, which is taken (0 while the pace is unlimited)."""
        if self.rate is None:
            return 0.0
        now = self._clock()
        at = max(now, self._next)
        self._next = at + 1 / self.rate
        if at > now:
            self._waited_at = now
            self._slowed.add(now, at)
        return at - now

    def accepted(self, sent_at: float | None = None) -> None:
        """The service answered a request (any answer but a 429) given its turn at `sent_at` (`turn()`)."""
        now = self._clock()
        wave_answered = self._answered_in_opening(now)
        if sent_at is None or sent_at >= self._cut_at:
            self._burst_over = True  # it accepted a request sent at the pace after the cut
        self._last_accepted = now
        self._accepted_at.append(now)
        self._answers.append((now, False))
        self._forget(now)
        if wave_answered and self._weigh_wave(now):
            return  # a wave's last answer in the opening: its refusals were weighed now
        if self.rate is None:
            return
        if not self.limited and now - max(self._waited_at, self._cut_at) >= RELEASE_S:
            self.rate, self._lifted_at = None, now  # back at full speed: the burst was a blip
            return
        if now - self._waited_at > 1.0:
            return  # the pace is not what holds the run back: growing it would go past anything the run sends
        # per answer, so that the growth a second is a share of the pace (`rate` answers a second)
        if self.limited:
            grown = self.rate + INCREASE
            self.rate = grown if self.limit is None else min(self.limit, grown)
        else:  # never far past what the service accepted: at a limit the next burst comes at twice it, at most
            self.rate = min(self.rate + CLIMB, max(self.rate, AHEAD * len(self._accepted_at)))

    def refused_one(self, sent_at: float | None = None) -> None:
        """The service answered 429 to a request given its turn at `sent_at` (`turn()`): slow down, once per
        burst. A burst goes on until the service accepts a request sent after the cut: refusals until then
        answer requests sent at the pace before it, or say the service is still refusing whatever comes (a
        blip, or the wait a limit asks), not that the new pace is too fast. Without `sent_at`, refusals within
        `CUT_GAP` of a cut are taken as one burst."""
        now = self._clock()
        wave_answered = self._answered_in_opening(now)
        self.refused += 1
        self._answers.append((now, True))
        if wave_answered is False:
            return  # in the opening, a wave's refusals are weighed at its last answer
        if (now - self._cut_at < CUT_GAP) if sent_at is None else not self._burst_over:
            return
        self._weigh(now)

    def _weigh_wave(self, now: float) -> bool:
        """Weigh a wave's refusals, if it had any (a wave all accepted is no reason to look at the pace)."""
        refused = any(was_refused for _, was_refused in self._answers)
        if refused:
            self._weigh(now)
        return refused

    def _weigh(self, now: float) -> None:
        """Cut the pace if the window's refusals are a burst (or the pace is back at a limit)."""
        self._forget(now)
        if not self._dense() and not self._back_at_limit():
            return  # a refusal here and there: the refused request waits what the service asked, the pace holds
        seen = len(self._accepted_at)  # what the service accepted over the last second
        if self.rate is None and not seen:
            return  # nothing to measure a rate by yet: the refused requests wait what the service asks
        if self.rate is not None or now - self._lifted_at < REMEMBER_S:
            self.limited = True  # refused again while slowed, or soon after: the service has a limit
        base = seen if self.rate is None else min(self.rate, seen) if seen else self.rate
        self._cut_from = min(base, self._accepted_rate(now))
        judged = self._answers and now - self._answers[0][0] >= HELD_WINDOW_S
        if self.limited and judged and self._cut_from > 0:  # 0: it accepted nothing over the window (no rate)
            self._held.append(self._cut_from)
        self.rate = max(MIN_RATE, base * (SETTLE if self.limited else DECREASE))
        if self.limit is not None:
            self.rate = min(self.rate, self.limit)
        self._cut_at, self._burst_over = now, False
        self._next = now + 1 / self.rate  # turns given before are taken again (`turn`)
        self._answers.clear()  # the next cut weighs the answers at the new pace

    def idle(self) -> float:
        """Seconds since the last accepted answer (or since the pace started, less its `idle_for`)."""
        return self._clock() - self._last_accepted

    def wait_after_refusal(self, retry_after: float | None, refusals: int, cap: float = math.inf) -> float:
        """Seconds a refused request waits before its next turn: `Retry-After`, or a backoff by how often it was
        refused, at most `cap` (the client's longest wait). Raises `RateLimitedTooLong` when that would pass
        `max_wait` without an accepted answer."""
        wait = retry_after if retry_after is not None else BACKOFF[min(refusals, len(BACKOFF) - 1)]
        wait = min(wait, cap)
        now = self._clock()
        idle = now - self._last_accepted
        if idle + wait > self.max_wait:
            raise RateLimitedTooLong(idle)
        self._slowed.add(now, now + wait)
        return wait

    def _forget(self, now: float) -> None:
        while self._accepted_at and self._accepted_at[0] < now - 1.0:
            self._accepted_at.popleft()
        while len(self._answers) > DENSE_ANSWERS and self._answers[0][0] < now - DENSE_WINDOW_S:
            self._answers.popleft()

    def _dense(self) -> bool:
        """Whether the window's refusals are dense enough to be a burst (`DENSE_COUNT`, `DENSE_SHARE`)."""
        refused = sum(1 for _, was_refused in self._answers if was_refused)
        pace = self.rate if self.rate is not None else len(self._accepted_at)
        least = min(DENSE_ANSWERS, DENSE_WINDOW_S * pace)
        return refused >= DENSE_COUNT and refused >= DENSE_SHARE * max(len(self._answers), least)

    def _back_at_limit(self) -> bool:
        """At a limit, whether the pace is back at what the service accepted before the last cut: a refusal there
        is the limit's, sparse or not."""
        return self.limited and self.rate is not None and self.rate >= self._cut_from

    def _accepted_rate(self, now: float) -> float:
        """Answers the service accepted a second over the window (at least its last second): at a limit, about
        the limit, where the last second alone may hold a burst the service let through."""
        accepted = sum(1 for _, was_refused in self._answers if not was_refused)
        span = max(1.0, now - self._answers[0][0]) if self._answers else 1.0
        return accepted / span
