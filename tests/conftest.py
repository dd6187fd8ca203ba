"""Session-wide test setup.

Prefect must never phone home from tests, and every test session gets its own throw-away Prefect home.
These variables are set before anything imports Prefect. Prefect's test harness takes ~9 s to start, so one
harness serves the whole session of each pytest worker (`prefect_harness`; `make test` runs two).
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator

import pytest

from flows.settings import apply_prefect_defaults

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="harvest-prefect-"))
if os.environ.get(
    "PYTEST_XDIST_WORKER"
):  # xdist gives its workers an 80x24 terminal size; tests read wide tables
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
apply_prefect_defaults()
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    # A shell starts a background job (`make test &`, nohup) with SIGINT ignored, and every process the tests
    # start would inherit it: the tests that press Ctrl-C on `harvest serve` would wait for an exit that never
    # comes. Python's own handler is reset to the default in the processes it starts; SIG_IGN is not.
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = ["tests.fixtures_sandbox"]


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """A temporary Prefect server and database for every flow run of the session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield


@pytest.fixture(scope="session")
def prefect_api_url(prefect_harness: None) -> str:
    """The harness server's API URL: `harvest` subprocesses given it skip starting a temporary server."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    assert url, "the Prefect test harness has no API URL"
    return str(url)
