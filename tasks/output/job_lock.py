"""One run per job and output directory at a time.

Two runs of one job on one output would both pay for every page. The lock is an `flock` on
`<output>/.harvest-<job>.lock`: the kernel releases it when its process dies, however it dies, so a lock left by
`kill -9` or a power cut is never mistaken for a running job (the file's text, which names the run, is then
just stale). Local file systems only: on NFS `flock` may not lock across machines.
"""

from __future__ import annotations

import fcntl
import os
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from harvest.tasks.output.manifest import RunManifest


class JobLocked(Exception):
    """Another process runs this job on this output; `holder` is what it wrote into the lock file."""

    def __init__(self, path: Path, holder: dict[str, str]) -> None:
        self.path = path
        self.holder = holder
        process = ", ".join(f"{k} {holder[k]}" for k in ("pid", "host") if holder.get(k))
        super().__init__(
            f"another harvest run of this job is running on this output: {_holding(holder)} "
            f"({process or 'no details'}; lock {path})"
        )


def _holding(holder: dict[str, str]) -> str:
    """What holds the lock, in the words `harvest runs` and raw/ use: the run's id and when it started (a
    resume: and when this process resumed it). A run is given its id when it starts paying; before that (its
    Prefect flow starting, earlier runs loading) there is none to name, and saying so beats a bare pid."""
    since = f"{holder['since'][:19]} UTC" if holder.get("since") else "a moment ago"
    if command := holder.get("command"):
        return f"`{command}`, since {since}"
    if run_id := holder.get("run_id"):
        started = f", started {holder['started'][:19]} UTC" if holder.get("started") else ""
        return f"run {run_id}{started}" + (f", resumed {since}" if holder.get("resumed") else "")
    return f"a run starting since {since}, not yet given a run id"


@dataclass
class JobLock:
    """Taken once per run (`flows.run.preflight.lock_job`): by `harvest run` before Prefect starts (the flow
    gets it with the prepared run), or by the flow itself in a deployment's run. A second `acquire` of the same job,
    in this process or another, is refused."""

    path: Path
    fd: int
    released: bool = False
    since: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    """When this process took the lock: kept by every `describe`, as the run's resume began then."""

    def describe(self, **facts: str) -> None:
        """Write who holds the lock (pid, host, run id) for the message a second run prints."""
        text = orjson.dumps(
            {"pid": str(os.getpid()), "host": socket.gethostname(), "since": self.since} | facts
        )
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, text, 0)

    def holds(self, run: RunManifest, resumed: bool = False) -> None:
        """Name `run` in the lock, once its manifest is on disk (`harvest runs` lists it): its id and start."""
        facts = {"run_id": run.run_id, "job": run.job, "started": run.started}
        self.describe(**facts, **({"resumed": "yes"} if resumed else {}))

    def release(self) -> None:
        if not self.released:
            self.released = True
            os.close(self.fd)  # closing the descriptor releases the flock


def _holder(fd: int) -> dict[str, str]:
    try:
        data = orjson.loads(os.pread(fd, 4096, 0) or b"{}")
    except orjson.JSONDecodeError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def acquire(path: Path) -> JobLock:
    """Take the job's lock, or raise JobLocked naming the run that holds it."""
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise JobLocked(path, holder) from None
    lock = JobLock(path, fd)
    lock.describe()
    return lock


def is_locked(path: Path) -> bool:
    """Whether some process (this one included: flock refuses a second open file of the same process too) holds
    the lock right now."""
    path = path.resolve()
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
