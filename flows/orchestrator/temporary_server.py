"""Prefect's temporary server, started by `harvest run` at once instead of when Prefect first needs it.

Without a configured Prefect API, Prefect starts a temporary server the first time a client is needed: after
harvest has imported Prefect (~1.5 s) and then itself importing the server's code into harvest's process; the
server then boots (~3.5 s) while harvest waits, and at exit Prefect stops it gracefully (~1 s). harvest starts
the same server process (same command, same environment) right after its checks of the spec, the service URL,
the output directory and the key (`flows.commands.run_job.run_job`: milliseconds, so refused input starts nothing) and
before importing Prefect, so it boots while harvest imports, and points Prefect at it. It is stopped last, after Prefect's own exit handlers have sent their logs
and events, without waiting for a graceful shutdown: its SQLite database is crash-safe.

The server belongs to harvest's run, not to the terminal or service manager around it:

- Ctrl-C in a terminal, `kill -INT -<pgid>`, `docker stop` and systemd (which sends SIGTERM to every process of
  the unit; SIGHUP too with `SendSIGHUP=yes`) must stop harvest cleanly, and harvest still needs the server to
  report the run's final state. So the server runs in its own session (no group signal reaches it) with SIGINT,
  SIGTERM and SIGHUP blocked (a signal sent to its pid stays pending); harvest kills it at exit.
- When harvest itself dies without exiting (kill -9, the OOM killer) the kernel kills the server too (Linux
  `PR_SET_PDEATHSIG`, tied to the thread that started it: harvest starts it from the main thread). Elsewhere
  it would outlive harvest; there, run against a configured Prefect API.
- Its output goes to `temporary-server.log` in Prefect's home, not to harvest's stdout and stderr: a process
  reading harvest's output (cron's mail, a pipe) sees the end when harvest ends. Past 5 MB a start moves it
  to `temporary-server.log.1` (replacing the one before), so years of nightly runs keep at most ~10 MB.

Its start does less once an earlier one did the database's upkeep (`KnownDatabase`: migrations and block
registration, ~1 s), and harvest imports what the flow will need while it waits for the server.

A configured API (PREFECT_API_URL, or the active profile's) is always used as is.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import hashlib
import importlib
import importlib.util
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

ENV = "PREFECT_API_URL"
LOG_NAME = "temporary-server.log"
LOG_KEEP_BYTES = 5_000_000
"""The server log's size at which a start moves it to `temporary-server.log.1`: at most two such logs stay."""
MEMO_NAME = "harvest-temporary-server.toml"
UPKEEP_LOCK = "harvest-temporary-server.lock"
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


def configured(name: str) -> str | None:
    """A Prefect setting the user configured: the environment, or the active profile (read without Prefect)."""
    if os.environ.get(name):
        return os.environ[name]
    try:
        profiles = tomllib.loads(_profiles_path().read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    value = profiles.get("profiles", {}).get(active, {}).get(name)
    return str(value) if value else None


def configured_api_url() -> str | None:
    """The API the user configured: the environment, or the active Prefect profile."""
    return configured(ENV)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait while harvest forks the server: the child starts with them blocked.

    Between fork and `setsid` the child is still in harvest's process group, so a signal sent to the group
    (`kill -TERM -<pgid>`, a closed terminal) reaches it too, while it runs Python's after-fork hooks with
    harvest's handlers: a KeyboardInterrupt there printed "Exception ignored ... Traceback" on harvest's stderr.
    A mask set in the parent before the fork is the child's from its first instruction (and survives exec);
    harvest gets what came meanwhile once the server is started and its stop registered."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _detach_signals(parent: int, libc: ctypes.CDLL | None) -> None:
    """Runs in the server's process between fork and exec (harvest has no other thread yet): die with the
    parent. SIGINT/SIGTERM/SIGHUP stay blocked for good (`_signals_held`: a blocked mask survives exec and
    uvicorn's handlers), so one sent to the server's pid stays pending."""
    if libc is not None and hasattr(libc, "prctl"):
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)


def open_log() -> IO[bytes] | int:
    """Where the server's output goes: a log in Prefect's home, or nowhere when that cannot be written."""
    try:
        home = _prefect_home()
        home.mkdir(parents=True, exist_ok=True)
        log = home / LOG_NAME
        rotate_log(log)
        return log.open("ab")
    except OSError:
        return subprocess.DEVNULL


def rotate_log(log: Path, keep: int = LOG_KEEP_BYTES) -> None:
    """Past `keep` bytes the log becomes `<name>.1`, replacing the one before: every run appends to it, and a
    nightly job must not fill Prefect's home over the years. Two runs starting at once may both try; one wins."""
    with contextlib.suppress(OSError):
        if log.stat().st_size > keep:
            log.replace(log.with_name(log.name + ".1"))


LEAN_START = {
    "PREFECT_SERVER_DATABASE_MIGRATE_ON_START": "false",
    "PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "false",
    "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false",
}
"""The server's start without its database upkeep, for a database an earlier start already did it for."""

_DATABASE_SETTINGS = (
    *LEAN_START,
    "PREFECT_API_DATABASE_MIGRATE_ON_START",
    "PREFECT_API_BLOCKS_REGISTER_ON_START",
    "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION",
    "PREFECT_SERVER_DATABASE_CONNECTION_URL",
    "PREFECT_API_DATABASE_CONNECTION_URL",
)


class KnownDatabase:
    """Prefect's SQLite database in its home, as a start of the temporary server left it.

    Every start of Prefect's server runs the database migrations (~0.3 s with nothing to do: alembic reads
    every migration script) and checks the block types to register, which imports every installed Prefect
    collection (~0.5-1.5 s with prefect-dask). After a start that did both, harvest notes the database's
    migration revision and the migration scripts it had (`harvest-temporary-server.toml` in Prefect's home);
    while both still match, the next start skips that upkeep. A Prefect upgrade changes the scripts and a
    new or replaced database its revision: the upkeep runs again. Block types a collection installed later
    would register are registered by whatever saves a block of that type (`Block.save`)."""

    def __init__(self, home: Path, migrations: str) -> None:
        self.path = home / "prefect.db"
        self.memo = home / MEMO_NAME
        self.migrations = migrations

    @classmethod
    def unless_configured(cls) -> KnownDatabase | None:
        """None when the user chose the database or its upkeep (then Prefect's defaults apply as they are)."""
        if any(configured(name) for name in _DATABASE_SETTINGS):
            return None
        migrations = _migration_scripts()
        return None if migrations is None else cls(_prefect_home(), migrations)

    def revision(self) -> str | None:
        if not self.path.is_file():
            return None
        try:
            with contextlib.closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=1)) as db:
                row = db.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.Error:
            return None
        return str(row[0]) if row else None

    def current(self) -> bool:
        try:
            memo = tomllib.loads(self.memo.read_text())
        except (OSError, tomllib.TOMLDecodeError):
            return False
        revision = self.revision()
        return (
            revision is not None
            and memo.get("migrations") == self.migrations
            and memo.get("revision") == revision
        )

    def upkeep_lock(self) -> int:
        """Wait for, and hold, the right to migrate the database: two harvest runs starting at once on a new
        database (two nightly jobs, the first night after an upgrade) each ran the migrations, and the second
        failed on a column the first had added (seen: `duplicate column name: state_timestamp`, exit 3).
        Released once the server answers (`release`); a process that dies releases it with its descriptor."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(UPKEEP_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    @staticmethod
    def release(fd: int | None) -> None:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def remember(self) -> None:
        """After a start that migrated the database and registered the block types (best effort)."""
        revision = self.revision()
        if revision is None:
            return
        text = f'migrations = "{self.migrations}"\nrevision = "{revision}"\n'
        with contextlib.suppress(OSError):
            tmp = self.memo.with_name(f"{self.memo.name}.{os.getpid()}")
            tmp.write_text(text)
            tmp.replace(self.memo)


def _migration_scripts() -> str | None:
    """A digest of the names of the SQLite migration scripts of the installed Prefect (found without importing
    it, in milliseconds): it changes when an upgrade brings a migration."""
    spec = importlib.util.find_spec("prefect")
    if spec is None or spec.origin is None:
        return None
    scripts = Path(spec.origin).parent / "server" / "database" / "_migrations" / "versions" / "sqlite"
    try:
        names = sorted(name for name in os.listdir(scripts) if name.endswith(".py"))
    except OSError:
        return None
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


class TemporaryServer:
    """The uvicorn process Prefect itself would start for a temporary server."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        self.database = KnownDatabase.unless_configured()
        self.upkeep: int | None = None
        if self.database is not None and not self.database.current():
            self.upkeep = self.database.upkeep_lock()  # then look again: another start may have done it
        lean = self.database is not None and self.database.current()
        env = {
            **os.environ,
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
            **(LEAN_START if lean else {}),
        }
        self.remember = self.database is not None and not lean
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
        parent, libc, log = os.getpid(), _libc(), open_log()
        self.log = Path(log.name) if not isinstance(log, int) else None
        try:
            with _signals_held():
                self.process = subprocess.Popen(
                    command,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    preexec_fn=lambda: _detach_signals(parent, libc),  # harvest has no other thread yet
                )
                atexit.register(self.stop)  # registered before Prefect's handlers, so it runs after them
        finally:
            if not isinstance(log, int):
                log.close()

    def wait_ready(self, timeout: float) -> None:
        """Return once the server answers; first import what the flow will need (the server still boots)."""
        deadline = time.monotonic() + timeout
        for name in IMPORTED_WHILE_BOOTING:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        try:
            self._wait_ready(deadline, timeout)
        finally:
            KnownDatabase.release(self.upkeep)
            self.upkeep = None

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        import httpx  # here, not at the top: the server starts ~45 ms sooner

        with httpx.Client() as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"Prefect's temporary server exited with code {self.process.returncode}"
                        + (f"; its output is in {self.log}" if self.log else "")
                    )
                try:
                    if client.get(f"{self.url}/health", timeout=2).status_code == 200:
                        if self.remember and self.database is not None:
                            self.database.remember()
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise RuntimeError(f"Prefect's temporary server did not answer within {timeout:g} s")

    def stop(self) -> None:
        KnownDatabase.release(self.upkeep)
        self.upkeep = None
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
