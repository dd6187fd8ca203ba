"""The breadth-first half of `CreditLedger`: the calls by which queries take their turns at a short budget.

Kept apart from granting and closing because it is the queries' side: a query is expected when its task is
launched, registers while it runs, reports each finished page and finishes; `connectors.credits.fair_share` keeps
the books these calls write, and the ledger's grants read them. Plain calls under the ledger's one lock (never
awaiting, so they complete in a cancelled task's cleanup); each wakes the waiting reservations it may let go.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable

from harvest.connectors.credits.fair_share import FairShare

__all__ = ["Turns"]


class Turns:
    _lock: threading.Lock
    _share: FairShare
    _wake_all: Callable[[], None]

    def expect(self, query_id: str, next_page: int = 0) -> None:
        """A query whose task was launched will register soon: until then it counts as lagging at `next_page`.

        Without it, a query whose Prefect task starts late (a loaded machine) finds the short budget taken by
        one that started sooner. The caller must `finish` it if the task ends without registering."""
        with self._lock:
            self._share.expect(query_id, next_page)

    def register(self, query_id: str, next_page: int = 0) -> None:
        """A query starts running; `next_page` is its first page index (a resumed query starts further on)."""
        with self._lock:
            self._share.register(query_id, next_page)
        self._wake_all()

    def page_done(self, query_id: str, page_index: int) -> None:
        """Page `page_index` of the query is complete (settled and kept); no-op for unregistered queries."""
        with self._lock:
            moved = self._share.done(query_id, page_index)
        if moved:
            self._wake_all()

    def finish(self, query_id: str) -> None:
        """The query will reserve nothing more (done, failed or cancelled); others stop waiting for it."""
        with self._lock:
            removed = self._share.finish(query_id)
        if removed:
            self._wake_all()

    @contextlib.asynccontextmanager
    async def query(self, query_id: str, next_page: int = 0) -> AsyncIterator[None]:
        """register() on entry, finish() on any exit, including errors and cancellation."""
        self.register(query_id, next_page)
        try:
            yield
        finally:
            self.finish(query_id)
