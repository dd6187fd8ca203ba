"""Session-wide test setup, and the fixtures many test modules share.

Prefect must never phone home from tests, and every test session gets its own throw-away Prefect home.
These variables are set before anything imports Prefect, by the tests themselves: harvest switches Prefect's
analytics and telemetry off on its own (`flows.orchestrator.prefect_settings`), and `test_prefect_defaults` proves it in processes
started without them. Prefect's test harness takes ~9 s to start, so one harness serves the whole session of
each pytest worker (`prefect_harness`; `make test` runs three, `TEST_WORKERS` in the Makefile).

With `-n`, a module that sets something up once for its tests runs whole on one worker
(`pytest_xdist_make_scheduler` below), and the longest modules are handed out first (`LONGEST_FIRST`).

Shared fixtures: `prefect_harness`, `prefect_api_url`, `api_key` (harvest's key in the environment),
`free_port`, `duckdb_holder` (another process holding a DuckDB file), the sandbox's
(`tests.fixtures_sandbox`), a Dask cluster's (`tests.fixtures_dask`) and the session's one landed demo
(`landed_demo`, `tests.landed_demo`). Prefect's background services end before each hypothesis test
(`pytest_runtest_setup`).
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.session_dirs import remove_session_dirs, session_dir

if TYPE_CHECKING:  # imported by the fixtures, after the environment above is set
    from tests.flow_helpers import HoldDuckDB

TESTS_NEVER_PHONE_HOME = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS": "false",
    "DO_NOT_TRACK": "1",
}

if "PREFECT_HOME" not in os.environ:  # xdist's workers inherit the controller's
    os.environ["PREFECT_HOME"] = session_dir("harvest-prefect-")
if os.environ.get(
    "PYTEST_XDIST_WORKER"
):  # xdist gives its workers an 80x24 terminal size; tests read wide tables
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
for _name, _value in TESTS_NEVER_PHONE_HOME.items():
    os.environ.setdefault(_name, _value)
# One sandbox clock for the whole session and every process it starts: a suite that runs past midnight (UTC)
# must not see a sandbox started after it answer other times than one started before (`today_clock`).
from harvest.sandbox.config import CLOCK_ENV, today_clock  # noqa: E402  (after the environment above)

os.environ.setdefault(CLOCK_ENV, str(today_clock()))
# A load tries once when another process holds the DuckDB file (0: harvest's behaviour before the wait): a
# test holding the file for a whole run would wait the default minute. The tests of the wait set their own.
os.environ.setdefault("HARVEST_DUCKDB_LOCK_WAIT_SECONDS", "0")
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    # A shell starts a background job (`make test &`, nohup) with SIGINT ignored, and every process the tests
    # start would inherit it: the tests that press Ctrl-C on `harvest serve` would wait for an exit that never
    # comes. Python's own handler is reset to the default in the processes it starts; SIG_IGN is not.
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = ["tests.fixtures_sandbox", "tests.fixtures_dask", "tests.landed_demo"]


LONGEST_FIRST = (
    "test_serve.py",
    "test_resume_kill.py",
    "test_cli_run.py",
    "test_printed_commands.py",
    "test_scheduled_jobs_doc.py",
    "test_prefect_defaults.py",
    "test_packaging.py",
    "test_bill_after_kills.py",
    "test_power_cut.py",
    "test_run_lifecycle.py",
    "test_dask_runner.py",
    "test_service_check.py",
    "test_sql_command.py",
    "test_export.py",
)
"""The modules whose tests took longest in `make test` (`--durations`), handed out first: a long test handed out
last ends the run alone while the other workers wait. An order only: a module not named runs after these, in
the order collected. The demo's readers (`tests.landed_demo`) come after test_cli_run, whose first test lands
it: they find it landed instead of waiting for it."""

LONGEST_SCENARIOS_FIRST = (
    "test_full_disk.py",
    "test_schedule_fires.py",
    "test_temp_folders.py",
    "test_stop_signals.py",
    "test_temporary_server_start.py",
    "test_dask_staging.py",
    "test_packaging.py",
    "test_incremental_history.py",
    "test_serve.py",
    "test_prefect_defaults.py",
    "test_stop.py",
    "test_printed_commands.py",
    "test_serve_stop.py",
    "test_dask_runner.py",
    "test_prefect_outage.py",
    "test_power_cut.py",
    "test_dask_resume.py",
    "test_resume_kill.py",
)
"""The same for `make scenarios` (tests marked `scenario`); in a run of both tiers the scenarios go first."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first (`LONGEST_SCENARIOS_FIRST`, then `LONGEST_FIRST`), each module's tests still
    together and in their order."""
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    scenario_rank = {name: n for n, name in enumerate(LONGEST_SCENARIOS_FIRST)}

    def order(item: pytest.Item) -> tuple[int, int]:
        if item.get_closest_marker("scenario"):
            return (0, scenario_rank.get(item.path.name, len(scenario_rank)))
        return (1, rank.get(item.path.name, len(rank)))

    items.sort(key=order)


def pytest_unconfigure(config: pytest.Config) -> None:
    remove_session_dirs()


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With `-n` (xdist's `load`): tests handed out one at a time, except that a module which sets something up
    once for all its tests (a module-scoped fixture: a landed job, a built wheel, a Dask cluster, a server) goes
    whole to one worker. Handed out one at a time, its tests reach every worker, and each sets it up again. A
    worker holds at most three waiting units, so the last long tests do not queue behind one worker."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedSetupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if _sets_up_once(config.rootpath / module) else nodeid

    return SharedSetupScheduling(config, log)


@functools.cache
def _sets_up_once(module: Path) -> bool:
    """Whether a test module defines a module-scoped fixture (read from its text: xdist's controller sees only
    test ids, never the collected tests)."""
    try:
        return 'scope="module"' in module.read_text(encoding="utf-8")
    except OSError:
        return False


HARNESS_SERVER_QUIET = {
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_EVENT_LOGGER_ENABLED": "false",
    "PREFECT_SERVER_EVENTS_STREAM_OUT_ENABLED": "false",
    "PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED": "false",
}
"""The harness server's services no test reads: the event feed's store (task runs are still recorded from their
events, by the task run recorder), automations, and streams to subscribers. Measured on the demo's job against
the harness's kind of server: 10.3 -> 8.2 CPU s of serving, and a quarter less CPU while idle (~2.7% of a core,
for each of a session's servers)."""


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """A temporary Prefect server and database for every flow run of the session."""
    import subprocess
    from contextlib import ExitStack
    from unittest import mock

    from prefect.testing.utilities import prefect_test_harness

    from tests.process_helpers import dies_with_parent

    with ExitStack() as harness:
        # The server ends with this pytest process however it ends (a killed worker runs no finalizer): started
        # with the kernel's parent-death signal, from this, the main, thread.
        with (
            mock.patch.object(
                subprocess, "Popen", functools.partial(subprocess.Popen, preexec_fn=dies_with_parent)
            ),
            mock.patch.dict(os.environ, HARNESS_SERVER_QUIET),
        ):
            # A hang guard, not a bound: Prefect's server migrates a fresh SQLite database at start, which took
            # over 60 s with two suites and a benchmark side by side on 2 cores (every flow test then errored).
            harness.enter_context(prefect_test_harness(server_startup_timeout=180))
        # Importing harvest's flow module the first time configures Prefect's logging, which replaces the root
        # logger's handlers, pytest's `caplog` among them: here, not inside the first test that runs a flow
        # (which then saw no log record: it passed only after another test had imported it).
        import harvest.flows.collect  # noqa: F401

        yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a hypothesis test, Prefect's background services an earlier flow run of this worker left running
    end (`tests.prefect_helpers.end_services`): none draws from the global `random` while it draws examples.
    Only there: ended after every test, they cost each flow test 30-50 ms and their restart."""
    if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        from tests.prefect_helpers import end_services

        end_services()


@pytest.fixture(scope="session")
def prefect_api_url(prefect_harness: None) -> str:
    """The harness server's API URL: `harvest` subprocesses given it skip starting a temporary server."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    assert url, "the Prefect test harness has no API URL"
    return str(url)


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """harvest's key (`tests.flow_helpers.SECRET_KEY`) in HARVEST_API_KEY, and no HARVEST_BASE_URL from the
    environment: runs in this process take their service from the spec."""
    from tests.flow_helpers import SECRET_KEY

    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    monkeypatch.delenv("HARVEST_BASE_URL", raising=False)
    return SECRET_KEY


@pytest.fixture
def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on, for a server the test starts in another process."""
    from tests.net_helpers import free_port as pick

    return pick()


@pytest.fixture
def duckdb_holder() -> HoldDuckDB:
    """`with duckdb_holder(db, mark=True):` another process holds `db` open for writing (see
    `tests.flow_helpers.held_duckdb`)."""
    from tests.flow_helpers import held_duckdb

    return held_duckdb
