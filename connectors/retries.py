"""How harvest tries a failed step again: stamina, configured here and nowhere else.

Every retry harvest makes (a page's attempts and the balance's, a staging store's calls, a Delta or Iceberg merge
that lost to another writer) is a `Backoff` run by `retried` (blocking steps) or `aretried` (async ones). The
wait before retry n is `initial * exp_base**(n-1)` plus up to `jitter` seconds, capped at `max_wait`; `on` says
which failures are tried again (False: raised at once) and may name the wait itself (a float: a 429's
`Retry-After`, capped by `max_wait` by whoever reads it). Past `attempts` (or `deadline` seconds of retrying) the
last failure is raised for the caller to name. stamina's switches (`stamina.set_active`, `stamina.set_testing`)
govern every one of them, and each retry is logged as stamina logs it (`stamina.retry_scheduled`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import stamina

__all__ = ["Backoff", "aretried", "retried"]

T = TypeVar("T")
RetryOn = Callable[[Exception], bool | float]
"""Whether a failure is tried again: False raises it, True waits the backoff, a float waits that long."""


@dataclass(frozen=True)
class Backoff:
    """How often a step is tried and how long it waits between tries (seconds)."""

    attempts: int
    initial: float = 0.0
    max_wait: float = 0.0
    jitter: float = 0.0
    exp_base: float = 2.0
    deadline: float | None = None
    """How long retrying may go on after the first failure; None: `attempts` alone decide."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")

    def first_wait(self, asked: bool | float) -> float:
        """The wait before the second try, as stamina computes its first: what `on` asked, else the backoff."""
        if not isinstance(asked, bool):
            return asked
        return min(self.max_wait, self.initial + random.uniform(0, self.jitter))

    def _after_first(self) -> dict[str, float | int | None]:
        """stamina's arguments for tries 2..n, its first wait being the backoff's second."""
        return {
            "attempts": self.attempts - 1,
            "timeout": self.deadline,
            "wait_initial": self.initial * self.exp_base,
            "wait_max": self.max_wait,
            "wait_jitter": self.jitter,
            "wait_exp_base": self.exp_base,
        }


def retried(backoff: Backoff, on: RetryOn, step: Callable[[], T]) -> T:
    """`step()`, tried again under `backoff` while it fails in a way `on` accepts."""
    for attempt in stamina.retry_context(
        on=on, attempts=backoff.attempts, timeout=backoff.deadline, wait_initial=backoff.initial,
        wait_max=backoff.max_wait, wait_jitter=backoff.jitter, wait_exp_base=backoff.exp_base,
    ):  # fmt: skip
        with attempt:
            return step()
    raise AssertionError("unreachable: stamina either returns, raises or re-raises")  # pragma: no cover


async def aretried(backoff: Backoff, on: RetryOn, step: Callable[[], Awaitable[T]]) -> T:
    """`await step()`, tried again under `backoff` while it fails in a way `on` accepts. The first try runs
    without stamina's machinery: it is most of them, and the machinery cost ~5% of a run's CPU per page."""
    try:
        return await step()
    except Exception as exc:
        asked = on(exc)
        if asked is False or backoff.attempts == 1 or not stamina.is_active():
            raise
        wait = backoff.first_wait(asked)
    await asyncio.sleep(wait)
    async for attempt in stamina.retry_context(on=on, **backoff._after_first()):  # type: ignore[arg-type]
        with attempt:
            return await step()
    raise AssertionError("unreachable: stamina either returns, raises or re-raises")  # pragma: no cover
