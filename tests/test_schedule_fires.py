"""A schedule that fires by itself, as the nightly job's user meets it: a real `prefect server start` (its own
home, its scheduler service on), `harvest serve` of a spec with a 60 s interval (the shortest a spec allows),
and nobody triggering anything. The test waits until the server's scheduler has created a run
(`auto_scheduled`), the serving process has run it to Completed and its records are in the job's DuckDB; then
SIGTERM (a service manager's stop) ends `harvest serve` the way Ctrl-C does.

This is what `make upgrade` relies on to catch a dependency that breaks scheduling before it is locked: with
SQLAlchemy 2.1 under prefect 3.8.8 the server's scheduler fails every loop (`Can't evaluate bulk DML
statement`) and no run ever comes; the server log's error fails the test at once (docs/decisions.md,
"Recurring runs").
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.conftest import TESTS_NEVER_PHONE_HOME
from tests.crawl_helpers import data_entries
from tests.endpoints import PINS
from tests.flow_helpers import (
    BIG_BALANCE,
    HARVEST,
    ROOT,
    SECRET_KEY,
    job_spec,
    rows,
    subprocess_env,
    write_spec,
)
from tests.net_helpers import free_port, wait_until_serving

CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 2)}, page_size=4)
JOB = "every-minute"
HANG_GUARD = 420.0
"""How long the first scheduled run may take to complete: the interval (60 s), the runner's poll (10 s) and a
flow run's process start, several times over on a loaded machine. Only a schedule that never fires waits
this long (a scheduler that fails says so in the server's log, and the test stops there)."""
SCHEDULER_FAILURE = re.compile(r"\| ERROR .*\bschedule_(recent_)?deployments\b")
SCHEDULER_FAILURES_SEEN = 3
"""Failed loops of the server's scheduler after which the test stops waiting: three that a busy machine does not
explain (a locked SQLite database or a timeout may pass) are a scheduler that cannot work."""
PASSING = ("OperationalError", "TimeoutError")
SCHEDULER_LOOP_SECONDS = "10"
"""The server's scheduler loop (Prefect's default: 60 s), so that a failing scheduler shows within ~30 s."""
EXCEPTION_LINE = re.compile(r"^[\w.]+(Error|Exception)\b")


@dataclass(frozen=True)
class PrefectServer:
    url: str
    log: Path

    def scheduler_failing(self) -> str | None:
        """What the scheduler's failures in the server log say, once they are more than passing ones."""
        lines = self.log.read_text(errors="replace").splitlines()
        failures = []
        for at, line in enumerate(lines):
            if SCHEDULER_FAILURE.search(line):
                why = next((later for later in lines[at:] if EXCEPTION_LINE.match(later)), "")
                if not any(passing in why for passing in PASSING):
                    failures.append(f"{line}\n{why}")
        if len(failures) < SCHEDULER_FAILURES_SEEN:
            return None
        return f"{len(failures)} failed scheduler loops; the first: {failures[0]}"


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """`prefect server start` as a user runs it (the venv's prefect, its scheduler on, no UI), on a free port of
    127.0.0.1 with its own Prefect home and analytics off."""
    home = tmp_path_factory.mktemp("prefect-server-home")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        TESTS_NEVER_PHONE_HOME,
        PREFECT_HOME=str(home),
        PREFECT_SERVER_LOGGING_LEVEL="INFO",
        PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS=SCHEDULER_LOOP_SECONDS,
    )
    log = home / "server.log"
    with log.open("wb") as sink:
        server = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "prefect"), "server", "start", "--host", "127.0.0.1",
             "--port", str(port), "--no-ui", "--analytics-off"],
            env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/api"
    try:
        # a new database is migrated first: a minute or more on a busy machine
        wait_until_serving(f"{url}/health", server, timeout=300)
        yield PrefectServer(url, log)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=60)


def _deployment(api: httpx.Client) -> dict[str, Any] | None:
    answer = api.get(f"/deployments/name/collect_job/{JOB}")
    return answer.json() if answer.status_code == 200 else None


def _flow_runs(api: httpx.Client, deployment_id: str) -> list[dict[str, Any]]:
    answer = api.post("/flow_runs/filter", json={"flow_runs": {"deployment_id": {"any_": [deployment_id]}}})
    answer.raise_for_status()
    return list(answer.json())


def _first_scheduled_run_completes(
    api: httpx.Client, server: PrefectServer, serving: subprocess.Popen[str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Until a run the scheduler created (no one triggered it) is Completed: that run and every run of the
    deployment. Fails at once when the server logs an error or `harvest serve` ends."""
    deadline = time.monotonic() + HANG_GUARD
    while True:
        failing = server.scheduler_failing()
        assert failing is None, f"the Prefect server's scheduler fails (see its log {server.log}):\n{failing}"
        assert serving.poll() is None, f"harvest serve ended: {serving.communicate()}"
        deployment = _deployment(api)
        runs = _flow_runs(api, deployment["id"]) if deployment else []
        done = [r for r in runs if r["auto_scheduled"] and r["state"]["type"] == "COMPLETED"]
        if done:
            return done[0], runs
        failed = [r for r in runs if r["state"]["type"] in ("FAILED", "CRASHED")]
        assert not failed, f"a scheduled run did not complete: {failed[0]['state']}"
        assert time.monotonic() < deadline, f"no scheduled run completed within {HANG_GUARD:g} s: {runs}"
        time.sleep(1)


@pytest.mark.scenario
def test_a_served_interval_schedule_fires_by_itself_and_lands_its_records(
    prefect_server: PrefectServer, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    with running(CONFIG) as sb, httpx.Client(base_url=prefect_server.url, timeout=60) as api:
        queries = [{"id": "pins", "endpoint": PINS, "params": {"query": "oak desk"}}]
        spec = write_spec(
            tmp_path, job_spec(sb.base_url, output, queries, name=JOB, schedule={"interval": 60})
        )
        env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=prefect_server.url)
        serving = subprocess.Popen(
            [str(HARVEST), "serve", str(spec)], cwd=tmp_path, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            fired, runs = _first_scheduled_run_completes(api, prefect_server, serving)
        finally:
            serving.send_signal(signal.SIGTERM)  # a service manager's stop
            try:
                out, err = serving.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(serving.pid, signal.SIGKILL)
                out, err = serving.communicate(timeout=60)
        deployment = _deployment(api)
        pins_paid = [e for e in data_entries(sb) if e.path == PINS]
    assert serving.returncode == 0, (serving.returncode, out, err)
    assert "stopped serving; the deployments' schedules are paused" in err and "Traceback" not in err, err
    assert deployment is not None and deployment["paused"], "SIGTERM paused the schedule, as Ctrl-C does"
    assert all(r["auto_scheduled"] for r in runs), "every run came from the schedule, none was triggered"
    assert fired["state"]["name"] == "Completed"
    run = next(m for m in all_manifests(OutputLayout(output)) if fired["id"] in m.flow_runs())
    assert run.status == "complete"
    db = output / "harvest.duckdb"
    assert rows(db, "SELECT status FROM runs WHERE run_id = ?", [run.run_id]) == [("complete",)]
    expected = {pin["id"] for pin in full_crawl(PINS, {"query": "oak desk"}, CONFIG)["pins"]}
    assert {r[0] for r in rows(db, "SELECT id FROM pinboard_pins")} == expected
    assert len(pins_paid) >= 2 and SECRET_KEY not in out + err
