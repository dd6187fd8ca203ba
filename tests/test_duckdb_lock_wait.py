"""A load waits for `harvest.duckdb` while another process holds it (HARVEST_DUCKDB_LOCK_WAIT_SECONDS).

Real `harvest run` processes against the sandbox; the other process is a dashboard that polls the file (opens it
read-only, runs a query, closes it, sleeps briefly, again) or a notebook that keeps it open. A load that tries once
meets the dashboard's query ~95% of the time and leaves the night unloaded; one that tries again loads it.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from harvest.tasks.database.connection import write_connection
from tests.endpoints import PINS
from tests.flow_helpers import (
    BIG_BALANCE,
    HARVEST,
    PYTHON,
    SECRET_KEY,
    expected_keys,
    held_duckdb,
    job_spec,
    key_set,
    rows,
    subprocess_env,
    write_spec,
)
from tests.process_helpers import Watched, finish, start_run

TOPICS = ["oak desk", "elm chair"]
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)}, page_size=4)
WAIT = {"HARVEST_DUCKDB_LOCK_WAIT_SECONDS": "30"}

POLLER = """
import sys, threading, time, duckdb
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
polls = refused = 0
while not done.is_set():
    try:
        con = duckdb.connect(sys.argv[1], read_only=True)
    except duckdb.IOException:  # harvest's load holds the file: the dashboard tries again
        refused += 1
    else:
        con.execute("SELECT count(*) FROM duckdb_tables()").fetchall()
        time.sleep(0.4)  # a slow query
        con.close()
        polls += 1
        if polls == 1:
            print("polling", flush=True)
    time.sleep(0.02)
print(polls, refused, flush=True)
"""


@contextmanager
def dashboard(db: Path) -> Iterator[list[int]]:
    """A process polling `db` until the block ends; then [its polls, the opens harvest's load refused]."""
    counts: list[int] = []
    poller = subprocess.Popen(
        [PYTHON, "-c", POLLER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert poller.stdout is not None and poller.stdout.readline().strip() == "polling"
        yield counts
    finally:
        out, _ = poller.communicate("", timeout=60)
    assert poller.returncode == 0
    counts.extend(int(n) for n in out.split())


def _spec(tmp_path: Path, base_url: str) -> Path:
    queries = [{"id": "pins", "endpoint": PINS, "for_each": {"query": TOPICS}}]
    return write_spec(tmp_path, job_spec(base_url, tmp_path / "out", queries, name="nightly", credits=1_000))


def test_a_night_is_loaded_while_a_dashboard_polls_the_database(prefect_api_url: str, tmp_path: Path) -> None:
    db = tmp_path / "out" / "harvest.duckdb"
    with write_connection(db):  # an earlier night's file, which the dashboard reads
        pass
    with running(CONFIG) as sb, dashboard(db) as counts:
        code, out, err = finish(start_run(_spec(tmp_path, sb.base_url), tmp_path, prefect_api_url, env=WAIT))
    assert code == 0, out + err
    assert "not loaded into DuckDB yet" not in out + err
    for table, keys in expected_keys([(PINS, {"query": t}) for t in TOPICS], CONFIG).items():
        assert key_set(db, table) == set(keys), table
    assert rows(db, "SELECT status FROM runs") == [("complete",)]
    polls, _refused = counts
    assert polls >= 3, counts  # it kept polling through the run
    assert err.count("waiting up to 30 s for it to close it") <= 1, err  # said once, if the first try met it


def test_a_night_whose_database_stays_held_past_the_wait_exits_1_and_loads_later(
    prefect_api_url: str, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    db = output / "harvest.duckdb"
    output.mkdir()
    with running(CONFIG) as sb:
        spec = _spec(tmp_path, sb.base_url)
        with held_duckdb(db) as notebook:
            started = time.monotonic()
            env = {"HARVEST_DUCKDB_LOCK_WAIT_SECONDS": "1"}
            code, out, err = finish(start_run(spec, tmp_path, prefect_api_url, env=env))
            held_for = time.monotonic() - started
    assert code == 1, out + err  # a session left open keeps the tables stale: cron must hear it
    assert "waiting up to 1 s for it to close it" in err and f"PID {notebook.pid})" in err, err
    assert f"{db} is still, after waiting 1 s, open in another process" in err, err
    assert "not loaded into DuckDB yet" in err and held_for > 1
    (manifest,) = (output / "raw").glob("*/manifest.json")
    assert orjson.loads(manifest.read_bytes())["loaded"] is False
    loaded = subprocess.run(
        [str(HARVEST), "load", str(output)],
        env=subprocess_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert loaded.returncode == 0, loaded.stderr
    for table, keys in expected_keys([(PINS, {"query": t}) for t in TOPICS], CONFIG).items():
        assert key_set(db, table) == set(keys), table


@pytest.mark.scenario
def test_a_second_signal_ends_the_wait_at_once(prefect_api_url: str, tmp_path: Path) -> None:
    output = tmp_path / "out"
    db = output / "harvest.duckdb"
    output.mkdir()
    with running(CONFIG) as sb:
        spec = _spec(tmp_path, sb.base_url)
        with held_duckdb(db):
            env = {"HARVEST_DUCKDB_LOCK_WAIT_SECONDS": "600"}
            run = Watched(start_run(spec, tmp_path, prefect_api_url, env=env))
            run.wait_for_stderr("waiting up to 600 s for it to close it")
            run.proc.send_signal(signal.SIGTERM)  # a service manager's stop: the load is being finished
            run.wait_for_stderr("finishing the load into DuckDB")
            asked = time.monotonic()
            run.proc.send_signal(signal.SIGINT)  # and Ctrl-C: leave it for later
            code, out, err = run.finish(timeout=120)
            stopped_in = time.monotonic() - asked
    assert code == 130, out + err
    assert stopped_in < 30, stopped_in  # not the 600 s wait (the rest is Prefect's end, on a busy machine)
    (manifest,) = (output / "raw").glob("*/manifest.json")
    assert orjson.loads(manifest.read_bytes())["loaded"] is False
