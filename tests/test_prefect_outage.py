"""Prefect's API away while a nightly job runs: the run goes on, exits by its data, says in one line that Prefect
could not be told, and Prefect's flow and task runs reach their true final states once the API answers again.

Real parts: `harvest run` (and `harvest serve`) as processes against the sandbox over HTTP, reporting to the
session's Prefect server through a loopback proxy the test cuts and restores (`tests.net_helpers.CuttableProxy`:
to harvest the server is gone, connections refused, then back), and the sandbox's gate to choose the moment.
Prefect's states are read from the server itself, past the proxy.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries, paid_twice
from tests.endpoints import CREATIVE, PINS
from tests.flow_helpers import BIG_BALANCE, HARVEST, SECRET_KEY, job_spec, subprocess_env, write_spec
from tests.net_helpers import CuttableProxy
from tests.prefect_helpers import flow_run_states, task_runs
from tests.process_helpers import Watched, finish, start_run
from tests.sandbox_gate import WAIT, GatedSandbox, gated

CONFIG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (6, 6), CREATIVE: (2, 2)}, page_size=5
)
PAGES = 9  # 6 pages of pins, the billed `-end-` page that ends them, 2 of creatives
PREFECT_RETRIES_SECONDS = 62
"""What Prefect's client waits on one call to an API that went away before it gives up (2+4+8+16+32 s)."""
UNTOLD = "Prefect could not be told"


def owed_file(layout: OutputLayout, run_id: str) -> Path:
    """Where a run keeps what Prefect is owed (`flows.orchestrator.prefect_record`)."""
    return layout.prefect_owed_file(run_id)


@pytest.fixture
def proxy(prefect_api_url: str) -> Iterator[CuttableProxy]:
    """The session's Prefect server behind a proxy the test can cut."""
    port = int(prefect_api_url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    found = CuttableProxy(port)
    yield found
    found.cut()


def api(proxy: CuttableProxy) -> str:
    return f"http://127.0.0.1:{proxy.port}/api"


def job(base_url: str, output: Path) -> dict[str, Any]:
    return job_spec(
        base_url,
        output,
        [
            {"id": "pins", "endpoint": PINS, "params": {"query": "oak desk"}},
            {"id": "creatives", "endpoint": CREATIVE, "params": {"query": "standing desks"}},
        ],
        name="nightly-outage",
        credits=1000,
    )


def lines_running(output: Path, run: Watched) -> None:
    """Until Prefect shows the run's two query lines' task runs started (they start beside the queries, which do
    not wait for them)."""
    deadline = time.monotonic() + WAIT
    while True:
        heads = all_manifests(OutputLayout(output))
        flow_run_id = heads[-1].flow_run_id if heads else None
        states = (
            {t.name: t.state and t.state.type.value for t in task_runs(flow_run_id)} if flow_run_id else {}
        )
        if set(states) == {"pins", "creatives"} and set(states.values()) <= {"RUNNING", "COMPLETED"}:
            return
        assert run.proc.poll() is None and time.monotonic() < deadline, states
        time.sleep(0.1)


def untold_run(
    sb: GatedSandbox, spec: Path, tmp_path: Path, proxy: CuttableProxy, output: Path
) -> tuple[int, str, float]:
    """A run whose Prefect goes away just before its end (its last page held at the gate meanwhile); exit code,
    stderr, and the seconds from the cut to the run's exit. The proxy stays cut."""
    sb.gate.close_after(PAGES - 1)
    run = Watched(start_run(spec, tmp_path, api(proxy)))
    sb.gate.wait_frozen(run.proc)
    lines_running(output, run)
    proxy.cut()
    cut_at = time.monotonic()
    sb.gate.open()
    code, _, err = run.finish()
    return code, err, time.monotonic() - cut_at


def assert_one_line_about_prefect(err: str, said: str) -> None:
    """Prefect's trouble is said once, in one line: no traceback, no event dump, nothing of Prefect's own."""
    assert err.count(said) == 1, err
    assert "Traceback" not in err and "Event(" not in err and "EventsWorker" not in err, err
    assert "Error logging to API" not in err and "| ERROR" not in err and "| WARNING" not in err, err
    assert len(err.encode()) < 2048, err  # the issue met a 2 KB event dump every 7 s


def artifact_keys(flow_run_id: str) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(flow_run_id)]))
        )
    return sorted(a.key for a in found if a.key)


def assert_told(flow_run_id: str, run_id: str) -> None:
    """Prefect holds the run's true end: the flow run Completed with the run's headline, each query line's task
    run Completed, the run's artifacts."""
    (state, message) = flow_run_states([flow_run_id])[flow_run_id]
    assert state == "COMPLETED" and message.startswith("complete: 2 queries") and run_id in message, message
    lines = {t.name: t.state.type.value for t in task_runs(flow_run_id)}
    assert lines == {"pins": "COMPLETED", "creatives": "COMPLETED"}, lines
    assert artifact_keys(flow_run_id) == ["harvest-nightly-outage", "harvest-nightly-outage-tables"]


@pytest.mark.scenario
def test_prefect_away_at_the_end_the_run_exits_by_its_data_and_the_next_run_tells_it(
    proxy: CuttableProxy, tmp_path: Path
) -> None:
    """The issue's night: every page landed and loaded, then Prefect's API went away. Before, the run waited
    out Prefect's retries twice (~62 s each), printed a traceback, exited 1, and the scheduler's retry paid every
    page again while Prefect kept the flow run and its task runs Running for ever."""
    output = tmp_path / "out"
    with gated(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        code, err, waited = untold_run(sb, spec, tmp_path, proxy, output)
        (run,) = all_manifests(OutputLayout(output))
        record = json.loads(owed_file(OutputLayout(output), run.run_id).read_bytes())
        assert run.flow_run_id is not None
        left = flow_run_states([run.flow_run_id])[run.flow_run_id][0]  # what Prefect holds meanwhile
        listed = CliRunner().invoke(app, ["runs", str(output)], env={"COLUMNS": "200"})
        proxy.restore()
        code2, out2, err2 = finish(start_run(spec, tmp_path, api(proxy), "--continue"))
        paid = data_entries(sb)
    assert code == 0, err  # every query complete: the data says 0, whatever Prefect heard
    assert_one_line_about_prefect(err, UNTOLD)
    assert waited < PREFECT_RETRIES_SECONDS, (
        waited
    )  # harvest waited neither for Prefect's retries nor its queues
    assert run.status == "complete" and run.loaded
    assert record["state"] == "COMPLETED" and record["flow_run_id"] == run.flow_run_id
    assert left == "RUNNING"
    assert f"run {run.run_id}: Prefect has not been told how it ended" in listed.stderr, listed.output
    assert code2 == 0 and "nothing to continue" in out2, out2 + err2
    assert f"told Prefect how run {run.run_id} of job nightly-outage ended" in err2, err2
    assert len(paid) == PAGES and paid_twice(paid) == 0  # told, not paid again
    assert_told(run.flow_run_id, run.run_id)
    assert not owed_file(OutputLayout(output), run.run_id).exists()


@pytest.mark.scenario
def test_prefect_away_at_the_start_waits_for_it_then_refuses_before_paying(
    proxy: CuttableProxy, tmp_path: Path
) -> None:
    """No flow run can be created: the run waits a bounded time (HARVEST_PREFECT_WAIT_SECONDS) for Prefect's
    API and starts once it answers; one that never answers is refused before a request is sent (exit 75, try
    again later). Before, it failed at once with exit 1."""
    output = tmp_path / "out"
    with gated(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        proxy.cut()
        code, out, err = finish(
            start_run(spec, tmp_path, api(proxy), env={"HARVEST_PREFECT_WAIT_SECONDS": "1"})
        )
        refused_paid = len(data_entries(sb))
        no_run = all_manifests(OutputLayout(output))
        run = Watched(start_run(spec, tmp_path, api(proxy)))
        run.wait_for_stderr("waiting up to 60 s before the run starts")
        proxy.restore()  # Prefect's server is back from its restart
        code2, out2, err2 = run.finish()
        paid = data_entries(sb)
    assert code == 75, out + err
    assert err.count("error: ") == 1 and "did not answer" in err and "nothing was sent" in err, err
    assert "Traceback" not in err
    assert refused_paid == 0 and no_run == []
    assert code2 == 0, out2 + err2
    assert len(paid) == PAGES and paid_twice(paid) == 0
    (ran,) = all_manifests(OutputLayout(output))
    assert ran.flow_run_id is not None
    assert_told(ran.flow_run_id, ran.run_id)


@pytest.mark.scenario
def test_prefect_away_mid_run_loses_a_line_s_end_which_the_run_tells_once_it_is_back(
    proxy: CuttableProxy, tmp_path: Path
) -> None:
    """Prefect's API goes away while the run pays; one query line ends meanwhile and Prefect drops the event
    that carries its task run's end (Prefect tries it for ~8 s, then gives up: the line stays Running). The API
    comes back before the run ends: the run says the outage once, ends as usual, and tells Prefect the line's
    end right after the flow run."""
    output = tmp_path / "out"
    with gated(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        sb.gate.close_after(1, path=CREATIVE)
        run = Watched(start_run(spec, tmp_path, api(proxy)))
        sb.gate.wait_frozen(run.proc)
        lines_running(output, run)
        proxy.cut()
        sb.gate.let_through(1, CREATIVE)  # the creatives' last page: their line ends while Prefect is away
        run.wait_for_stderr("Prefect's API did not answer")  # Prefect gave that line's end up
        proxy.restore()
        sb.gate.open()
        code, _, err = run.finish()
        paid = data_entries(sb)
    (ran,) = all_manifests(OutputLayout(output))
    assert code == 0, err
    assert_one_line_about_prefect(err, "Prefect's API did not answer")
    assert UNTOLD not in err
    assert len(paid) == PAGES and paid_twice(paid) == 0
    assert ran.flow_run_id is not None
    assert_told(ran.flow_run_id, ran.run_id)
    assert not owed_file(OutputLayout(output), ran.run_id).exists()


@pytest.mark.scenario
def test_harvest_serve_tells_prefect_what_a_run_could_not_when_it_starts(
    proxy: CuttableProxy, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    with gated(CONFIG) as sb:
        specs = tmp_path / "jobs"
        specs.mkdir()
        spec = write_spec(specs, job(sb.base_url, output), "nightly.yaml")
        code, err, _ = untold_run(sb, spec, tmp_path, proxy, output)
        (run,) = all_manifests(OutputLayout(output))
        proxy.restore()
        env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=api(proxy))
        serving = subprocess.Popen(
            [str(HARVEST), "serve", str(specs)], cwd=tmp_path, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        served = Watched(serving)
        try:
            told = served.wait_for_stderr(f"told Prefect how run {run.run_id}")
        finally:
            serving.send_signal(signal.SIGINT)
            served.finish()
        paid = data_entries(sb)
    assert code == 0 and UNTOLD in err, err
    assert "nightly-outage" in told and "ConnectError" in told, told
    assert len(paid) == PAGES
    assert run.flow_run_id is not None
    assert_told(run.flow_run_id, run.run_id)
    assert not owed_file(OutputLayout(output), run.run_id).exists()


def test_a_task_run_stuck_in_prefect_s_retries_holds_the_run_a_bounded_time(
    prefect_harness: None, api_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line's task run whose call to Prefect hangs (Prefect's client retries an API that went away ~62 s per
    call; here: for good) is given up `TASK_RUN_GRACE` after its line ended; the run completes, says so once,
    and tells Prefect the line's end right after its flow run. Before, the run waited for it as long as it hung."""
    import asyncio
    import contextlib
    from collections.abc import AsyncIterator

    import prefect.task_engine

    import harvest.flows.run.fanout
    from harvest.flows.collect import run_collect
    from harvest.flows.orchestrator import prefect_outage
    from harvest.sandbox.wire.serving import running

    @contextlib.asynccontextmanager
    async def stuck(names: list[str], **_: Any) -> AsyncIterator[None]:
        await asyncio.sleep(3600)
        yield

    monkeypatch.setattr(prefect.task_engine, "_aconcurrency", stuck)
    monkeypatch.setattr(harvest.flows.run.fanout, "TASK_RUN_GRACE", 0.5)
    # What is tested is the grace, not how fast the harness's server answers: in a full `make test` on two cores
    # it once took over the 10 s a call to tell Prefect gets, and the run (rightly) said Prefect was not told.
    monkeypatch.setattr(prefect_outage, "CALL_TIMEOUT_SECONDS", 60.0)
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        summary = asyncio.run(asyncio.wait_for(run_collect(spec_path=str(spec)), timeout=180))
        paid = data_entries(sb)
    (ran,) = all_manifests(OutputLayout(output))
    assert summary.status == "complete" and summary.prefect_untold is None
    assert len(paid) == PAGES and paid_twice(paid) == 0
    assert ran.flow_run_id is not None
    assert_told(ran.flow_run_id, ran.run_id)
    assert not owed_file(OutputLayout(output), ran.run_id).exists()


@pytest.mark.scenario
def test_on_dask_prefect_away_mid_run_learns_every_round_s_end_once_it_answers(
    proxy: CuttableProxy, tmp_path: Path
) -> None:
    """On the Dask runner each round of a query is a task run its worker reports to Prefect, and a worker that
    ends while Prefect's API is away loses those reports where the flow cannot see them. Every round joins the
    record of what Prefect is owed, with its true end, told once the API answers (here: by the job's next run):
    none stays Running in Prefect, none is missing from it."""
    output = tmp_path / "out"
    with gated(CONFIG) as sb:
        dask = {"kind": "dask", "workers": 1, "round_pages": 2}
        spec = write_spec(tmp_path, {**job(sb.base_url, output), "runner": dask})
        sb.gate.close_after(3)  # the first round's page of each (prices unseen) and one of the second's
        run = Watched(start_run(spec, tmp_path, api(proxy)))
        sb.gate.wait_frozen(run.proc)
        rounds_seen(output, run, 2)
        proxy.cut()
        sb.gate.open()
        code, _, err = run.finish()
        (ran,) = all_manifests(OutputLayout(output))
        record = json.loads(owed_file(OutputLayout(output), ran.run_id).read_bytes())
        proxy.restore()
        code2, out2, err2 = finish(start_run(spec, tmp_path, api(proxy), "--continue"))
        paid = data_entries(sb)
    expected = {*(f"pins round {n}" for n in range(1, 5)), "creatives round 1", "creatives round 2"}
    assert code == 0 and UNTOLD in err, err
    assert {t["name"]: (t["state"], t["task"]) for t in record["task_runs"]} == dict.fromkeys(
        expected, ("COMPLETED", "collect_round")
    ), record["task_runs"]
    assert code2 == 0 and f"told Prefect how run {ran.run_id}" in err2, out2 + err2
    assert len(paid) == PAGES and paid_twice(paid) == 0
    assert ran.flow_run_id is not None
    (state, message) = flow_run_states([ran.flow_run_id])[ran.flow_run_id]
    assert state == "COMPLETED" and ran.run_id in message, message
    rounds = {t.name: t.state.type.value for t in task_runs(ran.flow_run_id)}
    assert rounds == dict.fromkeys(expected, "COMPLETED"), rounds
    assert not owed_file(OutputLayout(output), ran.run_id).exists()


def rounds_seen(output: Path, run: Watched, count: int) -> None:
    """Until Prefect shows `count` task runs of the run (its Dask rounds)."""
    deadline = time.monotonic() + WAIT
    while True:
        heads = all_manifests(OutputLayout(output))
        flow_run_id = heads[-1].flow_run_id if heads else None
        if flow_run_id and len(task_runs(flow_run_id)) >= count:
            return
        assert run.proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)


def test_a_run_the_job_lock_refuses_is_not_taken_for_prefect_away(
    prefect_harness: None, tmp_path: Path, api_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A served run that finds another run of its job holding the lock (`harvest run` by hand, cron overlap) is
    refused as that, not as "Prefect's API did not answer": the lock's refusal is raised `from None` while
    handling the BlockingIOError it was found by, an OSError that reads as an outage when the chain is walked
    past it."""
    from harvest.flows.spec import UsageError
    from harvest.tasks.output.job_lock import acquire
    from tests.flow_helpers import run_flow

    output = tmp_path / "out"
    spec = write_spec(
        tmp_path,
        job_spec(
            "sandbox", output, [{"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}], name="locked"
        ),
    )
    output.mkdir()
    held = acquire(output / ".harvest-locked.lock")
    try:
        with pytest.raises(UsageError, match="another harvest run of this job is running"):
            run_flow(spec)
    finally:
        held.release()
    assert "Prefect's API did not answer" not in capsys.readouterr().err


def test_a_full_disk_is_not_taken_for_prefect_away() -> None:
    """An OSError of this machine's own files (a full disk, as Python and pyarrow raise it; a directory removed)
    escaping a flow was said as "Prefect's API did not answer"; a connection refused still is, as asyncio says
    it too."""
    import errno

    import httpx

    from harvest.flows.orchestrator.prefect_outage import caused_by_api

    assert not caused_by_api(OSError(errno.ENOSPC, "No space left on device"))
    assert not caused_by_api(
        OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")
    )
    assert not caused_by_api(FileNotFoundError(errno.ENOENT, "No such file or directory", "/out/raw"))
    assert caused_by_api(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
    assert caused_by_api(OSError("Multiple exceptions: [Errno 111] Connect call failed ('127.0.0.1', 4200)"))
    assert caused_by_api(httpx.ConnectError("All connection attempts failed"))
