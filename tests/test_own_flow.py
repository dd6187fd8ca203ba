"""harvest inside a team's own Prefect flow, as docs/installing.md says to call it: `await collect_job(...)`
returns the run's summary when the run completed and raises `harvest.RunFailed` (the summary inside) when it did
not, a real flow run against the sandbox over HTTP each time."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, one_query, write_spec


def test_a_team_s_flow_gets_the_summary_or_harvest_s_run_failed_not_prefect_s_type_error(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """Awaited without `return_state`, a run that did not complete raised Prefect's `TypeError` ("Unexpected
    result for failed state ... cannot be resolved into an exception"), the summary out of reach. A night whose
    budget left queries never started, in a spec that asks to hear it (`unstarted_exit_code: 3`), raises
    `harvest.RunFailed` now, the summary in it; a night that completed returns its summary as before."""
    from prefect import flow

    from harvest import RunFailed, collect_job

    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 2)}, page_size=3)
    with running(config) as sb:
        whole = job_spec(
            sb.base_url, tmp_path / "whole", [{"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}]
        )
        short = job_spec(
            sb.base_url, tmp_path / "short", [{"id": "pins", "endpoint": PINS, "for_each": {"query": ["a", "b", "c"]}}],
            name="short", credits=1, budget={"unstarted_exit_code": 3},
        )  # fmt: skip
        specs = [write_spec(tmp_path, spec, f"{spec['name']}.yaml") for spec in (whole, short)]

        @flow
        async def nightly() -> list[Any]:
            said: list[Any] = []
            for spec in specs:
                try:
                    said.append(await collect_job(spec_path=str(spec)))
                except RunFailed as failed:
                    said.append(failed)
            return said

        done, failed = asyncio.run(nightly())
    assert done.status == "complete" and done.records > 0, done
    assert isinstance(failed, RunFailed), failed
    assert (failed.summary.status, failed.summary.credits_spent) == ("budget_exhausted", 1), failed.summary
    assert "never started" in str(failed), str(failed)


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_team_s_own_prefect_lines_are_prefect_s_outside_harvest_s_run(
    prefect_harness: None, tmp_path: Path, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`harvest run` folds Prefect's lines about its API being away into one line of its own; a team's process
    that imports harvest keeps them as Prefect says them once harvest's run has ended: the events client's
    "Unable to connect" of the team's own flow was dropped, and harvest's WATCH took it for a run of its own."""
    from prefect import flow

    from harvest import collect_job
    from harvest.flows.orchestrator import prefect_outage
    from harvest.flows.orchestrator.prefect_outage import WATCH

    # A team's process never ran harvest's command line; this worker's earlier tests may have, in-process.
    monkeypatch.setattr(prefect_outage.SCOPE, "everywhere", False)

    events = logging.getLogger("prefect.events.clients")  # Prefect's own, as its EventsClient logs the line
    kept = _Kept()
    events.addHandler(kept)
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (1, 1)}, page_size=3)
    try:
        with running(config) as sb:
            spec = one_query(tmp_path, sb.base_url, PINS, {"query": "oak"}, name="team")

            @flow
            async def nightly() -> Any:
                summary = await collect_job(spec_path=str(spec))
                noticed = WATCH.mark()
                events.warning(
                    "Unable to connect to %r. Please check your network settings to ensure websocket connections "
                    "to the API are allowed. Otherwise event data (including task run data) may be lost. Reason: "
                    "%s. Set PREFECT_DEBUG_MODE=1 to see the full error.",
                    "ws://127.0.0.1:9/api/events/in",
                    "[Errno 111] Connection refused",
                )
                return summary, WATCH.since(noticed)

            summary, noticed = asyncio.run(nightly())
    finally:
        events.removeHandler(kept)
    assert summary.status == "complete", summary
    assert [m for m in kept.messages if m.startswith("Unable to connect to 'ws://127.0.0.1:9")], kept.messages
    assert noticed == [], "harvest's run had ended: the line is the team's flow's, not harvest's"


TWO_AT_ONCE = """
import asyncio, gc, json, signal, sys
from prefect import flow
from harvest import RunFailed, collect_job

before = [signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), gc.get_threshold()]

async def one(spec: str) -> str:
    try:
        return (await collect_job(spec_path=spec)).status
    except RunFailed as failed:
        return failed.summary.status

@flow
async def team() -> list[str]:
    return list(await asyncio.gather(one(sys.argv[1]), one(sys.argv[2])))

statuses = asyncio.run(team())
after = [signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), gc.get_threshold()]
print(json.dumps({"statuses": statuses, "restored": before == after}))
"""
"""A team's flow awaiting two jobs at once, as a script the team runs (`python nightly.py a.yaml b.yaml`)."""


@pytest.mark.scenario
def test_one_ctrl_c_stops_both_jobs_a_team_s_flow_awaits_at_once_and_leaves_the_process_as_it_was(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """Each run put back the handlers it found: the first to end removed the second's, so one Ctrl-C stopped
    one job and the other paid on to its end, and the handler left behind was an ended run's (a later SIGTERM
    went to it and the flow went on), the collector's threshold raised."""
    import json
    import signal
    import subprocess

    from tests.crawl_helpers import data_entries
    from tests.flow_helpers import PYTHON, subprocess_env
    from tests.process_helpers import finish, wait_until

    # 120 pages a job at 0.3 s each: neither job can end before the Ctrl-C, however slowly a loaded machine
    # starts the second flow run (with 16, the first had ended under CI's load: `complete`, not stopped)
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (60, 60)}, page_size=3, latency=0.3
    )
    (tmp_path / "nightly.py").write_text(TWO_AT_ONCE)
    with running(config) as sb:
        specs = []
        for name in ("a", "b"):
            queries = [{"id": "pins", "endpoint": PINS, "for_each": {"query": [f"{name}1", f"{name}2"]}}]
            spec = job_spec(sb.base_url, tmp_path / name, queries, name=f"team-{name}", concurrency=1)
            specs.append(str(write_spec(tmp_path, spec, f"{name}.yaml")))
        env = subprocess_env(tmp_path, PREFECT_API_URL=prefect_api_url, HARVEST_API_KEY=SECRET_KEY)
        proc = subprocess.Popen(
            [PYTHON, str(tmp_path / "nightly.py"), *specs], cwd=tmp_path, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        both = lambda: {e.params["query"][0] for e in data_entries(sb)} >= {"a", "b"}  # noqa: E731
        wait_until(both, proc, "both jobs paged")
        proc.send_signal(signal.SIGINT)
        code, out, err = finish(proc)
    assert code == 0, out + err
    said = json.loads(out.splitlines()[-1])
    assert said == {"statuses": ["interrupted", "interrupted"], "restored": True}, (said, err)
