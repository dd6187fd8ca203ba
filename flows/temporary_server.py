"""Prefect's temporary server, started by `harvest run` at once instead of when Prefect first needs it.

Without a configured Prefect API, Prefect starts a temporary server the first time a client is needed: after
harvest has imported Prefect (~1.5 s) and then itself importing the server's code into harvest's process; the
server then boots (~3.5 s) while harvest waits, and at exit Prefect stops it gracefully (~1 s). harvest starts
the same server process (same command, same environment) right after its checks of the spec, the service URL,
the output directory and the key (`flows.commands.run_job`: milliseconds, so refused input starts nothing) and
before importing Prefect, so it boots while harvest imports, and points Prefect at it. It is stopped last, after Prefect's own exit handlers have sent their logs
and events, without waiting for a graceful shutdown: its SQLite database is crash-safe.

The server belongs to harvest's run, not to the terminal or service manager around it:

- Ctrl-C in a terminal, `kill -INT -<pgid>`, `docker stop` and systemd (which sends SIGTERM to every process of
  the unit) must stop harvest cleanly, and harvest still needs the server to report the run's final state. So
  the server runs in its own session (no group signal reaches it) with SIGINT and SIGTERM blocked (a signal
  sent to its pid stays pending); harvest kills it at exit.
- When harvest itself dies without exiting (kill -9, the OOM killer) the kernel kills the server too (Linux
  `PR_SET_PDEATHSIG`, tied to the thread that started it: harvest starts it from the main thread). Elsewhere
  it would outlive harvest; there, run against a configured Prefect API.
- Its output goes to `temporary-server.log` in Prefect's home, not to harvest's stdout and stderr: a process
  reading harvest's output (cron's mail, a pipe) sees the end when harvest ends.

A configured API (PREFECT_API_URL, or the active profile's) is always used as is.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import IO

import httpx

ENV = "PREFECT_API_URL"
LOG_NAME = "temporary-server.log"
_PR_SET_PDEATHSIG = 1

IMPORTED_WHILE_BOOTING = (
    "prefect.flow_engine",
    "prefect.task_engine",
    "prefect.utilities.visualization",
    "fastapi.encoders",
    "anyio._core._sockets",
    "anyio._core._streams",
)
"""What Prefect imports only once the flow is called (~0.25 s, ~0.9 s on a busy machine; measured with
`-X importtime` on Prefect 3.8): imported while harvest would otherwise just wait for the server, instead of
after it answered."""


def _prefect_home() -> Path:
    return Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect")


def _profiles_path() -> Path:
    if os.environ.get("PREFECT_PROFILES_PATH"):
        return Path(os.environ["PREFECT_PROFILES_PATH"])
    return _prefect_home() / "profiles.toml"


def configured_api_url() -> str | None:
    """The API the user configured: the environment, or the active Prefect profile (read without Prefect)."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    try:
        profiles = tomllib.loads(_profiles_path().read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    value = profiles.get("profiles", {}).get(active, {}).get(ENV)
    return str(value) if value else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _detach_signals(parent: int, libc: ctypes.CDLL | None) -> None:
    """Runs in the server's process between fork and exec (harvest has no other thread yet): die with the
    parent, and keep SIGINT/SIGTERM pending for good (a blocked mask survives exec and uvicorn's handlers)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    if libc is not None and hasattr(libc, "prctl"):
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)


def _log_file() -> IO[bytes] | int:
    """Where the server's output goes: a log in Prefect's home, or nowhere when that cannot be written."""
    try:
        home = _prefect_home()
        home.mkdir(parents=True, exist_ok=True)
        return (home / LOG_NAME).open("ab")
    except OSError:
        return subprocess.DEVNULL


class TemporaryServer:
    """The uvicorn process Prefect itself would start for a temporary server."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        env = {
            **os.environ,
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
        }
        command = [sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app"]
        command += [
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            "error",
            "--lifespan",
            "on",
        ]
        parent, libc, log = os.getpid(), _libc(), _log_file()
        self.log = Path(log.name) if not isinstance(log, int) else None
        try:
            self.process = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=lambda: _detach_signals(parent, libc),  # harvest has no other thread yet
            )
        finally:
            if not isinstance(log, int):
                log.close()
        atexit.register(self.stop)  # registered before Prefect's handlers, so it runs after them

    def wait_ready(self, timeout: float) -> None:
        """Return once the server answers; first import what the flow will need (the server still boots)."""
        deadline = time.monotonic() + timeout
        for name in IMPORTED_WHILE_BOOTING:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"Prefect's temporary server exited with code {self.process.returncode}"
                        + (f"; its output is in {self.log}" if self.log else "")
                    )
                try:
                    if client.get(f"{self.url}/health", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise RuntimeError(f"Prefect's temporary server did not answer within {timeout:g} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)


def start_if_needed() -> TemporaryServer | None:
    """Start a temporary server and point Prefect at it, unless the user configured an API."""
    if configured_api_url() is not None:
        return None
    server = TemporaryServer()
    os.environ[ENV] = server.url
    return server
