"""Ctrl-C and SIGTERM as a clean stop: send nothing more, let what is in flight land, then finish the run.

The first signal stops the ledger (every later reservation is refused, so no query sends again) and gives the
requests in flight `grace` seconds to land; after that they are abandoned (their credits still count). A second
signal abandons them at once. Either way the flow goes on normally: queries end `interrupted` with their
cursors, the manifest says `interrupted`, DuckDB is loaded, and the next `harvest run` resumes the run.

Handlers are installed inside the flow (after Prefect installed its own SIGTERM bridge) and the previous
handlers are put back when the flow body ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from connectors.client import ServiceClient
from connectors.ledger import CreditLedger

GRACE_SECONDS = 10.0
"""How long requests in flight may take to land after the first Ctrl-C."""


class StopOnSignal:
    def __init__(self, ledger: CreditLedger, client: ServiceClient, grace: float = GRACE_SECONDS) -> None:
        self.ledger = ledger
        self.client = client
        self.grace = grace
        self.signals = 0
        self.loop = asyncio.get_running_loop()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.loop.call_soon_threadsafe(self.stop, signal.Signals(signum).name)

    def stop(self, name: str) -> None:
        self.signals += 1
        if self.signals == 1:
            self.ledger.stop("interrupted", f"interrupted by {name}")
            print(
                f"harvest: {name}: stopping; letting the requests in flight land "
                f"(up to {self.grace:g} s; press Ctrl-C again to abandon them)",
                file=sys.stderr,
                flush=True,
            )
            self.loop.call_later(self.grace, self.client.abort)
        else:
            self.client.abort()

    @contextmanager
    def installed(self) -> Iterator[None]:
        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            # not the main thread (a worker running the flow elsewhere): no handlers
            with contextlib.suppress(ValueError):
                previous[sig] = signal.signal(sig, self._handle)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
