"""Ports on 127.0.0.1 for servers a test starts in another process, waiting until one answers, and a proxy
that makes a server go away and come back."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from http.server import ThreadingHTTPServer

import httpx

LOOPBACK = "127.0.0.1"

START_TIMEOUT = 120.0
"""How long a server process may take to answer its first request: it imports its web stack first, which
takes seconds on a machine busy with another test run. Only a process that never comes up waits this long."""


class LoopbackServer(ThreadingHTTPServer):
    """A threaded HTTP server for a test's answers, with a listen backlog a fan-out fits in. socketserver's
    default backlog is 5: a test gathering ~70 queries at once overflowed it, the kernel dropped the
    handshakes' last ACKs and retried them with a doubling wait, and requests sat unread for up to a minute
    (read timeouts in a whole run of the published samples). uvicorn's sandbox listens with 2,048."""

    request_queue_size = 2048


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now (the OS picks it; it may be taken again before use,
    which no test here has seen happen)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def wait_until_serving(
    url: str,
    proc: subprocess.Popen[str] | subprocess.Popen[bytes],
    headers: Mapping[str, str] | None = None,
    timeout: float = START_TIMEOUT,
) -> httpx.Response:
    """The first answer of `url`, served by `proc`: retried while nothing listens yet; fails at once when the
    process exits, and after `timeout` when it never answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(url, headers=dict(headers or {}), timeout=30)
        except httpx.TransportError:
            assert proc.poll() is None, f"the server exited ({proc.returncode}) before it answered"
            assert time.monotonic() < deadline, f"nothing answered at {url} within {timeout:g} s"
            time.sleep(0.05)


class CuttableProxy:
    """A TCP proxy on 127.0.0.1 in front of a server: `cut()` drops every connection and stops listening (to a
    client the server is gone: connections are refused), `restore()` listens again on the same port. A server
    that goes away and comes back, at the moment a test chooses."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((LOOPBACK, self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, upstream}
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
