"""Ports on 127.0.0.1 for servers a test starts in another process, and waiting until one answers."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Mapping

import httpx

LOOPBACK = "127.0.0.1"

START_TIMEOUT = 120.0
"""How long a server process may take to answer its first request: it imports its web stack first, which
takes seconds on a machine busy with another test run. Only a process that never comes up waits this long."""


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
