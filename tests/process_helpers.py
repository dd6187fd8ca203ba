"""Helpers of the tests that run `harvest run` as a real process, in its own process group like a cron job's, and
signal or kill it the way a terminal, a service manager or the OOM killer would."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import RunningSandbox
from tests.crawl_helpers import data_entries
from tests.endpoints import PINS
from tests.flow_helpers import (
    BIG_BALANCE,
    HARVEST,
    PYTHON,
    ROOT,
    SECRET_KEY,
    job_spec,
    subprocess_env,
    write_spec,
)

T = TypeVar("T")


def start_run(
    spec: Path,
    tmp_path: Path,
    api_url: str | None,
    *args: str,
    trace_imports: bool = False,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """`harvest run SPEC` in a new session (its own process group). `api_url`: the Prefect API to report to;
    None starts Prefect's temporary server, as a user without a configured Prefect does. `trace_imports`: the
    same entry point (`flows.cli`) under `python -X importtime`, so `imported(stderr)` tells what it imported
    (`messages(stderr)` is the rest of stderr). `env`: more environment variables."""
    extra = {"PREFECT_API_URL": api_url} if api_url else {}
    extra.update(env or {})
    env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, **extra)
    command = [str(HARVEST)]
    if trace_imports:
        command = [PYTHON, "-X", "importtime", "-m", "harvest.flows.cli"]
        env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen(
        [*command, "run", str(spec), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, signalled or killed whole like a cron job's
        # SIGHUP at its default as a terminal's session starts it: under `nohup make test` (or a CI runner that
        # ignores SIGHUP) the ignore is inherited, and harvest keeps an ignored SIGHUP ignored, as it should
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )


def pasted(command: str, tmp_path: Path, api_url: str) -> tuple[int, str, str]:
    """A command harvest printed, pasted into a shell as printed (`bash -c`), with the key and the Prefect API
    in the environment as a `harvest run` of the test has them: exit code, stdout and stderr."""
    env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=api_url)
    done = subprocess.run(
        ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=FINISH_TIMEOUT
    )
    return done.returncode, done.stdout, done.stderr


def imported(stderr: str) -> set[str]:
    """The modules a process run with `-X importtime` imported."""
    return {line.split("|")[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def imported_packages(stderr: str) -> set[str]:
    """The top-level packages of `imported`."""
    return {module.split(".")[0] for module in imported(stderr)}


def messages(stderr: str) -> list[str]:
    """The lines of stderr that are not `-X importtime`'s."""
    return [line for line in stderr.splitlines() if not line.startswith("import time:")]


FINISH_TIMEOUT = 300.0
"""How long a run may take to end before the test calls it hung: a hang guard, not a bound on the run's time (a
run on a machine busy with a second test session takes several times as long as on a quiet one)."""


def finish(proc: subprocess.Popen[str], timeout: float = FINISH_TIMEOUT) -> tuple[int, str, str]:
    """Exit code, stdout and stderr, once both pipes are closed (every process holding them ended)."""
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


class Watched:
    """A started run whose stdout and stderr are read as they come (two threads), so that a test can wait for a
    line on stderr (an event the run reports) and still have all of both at the end (`finish`)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self._lines: dict[str, list[str]] = {"out": [], "err": []}
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(stream, name), daemon=True)
            for stream, name in ((proc.stdout, "out"), (proc.stderr, "err"))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[str] | None, name: str) -> None:
        assert stream is not None, "start the process with stdout and stderr piped"
        for line in stream:
            with self._changed:
                self._lines[name].append(line)
                self._changed.notify_all()
        with self._changed:
            self._lines[name].append("")  # EOF
            self._changed.notify_all()

    def wait_for_stderr(self, text: str, timeout: float = FINISH_TIMEOUT) -> str:
        """Until a line of stderr holds `text`; that line. Fails when stderr ends without it."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [line for line in self._lines["err"] if text in line]
                if found:
                    return found[0]
                assert self._lines["err"][-1:] != [""], (
                    f"stderr ended without {text!r}: {''.join(self._lines['err'])}"
                )
                assert time.monotonic() < deadline, f"no {text!r} on stderr: {''.join(self._lines['err'])}"
                self._changed.wait(timeout=0.1)

    def finish(self, timeout: float = FINISH_TIMEOUT) -> tuple[int, str, str]:
        """Exit code, stdout and stderr, once the process ended and both pipes are closed. A process that does
        not end in `timeout` is killed (with its process group when it leads one) and the test fails with what
        it wrote, rather than leaving it running and saying nothing of where it stood."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            for reader in self._readers:
                reader.join(timeout=10)
            said = "".join(self._lines["err"])[-4000:]
            raise AssertionError(
                f"the process did not end within {timeout:g} s (killed); stderr:\n{said}"
            ) from None
        for reader in self._readers:
            reader.join(timeout=timeout)
            assert not reader.is_alive(), "a process still holds the run's output open"
        return self.proc.returncode, "".join(self._lines["out"]), "".join(self._lines["err"])

    def _kill(self) -> None:
        try:
            leads_group = os.getpgid(self.proc.pid) == self.proc.pid
            (os.killpg if leads_group else os.kill)(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def wait_for_requests(
    sb: RunningSandbox, count: int, proc: subprocess.Popen[str], path: str | None = None
) -> None:
    """Until the sandbox answered `count` data requests (to the documented `path` only, when given); a first
    start of Prefect's temporary server (its database created) takes a minute on a busy machine."""
    deadline = time.monotonic() + 180
    while sum(path in (None, e.path) for e in data_entries(sb)) < count:
        assert proc.poll() is None, f"the run ended before it was signalled: {proc.communicate()}"
        assert time.monotonic() < deadline, "the run never got going"
        time.sleep(0.005)


def wait_until(
    check: Callable[[], T], proc: subprocess.Popen[str], what: str, timeout: float = FINISH_TIMEOUT
) -> T:
    """Until `check()` gives something true (returned); fails saying `what` when the run ends first or the time
    is up. What a test waits for is a fact it can see (a file, a line, a process), never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.001)
    return found


PR_SET_PDEATHSIG = 1


def dies_with_parent() -> None:
    """A `preexec_fn`: the kernel SIGKILLs the child when the thread that started it ends (Linux's parent-death
    signal), so a server a test started ends with the test process, however it ends (finalizers that never ran,
    a killed pytest worker). A change of user clears it: `setpriv --pdeathsig KILL` sets it after the change."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def children(pid: int) -> list[int]:
    """The processes `pid` started (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def server_port(pid: int) -> int:
    """The port of Prefect's temporary server, process `pid`: the `--port` of its command line."""
    argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
    return int(argv[argv.index(b"--port") + 1])


def alive(pid: int) -> bool:
    """Running: neither gone nor a zombie waiting to be reaped."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def signal_mask(pid: int, field: str) -> int:
    """A signal set of /proc/<pid>/status (`ShdPnd`: pending for the process, `SigCgt`: caught by a handler,
    `SigIgn`: ignored) as a bit mask."""
    for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no {field} in the status of process {pid}")


def signal_bits(*signals: int) -> int:
    """The bit mask of `signal_mask` holding `signals`."""
    return sum(1 << (s - 1) for s in signals)


def signal_group(proc: subprocess.Popen[str], sig: int) -> float:
    """Send `sig` to the run's whole process group, as a terminal's Ctrl-C does; the monotonic time sent."""
    os.killpg(proc.pid, sig)
    return time.monotonic()


def harvest_importing(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`harvest ARGS` in a process of its own (it succeeded), and the modules it imported."""
    proc = subprocess.run(
        [PYTHON, "-X", "importtime", "-m", "harvest.flows.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc, imported(proc.stderr)


SWITCHED_NIGHT = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)}, page_size=4)
"""Three pins queries of three pages, four items each: the night `killed_then_switched_to_dask` kills."""


def killed_then_switched_to_dask(
    sb: Any, output: Path, tmp_path: Path, api_url: str, dask_address: str, **spec: Any
) -> Path:
    """A night of `SWITCHED_NIGHT` (`sb`: a gated sandbox serving it) killed -9 on the local runner after ten of
    its twelve pages, one request at a time (its own Parquet file left torn), then its spec's `runner:` changed
    to the Dask cluster at `dask_address` and the gate opened: the spec's path, for the resume."""
    from tests.sandbox_gate import settle

    queries = [{"id": "pins", "endpoint": PINS, "for_each": {"query": ["oak", "elm", "ash"]}}]
    local = job_spec(sb.base_url, output, queries, name="switched", credits=1000, concurrency=1, **spec)
    path = write_spec(tmp_path, local)
    sb.gate.close_after(10)
    run = start_run(path, tmp_path, api_url)
    sb.gate.wait_frozen(run)
    signal_group(run, signal.SIGKILL)
    finish(run)
    write_spec(tmp_path, {**local, "runner": {"kind": "dask", "address": dask_address, "round_pages": 1}})
    sb.gate.open()
    settle(sb)
    return path
