"""Ctrl-C, SIGTERM and SIGHUP as a clean stop: send nothing more, let what is in flight land, then finish the run.

The handlers cover the whole flow body, in three phases:

- **Before paying** (lock, run start, key check): a signal is remembered and stops the ledger as soon as it
  exists, so no query sends; the run ends `interrupted` like any other. Loading the job's earlier runs into
  DuckDB (runs whose load was cut off) is answered at once, as the load at the end is: a second signal leaves
  them for later.
- **Collecting**: the first signal stops the ledger (every later reservation is refused, and a request still
  waiting for a connection slot is never sent) and gives the requests in flight `grace` seconds to land; after
  that they are abandoned (their credits still count). A second signal abandons them at once. Either way the
  flow goes on normally: queries end `interrupted` with their cursors, the manifest says `interrupted`,
  DuckDB is loaded, and the next `harvest run` resumes the run.
- **Served** (a flow run `harvest serve` started): serve's stop request (`stop_signals.SERVE_STOP`) is a first
  signal when it comes first and nothing otherwise; it never counts as a second one. The run may get serve's
  request and the signal that stopped serve (a terminal's Ctrl-C, systemd's SIGTERM to the whole service), in
  either order: one stop, the requests in flight land. A run whose process started after serve was stopped
  (`stop_signals.serve_stopping`) is asked from its start.
- **Free reads before paying** (the service check, the balance the bill starts from): a stop cancels a read
  still waiting (`unless_stopped`): a service that takes the connection and answers nothing would hold the run
  through the read's retries.
- **Finishing** (manifest, load, export, report): every page is landed, so there is nothing left to stop. The
  first signal says the load is being finished; a later one during the load abandons it (`LoadInterrupted`),
  and the run says how it gets loaded (`harvest load`, or the resume of an interrupted run). The same goes for
  the export after it (`ExportInterrupted`: `harvest export` sends it later).

The load runs synchronously in the event loop's thread, so in that phase the handler acts at once (it cannot
wait for the loop) and writes its note so that a nested write to stderr cannot fail. Handlers are
installed inside the flow (after Prefect installed its own SIGTERM bridge) and the previous handlers are put
back when the flow body ends; runs under way at once in one process (a team's flow awaiting two jobs) share
one handler that tells each of them (`_Runs`), and the last to end puts back what the first found.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.client import ServiceClient
from harvest.flows import closed_output, stop_signals
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunHead, run_heads

T = TypeVar("T")

GRACE_SECONDS = 10.0
"""How long requests in flight may take to land after the first Ctrl-C."""
SERVE_ASKED = "harvest serve stopped"
"""What stopped a served run when `harvest serve`'s stop request came before any signal."""


def _note(line: str) -> None:
    """A line on stderr from inside a signal handler: the main thread may have been writing to stderr when
    the signal came, and a buffered stream refuses that nested write (RuntimeError); the raw fd never does."""
    try:
        print(line, file=sys.stderr, flush=True)
    except RuntimeError:
        os.write(2, f"{line}\n".encode())


class LoadInterrupted(BaseException):
    """A signal abandoned the load into DuckDB (a second Ctrl-C while it ran). A BaseException, like the
    KeyboardInterrupt it replaces, so that no `except Exception` on the way swallows it."""


class ExportInterrupted(BaseException):
    """A second signal abandoned the export at the end of a run: nothing copied so far is committed (no
    `_SUCCESS`), and `harvest export` sends it later."""


class StopOnSignal:
    def __init__(self, grace: float = GRACE_SECONDS) -> None:
        self.grace = grace
        self.signals = 0
        """Signals received (serve's stop request is not one: `stop_asked`)."""
        self.first: str | None = None
        """The name of what stopped the run first (SIGINT, SIGTERM, SIGHUP, `SERVE_ASKED`)."""
        self.loop = asyncio.get_running_loop()
        self.ledger: CreditLedger | None = None
        self.client: ServiceClient | None = None
        self.finishing = False
        self.loading = False
        self.abandoned_load = False
        self.earlier = False
        """Loading the job's earlier runs before this one pays (`loading_earlier`)."""
        self.in_export = False
        """Sending the run to the spec's `export.to` (`exporting`)."""
        self._read: asyncio.Task[Any] | None = None
        """A free read before paying that a stop cancels (`unless_stopped`)."""
        self._cut: asyncio.Task[Any] | None = None
        """The read a stop cancelled."""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.finishing or self.earlier:
            self._finishing(name)
        else:
            self.loop.call_soon_threadsafe(self.stop, name)

    def _handle_asked(self, signum: int, frame: FrameType | None) -> None:
        if self.finishing or self.earlier:
            self._finishing_asked()
        else:
            self.loop.call_soon_threadsafe(self.stop_asked)

    async def unless_stopped(self, read: Awaitable[T]) -> T | None:
        """`read` (a free balance read before anything is paid: the service check, the balance the bill starts
        from), cancelled by a stop that comes while it waits: a service that takes the connection and answers
        nothing held a served run past `harvest serve`'s wait until it was killed. None when a stop cut it."""
        self._read = task = asyncio.ensure_future(read)
        try:
            return await task
        except asyncio.CancelledError:
            if self._cut is not task:
                raise
            return None
        finally:
            self._read = None

    def _cut_read(self) -> None:
        if self._read is not None and not self._read.done():
            self._cut = self._read
            self._read.cancel()

    def stop_asked(self) -> None:
        """`harvest serve` asks the run to stop: the first stop, unless a signal stopped it already."""
        self._cut_read()
        if self.first is not None:
            return
        self.first = SERVE_ASKED
        if self.ledger is not None and self.client is not None:
            self._stop_paying(SERVE_ASKED)

    def stop(self, name: str) -> None:
        self._cut_read()
        self.signals += 1
        first = self.first is None
        if first:
            self.first = name
        if self.ledger is None or self.client is None:
            return  # before paying: `collecting` stops the ledger as soon as it exists
        if first:
            self._stop_paying(name)
        elif self.signals > 1:
            self.client.abort()

    def _stop_paying(self, name: str) -> None:
        assert self.ledger is not None and self.client is not None
        self.ledger.stop("interrupted", f"interrupted by {name}")
        again = "" if stop_signals.served() else "; press Ctrl-C again to abandon them"  # serve waits
        print(
            f"harvest: {name}: stopping; letting the requests in flight land\n"
            f"  (up to {self.grace:g} s{again})",  # 80 columns: two lines
            file=sys.stderr,
            flush=True,
        )
        self.loop.call_later(self.grace, self.client.abort)

    def _finishing_asked(self) -> None:
        if self.first is None:
            self.first = SERVE_ASKED
            self._finishing_note(SERVE_ASKED)

    def _finishing(self, name: str) -> None:
        self.signals += 1
        if self.first is None:
            self.first = name
            self._finishing_note(name)
        elif self.signals < 2:
            return  # the signal that stopped `harvest serve` as well as its request: the same stop
        elif self.loading:
            self.loading = False
            self.abandoned_load = not self.earlier  # this run's own load, not an earlier run's
            raise LoadInterrupted(name)
        elif self.in_export:
            self.in_export = False
            raise ExportInterrupted(name)

    def _finishing_note(self, name: str) -> None:
        if self.earlier:
            _note(
                f"harvest: {name}: nothing will be paid; finishing the load of earlier runs into DuckDB "
                "(press Ctrl-C again to leave it for later)"
            )
        elif self.in_export:
            _note(
                f"harvest: {name}: the run is landed and loaded; finishing the export "
                "(press Ctrl-C again to leave the export for later)"
            )
        else:
            _note(
                f"harvest: {name}: every page is landed; finishing the load into DuckDB "
                "(press Ctrl-C again to leave the load for later)"
            )

    @contextmanager
    def collecting(self, ledger: CreditLedger, client: ServiceClient) -> Iterator[None]:
        """The paid part of the run; a signal that came before it stops the ledger at once."""
        self.ledger, self.client = ledger, client
        if self.first is not None:
            ledger.stop("interrupted", f"interrupted by {self.first}")
            print(f"harvest: {self.first}: stopping before anything is paid", file=sys.stderr, flush=True)
        try:
            yield
        finally:
            self.ledger = self.client = None
            self.finishing = True

    @contextmanager
    def load(self) -> Iterator[None]:
        """The load into DuckDB: a signal after the first abandons it (`LoadInterrupted`)."""
        self.finishing = self.loading = True
        try:
            yield
        finally:
            self.loading = False

    @contextmanager
    def exporting(self) -> Iterator[None]:
        """The export after the load: a signal after the first abandons it (`ExportInterrupted`); a destination
        that stopped answering must not hold the run forever."""
        self.finishing = self.in_export = True
        try:
            yield
        finally:
            self.in_export = False

    @contextmanager
    def loading_earlier(self) -> Iterator[None]:
        """Loading earlier runs before this one pays. That load also runs in the loop's thread, so the handler
        acts at once: the first signal says nothing will be paid (`collecting` then stops the ledger), a second
        abandons that load (`LoadInterrupted`): those runs stay for `harvest load` or the next run."""
        self.earlier = self.loading = True
        try:
            yield
        finally:
            self.earlier = self.loading = False

    def output_closed(self, name: str) -> None:
        """stdout or stderr closed (`flows.closed_output`): output is not the work, so nothing fails for it, and
        nobody reads the run any more, so it stops as on SIGTERM: before or while paying, paying stops and what
        landed is loaded (the next run resumes it); once every page landed, the load and the export go on. Any
        thread may call it."""
        if self.finishing:
            return
        if self.earlier:  # remembered: `collecting` stops the ledger before anything is paid
            self.signals += 1
            self.first = self.first or name
            return
        self.loop.call_soon_threadsafe(self.stop, name)

    @contextmanager
    def installed(self) -> Iterator[None]:
        deaf = closed_output.listen(self.output_closed)
        if (already := closed_output.gone()) is not None:  # while Prefect started: remembered, as a signal is
            self.stop(already)
        if (lost := stop_signals.received) is not None:  # lost on its way (`stop_signals.lost_on_its_way`)
            self.stop(lost)
        # `harvest serve` asked while Prefect started the flow run, or was stopping when it started it
        if stop_signals.asked_to_stop or stop_signals.serve_stopping():
            self.stop_asked()
        try:
            with self._handlers():
                yield
        finally:
            deaf()

    @contextmanager
    def _handlers(self) -> Iterator[None]:
        _RUNS.add(self)
        try:
            yield
        finally:
            _RUNS.remove(self)


class _Runs:
    """The process's handlers while runs are under way, shared: a team's flow may await two jobs at once, and
    each run putting back the handlers it found put them back out of order (the first to end removed the
    second's, the second then restored the first's, so Ctrl-C stopped one job and a later SIGTERM went to a run
    that had ended). The first run installs one handler that tells every run under way; the last puts back what
    was there before."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[StopOnSignal] = []
        self.previous: dict[int, Any] = {}

    def add(self, run: StopOnSignal) -> None:
        with self.lock:
            if not self.runs:
                self._install()
            self.runs.append(run)

    def remove(self, run: StopOnSignal) -> None:
        with self.lock:
            self.runs.remove(run)
            if not self.runs:
                for sig, handler in self.previous.items():
                    with contextlib.suppress(ValueError):
                        signal.signal(sig, handler)
                self.previous.clear()

    def _install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            # not the main thread (a worker running the flow elsewhere): no handlers
            with contextlib.suppress(ValueError):
                if sig != signal.SIGINT and signal.getsignal(sig) is signal.SIG_IGN:
                    continue  # ignored by whoever started harvest (`nohup`): stays ignored
                self.previous[sig] = signal.signal(sig, self._handle)
        if stop_signals.served():
            with contextlib.suppress(ValueError):
                self.previous[stop_signals.SERVE_STOP] = signal.signal(stop_signals.SERVE_STOP, self._asked)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._tell(signum, frame, "_handle")

    def _asked(self, signum: int, frame: FrameType | None) -> None:
        self._tell(signum, frame, "_handle_asked")

    def _tell(self, signum: int, frame: FrameType | None, how: str) -> None:
        """Every run hears it; one abandoning its load or export raises here, into what the main thread runs
        (that load: it holds the thread), after the others heard it."""
        raised: BaseException | None = None
        for run in list(self.runs):
            try:
                getattr(run, how)(signum, frame)
            except BaseException as exc:  # LoadInterrupted, ExportInterrupted
                raised = raised or exc
        if raised is not None:
            raise raised


_RUNS = _Runs()


RunMarks = dict[str, tuple[str, int, bool]]


def _marks(h: RunHead) -> tuple[str, int, bool]:
    return (h.status, h.resumes, h.loaded)


def run_marks(layout: OutputLayout, job: str) -> RunMarks:
    """Each run's (status, resumes, loaded): compared after a Ctrl-C to tell which run this process touched."""
    return {h.run_id: _marks(h) for h in run_heads(layout, job)}


def interrupted_outside_the_flow(
    layout: OutputLayout, job: str, before: RunMarks, resume: str, load: str
) -> str:
    """One true line after a Ctrl-C that came while Prefect was starting or reporting (outside the flow body,
    where harvest's handlers are not installed): what the run left, and the command (`resume`, `load`) that
    goes on from there."""
    touched = [h for h in run_heads(layout, job) if before.get(h.run_id) != _marks(h)]
    if not touched:
        return "interrupted before the run started: nothing was sent"
    run = touched[-1]
    if run.unfinished:
        return f"interrupted: run {run.run_id} stopped; `{resume}` resumes it"
    if not run.loaded:
        return f"interrupted after run {run.run_id} ended ({run.status}), before its load: `{load}` loads it"
    return f"interrupted after run {run.run_id} ended ({run.status}) and was loaded: nothing to resume"
