"""A sandbox whose data requests the test can hold at the door, and a way to know that it has gone quiet.

The tests that stop or kill a run mid-crawl need the crawl to stand still at a known point: how many requests
were answered when the signal went out, and how many were in flight. A wall clock cannot say that on a busy
machine; the gate can. It sits in front of the sandbox (outside its fault gate, so a held request is neither
numbered nor billed until it goes through) and, once closed, holds every data request that arrives until the
test opens it again. The balance (`/v1/account/credit-balance`) and the test routes always pass.

    with gated(CONFIG) as sb:
        sb.gate.close_after(9, path=CREATIVE)   # the 10th request to CREATIVE, and everything after it, wait
        sb.gate.wait_frozen(proc)               # every request let through is answered; one at least waits
        answered = len(data_entries(sb))         # exact: nothing moves until the gate opens
        ...signal the run, wait for its "stopping" line...
        sb.gate.open()

`settle(sb)` waits until the sandbox has no connection open and no request in progress: after a client was
killed, every byte it sent has then been read and answered (or found to be nothing), so the ledger is final.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from harvest.sandbox.config import SandboxConfig, configured
from harvest.sandbox.emulation import endpoint_table as sandbox_endpoints
from harvest.sandbox.wire.serving import RunningSandbox

WAIT = 300.0
"""How long a test waits for the run to reach a point it waits for: only a run that never gets there (a bug, a
hang) waits this long; the first start of Prefect's temporary server on a busy machine takes a minute."""


class Gate:
    """ASGI wrapper counting and, when closed, holding the data requests on their way to the sandbox."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._changed = threading.Condition()
        self._closed = False
        self._close_after: tuple[int, str | None] | None = None
        self._only: str | None = None
        """While set, only data requests to this documented path pass (`let_through`)."""
        self.passed = 0
        """Data requests let through so far."""
        self.passed_by_path: dict[str, int] = {}
        self.active = 0
        """Data requests let through and not answered yet."""
        self.held = 0
        """Data requests waiting at the closed gate now."""

    # ----------------------------------------------------------------------------------- the test's side
    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def close_after(self, count: int, path: str | None = None) -> None:
        """Let `count` more data requests (to the documented `path` only, when given) through, then close."""
        with self._changed:
            done = self.passed if path is None else self.passed_by_path.get(path, 0)
            self._close_after = (done + count, path)
            self._check_close_after()

    def let_through(self, count: int, path: str) -> None:
        """A closed gate lets `count` more data requests to the documented `path` through, and only those, then
        closes again: one query goes on while the test holds the others."""
        with self._changed:
            self._closed, self._only = False, path
            self.close_after(count, path)

    def open(self) -> None:
        with self._changed:
            self._closed = False
            self._close_after = None
            self._only = None
            self._changed.notify_all()

    @property
    def closed(self) -> bool:
        with self._changed:
            return self._closed

    def wait_frozen(self, proc: subprocess.Popen[Any] | None = None, held: int = 1) -> int:
        """Until the gate is closed, every request it let through is answered and at least `held` requests wait
        at it (the client is blocked on the gate, not busy elsewhere); the number waiting. Fails at once if
        `proc` (the client) ends first."""
        return self._wait(lambda: self._closed and self.active == 0 and self.held >= held, proc, "frozen")

    def wait_held(self, count: int, proc: subprocess.Popen[Any] | None = None) -> int:
        """Until at least `count` requests wait at the closed gate; how many do."""
        return self._wait(lambda: self.held >= count, proc, f"{count} held")

    def _wait(self, ready: Any, proc: subprocess.Popen[Any] | None, what: str) -> int:
        deadline = time.monotonic() + WAIT
        with self._changed:
            while not ready():
                if proc is not None and proc.poll() is not None:
                    raise AssertionError(
                        f"the client ended (exit {proc.returncode}) before the gate was {what}"
                    )
                assert time.monotonic() < deadline, (
                    f"the gate was never {what}: closed={self._closed}, passed={self.passed}, "
                    f"active={self.active}, held={self.held}"
                )
                self._changed.wait(timeout=0.05)
            return self.held

    # ----------------------------------------------------------------------------------- the server's side
    def _check_close_after(self) -> None:
        if self._close_after is None:
            return
        count, path = self._close_after
        done = self.passed if path is None else self.passed_by_path.get(path, 0)
        if done >= count:
            self._closed = True
            self._close_after = None
            self._only = None
            self._changed.notify_all()

    def _try_pass(self, path: str) -> bool:
        with self._changed:
            if self._closed or self._only not in (None, path):
                return False
            self.passed += 1
            self.passed_by_path[path] = self.passed_by_path.get(path, 0) + 1
            self.active += 1
            self._check_close_after()
            self._changed.notify_all()
            return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        table = getattr(
            self.app, "table", sandbox_endpoints.BUILT_IN
        )  # a SandboxApp's: its declared ones too
        endpoint = table.match(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        if not self._try_pass(endpoint.path):
            with self._changed:
                self.held += 1
                self._changed.notify_all()
            try:
                while not self._try_pass(endpoint.path):
                    await asyncio.sleep(0.002)  # cancellable: a server shutting down never hangs on it
            finally:
                with self._changed:
                    self.held -= 1
                    self._changed.notify_all()
        try:
            await self.app(scope, receive, send)
        finally:
            with self._changed:
                self.active -= 1
                self._changed.notify_all()


class GatedSandbox(RunningSandbox):
    """A `RunningSandbox` served through a `Gate` (`.gate`); stopping it opens the gate first."""

    def __init__(self, config: SandboxConfig) -> None:
        super().__init__(config, served=self._gated)

    def _gated(self, app: Any) -> Gate:
        self.gate = Gate(app)
        return self.gate

    def stop(self, wait: bool = True) -> None:
        self.gate.open()
        super().stop(wait)


@contextmanager
def gated(config: SandboxConfig | None = None, **overrides: Any) -> Iterator[GatedSandbox]:
    """`sandbox.wire.serving.running`, with a gate."""
    sandbox = GatedSandbox(configured(config, **overrides))
    sandbox.start()
    try:
        yield sandbox
    finally:
        sandbox.stop()


# ------------------------------------------------------------------------------------------------ quiet
def _accept_queue(port: int) -> int:
    """Connections to 127.0.0.1:`port` made and not accepted by the server yet (Linux: a listening socket's
    receive queue in /proc/net/tcp is its accept queue)."""
    wanted = f"0100007F:{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == wanted and fields[3] == "0A":  # LISTEN
            return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def settle(sb: RunningSandbox) -> None:
    """Until the sandbox has no connection waiting to be accepted, none open and no request in progress.

    Call it once the only client is gone (killed and reaped): everything it sent is then in the server's
    socket buffers, and when all of it has been read, answered and the connections closed, the ledger is final.
    Polling that state is the event; no quiet period is guessed."""
    deadline = time.monotonic() + WAIT
    while any(busy := sb.busy()) or _accept_queue(sb.port):
        assert time.monotonic() < deadline, (
            f"the sandbox never settled: {busy[0]} connections, {busy[1]} requests"
        )
        time.sleep(0.01)
