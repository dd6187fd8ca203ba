"""The requests on the wire now, so that a stop that cannot wait (a second Ctrl-C, the grace time ran out) can
cancel them at once instead of waiting for their answers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class InFlight:
    """The asyncio tasks sending a request now, and whether they were cancelled by `abort`."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.aborting = False

    @contextmanager
    def sending(self) -> Iterator[None]:
        """Around one request on the wire: the current task may be cancelled by `abort` meanwhile."""
        current = asyncio.current_task()
        if current is not None:
            self._tasks.add(current)
        try:
            yield
        finally:
            if current is not None:
                self._tasks.discard(current)

    def abort(self) -> int:
        """Cancel every request on the wire; returns how many."""
        self.aborting = True
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel("harvest: aborted at stop")
        return len(tasks)
