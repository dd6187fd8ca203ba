"""Serving the sandbox over real HTTP on 127.0.0.1: in the foreground (`harvest sandbox`) or in a background
thread for tests and the demo (`running`).

Always HTTP/1.1 through uvicorn's h11 implementation: the dropped-connection fault relies on it, and it needs
no compiled extras.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from harvest.sandbox.config import DEFAULT_KEY, SandboxConfig, configured
from harvest.sandbox.wire.asgi_app import SandboxApp
from harvest.sandbox.wire.billing import LedgerEntry

LOOPBACK = "127.0.0.1"


ASGIApp = Callable[[Any, Any, Any], Any]


def _uvicorn_config(app: ASGIApp, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=LOOPBACK,
        port=port,
        http="h11",
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
    )


def _listening(port: int) -> socket.socket:
    """A socket of 127.0.0.1 listening on `port` (0: a free one), for uvicorn to serve on. TCP_NODELAY on every
    connection, or uvicorn's two writes (head, body) meet the client's delayed ACK and every answer waits ~40 ms:
    asyncio sets it only on sockets whose proto is IPPROTO_TCP, and accepted sockets inherit it from the listener.
    ValueError naming the port when it cannot be had (another process listens on it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((LOOPBACK, port))
        sock.listen(2048)  # uvicorn's default backlog
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot serve on {LOOPBACK}:{port}: {exc.strerror}; pick another --port") from None
    return sock


def serve(
    port: int,
    api_key: str = DEFAULT_KEY,
    credits: int = 1000,
    fault_rate: float = 0.0,
    seed: int = 0,
    host: str = LOOPBACK,
    **config: Any,
) -> None:
    """Serve until interrupted. `config` takes any other `SandboxConfig` field (pages, page_size, quirks,
    ...). Only the loopback interface is served: the sandbox has fake keys and no business on a network."""
    if host not in (LOOPBACK, "localhost"):
        raise ValueError("the sandbox only binds 127.0.0.1")
    cfg = SandboxConfig(api_keys={api_key: credits}, fault_rate=fault_rate, seed=seed, **config)
    app = SandboxApp(cfg)
    sock = _listening(port)  # before "serving" is said: a port another process holds is refused
    port = sock.getsockname()[1]  # the one bound: `--port 0` asks for any free one
    print(
        f"sandbox serving on http://{LOOPBACK}:{port} (key {api_key!r}, {credits} credits, "
        f"fault rate {fault_rate}, seed {seed}); Ctrl-C to stop",
        file=sys.stderr,
    )
    with sock:
        uvicorn.Server(_uvicorn_config(app, port)).run(sockets=[sock])


class RunningSandbox:
    """A sandbox served from a background thread. Use as a context manager, or call `stop()`."""

    def __init__(self, config: SandboxConfig, served: Callable[[SandboxApp], ASGIApp] | None = None) -> None:
        """`served`: the ASGI app served in front of the sandbox's own, made from it (a test's gate that holds
        requests, a route alias); the sandbox's app when not given."""
        self.config = config
        self.app = SandboxApp(config)
        self._sock = _listening(0)
        self.port: int = self._sock.getsockname()[1]
        self.base_url = f"http://{LOOPBACK}:{self.port}"
        self._server = uvicorn.Server(_uvicorn_config(served(self.app) if served else self.app, self.port))
        # Signal handlers: uvicorn installs none outside the main thread.
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="sandbox-server", daemon=True
        )
        self._stopped = False

    @property
    def key(self) -> str:
        """The first configured key (the only one, usually)."""
        return next(iter(self.config.api_keys))

    @property
    def ledger(self) -> list[LedgerEntry]:
        """A snapshot of every answered request."""
        return self.app.state.ledger.entries()

    def balance(self, key: str | None = None) -> int:
        return self.app.state.book.balance(key or self.key)

    def set_balance(self, credits: int, key: str | None = None) -> None:
        self.app.state.book.set_balance(key or self.key, credits)

    def billed_total(self, key: str | None = None) -> int:
        return self.app.state.ledger.billed_total(key or self.key)

    def busy(self) -> tuple[int, int]:
        """(connections open, requests in progress): uvicorn's own count. Both 0, and none waiting to be
        accepted, once every request a client sent has been answered."""
        state = self._server.server_state
        return len(state.connections), len(state.tasks)

    def client(self, key: str | None = None, **kwargs: Any) -> httpx.Client:
        """An httpx client on this sandbox sending `key` (default: the first configured one; "": none)."""
        headers = {} if key == "" else {"x-api-key": key or self.key}
        return httpx.Client(base_url=self.base_url, headers=headers, **kwargs)

    def start(self) -> RunningSandbox:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the sandbox server did not start")
            time.sleep(0.002)
        return self

    def stop(self, wait: bool = True) -> None:
        """Ask the server to exit; with `wait`, until it has (uvicorn takes 0.1-0.3 s to wind down, so test
        fixtures let it finish in the background: the thread is a daemon and uvicorn closes the socket)."""
        if self._stopped:
            return
        self._stopped = True
        self._server.should_exit = True
        if wait:
            if self._thread.is_alive():
                self._thread.join(timeout=5)
            self._sock.close()

    def __enter__(self) -> RunningSandbox:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextmanager
def running(config: SandboxConfig | None = None, **overrides: Any) -> Iterator[RunningSandbox]:
    """Serve a sandbox on a free port of 127.0.0.1 for the duration of a `with` block.

    with running(SandboxConfig(pages=(3, 3))) as sb:
        httpx.get(sb.base_url + "/v1/account/credit-balance", headers={"x-api-key": sb.key})
    """
    cfg = configured(config, **overrides)
    sandbox = RunningSandbox(cfg).start()
    try:
        yield sandbox
    finally:
        sandbox.stop()


def start(config: SandboxConfig | None = None, **overrides: Any) -> RunningSandbox:
    """A started sandbox the caller stops (`stop()` or a `with` block)."""
    cfg = configured(config, **overrides)
    return RunningSandbox(cfg).start()
