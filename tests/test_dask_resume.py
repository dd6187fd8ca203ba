"""A run stopped part-way and resumed, on Dask as locally: a query's `max_credits` counts what it paid before.

Real `harvest run` processes against the sandbox over HTTP, stopped with Ctrl-C or killed with -9 at a known point
(the sandbox's gate holds the next request), then run again: the resume goes on under the run's one credit
ledger, and a killed session's charges are settled against the account's balance where nothing of it can
still pay.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from harvest.sandbox.config import SandboxConfig
from harvest.tasks.output.journal import read_journal
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries, paid_twice
from tests.endpoints import CREATIVE, CREATIVE_DETAIL, PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, scalar, write_spec
from tests.process_helpers import (
    SWITCHED_NIGHT,
    Watched,
    finish,
    killed_then_switched_to_dask,
    signal_group,
    start_run,
)
from tests.sandbox_gate import gated, settle

CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (20, 20)}, page_size=4)
CAP = 7
"""Pins cost 1 credit a page: the query may pay 7 pages of its 20, 3 of them before the stop."""


def stopped_then_resumed(tmp_path: Path, api_url: str, name: str, runner: dict[str, Any]) -> dict[str, Any]:
    """What a user sees of the stopped run and of its resume: exit codes, the query's summary in the manifest,
    the resume's line about the query on stderr (what this session paid), what the sandbox billed and answered."""
    queries = [{"id": "pins", "endpoint": PINS, "params": {"query": "oak"}, "max_credits": CAP}]
    output = tmp_path / name
    with gated(CONFIG) as sb:
        spec = job_spec(sb.base_url, output, queries, name="capped", credits=100, runner=runner)
        path = write_spec(tmp_path, spec, f"{name}.yaml")
        sb.gate.close_after(2)  # the third page waits at the door while the run is told to stop
        run = Watched(start_run(path, tmp_path, api_url, env={"COLUMNS": "2000"}))
        sb.gate.wait_frozen(run.proc)
        signal_group(run.proc, signal.SIGINT)
        run.wait_for_stderr("stopping; letting the requests in flight land")
        sb.gate.open()
        stopped_code = run.finish()[0]
        (stopped,) = all_manifests(OutputLayout(output))[0].queries
        code, _, err = finish(start_run(path, tmp_path, api_url, env={"COLUMNS": "2000"}))
        entries = data_entries(sb)
        billed = sb.billed_total()
    (run_,) = all_manifests(OutputLayout(output))
    (query,) = run_.queries
    return {
        "stopped": (stopped_code, stopped["status"], stopped["pages"]),
        "resumed": (code, run_.status, run_.credits_spent),
        "query": (query["status"], query["pages"], query["credits"]),
        "error": query["error"],
        "line": next((x for x in err.splitlines() if x.startswith("harvest: pins: ")), err),
        "billed": (billed, len(entries), paid_twice(entries)),
    }


@pytest.mark.scenario
def test_a_resumed_query_stops_at_its_max_credits_on_dask_as_locally(
    prefect_api_url: str, dask_address: str, tmp_path: Path
) -> None:
    """Stopped after 3 pages, resumed: the query pays 4 more, to its cap of 7, on Dask as locally, and ends
    saying so, its credits the 7 it paid over both sessions. Counting only the resume's spend against the cap
    grants past it: the ledger refuses the grant and the query ends a page short (6 pages, 3 credits), said to
    have met the run's budget with 94 of its 100 credits left. The landed rows are the same either way (34 in the
    Parquet, 28 keys in DuckDB)."""
    local, dask = (
        stopped_then_resumed(tmp_path, prefect_api_url, name, runner)
        for name, runner in (
            ("local", {"kind": "local"}),
            ("dask", {"kind": "dask", "address": dask_address, "round_pages": 2}),
        )
    )
    assert local["stopped"] == dask["stopped"] == (130, "interrupted", 3), (local, dask)
    assert dask["billed"] == local["billed"] == (CAP, CAP, 0), (local, dask)
    assert dask["resumed"] == local["resumed"] == (0, "budget_exhausted", CAP), (local, dask)
    assert dask["query"] == local["query"] == ("budget_exhausted", CAP, CAP), (local, dask)
    assert "the query's cap of 7 credits is reached (7 spent)" in local["error"], local
    assert dask["error"] == local["error"], (local, dask)
    # what this session paid: a Dask round of two pages counts two, the replayed pages none (Dask's line said
    # "3 pages, 34 records": its rounds, and the query's records over both sessions)
    assert local["line"] == "harvest: pins: budget_exhausted, 4 pages, 20 records, 4 credits", local
    assert dask["line"] == local["line"], (local, dask)


FANNED = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={CREATIVE: (1, 1)})
"""One page of creatives (1 credit), whose material ids each start a one-page detail query."""


def fanned_out_stopped_then_resumed(tmp_path: Path, api_url: str, runner: dict[str, Any]) -> dict[str, Any]:
    """Ctrl-C once the parent query has ended and its first dependent's page waits at the door (the others are
    started, none has a page), then the same command: what the stopped run and its resume end as, what the
    sandbox billed and answered, and the details DuckDB holds."""
    queries = [
        {"id": "creatives", "endpoint": CREATIVE, "params": {"query": "desks"}},
        {"id": "details", "endpoint": CREATIVE_DETAIL,
         "for_each": {"material_id": {"from": "creatives", "field": "material_id"}}},
    ]  # fmt: skip
    output = tmp_path / runner["kind"]
    with gated(FANNED) as sb:
        spec = job_spec(sb.base_url, output, queries, name="fanned", credits=100, runner=runner)
        path = write_spec(tmp_path, spec, f"fanned-{runner['kind']}.yaml")
        sb.gate.close_after(1, path=CREATIVE)  # the parent's one page, then every detail waits
        run = Watched(start_run(path, tmp_path, api_url))
        sb.gate.wait_frozen(run.proc)
        signal_group(run.proc, signal.SIGINT)
        run.wait_for_stderr("stopping; letting the requests in flight land")
        sb.gate.open()
        stopped_code = run.finish()[0]
        (first,) = all_manifests(OutputLayout(output))
        stopped = Counter((q["query_id"].split("[")[0], q["status"]) for q in first.queries)
        code, _, err = finish(start_run(path, tmp_path, api_url))
        entries = data_entries(sb)
        billed = sb.billed_total()
    (run_,) = all_manifests(OutputLayout(output))
    db = OutputLayout(output).db
    return {
        "stopped": (stopped_code, first.status, stopped),
        "resumed": (code, run_.status, Counter(q["status"] for q in run_.queries)),
        "billed": (billed, len(entries), paid_twice(entries), run_.credits_spent),
        "details": scalar(db, "SELECT count(DISTINCT material_id) FROM creative_material_details"),
        "stderr": err[-3000:],
    }


@pytest.mark.scenario
def test_a_resume_after_ctrl_c_goes_on_with_the_dependents_of_parents_that_ended_on_dask_as_locally(
    prefect_api_url: str, dask_address: str, tmp_path: Path
) -> None:
    """Stopped once the creative search had ended and its details had started (one page landed, the others
    none), the resume goes on with the unfinished details, on Dask as locally: every detail is paid once and
    lands, and the run completes. Dask's resume started only the queries its plan named and whose parents still
    ran: a dependent whose parent had ended was never started again, so it sent nothing and said `complete`
    (exit 0) while the manifest's queries were the parent and one detail, the journal's others `interrupted`."""
    local, dask = (
        fanned_out_stopped_then_resumed(tmp_path, prefect_api_url, runner)
        for runner in ({"kind": "local"}, {"kind": "dask", "address": dask_address, "round_pages": 2})
    )
    for outcome in (local, dask):
        code, status, stopped = outcome["stopped"]
        assert (code, status) == (130, "interrupted"), outcome
        assert stopped[("creatives", "complete")] == 1 and stopped[("details", "interrupted")] >= 1, outcome
        details = sum(n for (query, _), n in stopped.items() if query == "details")  # started before the stop
        assert details > 2, "the test needs details the stop left unfinished"
        assert outcome["resumed"] == (0, "complete", Counter({"complete": 1 + details})), outcome["stderr"]
        assert outcome["billed"] == (1 + details, 1 + details, 0, 1 + details), outcome
        assert outcome["details"] == details, outcome
    assert dask["details"] == local["details"], (local, dask)


def details_added_then_resumed(tmp_path: Path, api_url: str, runner: dict[str, Any]) -> dict[str, Any]:
    """Ctrl-C once the creatives query has ended (pins still paging), then the materials' details added to the
    spec and the same command: its exit code, what it said, and the details DuckDB holds."""
    creatives = {"id": "creatives", "endpoint": CREATIVE, "params": {"query": "desks"}}
    pins = {"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}
    details = {"id": "details", "endpoint": CREATIVE_DETAIL,
               "for_each": {"material_id": {"from": "creatives", "field": "material_id"}}}  # fmt: skip
    output = tmp_path / f"added-{runner['kind']}"
    config = replace(FANNED, pages_by_path={CREATIVE: (1, 1), PINS: (20, 20)})
    with gated(config) as sb:
        name = f"added-{runner['kind']}.yaml"
        path = write_spec(
            tmp_path, job_spec(sb.base_url, output, [creatives, pins], credits=100, runner=runner), name
        )
        sb.gate.close_after(2)  # the creatives' one page and the pins' first, then every request waits
        run = Watched(start_run(path, tmp_path, api_url))
        sb.gate.wait_frozen(run.proc)
        signal_group(run.proc, signal.SIGINT)
        run.wait_for_stderr("stopping; letting the requests in flight land")
        sb.gate.open()
        run.finish()
        write_spec(
            tmp_path,
            job_spec(sb.base_url, output, [creatives, pins, details], credits=100, runner=runner),
            name,
        )
        code, out, err = finish(start_run(path, tmp_path, api_url))
        entries = data_entries(sb)
    db = OutputLayout(output).db
    fetched = sum(1 for e in entries if e.path_params)
    held = scalar(db, "SELECT count(DISTINCT material_id) FROM creative_material_details") if code == 0 else 0
    return {"code": code, "said": " ".join((out + err).split()), "fetched": fetched, "held": held}


@pytest.mark.scenario
def test_a_dependent_added_after_ctrl_c_starts_from_its_ended_parent_locally_and_is_refused_on_dask(
    prefect_api_url: str, dask_address: str, tmp_path: Path
) -> None:
    """The creatives ended before a Ctrl-C; the team adds their materials' details. Locally the resume lands the
    creatives' pages again, and they start every detail. Dask's resume reads only the pages of the queries that
    go on, so nothing would start the details: it is refused by name (exit 2, nothing paid), not `complete`
    without them."""
    local = details_added_then_resumed(tmp_path, prefect_api_url, {"kind": "local"})
    dask = details_added_then_resumed(tmp_path, prefect_api_url, {"kind": "dask", "address": dask_address})
    assert local["code"] == 0 and local["fetched"] == local["held"] > 0, local
    assert dask["code"] == 2 and dask["fetched"] == 0, dask
    assert "(added: details, for records this resume does not read again)" in dask["said"], dask


@pytest.mark.scenario
def test_ctrl_c_on_harvest_s_own_cluster_pays_no_page_twice(prefect_api_url: str, tmp_path: Path) -> None:
    """A terminal's Ctrl-C goes to the whole process group, and on the cluster harvest starts itself
    (`workers: 1`) it killed the worker mid-request: the page was billed, its query ended `interrupted` with 0
    pages, and the resume paid for it again. The workers ignore it now; harvest's own handler stops the run, and
    the round in flight lands as on a cluster of its own."""
    outcome = fanned_out_stopped_then_resumed(tmp_path, prefect_api_url, {"kind": "dask", "workers": 1})
    code, status, stopped = outcome["stopped"]
    assert (code, status) == (130, "interrupted"), outcome
    details = sum(n for (query, _), n in stopped.items() if query == "details")
    assert outcome["resumed"] == (0, "complete", Counter({"complete": 1 + details})), outcome["stderr"]
    assert outcome["billed"] == (1 + details, 1 + details, 0, 1 + details), outcome
    assert outcome["details"] == details, outcome


TIGHT = 22
"""The run's budget: 20 pages at 1 credit, the empty page the last one's cursor still leads to (the service's
quirk), and the page the kill had billed without its answer read."""


def killed_then_resumed(
    tmp_path: Path,
    api_url: str,
    name: str,
    runner: dict[str, Any],
    held_by_orphan: bool = False,
    config: SandboxConfig = CONFIG,
    answered: int = 2,
    credits: int = TIGHT,
) -> dict[str, Any]:
    """A run killed with -9 (its whole process group: harvest, and the Dask cluster it started) while the
    request after the first `answered` waits at the sandbox's door, then the same command: what the resume ends
    as and what was billed. `held_by_orphan`: the held page is a round's on a cluster of its own, which outlives
    the kill; the door opens once the resume says it waits for that round."""
    queries = [{"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}]
    output = tmp_path / name
    with gated(config) as sb:
        spec = job_spec(sb.base_url, output, queries, name="tight", credits=credits, runner=runner)
        path = write_spec(tmp_path, spec, f"{name}.yaml")
        sb.gate.close_after(answered)
        run = start_run(path, tmp_path, api_url)
        sb.gate.wait_frozen(run)
        signal_group(run, signal.SIGKILL)
        finish(run)
        if held_by_orphan:
            resume = Watched(start_run(path, tmp_path, api_url))
            resume.wait_for_stderr("waiting for 1 round of the killed run still paying on the cluster")
            sb.gate.open()
            code, _, err = resume.finish()
        else:
            sb.gate.open()
            settle(sb)
            code, _, err = finish(start_run(path, tmp_path, api_url))
        billed = sb.billed_total()
    (run_,) = all_manifests(OutputLayout(output))
    (query,) = run_.queries
    return {
        "resumed": (code, run_.status, query["status"], query["pages"]),
        "billed": billed,
        "counted": run_.credits_spent,
        "bill": (run_.service_billed, run_.bill_unknown),
        "line": next((x for x in err.splitlines() if x.startswith("harvest: pins: ")), err[-3000:]),
        "said refusals": [x for x in err.splitlines() if "refused requests" in x],
        "dask's lines": [x for x in err.splitlines() if "distributed." in x],
        "stderr": err[-3000:],
    }


@pytest.mark.scenario
def test_a_kill_mid_round_leaves_no_credit_of_its_grant_counted_that_the_service_did_not_bill(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """A Dask round holds its whole grant (4 credits) while it pays page by page; killed after 2 pages, the
    resume counted the grant as spent (the account's balance said otherwise) and ended the night a page or two
    short of a budget that covers it, where the local runner, settling a killed session against its bill,
    completes. Both complete now, counting what the service billed, and the query's line says what this session
    paid: the killed session's request in flight (billed, its answer lost) was not one of this session's
    refusals, as the line used to say ("19 credits; 1 of them for refused requests, until the account's
    balance shows whether they were billed"; Dask said 2)."""
    local, dask = (
        killed_then_resumed(tmp_path, prefect_api_url, name, runner)
        for name, runner in (
            ("local", {"kind": "local"}),
            ("dask", {"kind": "dask", "workers": 1, "round_pages": 4}),
        )
    )
    for outcome in (local, dask):
        assert outcome["resumed"] == (0, "complete", "complete", 21), outcome["stderr"]
        assert outcome["billed"] <= TIGHT and outcome["counted"] == outcome["billed"], outcome
        assert outcome["line"] == "harvest: pins: complete, 19 pages, 89 records, 19 credits", outcome
        assert outcome["said refusals"] == [], "the sandbox refused nothing"
        assert outcome["dask's lines"] == [], "Dask's INFO lines (35 a run) are not the user's"


DROPPED = replace(CONFIG, fault_plan={3: "drop", 6: "drop"})
"""The third request's connection is dropped before any answer, the service billing nothing for it; so is the
sixth's, the one held at the door when the run is killed (numbered once it goes through)."""


@pytest.mark.scenario
def test_a_killed_dask_session_s_dropped_connection_is_no_charge_the_bill_is_said_to_hold(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """Killed while the first page of its third round waits at the door (its connection dropped once the door
    opens), after a round whose connection was dropped once (its page asked again): the killed session was
    billed 4 pages, and counted 5 settled (the dropped request's credit, billed or not, stays counted, as
    locally) and the open round's grant of 4. The resume settles that grant against the bill and completes,
    counting as the local runner counts: the bill and the one lost answer. The round used to report its lost
    credit as a charge an answer named: 5 named for a fall of 4, so the bill was "unknown (... something else
    used or topped up the account)", the grant stayed counted and the run ended `budget_exhausted`, pages
    short."""
    local, dask = (
        killed_then_resumed(
            tmp_path, prefect_api_url, name, runner, config=DROPPED, answered=5, credits=TIGHT + 1
        )
        for name, runner in (
            ("local", {"kind": "local"}),
            ("dask", {"kind": "dask", "workers": 1, "round_pages": 4}),
        )
    )
    for outcome in (dask, local):
        assert outcome["resumed"] == (0, "complete", "complete", 21), outcome["stderr"]
        assert outcome["billed"] == 21 and outcome["bill"] == (21, None), outcome
        assert outcome["counted"] == outcome["billed"] + 1, outcome
        assert "something else used" not in outcome["stderr"], outcome["stderr"]


@pytest.mark.scenario
def test_a_resume_waits_for_the_killed_flow_s_round_on_its_cluster_then_settles_it(
    prefect_api_url: str, dask_address: str, tmp_path: Path
) -> None:
    """On a cluster harvest did not start, a round outlives the flow killed under it and pays the rest of its
    grant. The resume waits for it before reading the balance, and says so: then the killed session is settled
    as locally, and the round's pages land once. Read before that round paid, the balance gave back the grant's
    unpaid part and the resume paid it again (24 billed on a budget of 22); not carried over, the grant stayed
    counted whole and the night ended short; either way the round's files and the resume's raced (a failed
    load once in seven runs)."""
    runner = {"kind": "dask", "address": dask_address, "round_pages": 4}
    outcome = killed_then_resumed(tmp_path, prefect_api_url, "orphan", runner, held_by_orphan=True)
    assert outcome["resumed"] == (0, "complete", "complete", 21), outcome["stderr"]
    assert outcome["billed"] <= TIGHT and outcome["counted"] == outcome["billed"], outcome
    assert outcome["said refusals"] == [], "the sandbox refused nothing"


@pytest.mark.scenario
def test_a_killed_flow_s_round_that_never_ends_is_waited_for_until_the_cap_or_a_stop_and_nothing_is_settled(
    dask_address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A round of the killed run still counted on a worker of the cluster (stuck on an answer that never comes):
    the resume's wait says so once, gives up at its cap and at once on Ctrl-C, and says False either way (the
    killed session is not settled: its grants stay counted, nothing passes the budget); once the round is gone,
    True at once. Asked of the cluster's real workers, as a resume asks them."""
    from distributed import Client

    from harvest.flows.run.dask.killed_rounds import killed_rounds_ended
    from harvest.tasks.round_task import _paying, rounds_paying

    run_id = "run-killed-mid-round"

    def ended(stopped: bool, cap: float) -> bool:
        return asyncio.run(killed_rounds_ended(dask_address, run_id, lambda: stopped, wait_seconds=cap))

    with Client(dask_address) as client:
        worker = sorted(client.scheduler_info(n_workers=-1)["workers"])[0]
        client.run(_paying, run_id, 1, workers=[worker])
        try:
            assert sum(client.run(rounds_paying, run_id).values()) == 1
            began = time.monotonic()
            assert ended(stopped=False, cap=2) is False
            assert time.monotonic() - began >= 2, "the wait lasts its cap"
            said = " ".join(capsys.readouterr().err.split())
            waiting = "harvest: waiting for 1 round of the killed run still paying on the cluster at"
            assert said.count(f"{waiting} {dask_address} (at most 0 min) before reading the balance") == 1
            began = time.monotonic()
            assert ended(stopped=True, cap=120) is False
            assert time.monotonic() - began < 60, "a Ctrl-C ends the wait at once, not at its cap"
        finally:
            client.run(_paying, run_id, -1, workers=[worker])
        capsys.readouterr()
        assert ended(stopped=False, cap=30) is True
        assert "harvest: waiting" not in capsys.readouterr().err, "nothing to wait for, nothing said"


@pytest.mark.scenario
def test_a_local_run_killed_then_resumed_on_a_dask_cluster_lands_each_row_once(
    prefect_api_url: str, dask_address: str, tmp_path: Path
) -> None:
    """A night killed -9 on the local runner (its own Parquet file left torn), then resumed after the spec's
    `runner:` was changed to a Dask cluster: the queries that ended before the kill land again from their raw
    pages, the one cut short goes on, and each landed row is in the Parquet once."""
    output = tmp_path / "out"
    with gated(SWITCHED_NIGHT) as sb:
        path = killed_then_switched_to_dask(sb, output, tmp_path, prefect_api_url, dask_address)
        ended = [q for q in read_journal(OutputLayout(output).journal_file(run_id_of(output))).ended.values()]
        code, _, err = finish(start_run(path, tmp_path, prefect_api_url))
    assert 0 < len(ended) < 3, "the test needs a query that ended before the kill and one that did not"
    assert code == 0, err[-3000:]
    (run_,) = all_manifests(OutputLayout(output))
    assert run_.status == "complete" and run_.resumes == 1, run_.status
    files = [output / p for _, p, _ in run_.all_files()]
    assert all(f.exists() for f in files), files
    on_disk = sorted((output / "parquet" / "pinboard_pins").glob("date=*/*.parquet"))
    assert on_disk == sorted(files), "no file of the run but those its manifest names"
    landed = sum(pq.read_metadata(p).num_rows for p in on_disk)
    assert landed == run_.records == 39, (landed, run_.records)


def run_id_of(output: Path) -> str:
    (manifest,) = (output / "raw").glob("*/manifest.json")
    return manifest.parent.name
