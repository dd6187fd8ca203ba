"""Reservations that wait: futures parked on their own event loop, woken from any thread.

The credit ledger parks a reservation that might fit later (credits held by others, a laggard, an unseen price)
and wakes every waiter whenever something changes; each then decides again. Waking never awaits, so it works
from `settle` and `release` in a cancelled task's cleanup and from other threads (a Dask callback, progress).
A waiter must be added under the ledger's lock, in the same critical section as the decision to wait, so that a
change made after that decision always finds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Waiters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: set[asyncio.Future[None]] = set()

    def add(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        fut = loop.create_future()
        with self._lock:
            self._waiting.add(fut)
        return fut

    def discard(self, fut: asyncio.Future[None]) -> None:
        with self._lock:
            self._waiting.discard(fut)

    def __len__(self) -> int:
        """Reservations waiting now for credits other queries hold (`CreditLedger.waiting`)."""
        with self._lock:
            return len(self._waiting)

    def wake_all(self) -> None:
        with self._lock:
            waiting = list(self._waiting)
            self._waiting.clear()
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for fut in waiting:
            loop = fut.get_loop()
            if loop is running:
                _resolve(fut)
            else:
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits there any more
                    loop.call_soon_threadsafe(_resolve, fut)
