"""The suite's hygiene: a hypothesis test draws with none of Prefect's background services running, though an
earlier test of its worker ran a flow in this process (`tests/conftest.py`, `pytest_runtest_setup`). Left running, they drew from the
global `random` (the events client's websocket pings, every ~20 s) while a later hypothesis test of the same
worker drew its examples, and `make test` printed HypothesisDeprecationWarning ("Do not use the `random` module
inside strategies") for whichever property test happened to meet one.

The module-scoped sandbox keeps the two tests on one worker, in their order (`tests/conftest.py`'s scheduler).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import RunningSandbox, running
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, one_query, run_flow
from tests.prefect_helpers import service_threads


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    with running(SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (1, 1)})) as sb:
        yield sb


def test_a_flow_run_in_this_process_starts_prefect_s_services(
    prefect_harness: None, sandbox: RunningSandbox, tmp_path: Path, api_key: str
) -> None:
    summary = run_flow(one_query(tmp_path, sandbox.base_url, PINS, {"query": "oak"}))
    assert summary.status == "complete", summary
    assert "EventsWorkerThread" in service_threads(), "the run's task run states travel as events"


@settings(max_examples=3, deadline=None)
@given(st.integers())
def test_they_have_ended_when_a_property_test_draws(sandbox: RunningSandbox, drawn: int) -> None:
    assert service_threads() == []
