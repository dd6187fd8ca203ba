"""Stopping `harvest serve` stops the runs it started as `harvest run` stops: their requests in flight land, each
run ends `interrupted` and is loaded, its flow run ends Cancelled; serve waits for them, then pauses the
schedules and exits 0.

Prefect's runner, stopped by cancelling its task group (what Ctrl-C and its own SIGTERM handler do), closes each
flow-run process it started on the way out: anyio's `Process.aclose`, cancelled, kills the child at once. The
run died with paid requests whose pages were never stored (`killed`), paid again by the resume. Here the first
signal (SIGTERM, SIGINT, SIGHUP) stops the polling for new runs and asks each flow-run process to stop with
`stop_signals.SERVE_STOP`, a request the child honours once (`flows.run.interrupt`): a stop signal the child
got itself as well (a terminal's Ctrl-C reaches the foreground process group, systemd signals every process of
the service's cgroup) is the same stop, never a second signal that abandons the requests in flight. Only once
every flow-run process has ended is the runner's task group cancelled, with nothing left for it to kill.

A run the poller picked up before the stop whose process starts only after it is waited for too (`_starting`), and
stops itself before paying: its process inherits `stop_signals.SERVE_STOPPING` from serve's environment.

The wait is bounded (`STOP_WAIT_SECONDS`): a run that has not ended by then gets SIGTERM, then SIGKILL
(Prefect's own kill), and is resumed by the next run. Later signals to serve change nothing: they reach the runs
themselves when they come to the process group, and serve's wait is bounded anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from prefect.runner import Runner

from harvest.flows import stop_signals
from harvest.flows.run.interrupt import GRACE_SECONDS

STOP_WAIT_SECONDS = 120.0
"""How long a stopping `harvest serve` waits for its runs to end: the requests' grace (`GRACE_SECONDS`), the
load into DuckDB and the flow run's report; a service manager's stop timeout must be longer
(systemd's TimeoutStopSec, `docker stop -t`)."""
KILL_GRACE_SECONDS = 10.0
"""After the wait, between the SIGTERM and the SIGKILL of a run that still has not ended."""
POLL_SECONDS = 0.2


def _note(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"{line}\n".encode())


def catches(pid: int, sig: int) -> bool | None:
    """Whether process `pid` has a handler for `sig` (Linux's /proc); None where that cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    return None


class StopsItsRuns(Runner):
    """`prefect.serve`'s runner (schedules paused on exit, no limit), stopped as the module says."""

    def __init__(self) -> None:
        super().__init__(pause_on_shutdown=True, limit=None)
        self._stop_began: float | None = None

    async def start(self, run_once: bool = False, webserver: bool | None = None) -> None:
        # Prefect installs SIGTERM's handler (`handle_sigterm`); SIGINT's is asyncio.run's (cancel everything)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self.handle_sigterm)
        os.environ[stop_signals.SERVED_BY] = str(os.getpid())  # the flow-run processes listen for SERVE_STOP
        await super().start(run_once=run_once, webserver=webserver)

    def handle_sigterm(self, signum: int = signal.SIGTERM, frame: FrameType | None = None, *_: Any) -> None:
        name = signal.Signals(signum).name
        stop_signals.received = name
        if not self.started or self._loop is None:  # still registering: nothing runs yet
            stop_signals.interrupt(signum, frame)
            return
        if self._stop_began is not None:
            return
        self._stop_began = time.monotonic()
        self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._stop_after_runs(name)))

    def _starting(self) -> set[Any]:
        """Flow run ids the poller picked up whose process is not running yet (Prefect's `_submit_run` between
        the Pending state and the process manager's `add`): each starts after serve's stop, and stops itself
        before paying (`stop_signals.SERVE_STOPPING`), but serve waits for it as for the others."""
        poller = getattr(self, "_scheduled_run_poller", None)
        submitting = set(getattr(poller, "_submitting_flow_run_ids", ()))
        return submitting - set(self._running()) - set(self._process_manager.flow_run_ids())

    def _running(self) -> dict[Any, int]:
        """Flow run id -> pid of each flow-run process still running."""
        manager = self._process_manager
        found = {}
        for flow_run_id in manager.flow_run_ids():
            handle = manager.get(flow_run_id)
            if handle is not None and handle.pid is not None and handle.returncode is None:
                found[flow_run_id] = handle.pid
        return found

    async def _stop_after_runs(self, name: str) -> None:
        self._scheduled_run_poller.stopping = True  # no new poll
        # a run the poller picked up already starts its process after this, and stops before paying
        os.environ[stop_signals.SERVE_STOPPING] = str(os.getpid())
        asked: set[int] = set()
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        said = False
        while ((running := self._running()) or self._starting()) and time.monotonic() < deadline:
            if not said:
                _note(
                    f"harvest serve: {name}: stopping {len(running) + len(self._starting())} run(s) in "
                    "progress: their requests in "
                    f"flight land (up to {GRACE_SECONDS:g} s), then each is loaded (serve waits up to "
                    f"{STOP_WAIT_SECONDS:g} s)"
                )
                said = True
            for pid in set(running.values()) - asked:
                listens = catches(pid, stop_signals.SERVE_STOP)
                if listens is False:
                    continue  # still starting, before harvest's code: asked once it listens
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, stop_signals.SERVE_STOP if listens else signal.SIGTERM)
                asked.add(pid)
            await asyncio.sleep(POLL_SECONDS)
        for flow_run_id in self._running():
            _note(f"harvest serve: flow run {flow_run_id} did not end in {STOP_WAIT_SECONDS:g} s: killing it")
            await self._process_manager.kill(flow_run_id, grace_seconds=KILL_GRACE_SECONDS)
        self._loops_task_group.cancel_scope.cancel()
