"""How long one attempt may take and how a failed one is tried again.

Retries (`connectors.retries`: exponential backoff with jitter) cover 500/502/503/504, timeouts and dropped connections.
Each retry is a new attempt and reserves its credits again, so retries can never spend past the budget. A 429
is not an attempt: the request waits and takes its turn again (`connectors.http.pace`).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from harvest.connectors.errors import ServiceAnswer
from harvest.connectors.retries import Backoff

NEVER_SENT: tuple[type[Exception], ...] = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Failures where the request bytes never left this machine: the reservation goes back."""
MAYBE_SENT: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.DecodingError,
)
"""Failures after the request may have reached the service: retried, the reservation is kept. A body that does
not decode (corrupt gzip) came from the service: it was answered, so it may have been billed."""


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `read` follows the official client (60 s); `total` caps one attempt (a trickling body)."""

    connect: float = 10.0
    read: float = 60.0
    write: float = 10.0
    pool: float = 60.0
    total: float | None = 120.0

    def to_httpx(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts per request and how long to wait between them.

    Waits grow as initial * 2**n (+ up to `jitter` seconds, True = 1 s), capped at `max_wait`; a 429's
    Retry-After replaces the computed wait, also capped at `max_wait`. `deadline` bounds the whole call
    (None: attempts alone decide). Tests set initial=0, max_wait=0, jitter=False for instant retries.
    """

    attempts: int = 5
    initial: float = 0.5
    max_wait: float = 30.0
    jitter: bool | float = True
    deadline: float | None = None
    retry_statuses: frozenset[int] = frozenset({500, 502, 503, 504})

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")

    @functools.cached_property
    def backoff(self) -> Backoff:
        return Backoff(self.attempts, self.initial, self.max_wait, self.jitter_seconds, 2.0, self.deadline)

    @property
    def jitter_seconds(self) -> float:
        if self.jitter is True:
            return 1.0
        if self.jitter is False:
            return 0.0
        return float(self.jitter)


class Retryable(Exception):
    """This attempt failed in a way worth another try (internal to the client). `sent`: whether the request may
    have reached the service (a failure on the wire before it could, `on_the_wire`, says False)."""

    def __init__(
        self,
        cause: str,
        *,
        retry_after: float | None = None,
        response: ServiceAnswer | None = None,
        sent: bool = True,
    ) -> None:
        super().__init__(cause)
        self.cause = cause
        self.retry_after = retry_after
        self.response = response
        self.sent = sent


def on_the_wire(exc: httpx.HTTPError, describe: Callable[[BaseException], str]) -> Retryable | None:
    """What a request that failed on the wire means, for a page and the balance alike: never sent (`NEVER_SENT`:
    `sent` False, a page's reservation goes back), maybe sent (`MAYBE_SENT`: its reservation is kept), both worth
    another try; None when it could not be sent at all (a bad URL, a local protocol error): no retry can help.
    `describe` says what happened without the key (`ApiKey.describe`)."""
    if isinstance(exc, NEVER_SENT):
        return Retryable(f"could not connect: {describe(exc)}", sent=False)
    if isinstance(exc, MAYBE_SENT):
        return Retryable(describe(exc))
    return None


class SlowDown(Exception):
    """The service answered 429: wait and take a turn again, not an attempt (internal to the client)."""

    def __init__(self, retry_after: float | None) -> None:
        super().__init__("HTTP 429")
        self.retry_after = retry_after


def parse_retry_after(value: str | None, *, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait per a Retry-After header (delta-seconds or HTTP date); None if absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = (when - (now or dt.datetime.now(dt.UTC))).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)
