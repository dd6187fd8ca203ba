"""Prefect's temporary server, started by `harvest run` at once instead of when Prefect first needs it.

Without a configured Prefect API, Prefect starts a temporary server the first time a client is needed: after
harvest has imported Prefect (~1.5 s) and then itself importing the server's code into harvest's process; the
server then boots (~3.5 s) while harvest waits, and at exit Prefect stops it gracefully (~1 s). harvest starts
the same server process (same command, same environment) right after its checks of the spec, the service URL,
the output directory and the key (`flows.commands.run_job`: milliseconds, so refused input starts nothing) and
before importing Prefect, so it boots while harvest imports, and points Prefect at it. It is stopped last, after Prefect's own exit handlers have sent their logs
and events, without waiting for a graceful shutdown: its SQLite database is crash-safe.

A configured API (PREFECT_API_URL, or the active profile's) is always used as is.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx

ENV = "PREFECT_API_URL"


def _profiles_path() -> Path:
    if os.environ.get("PREFECT_PROFILES_PATH"):
        return Path(os.environ["PREFECT_PROFILES_PATH"])
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect")
    return home / "profiles.toml"


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
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
        atexit.register(self.stop)  # registered before Prefect's handlers, so it runs after them

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"Prefect's temporary server exited with code {self.process.returncode}"
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
            self.process.wait(timeout=5)


def start_if_needed() -> TemporaryServer | None:
    """Start a temporary server and point Prefect at it, unless the user configured an API."""
    if configured_api_url() is not None:
        return None
    server = TemporaryServer()
    os.environ[ENV] = server.url
    return server
