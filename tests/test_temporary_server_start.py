"""Prefect's temporary server skips its database upkeep (migrations, block registration) once a start of the
same Prefect did it for the same database (`flows.orchestrator.temporary_server.KnownDatabase`), and does it again whenever
that may no longer hold: a new database, a Prefect upgrade, a database or upkeep the user configured."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from harvest.flows.orchestrator import temporary_server
from harvest.flows.orchestrator.temporary_server import LEAN_START, KnownDatabase
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, HARVEST, PYTHON, SECRET_KEY, key_set, one_query, subprocess_env
from tests.process_helpers import children, finish


def _database(home: Path, revision: str) -> None:
    with sqlite3.connect(home / "prefect.db") as db:
        db.execute("CREATE TABLE IF NOT EXISTS alembic_version (version_num TEXT NOT NULL)")
        db.execute("DELETE FROM alembic_version")
        db.execute("INSERT INTO alembic_version VALUES (?)", (revision,))


def test_the_upkeep_is_skipped_only_while_the_database_and_prefect_are_the_ones_it_was_done_for(
    tmp_path: Path,
) -> None:
    known = KnownDatabase(tmp_path, migrations="scripts-a")
    assert not known.current(), "no database yet"
    _database(tmp_path, "rev1")
    assert not known.current(), "a database no start of harvest's noted"
    known.remember()
    assert known.current()
    assert not KnownDatabase(tmp_path, migrations="scripts-b").current(), "Prefect brought new migrations"
    _database(tmp_path, "rev2")
    assert not known.current(), "the database moved on (another Prefect migrated it)"
    (tmp_path / "prefect.db").unlink()
    assert not known.current(), "the database is gone"


@pytest.mark.parametrize(
    "name", ["PREFECT_API_DATABASE_CONNECTION_URL", "PREFECT_SERVER_DATABASE_MIGRATE_ON_START"]
)
def test_a_database_or_upkeep_the_user_configured_is_left_to_prefect(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, "true")
    assert KnownDatabase.unless_configured() is None


def _cmdline(pid: int) -> bytes:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""


def _server_environment(proc_pid: int) -> dict[str, str]:
    """The environment of the temporary server harvest started (read from /proc while it runs).

    Only once the child runs uvicorn: between fork and exec it still has harvest's environment (a loaded machine
    made that window wide enough to be read once)."""
    deadline = time.monotonic() + 300  # a hang guard: a busy machine starts processes slowly
    while not (found := [pid for pid in children(proc_pid) if b"uvicorn" in _cmdline(pid)]):
        assert time.monotonic() < deadline, "harvest started no server"
        time.sleep(0.01)
    raw = (Path("/proc") / str(found[0]) / "environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


@pytest.mark.scenario
def test_a_second_run_on_the_same_prefect_home_starts_the_server_without_the_upkeep(tmp_path: Path) -> None:
    home = tmp_path / "prefect-home"
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (1, 1)})
    lean = dict(LEAN_START)
    env = {
        **subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY),
        "PREFECT_HOME": str(home),
    }  # no Prefect API
    seen = []
    with running(config) as sb:
        spec = one_query(tmp_path, sb.base_url, PINS, {"query": "desks"})
        for _ in range(2):
            proc = subprocess.Popen([str(HARVEST), "run", str(spec)], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)  # fmt: skip
            server = _server_environment(proc.pid)
            code, out, err = finish(proc, timeout=300)
            assert code == 0, (out, err)
            seen.append({name: server.get(name) for name in lean})
    assert seen[0] == dict.fromkeys(lean), "the first start migrates the new database and registers blocks"
    assert seen[1] == lean
    assert (home / temporary_server.MEMO_NAME).is_file()
    assert key_set(tmp_path / "out" / "harvest.duckdb", "pinboard_pins")


def test_the_server_log_is_rotated_past_its_cap_so_nightly_runs_do_not_fill_the_prefect_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "prefect-home"
    home.mkdir()
    monkeypatch.setenv("PREFECT_HOME", str(home))
    log = home / temporary_server.LOG_NAME
    older = home / (temporary_server.LOG_NAME + ".1")
    older.write_bytes(b"the oldest runs\n")
    log.write_bytes(b"x" * temporary_server.LOG_KEEP_BYTES)  # at the cap: kept
    for _ in range(2):
        out = temporary_server.open_log()
        assert not isinstance(out, int)
        out.write(b"one more start\n")
        out.close()
    assert older.read_bytes() == b"x" * temporary_server.LOG_KEEP_BYTES + b"one more start\n"
    assert log.read_bytes() == b"one more start\n"  # the second start found it past the cap
    assert sorted(p.name for p in home.iterdir()) == [log.name, older.name]  # nothing else piles up


@pytest.mark.scenario
def test_two_runs_starting_at_once_on_a_new_prefect_home_both_succeed(tmp_path: Path) -> None:
    """Two nightly jobs on one machine, the first night (or the first after a Prefect upgrade): both servers
    would migrate the one database at once, and the second died on a column the first had added (exit 3)."""
    home = tmp_path / "prefect-home"
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (1, 1)})
    env = {**subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY), "PREFECT_HOME": str(home)}
    with running(config) as sb:
        specs = []
        for job in ("a", "b"):
            (tmp_path / job).mkdir()
            specs.append(one_query(tmp_path / job, sb.base_url, PINS, {"query": f"desks {job}"}))
        procs = [
            subprocess.Popen(
                [str(HARVEST), "run", str(spec)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for spec in specs
        ]
        ended = [finish(proc, timeout=300) for proc in procs]
    for code, out, err in ended:
        assert code == 0, (out, err)
    for job in ("a", "b"):
        assert key_set(tmp_path / job / "out" / "harvest.duckdb", "pinboard_pins")


SIGNAL_IN_THE_FORK = """
import os, signal
from harvest.flows import stop_signals
for sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, stop_signals.like_ctrl_c)  # what the `harvest` process answers them with
# the group's SIGHUP reaching the server's process right after the fork, before its `setsid`
os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGHUP))
from harvest.flows.orchestrator.temporary_server import TemporaryServer
server = TemporaryServer()
server.wait_ready(120)
print("answered", flush=True)
server.stop()
"""


@pytest.mark.scenario
def test_a_signal_to_harvests_group_while_the_server_forks_prints_nothing_and_the_server_starts(
    tmp_path: Path,
) -> None:
    """`kill -HUP -<pgid>` (a closed terminal) landing between the server's fork and its own session reached
    the child while it ran Python's after-fork hooks with harvest's handlers: "Exception ignored in:
    <function _after_fork> ... Traceback ... KeyboardInterrupt" on harvest's stderr (a CI run caught it)."""
    env = {**subprocess_env(tmp_path), "PREFECT_HOME": str(tmp_path / "prefect-home")}
    done = subprocess.run([str(PYTHON), "-c", SIGNAL_IN_THE_FORK], env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "answered\n", "")
