"""SIGTERM and SIGHUP act as Ctrl-C at any moment of `harvest run`, start-up included: what Kubernetes, ECS,
systemd and a Prefect worker's cancel send (SIGTERM), and a closed terminal or SSH session (SIGHUP).

One job, one output directory, signalled at three moments as a real process on Prefect's temporary server
(the default setup) against the sandbox over HTTP: the first moment harvest's own code runs (read from the
kernel: the process catches SIGTERM), while Prefect's temporary server starts, and mid-paging. Each time: one
line, no traceback, exit 130, nothing paid twice; then the same command resumes and completes the job.
Python's own defaults would end the process silently with 143 (SIGHUP: 129) in the first seconds.

Then the signals that do not come out as an interrupt where they land: inside a compiled module's init
(duckdb's) and inside a library's callback that turns the interrupt into an error it swallows (pydantic's in
Prefect's start). Each is sent at that exact moment by a `sitecustomize` the process runs first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import full_crawl
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries, paid_twice
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, HARVEST, SECRET_KEY, job_spec, key_set, subprocess_env, write_spec
from tests.process_helpers import (
    Watched,
    children,
    finish,
    signal_bits,
    signal_group,
    signal_mask,
    start_run,
    wait_gone,
    wait_until,
)
from tests.sandbox_gate import WAIT, gated

PARAMS = {"query": "oak desk"}
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (12, 12)}, page_size=5)
STOPPING = "stopping; letting the requests in flight land"


def job(base_url: str, output: Path) -> dict[str, Any]:
    return job_spec(
        base_url,
        output,
        [{"id": "pins", "endpoint": PINS, "params": PARAMS}],
        name="signalled",
        credits=1000,
        concurrency=2,
    )


def start_like_nohup(spec: Path, tmp_path: Path) -> subprocess.Popen[str]:
    """`nohup harvest run SPEC`: SIGHUP ignored from the start (and its own process group, as `start_run`)."""
    return subprocess.Popen(
        [str(HARVEST), "run", str(spec)],
        env=subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )  # fmt: skip


def interrupt_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "interrupted" in line]


@pytest.mark.scenario
def test_sigterm_and_sighup_at_any_moment_stop_a_run_like_ctrl_c_and_the_same_command_resumes(
    tmp_path: Path,
) -> None:
    output = tmp_path / "out"
    caught = signal_bits(signal.SIGTERM)
    with gated(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))

        # 1. the first moment harvest's code runs: the process catches SIGTERM (a nohup'd SIGHUP stays ignored)
        first = start_like_nohup(spec, tmp_path)
        wait_until(lambda: signal_mask(first.pid, "SigCgt") & caught, first, "caught SIGTERM")
        hangup_ignored = signal_mask(first.pid, "SigIgn") & signal_bits(signal.SIGHUP)
        signal_group(first, signal.SIGTERM)
        code1, _, err1 = finish(first)

        # 2. while Prefect's temporary server starts (the process that answers the run's flow is up)
        second = start_run(spec, tmp_path, None)
        (server,) = wait_until(lambda: children(second.pid), second, "started Prefect's temporary server")
        signal_group(second, signal.SIGHUP)
        code2, _, err2 = finish(second)
        server_gone = wait_gone(server, WAIT)
        paid_before_paging = len(data_entries(sb))

        # 3. mid-paging: frozen at the sandbox's door, so what it sends after its stop line is what was in flight
        sb.gate.close_after(4, path=PINS)
        third = Watched(start_run(spec, tmp_path, None))
        sb.gate.wait_frozen(third.proc)
        signal_group(third.proc, signal.SIGTERM)
        third.wait_for_stderr(STOPPING)
        sb.gate.open()
        code3, _, err3 = third.finish()
        manifests = all_manifests(OutputLayout(output))
        runs = [(m.run_id, m.status, m.started) for m in manifests]
        assert len(manifests) == 1, (
            f"one run, the third: {runs}\n2nd ({code2}):\n{err2}\n3rd ({code3}):\n{err3}"
        )
        (stopped,) = manifests

        # 4. the same command resumes
        code4, out4, err4 = finish(start_run(spec, tmp_path, None))
        entries = data_entries(sb)
    assert code1 == 130 and len(interrupt_lines(err1)) == 1 and "Traceback" not in err1, err1
    assert len(err1.strip().splitlines()) == 1, err1
    assert hangup_ignored, "harvest took over a SIGHUP its parent ignored (nohup)"
    assert code2 == 130 and "Traceback" not in err2, err2
    assert interrupt_lines(err2) == err2.strip().splitlines() and len(interrupt_lines(err2)) == 1, err2
    assert server_gone, "Prefect's temporary server outlived harvest"
    assert paid_before_paging == 0, "nothing is sent before the run starts"
    assert code3 == 130 and "Traceback" not in err3, err3
    assert f"SIGTERM: {STOPPING}" in err3 and err3.count("resumes it") == 1 and stopped.run_id in err3, err3
    assert stopped.status == "interrupted" and stopped.loaded
    assert code4 == 0, out4 + err4
    (done,) = all_manifests(OutputLayout(output))
    assert done.run_id == stopped.run_id and done.status == "complete" and done.resumes == 1
    assert paid_twice(entries) == 0, "a clean stop lets every page in flight land: nothing is paid twice"
    expected = {(PARAMS["query"], pin["id"]) for pin in full_crawl(PINS, PARAMS, CONFIG)["pins"]}
    assert key_set(output / "harvest.duckdb", "pinboard_pins") == expected


SIGNAL_IN_INIT = """
import _imp, os, signal, sys

def _profile(frame, event, arg):
    \"\"\"SIGTERM to this process from the first Python code _duckdb's init runs (its own imports).\"\"\"
    if event == "c_call" and arg is _imp.exec_dynamic and frame.f_locals["args"][0].__name__ == "_duckdb":
        sys.setprofile(_in_init)

def _in_init(frame, event, arg):
    if event == "call":
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)

sys.setprofile(_profile)
"""

SIGNAL_IN_PREFECT_SETTINGS = """
import os, signal, sys
_calls = [0]

def _profile(frame, event, arg):
    \"\"\"HOOK_SIGNAL (SIGTERM) to this process from the HOOK_CALL-th call of Prefect's settings serializer
    (pydantic calls it): the first is in `import prefect`, later ones as Prefect starts the flow.\"\"\"
    if event == "call" and frame.f_code.co_name == "_ser_model":
        _calls[0] += 1
        if _calls[0] == int(os.environ.get("HOOK_CALL", "1")):
            sys.setprofile(None)
            os.kill(os.getpid(), getattr(signal, os.environ.get("HOOK_SIGNAL", "SIGTERM")))

sys.setprofile(_profile)
"""


def signalled_from(tmp_path: Path, hook: str) -> dict[str, str]:
    """The environment of a process whose interpreter runs `hook` first (a sitecustomize on PYTHONPATH)."""
    folder = tmp_path / "hook"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(hook)
    return {"PYTHONPATH": str(folder)}


def signalled_run(tmp_path: Path, hook: str, api_url: str | None, **env: str) -> tuple[int, str, str, int]:
    """`harvest run` of the job, signalled by `hook` (`signalled_from`): exit code, stdout, stderr and the data
    requests the sandbox answered."""
    with gated(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, tmp_path / "out"))
        env = {**signalled_from(tmp_path, hook), **env}
        code, out, err = finish(start_run(spec, tmp_path, api_url, env=env))
        return code, out, err, len(data_entries(sb))


def test_a_signal_while_duckdb_initialises_stops_the_run_with_its_line_not_an_abort(tmp_path: Path) -> None:
    """duckdb's compiled init imports Python modules, so a signal's KeyboardInterrupt can be raised inside it:
    placed as here (the init's first Python code), an unheld interrupt is lost and the run goes on to pay and
    land (exit 0); at other moments it aborts the process (exit 134, no line) or fails the import. `harvest run`
    imports duckdb after its command began (deciding the run's start), before anything is sent."""
    code, out, err, sent = signalled_run(tmp_path, SIGNAL_IN_INIT, None)
    assert code == 130, (code, out, err)
    assert err.strip().splitlines() == [
        "error: interrupted by SIGTERM before the run started: nothing was sent"
    ], err
    assert sent == 0


@pytest.mark.scenario
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_an_imported_library_swallowed_stops_the_run_before_it_pays(
    prefect_api_url: str, tmp_path: Path, signal_name: str
) -> None:
    """`import prefect` builds its settings with pydantic, which calls Prefect's serializer: a KeyboardInterrupt
    raised there comes out of pydantic as a ValidationError, which Prefect's plugin start catches and logs:
    unremembered, the signal is lost and the run pays and lands every page (exit 0). harvest remembers it (a
    Ctrl-C as a SIGTERM), so the run stops before anything is paid, and says so."""
    code, out, err, sent = signalled_run(
        tmp_path, SIGNAL_IN_PREFECT_SETTINGS, prefect_api_url, HOOK_SIGNAL=signal_name
    )
    assert code == 130, (code, out, err)
    assert f"harvest: {signal_name}: stopping before anything is paid" in err, err
    assert "Failed to initialize plugins" not in err and "Traceback" not in err, err  # Prefect's, about it
    assert sent == 0, err
    (stopped,) = all_manifests(OutputLayout(tmp_path / "out"))
    assert stopped.status == "interrupted" and stopped.credits_spent == 0


@pytest.mark.scenario
def test_a_signal_an_imported_library_swallowed_is_not_held_by_the_wait_for_prefect(
    free_port: int, tmp_path: Path
) -> None:
    """The same lost SIGTERM with a configured Prefect API that does not answer: the run would wait for it
    (a Prefect restart, up to HARVEST_PREFECT_WAIT_SECONDS) before its interrupt handler learned of the
    signal; a service manager stopping harvest waits meanwhile, then kills it. It stops before the wait."""
    code, out, err, sent = signalled_run(
        tmp_path,
        SIGNAL_IN_PREFECT_SETTINGS,
        f"http://127.0.0.1:{free_port}/api",  # nothing listens there
        HARVEST_PREFECT_WAIT_SECONDS="600",
    )
    assert code == 130, (code, out, err)
    assert "waiting up to" not in err and "interrupted" in err, err
    assert sent == 0, err


@pytest.mark.scenario
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_a_library_turned_into_its_own_error_is_an_interrupt_not_a_failed_run(
    prefect_api_url: str, tmp_path: Path, signal_name: str
) -> None:
    """A later call of the same serializer, as Prefect starts the flow: the interrupt comes out of pydantic as
    PydanticSerializationError, which reaches harvest. A SIGTERM is a stop (exit 130, resumable), not "the run
    failed" (exit 1) in a service manager's journal; so is a Ctrl-C, known by the KeyboardInterrupt pydantic
    gives as the error's cause."""
    code, out, err, sent = signalled_run(
        tmp_path, SIGNAL_IN_PREFECT_SETTINGS, prefect_api_url, HOOK_CALL="5", HOOK_SIGNAL=signal_name
    )
    assert code == 130, (code, out, err)
    assert "(PydanticSerializationError on its way out)" in err and "the run failed" not in err, err
    assert sent == 0, err


SERVE_STOPPED = "stopped serving; the deployments' schedules are paused"
SERVE_STOPPED_VIA = "stopped serving (PydanticSerializationError on its way out); the deployments' schedules"


@pytest.mark.scenario
@pytest.mark.parametrize(
    ("signal_name", "call", "last_line"),
    [
        ("SIGTERM", "1", SERVE_STOPPED),
        ("SIGTERM", "5", SERVE_STOPPED_VIA),
        ("SIGINT", "1", SERVE_STOPPED),
        ("SIGINT", "5", SERVE_STOPPED_VIA),
        ("SIGINT", "9", SERVE_STOPPED_VIA),
    ],
    ids=[
        "sigterm-swallowed",
        "sigterm-as-an-error",
        "ctrl-c-swallowed",
        "ctrl-c-as-an-error",
        "ctrl-c-unchained",
    ],
)
def test_harvest_serve_stops_on_a_signal_an_imported_library_swallowed(
    prefect_api_url: str, tmp_path: Path, signal_name: str, call: str, last_line: str
) -> None:
    """The same lost SIGTERM or Ctrl-C in `harvest serve` (a service manager stopping it as it starts):
    unremembered, serve serves on until the next signal; it stops before its runner starts, as on any signal
    (exit 0: serving ended as asked, the schedules paused). At the serializer's 5th call the interrupt comes out
    as pydantic's PydanticSerializationError instead (its cause the KeyboardInterrupt); at the 9th, the same
    error without the cause: a stop too, not exit 1 with a traceback."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    with gated(CONFIG) as sb:
        nightly = {**job(sb.base_url, tmp_path / "out"), "schedule": {"cron": "0 3 * * *"}}
        write_spec(jobs, nightly, "nightly.yaml")
        env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=prefect_api_url)
        env.update(
            signalled_from(tmp_path, SIGNAL_IN_PREFECT_SETTINGS), HOOK_SIGNAL=signal_name, HOOK_CALL=call
        )
        serving = subprocess.Popen(
            [str(HARVEST), "serve", str(jobs)], cwd=tmp_path, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        code, out, err = Watched(serving).finish(timeout=120)
        sent = len(data_entries(sb))
    assert code == 0, (code, out, err)
    assert err.strip().splitlines()[-1].startswith(last_line), err
    assert "PydanticSerializationError:" not in err and "╭" not in err, err  # no traceback of serve's own
    assert "Failed to initialize plugins" not in err and "Traceback" not in err, err  # nor Prefect's
    assert sent == 0


HELD_IMPORT = """
import copy, importlib, importlib.util, pickle, signal, sys
from importlib.machinery import ExtensionFileLoader
from harvest.flows import compiled_imports

compiled_imports.hold_signals({signal.SIGTERM})
import mmap  # a compiled module not imported yet
spec = importlib.util.find_spec("mmap")
assert type(mmap.__loader__) is not ExtensionFileLoader, "the init was not held"
assert isinstance(mmap.__loader__, ExtensionFileLoader) and spec == importlib.util.find_spec("mmap")
assert pickle.loads(pickle.dumps(spec)) == spec and copy.deepcopy(spec) == spec
importlib.reload(mmap)
print("ok")
"""


def test_a_held_compiled_import_leaves_its_module_as_python_s_own_would() -> None:
    """Libraries look at a module's loader and spec (isinstance, equality, pickling to Dask workers): the
    loader that holds the signals must look like Python's own."""
    done = subprocess.run([sys.executable, "-c", HELD_IMPORT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


LONG_QUERY = "SELECT count(*) FROM range(3000000000) r WHERE r.range % 7 = 3"
"""~35 s of both cores here: still running when the signal comes."""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_signal_during_a_long_query_stops_harvest_sql_with_its_line_not_a_traceback(
    tmp_path: Path, signal_name: str
) -> None:
    """DuckDB answers the interrupt by raising its own "RuntimeError: Query interrupted", and about one time
    in twenty it never returns at all: an analyst's Ctrl-C on a slow `harvest sql` (or a cron's SIGTERM on
    `harvest load`) is a stop, one line and exit 130 within seconds, not a traceback or a process only a kill
    ends (here DuckDB hung in about half the stops)."""
    output = tmp_path / "job"
    output.mkdir()
    duckdb.connect(str(output / "harvest.duckdb")).close()
    proc = subprocess.Popen(
        [str(HARVEST), "sql", str(output), LONG_QUERY], text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    db = str(output / "harvest.duckdb")
    fds = Path(f"/proc/{proc.pid}/fd")

    def opened() -> bool:
        try:
            return any(os.readlink(fd) == db for fd in fds.iterdir())
        except FileNotFoundError:  # a descriptor closed while listed
            return False

    wait_until(opened, proc, "harvest sql opened the database", timeout=60)
    start = cpu_seconds(proc.pid)
    wait_until(lambda: cpu_seconds(proc.pid) > start + 0.5, proc, "the query ran", timeout=60)
    signal_group(proc, getattr(signal, signal_name))
    code, out, err = finish(proc, timeout=30)
    assert code == 130, (code, out, err)
    assert "Traceback" not in err and len(interrupt_lines(err)) == 1, err
    assert err.startswith(
        f"harvest: {signal_name}: interrupted (RuntimeError on its way out)"
    ) or err.startswith(f"harvest: {signal_name}: interrupted; DuckDB had not stopped 10 s later"), err
