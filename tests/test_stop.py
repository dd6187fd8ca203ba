"""Stopping a run the way the world does it: a terminal's Ctrl-C or `docker stop` signals the whole process group,
systemd signals every process of the unit, the OOM killer SIGKILLs the biggest process alone.

The promise (docs/scheduled-jobs.md, "Ctrl-C is a clean stop"): the first SIGINT/SIGTERM stops sending, lets
the pages in flight land, writes the manifest `interrupted`, loads DuckDB and exits 130 with one line saying
how to resume, with no traceback and no Prefect error on stderr. The key cases run `harvest run` as a real
process with the default Prefect setup (no PREFECT_API_URL: harvest starts Prefect's temporary server, which
has to outlive the signal and die with harvest), against the sandbox over HTTP.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import harvest.flows.collect
import harvest.flows.run.load_step
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.errors import RunStopped
from harvest.connectors.http.client import ServiceClient
from harvest.connectors.paging.page_request import PageRequest
from harvest.flows.cli import app
from harvest.flows.run.fanout import DEPENDENTS_PER_SLOT
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries, paid_twice
from tests.endpoints import CREATIVE, CREATIVE_DETAIL, PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, key_set, rows, write_spec
from tests.prefect_helpers import flow_run
from tests.process_helpers import (
    Watched,
    alive,
    children,
    finish,
    server_port,
    signal_bits,
    signal_group,
    signal_mask,
    start_run,
    wait_gone,
)
from tests.sandbox_gate import WAIT, GatedSandbox, gated

CREATIVE_PARAMS = {"query": "standing desks", "limit": 20}
CONCURRENCY = 4
CONFIG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE},
    pages_by_path={CREATIVE: (15, 15), PINS: (30, 30)},
    page_size=20,
    latency=0.03,
)
"""15 creative pages of 20 materials: 300 dependent detail queries, found far faster than 4 connections fetch
them, so a stop finds a long line of them waiting."""
runner = CliRunner()


def job(base_url: str, output: Path) -> dict[str, Any]:
    queries = [
        {"id": "creatives", "endpoint": CREATIVE, "params": CREATIVE_PARAMS},
        {"id": "details", "endpoint": CREATIVE_DETAIL, "for_each": {"material_id": {"from": "creatives", "field": "material_id"}}},
    ]  # fmt: skip
    return job_spec(base_url, output, queries, name="nightly", credits=100_000, concurrency=CONCURRENCY)


def material_ids() -> set[str]:
    return {m["material_id"] for m in full_crawl(CREATIVE, CREATIVE_PARAMS, CONFIG)["materials"]}


STOPPING = "stopping; letting the requests in flight land"
"""harvest's line on stderr once the first SIGINT stopped its ledger: from then on nothing more is sent."""


def interrupted_tasks(err: str, prefix: str) -> int:
    """Queries whose Prefect task ended `interrupted`: harvest prints one line per finished task (stderr is no
    terminal), and none for a query it listed as never started."""
    return sum(
        1 for line in err.splitlines() if re.match(rf"harvest: {re.escape(prefix)}.*: interrupted, ", line)
    )


@pytest.mark.scenario
def test_ctrl_c_to_the_process_group_stops_at_once_with_hundreds_of_dependents_queued(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """SIGINT to the whole process group of a run on Prefect's temporary server, while hundreds of dependent
    queries wait: it stops sending at once, exit 130, one resume line, nothing on stderr that looks like an
    error; the resume then fetches every detail exactly once.

    "At once" is counted, not timed (a clock on a busy machine either flakes or is too generous): the run is
    frozen at the sandbox's door when the signal goes out, so what it sends after its stop line is exactly
    what was in flight (at most `concurrency`); and of the dependents in line only those already running as
    Prefect tasks (at most `DEPENDENTS_PER_SLOT` per connection) end through Prefect. A temporary server that
    died with the group's signal would leave the run to exit 1 after ~140 s (the exit code and the server's
    survival say it did not); a Prefect task for each dependent waiting in line would have to end through
    Prefect after the stop, 16-39 s for a few hundred (the count of tasks says there are none)."""
    output = tmp_path / "out"
    with gated(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        sb.gate.close_after(9, path=CREATIVE)  # ~180 details found by then, a few dozen fetched
        run = Watched(start_run(spec, tmp_path, None))  # no PREFECT_API_URL: the temporary server
        sb.gate.wait_frozen(run.proc)
        answered_at_stop = len(data_entries(sb))  # exact: nothing moves while the gate is closed
        (server,) = children(run.proc.pid)
        signal_group(run.proc, signal.SIGINT)
        run.wait_for_stderr(STOPPING)  # its ledger is stopped: every later request is refused
        sb.gate.open()  # the requests in flight land
        code, out, err = run.finish()
        server_gone = wait_gone(server, WAIT)
        sent_after_stop = len(data_entries(sb)) - answered_at_stop
        (stopped,) = all_manifests(OutputLayout(output))
        db = output / "harvest.duckdb"
        loaded_rows = rows(db, "SELECT run_id, status FROM runs")
        code2, out2, err2 = finish(start_run(spec, tmp_path, prefect_api_url))
        entries = data_entries(sb)
    assert code == 130, out + err
    assert sent_after_stop <= CONCURRENCY, "after the stop only the requests in flight were answered"
    assert "Traceback" not in err and "error" not in err.lower(), err
    assert "Finished in state" not in err
    assert err.count("resumes it") == 1 and stopped.run_id in err, err
    assert server_gone, "Prefect's temporary server outlived harvest"
    assert stopped.status == "interrupted" and stopped.loaded
    assert loaded_rows == [(stopped.run_id, "interrupted")]
    waiting = [q for q in stopped.queries if q["status"] == "interrupted" and not q["raw_file"]]
    assert len(waiting) >= 50, "the stop should have found dependents waiting in line"
    assert all(q["pages"] == 0 and q["query_id"].startswith("details[") for q in waiting)
    # only the dependents running when the stop came were Prefect tasks; those in line never became one
    assert interrupted_tasks(err, "details[") <= DEPENDENTS_PER_SLOT * CONCURRENCY < len(waiting), err
    assert code2 == 0, out2 + err2
    details = [e for e in entries if e.path == CREATIVE_DETAIL]
    assert {e.path_params["material_id"] for e in details} == material_ids()
    assert paid_twice(entries) == 0, "a clean stop lets every page in flight land: nothing is paid twice"
    (run_after,) = all_manifests(OutputLayout(output))
    assert run_after.run_id == stopped.run_id and run_after.status == "complete"
    assert {k[0] for k in key_set(db, "creative_material_details")} == material_ids()


def _blocked_in_every_thread(pid: int) -> int:
    """The signals every thread of `pid` blocks: a signal pending for the process stays pending while so."""
    masks = [
        int(line.split()[1], 16)
        for task in (Path("/proc") / str(pid) / "task").iterdir()
        for line in (task / "status").read_text().splitlines()
        if line.startswith("SigBlk:")
    ]
    assert masks, f"no threads of process {pid}"
    blocked = ~0
    for mask in masks:
        blocked &= mask
    return blocked


@pytest.mark.scenario
def test_the_temporary_server_ignores_signals_meant_for_harvest_and_dies_with_it(tmp_path: Path) -> None:
    """systemd sends SIGTERM to every process of the unit: the temporary Prefect server keeps serving, since
    harvest still has to report the run's state. kill -9 of harvest alone (the OOM killer): the server dies with
    it, and a reader of harvest's output (cron's mail, a pipe) sees the end at once.

    That the server ignores the signals is read from the kernel, not waited for: after `kill` they are pending
    for the server and blocked in every one of its threads, so they can never be delivered; it still answers,
    and they are still pending after that answer."""
    with gated(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, tmp_path / "out"))
        sb.gate.close_after(3)
        proc = start_run(spec, tmp_path, None)
        sb.gate.wait_frozen(proc)  # the run is paging: its server is up and serving it
        (server,) = children(proc.pid)
        port = server_port(server)
        os.kill(server, signal.SIGTERM)
        os.kill(server, signal.SIGINT)
        os.kill(server, signal.SIGHUP)  # systemd's SendSIGHUP=yes; harvest stops on it as on SIGTERM
        sent = signal_bits(signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        pending = signal_mask(server, "ShdPnd") & sent
        blocked = _blocked_in_every_thread(server) & sent
        answered = httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=60).status_code
        still_pending = signal_mask(server, "ShdPnd") & sent
        os.kill(proc.pid, signal.SIGKILL)
        code, _, _ = finish(proc)  # returns only once no process holds harvest's stdout/stderr
        server_gone = wait_gone(server, WAIT)
    assert pending == blocked == still_pending == sent, (
        "the signals reached the server and were never delivered"
    )
    assert answered == 200 and code == -signal.SIGKILL
    assert server_gone, "the temporary server outlived a kill -9 of harvest"
    assert not alive(server)


async def _stop_while_waiting_for_a_slot(sb: GatedSandbox) -> tuple[list[Any], CreditLedger]:
    ledger = CreditLedger(100)
    async with ServiceClient(sb.base_url, SECRET_KEY, ledger, max_in_flight=1) as client:
        # one page proves the key and shows the endpoint's price: later requests need not go one at a time
        await client.get(PageRequest("first", PINS, PINS, (("query", "first"),), page=0, cost=1))
        sb.gate.close()  # the next request is held at the sandbox's door: it is sending, and stays so
        calls = [
            asyncio.ensure_future(
                client.get(PageRequest(f"q{i}", PINS, PINS, (("query", f"q{i}"),), page=0, cost=1))
            )
            for i in range(6)
        ]
        deadline = time.monotonic() + WAIT
        while ledger.reserved < 6 or sb.gate.held < 1:  # one sending, five reserved and waiting for the slot
            assert time.monotonic() < deadline, f"only {ledger.reserved} of 6 requests were granted credits"
            await asyncio.sleep(0.001)
        ledger.stop("interrupted", "interrupted by SIGINT")
        sb.gate.open()
        results = await asyncio.gather(*calls, return_exceptions=True)
    return results, ledger


def test_a_request_still_waiting_for_a_connection_is_not_sent_after_a_stop() -> None:
    """Stopping means sending nothing more: a request that had its credits reserved but was still waiting for
    a connection slot is dropped, its reservation released (not sent one slot at a time, long after the
    Ctrl-C)."""
    with gated(SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE})) as sb:
        results, ledger = asyncio.run(_stop_while_waiting_for_a_slot(sb))
        sent = data_entries(sb)
    stopped = [r for r in results if isinstance(r, RunStopped)]
    assert len(sent) == 2 and len(stopped) == 5, results  # the pricing page, and the one that was sending
    assert all(r.status == "interrupted" for r in stopped)
    assert ledger.spent == 2 and ledger.reserved == 0


# ------------------------------------------------------------------------------ a signal during the load
def _signals_during_load(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """Deliver `count` SIGINTs to this process at the start of the load into DuckDB, then load for real: the
    one moment a test cannot hit from outside (a load takes a fraction of a second)."""
    real_load = harvest.flows.run.load_step.load_manifest_into_duckdb

    def load(*args: Any, **kwargs: Any) -> dict[str, int]:
        for _ in range(count):
            os.kill(os.getpid(), signal.SIGINT)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(harvest.flows.run.load_step, "load_manifest_into_duckdb", load)


def _pins_job(base_url: str, output: Path) -> dict[str, Any]:
    return job_spec(
        base_url,
        output,
        [{"id": "pins", "endpoint": PINS, "params": {"query": "oak desk"}}],
        name="loading",
        credits=1000,
    )


@pytest.mark.parametrize("signals", [1, 2])
def test_ctrl_c_during_the_load_says_what_became_of_the_run(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signals: int
) -> None:
    """All pages landed, only the load is left: one Ctrl-C lets the load finish (the run is complete, exit 0,
    Prefect Completed); a second one abandons it (exit 130, Prefect Cancelled, and the line says `harvest load`
    loads it, which it then does). Never "resumes next time": there is nothing to resume."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    output = tmp_path / "out"
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 2)})
    with running(config) as sb:
        spec = write_spec(tmp_path, _pins_job(sb.base_url, output))
        with (
            monkeypatch.context() as loading_run
        ):  # only the run's own load: `harvest load` below loads for real
            _signals_during_load(loading_run, signals)
            result = runner.invoke(app, ["run", str(spec)])
    (run,) = all_manifests(OutputLayout(output))
    assert run.flow_run_id is not None
    state = flow_run(run.flow_run_id).state  # its own flow run, by id: the server holds hundreds
    assert run.status == "complete"
    assert "resume" not in result.output and "Traceback" not in result.output
    if signals == 1:
        assert result.exit_code == 0, result.output
        assert "finishing the load" in result.stderr
        assert run.loaded and state.type.value == "COMPLETED"
        return
    assert result.exit_code == 130, result.output
    assert not run.loaded and state.type.value == "CANCELLED"
    assert "the load into DuckDB was interrupted" in (state.message or "")
    assert result.stderr.count(f"harvest load {output}") == 1, result.stderr
    loading = runner.invoke(app, ["load", str(output)])
    assert loading.exit_code == 0 and f"loaded run {run.run_id}" in loading.stdout
    assert rows(output / "harvest.duckdb", "SELECT status FROM runs") == [("complete",)]


@pytest.mark.scenario
@pytest.mark.parametrize(
    ("signals", "during"),
    [(1, "load_manifest_into_duckdb"), (2, "load_manifest_into_duckdb"), (2, "pending_manifests")],
    ids=["one", "two", "two-while-reading-manifests"],
)
def test_ctrl_c_while_earlier_runs_load_first_is_answered_at_once_and_pays_nothing(
    prefect_harness: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    signals: int,
    during: str,
) -> None:
    """Night 1 landed but its load was cut off. Night 2 starts by loading it, and gets Ctrl-C meanwhile: the
    first says at once that nothing will be paid and lets that load finish; a second leaves night 1 unloaded
    for later. Either way night 2 sends nothing and ends interrupted (exit 130), and a later run loads it all."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    output = tmp_path / "out"
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 2)})
    with running(config) as sb:
        spec = write_spec(tmp_path, _pins_job(sb.base_url, output))
        with monkeypatch.context() as night1:
            _signals_during_load(night1, 2)
            assert runner.invoke(app, ["run", str(spec)]).exit_code == 130
        (first,) = all_manifests(OutputLayout(output))
        assert first.status == "complete" and not first.loaded
        paid_before = len(data_entries(sb))
        real = getattr(harvest.flows.run.load_step, during)

        def signalled(*args: Any, **kwargs: Any) -> Any:
            for _ in range(signals):
                os.kill(os.getpid(), signal.SIGINT)
            return real(*args, **kwargs)

        with monkeypatch.context() as night2:
            night2.setattr(harvest.flows.run.load_step, during, signalled)
            second = runner.invoke(app, ["run", str(spec)])
        paid_by_night2 = len(data_entries(sb)) - paid_before
        assert second.exit_code == 130, second.output
        assert "Traceback" not in second.output and "the run failed" not in second.output
        assert "nothing will be paid; finishing the load of earlier runs" in second.stderr
        assert paid_by_night2 == 0
        runs = {m.run_id: m for m in all_manifests(OutputLayout(output))}
        assert runs[first.run_id].loaded == (signals == 1)
        night2_id = next(r for r in runs if r != first.run_id)
        assert runs[night2_id].status == "interrupted"
        if signals == 2:  # the run's log says so (a warning, on the terminal too)
            assert "earlier runs not loaded yet: a second SIGINT left them for later" in caplog.text
        third = runner.invoke(app, ["run", str(spec)])  # resumes night 2, loading night 1 first
        assert third.exit_code == 0, third.output
    assert all(m.loaded for m in all_manifests(OutputLayout(output)))
    assert {r[0] for r in rows(output / "harvest.duckdb", "SELECT status FROM runs")} == {"complete"}
