"""Crash, Ctrl-C and a second run, as a scheduled job meets them: real `harvest run` processes against the sandbox
over HTTP, killed mid-crawl, then run again. The sandbox's own ledger says what was paid twice; DuckDB, Parquet
and the raw pages say that nothing was lost or landed twice.

The processes talk to the session's Prefect test server (PREFECT_API_URL), so none starts a temporary one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from harvest.connectors.catalog import endpoints as catalog
from harvest.flows.cli import app
from harvest.flows.spec import UsageError
from harvest.sandbox.config import BILLED_FAULTS_DEFAULT, FaultKind, SandboxConfig
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import RunningSandbox, running
from harvest.tasks.output.journal import read_journal
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest, all_manifests, read_manifest
from harvest.tasks.output.raw_store import RawPageReader
from harvest.tasks.output.replay import replay_pages
from tests.crawl_helpers import data_entries, paid_twice
from tests.declaring_helpers import Variant, aliased, builtin, variants
from tests.endpoints import CREATIVE, CREATIVE_DETAIL, FEED, GROUP, PINS, PROFILE
from tests.flow_helpers import (
    BIG_BALANCE,
    SECRET_KEY,
    child_tables,
    expected_keys,
    held_duckdb,
    job_spec,
    key_set,
    rows,
    run_flow,
    scalar,
    write_spec,
)
from tests.history_helpers import assert_history_once
from tests.net_helpers import CuttableProxy
from tests.prefect_helpers import flow_run_states
from tests.process_helpers import (
    Watched,
    finish,
    imported_packages,
    messages,
    signal_group,
    start_run,
    wait_for_requests,
    wait_until,
)
from tests.sandbox_gate import WAIT, gated, settle

TOPICS = ["oak desk", "elm chair", "ash shelf", "fir bench"]
CREATIVE_PARAMS = {"query": "standing desks", "limit": 5}
CONCURRENCY = 4
CONFIG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE},
    pages_by_path={PINS: (20, 20), CREATIVE: (2, 2)},
    page_size=4,
    latency=0.03,
)
runner = CliRunner()


def job(base_url: str, output: Path, credits: int = 10_000, pins: Variant = builtin(PINS)) -> dict[str, Any]:
    queries = [
        {"id": "pins", "endpoint": pins.path, "for_each": {"query": TOPICS}},
        {"id": "creatives", "endpoint": CREATIVE, "params": CREATIVE_PARAMS},
        {"id": "details", "endpoint": CREATIVE_DETAIL, "for_each": {"material_id": {"from": "creatives", "field": "material_id"}}},
    ]  # fmt: skip
    return pins.spec(
        job_spec(base_url, output, queries, name="nightly", credits=credits, concurrency=CONCURRENCY)
    )


def kill_hard(proc: subprocess.Popen[str], sb: RunningSandbox) -> int:
    """SIGKILL the run's process group; return how many data requests the sandbox answered, once it is settled.

    A request the run sent just before the kill is still answered (and billed) by the sandbox after the run
    died, so the count is read only once the sandbox has read and answered everything the dead run sent
    (`settle`: no connection left open, none waiting to be accepted, no request in progress).
    """
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=WAIT)
    settle(sb)
    return len(data_entries(sb))


def material_ids() -> list[str]:
    return [m["material_id"] for m in full_crawl(CREATIVE, CREATIVE_PARAMS, CONFIG)["materials"]]


def expected_tables() -> dict[str, set[tuple[Any, ...]]]:
    queries = [(PINS, {"query": t}) for t in TOPICS] + [(CREATIVE, CREATIVE_PARAMS)]
    want = expected_keys(queries, CONFIG, [f"/v1/creative/materials/{m}" for m in material_ids()])
    return {table: set(keys) for table, keys in want.items()}


def assert_landed_once(output: Path, run_id: str) -> None:
    """DuckDB holds the full crawl; the run's Parquet holds each stored page's records exactly once, and the
    history views each of the run's fetches once (`tests.history_helpers`)."""
    db = output / "harvest.duckdb"
    for table, keys in expected_tables().items():
        assert key_set(db, table) == keys, table
    assert not list(output.rglob("*.tmp")), "a partial Parquet file was left behind"
    stored = Counter[str]()
    for path in OutputLayout(output).raw_files(run_id):  # a session's file holds every query's pages
        for raw in RawPageReader(path):
            for page in replay_pages([raw], catalog.get(raw.endpoint)):
                stored[page.raw.query_id] += page.record_count
    children = child_tables()  # their rows are items of the records counted here
    parquet = [
        str(p) for p in (output / "parquet").glob(f"*/*/{run_id}-*.parquet") if p.parts[-3] not in children
    ]
    con = duckdb.connect()
    landed = dict(
        con.execute(
            "SELECT _query_id, count(*) FROM read_parquet(?, union_by_name=true) GROUP BY 1", [parquet]
        ).fetchall()
    )
    assert landed == {q: n for q, n in stored.items() if n}
    assert_history_once(output, [run_id])


def test_kill_9_mid_crawl_then_the_same_command_resumes(
    prefect_api_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        proc = start_run(spec, tmp_path, prefect_api_url)
        wait_for_requests(sb, 40, proc)
        at_kill = kill_hard(proc, sb)

        assert (output / ".harvest-nightly.lock").exists(), "kill -9 left the lock file behind"
        listing = runner.invoke(app, ["runs", str(output)], env={"COLUMNS": "200"})
        loading = runner.invoke(app, ["load", str(output)], env={"COLUMNS": "200"})
        (killed,) = all_manifests(OutputLayout(output))

        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        entries = data_entries(sb)
        billed = sb.billed_total()
    assert killed.status == "running"
    assert "killed" in listing.stdout and killed.run_id in listing.stdout
    assert (
        f"run {killed.run_id} of job nightly was killed" in listing.stderr and "not loaded" in listing.stderr
    )
    assert "not loaded" in loading.stderr and loading.exit_code == 0
    assert "no run there has finished or been interrupted yet" in loading.stdout
    assert "harvest.duckdb" not in loading.stdout  # it does not exist: never named as holding anything
    assert code == 0, out + err
    assert "Traceback" not in err
    (run,) = all_manifests(OutputLayout(output))
    assert run.run_id == killed.run_id and run.status == "complete" and run.resumes == 1
    assert len(entries) > at_kill
    assert paid_twice(entries) <= CONCURRENCY, "only the pages in flight at the kill may be paid twice"
    assert billed <= run.credits_spent <= billed + CONCURRENCY
    db = output / "harvest.duckdb"
    assert rows(db, "SELECT run_id, status FROM runs") == [(killed.run_id, "complete")]
    # the service's bill covers both processes: the balance read before the first request was kept
    assert run.service_billed == billed and scalar(db, "SELECT service_billed FROM runs") == billed
    if billed != run.credits_spent:
        assert f"the account's balance fell by {billed} credits" in out
    # the killed process's flow run is Crashed in Prefect, naming the run; the resume's ran to its end
    assert run.flow_run_ids == [killed.flow_run_id, run.flow_run_id] and killed.flow_run_id
    states = flow_run_states(run.flow_run_ids)
    assert states[killed.flow_run_id][0] == "CRASHED", states
    assert f"harvest resumed run {run.run_id} in flow run {run.flow_run_id}" in states[killed.flow_run_id][1]
    assert states[run.flow_run_id][0] == "COMPLETED"
    details = Counter(e.path_params.get("material_id") for e in entries if e.path_params)
    assert set(details) == set(material_ids()) and sum(details.values()) - len(details) <= CONCURRENCY
    assert_landed_once(output, run.run_id)


FAILURES = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (60, 60), FEED: (4, 4), GROUP: (4, 4)}, page_size=4,
    latency=0.05, billed_faults=BILLED_FAULTS_DEFAULT | {FaultKind.SERVER_ERROR},
    fault_plan_by_path={FEED: [None, "server_error", "server_error"], GROUP: [None, "truncated", "truncated"]},
)  # fmt: skip
"""Pins that page long enough to be killed; the feed's second page answered 500 twice (billed: kept as a receipt),
the group's cut short twice (billed: kept, damaged): both queries end failed after one page."""


def listed_pages(listing: str, run_id: str) -> int:
    """The pages `harvest runs` shows for the run, in its table."""
    (row,) = [line for line in listing.splitlines() if run_id in line]
    return int(row.split("│")[5])


@pytest.mark.scenario  # a second kill -9 proof (~45 s): make scenarios
def test_harvest_runs_counts_a_killed_runs_pages_as_its_resume_does(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """A night that met a billed 500 and an answer damaged twice, killed with kill -9 mid-run: `harvest runs`
    counted every answer kept, the failures' two among them, so it showed two pages more than the resumed run's
    own summary says were landed before the kill (its pages less those the resume paid for). It now shows the
    pages its queries count, in its table and in its line."""
    output = tmp_path / "out"
    queries = [
        {"id": "feed", "endpoint": FEED, "params": {"handle": "acme.example"}},
        {"id": "group", "endpoint": GROUP, "params": {"group_id": "42"}},
        {"id": "pins", "endpoint": PINS, "for_each": {"query": TOPICS}},
    ]
    retried_once = {"attempts": 2}  # the feed's 500 is asked once more, then kept as its receipt
    with running(FAILURES) as sb:
        night = job_spec(sb.base_url, output, queries, name="nightly", credits=10_000, service=retried_once)
        spec = write_spec(tmp_path, {**night, "concurrency": CONCURRENCY})
        proc = start_run(spec, tmp_path, prefect_api_url)

        def failures_ended() -> bool:
            """Both failed queries' end lines are in the run's journal: their answers were kept before."""
            said = b"".join(j.read_bytes() for j in (output / "raw").glob("*/journal.jsonl"))
            return all(b'"e":"end","summary":{"query_id":"%s"' % q in said for q in (b"feed", b"group"))

        wait_until(failures_ended, proc, "the feed and the group ended")
        at_kill = kill_hard(proc, sb)
        listing = runner.invoke(app, ["runs", str(output)], env={"COLUMNS": "200"})
        (killed,) = all_manifests(OutputLayout(output))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        entries = data_entries(sb)
    assert killed.status == "running"  # killed mid-run: the pins were paging
    faults = sorted(e.fault for e in entries if e.fault)
    assert faults == ["server_error", "server_error", "truncated", "truncated"], (
        "each failure met before the kill"
    )
    assert code == 1, out + err  # the feed and the group failed; the pins ended
    (run,) = all_manifests(OutputLayout(output))
    assert run.run_id == killed.run_id and run.resumes == 1
    ended = {q["query_id"]: (q["status"], q["pages"]) for q in run.queries}
    assert (ended["feed"], ended["group"]) == (("failed", 1), ("failed", 1)), (
        ended
    )  # the failures are no pages
    resumed = entries[at_kill:]
    assert resumed and all(e.status == 200 and e.fault is None for e in resumed), "the resume paid only pages"
    landed_before_kill = sum(int(q["pages"]) for q in run.queries) - len(resumed)
    assert listing.exit_code == 0, listing.output
    assert listed_pages(listing.stdout, killed.run_id) == landed_before_kill, listing.stdout
    said = " ".join(listing.stderr.split())
    assert f"run {killed.run_id} of job nightly was killed ({landed_before_kill} pages," in said, said


@pytest.mark.scenario
def test_ctrl_c_stops_cleanly_and_the_next_run_resumes(
    prefect_api_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C stops sending at once (counted, not timed: the run is frozen at the sandbox's door when the signal
    goes out, and after its stop line the sandbox answers only what was in flight), lands and loads what it
    has, and the next run resumes it without paying a page twice."""
    output = tmp_path / "out"
    with gated(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        sb.gate.close_after(40)
        run = Watched(start_run(spec, tmp_path, prefect_api_url))
        sb.gate.wait_frozen(run.proc)
        answered_at_signal = len(data_entries(sb))  # exact: nothing moves while the gate is closed
        signal_group(run.proc, signal.SIGINT)  # what a terminal's Ctrl-C does
        run.wait_for_stderr("stopping; letting the requests in flight land")
        sb.gate.open()
        code, out, err = run.finish()
        at_stop = len(data_entries(sb))
        (stopped,) = all_manifests(OutputLayout(output))
        db = output / "harvest.duckdb"
        interrupted_rows = scalar(db, "SELECT count(*) FROM pinboard_pins")
        dest = tmp_path / "warehouse"  # a nightly export after the stopped run sends what it had
        sent_first = CliRunner().invoke(app, ["export", str(output), "--to", str(dest)])

        code2, out2, err2 = finish(start_run(spec, tmp_path, prefect_api_url))
        entries = data_entries(sb)
    # the resume wrote the run's files again: the next export sends the run again, so the warehouse has it all
    sent_again = CliRunner().invoke(app, ["export", str(output), "--to", str(dest)])
    assert sent_first.exit_code == 0 and sent_again.exit_code == 0, sent_first.output + sent_again.output
    exported = [p for p in dest.rglob("*.parquet") if "pinboard_pins" in p.parts]
    keys = (
        duckdb.connect()
        .execute(f"SELECT DISTINCT search_query, id FROM read_parquet({[str(p) for p in exported]!r})")
        .fetchall()
    )
    assert {tuple(k) for k in keys} == expected_tables()["pinboard_pins"], (
        "the resumed rows reached the export"
    )
    first, again = [json.loads(p.read_text()) for p in sorted(dest.glob("_exports/*/_manifest.json"))]
    assert first["runs"] == again["runs"] == [stopped.run_id]
    assert (first["resent"], again["resent"]) == (False, True), "a loader appending history is told"
    assert code == 130, out + err
    assert "Traceback" not in err and "error" not in err.lower(), err
    assert err.count("resumes it") == 1 and stopped.run_id in err
    assert at_stop - answered_at_signal <= CONCURRENCY, "after Ctrl-C only the requests in flight landed"
    assert stopped.status == "interrupted" and stopped.loaded
    assert rows(db, "SELECT status FROM runs") == [("complete",)], out2 + err2
    assert interrupted_rows > 0  # what landed before Ctrl-C was loaded at once
    assert code2 == 0, out2 + err2
    assert len(entries) > at_stop
    assert paid_twice(entries) == 0, "a clean stop lets every page in flight land: nothing is paid twice"
    assert_landed_once(output, stopped.run_id)


@pytest.mark.scenario
@pytest.mark.parametrize("pins", variants(PINS))
def test_a_killed_run_resumes_within_its_budget(prefect_api_url: str, tmp_path: Path, pins: Variant) -> None:
    """The same when the pins are a declared endpoint: the hard budget holds across a kill and a resume,
    and the resume lands what the killed run paid for."""
    budget = 60
    output = tmp_path / "out"
    with aliased(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, credits=budget, pins=pins))
        proc = start_run(spec, tmp_path, prefect_api_url)
        wait_for_requests(sb, 30, proc)
        kill_hard(proc, sb)
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        billed = sb.billed_total()
    assert code == 0, out + err
    (run,) = all_manifests(OutputLayout(output))
    assert run.status == "budget_exhausted"
    assert billed <= run.credits_spent <= budget
    assert budget - CONCURRENCY <= billed  # the resumed run used what the crash left of the budget
    pages = sum(q["pages"] for q in run.queries if q["query_id"].startswith("pins["))
    db = output / "harvest.duckdb"
    assert pages > 0 and scalar(db, f"SELECT count(*) FROM {pins.table('pinboard_pins')}") > 0


@pytest.mark.scenario
def test_a_resume_given_a_budget_below_what_was_spent_says_the_earlier_budget(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """A run killed with kill -9 after spending some 25 of its 40 credits, resumed with `--budget 10`: it pays
    nothing more, and neither its end nor `harvest runs` reads as a hard cap broken (`25 of a budget of 10`,
    `25/10`): both name the earlier budget that capped the spending and the resume's lower one, kept in the
    manifest and in DuckDB's `runs` (`budget` 10, `budget_before` 40)."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, credits=40))
        proc = start_run(spec, tmp_path, prefect_api_url)
        wait_for_requests(sb, 25, proc)
        at_kill = kill_hard(proc, sb)
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url, "--budget", "10"))
        after = len(data_entries(sb))
    listing = runner.invoke(app, ["runs", str(output)], env={"COLUMNS": "300"})
    (run,) = all_manifests(OutputLayout(output))
    spent = run.credits_spent
    assert after == at_kill, "the resume paid nothing: its budget is below what the run had spent"
    assert 10 < spent <= 40 and run.resumes == 1 and (run.budget, run.budget_before) == (10, 40)
    assert code == 0, out + err
    said = " ".join(out.split())
    assert "of a budget of 10" not in said, said
    resumed_line = " ".join(err.split())
    assert f"{spent} of 10 credits" not in err and "over this session's budget of 10" in resumed_line, err
    assert (
        f"credits spent: {spent} under the run's earlier budget of 40; a resume lowered it to 10, below what "
        "was spent, and paid nothing more;"
    ) in said, said
    assert listing.exit_code == 0 and f"{spent}/10" not in listing.stdout, listing.stdout
    assert f"{spent}/40, then 10" in listing.stdout, listing.stdout
    assert f"run {run.run_id}: credits spent: {spent} under the run's earlier budget of 40" in " ".join(
        listing.stderr.split()
    ), listing.stderr
    db = output / "harvest.duckdb"
    assert rows(db, "SELECT credits_spent, budget, budget_before FROM runs") == [(spent, 10, 40)]


@pytest.mark.scenario
def test_a_second_run_of_the_job_is_refused_at_once(prefect_api_url: str, tmp_path: Path) -> None:
    """ "At once" is shown, not timed: the first run is held at the sandbox's door for as long as the second
    one lives, so the second cannot have waited for the lock; and it never imported Prefect or an HTTP client,
    so it started nothing and sent nothing."""
    output = tmp_path / "out"
    with gated(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        sb.gate.close_after(5)
        first = start_run(spec, tmp_path, prefect_api_url)
        sb.gate.wait_frozen(first)
        (running_run,) = all_manifests(OutputLayout(output))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url, trace_imports=True))
        first_still_held = first.poll() is None and sb.gate.held > 0
        sb.gate.open()
        first_code, first_out, first_err = finish(first)
    said = "\n".join(messages(err))
    assert code == 2, out + said
    assert first_still_held, "the second run was refused while the first held the lock"
    assert "another harvest run of this job is running" in said and running_run.run_id in said
    assert str(first.pid) in said
    assert not imported_packages(err) & {"prefect", "httpx", "httpcore"}, "refused before any of it"
    assert first_code == 0, first_out + first_err
    assert paid_twice(data_entries(sb)) == 0


@pytest.mark.scenario
def test_a_second_run_refused_while_the_first_starts_names_the_run_it_resumes(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """A night killed mid-run; the nightly command resumes it but waits for Prefect's API (away), holding the
    job's lock. A second run refused meanwhile named only a pid, a host and when the lock was taken: now the
    run being resumed, by the id `harvest runs` lists, and when it started. Once Prefect answers the resume
    goes on to the end."""
    output = tmp_path / "out"
    port = int(prefect_api_url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    proxy = CuttableProxy(port)  # the session's Prefect server, as a restart takes it away and back
    api = f"http://127.0.0.1:{proxy.port}/api"
    try:
        with running(CONFIG) as sb:
            spec = write_spec(tmp_path, job(sb.base_url, output))
            first = start_run(spec, tmp_path, api)
            wait_for_requests(sb, 10, first)
            kill_hard(first, sb)
            (killed,) = all_manifests(OutputLayout(output))
            proxy.cut()
            resume = Watched(start_run(spec, tmp_path, api))
            resume.wait_for_stderr("waiting up to 60 s before the run starts")
            code, out, err = finish(start_run(spec, tmp_path, api))
            proxy.restore()
            resumed_code, resumed_out, resumed_err = resume.finish()
            listed = runner.invoke(app, ["runs", str(output)])
    finally:
        proxy.cut()
    said = " ".join(err.split())
    assert code == 2, out + said
    assert (
        f"another harvest run of this job is running on this output: run {killed.run_id}, started "
        f"{killed.started[:19]} UTC, resumed "
    ) in said, said
    assert f"{killed.run_id} " in listed.stdout and killed.started[:19] in listed.stdout, listed.stdout
    assert resumed_code == 0, resumed_out + resumed_err
    (ran,) = all_manifests(OutputLayout(output))
    assert ran.run_id == killed.run_id and ran.resumes == 1 and ran.status == "complete", ran


def killed_then_edited(
    sb: RunningSandbox, tmp_path: Path, api_url: str, topics: list[str], *added: dict[str, Any]
) -> tuple[Path, RunManifest, int, Any]:
    """A night of `job` killed after 30 data requests, then its spec edited: the pins fan-out asks `topics`, and
    the `added` queries follow. Returns the spec, the killed run, the requests the sandbox had answered at the
    kill, and what `harvest plan` said before the next run."""
    output = tmp_path / "out"
    spec = write_spec(tmp_path, job(sb.base_url, output))
    proc = start_run(spec, tmp_path, api_url)
    wait_for_requests(sb, 30, proc)
    at_kill = kill_hard(proc, sb)
    (killed,) = all_manifests(OutputLayout(output))
    edited = job(sb.base_url, output)
    edited["queries"][0]["for_each"]["query"] = topics
    edited["queries"].extend(added)
    write_spec(tmp_path, edited)
    return spec, killed, at_kill, runner.invoke(app, ["plan", str(spec)], env={"COLUMNS": "300"})


@pytest.mark.scenario
def test_a_changed_spec_is_refused_and_fresh_abandons_the_killed_run(
    prefect_api_url: str, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        # the first topic, paging when killed, gives way to another
        spec, killed, paid_before, planned = killed_then_edited(
            sb, tmp_path, prefect_api_url, [*TOPICS[1:], "teak table"]
        )
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        assert code == 2 and "--fresh" in err and killed.run_id in err, (code, out, err)
        said = " ".join(err.split())
        assert f"(no more in the spec: pins[query={TOPICS[0]}])" in said, err
        told = " ".join(planned.stdout.split())
        assert f"the next `harvest run` is refused: run {killed.run_id} of job nightly" in told, (
            planned.output
        )
        # said as `--fresh` does it: the killed run is not loaded now, its pages are landed and loaded first
        assert "abandon it (what it paid for is landed and loaded first)" in said, err
        assert len(data_entries(sb)) == paid_before  # refused before anything was sent

        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url, "--fresh"))
    assert code == 0, out + err
    runs = {m.run_id: m for m in all_manifests(OutputLayout(output))}
    assert set(runs) > {killed.run_id} and len(runs) == 2, runs
    abandoned = runs[killed.run_id]
    assert abandoned.status == "abandoned" and abandoned.loaded, (abandoned, out, err)
    assert killed.flow_run_id is not None
    state, message = flow_run_states([killed.flow_run_id])[killed.flow_run_id]
    assert state == "CRASHED" and f"harvest abandoned run {killed.run_id} (--fresh)" in message
    assert {q["status"] for q in abandoned.queries} >= {"abandoned"}
    db = output / "harvest.duckdb"
    assert dict(rows(db, "SELECT run_id, status FROM runs"))[killed.run_id] == "abandoned"
    new_topic = scalar(
        db, "SELECT count(DISTINCT _query_id) FROM pinboard_pins WHERE _query_id LIKE '%teak%'"
    )
    assert new_topic == 1
    assert not list(output.rglob("*.tmp"))  # the abandoned run's pages were landed from its raw store:
    stored = sum(
        page.record_count
        for path in OutputLayout(output).raw_files(killed.run_id)
        for raw in RawPageReader(path)
        if raw.query_id.startswith("pins")
        for page in replay_pages([raw], catalog.get(PINS))
    )
    parquet = str(output / "parquet" / "pinboard_pins" / "*" / f"{killed.run_id}-*.parquet")
    assert (
        duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{parquet}')").fetchall()[0][0] == stored
    )


@pytest.mark.scenario
def test_a_killed_night_resumes_under_a_spec_that_only_added_queries(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """kill -9 mid-night, then the team adds a topic to the fan-out and a query before the next night. The plain
    command was refused (exit 2) every night until someone ran `--fresh`, which paid again for every page the
    killed night had. Now it resumes: the topics it asked go on from where they stopped, the added ones start at
    page 1, one run, only the pages in flight at the kill paid twice, and a later resume compares with the
    edited spec."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        walnut = {"id": "walnut", "endpoint": PINS, "params": {"query": "walnut"}}
        spec, killed, at_kill, planned = killed_then_edited(
            sb, tmp_path, prefect_api_url, [*TOPICS, "teak table"], walnut
        )
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        entries = data_entries(sb)
    assert code == 0, out + err
    said = " ".join(err.split())
    assert f"run {killed.run_id} of job nightly is resumed under a spec edited since it started" in said, err
    told = " ".join(planned.stdout.split())  # `harvest plan` before the night said what it would do
    assert f"the next `harvest run` resumes run {killed.run_id} (killed)" in told, planned.output
    assert "the queries the spec added since start at page 1" in told, planned.output
    (run,) = all_manifests(OutputLayout(output))
    assert run.run_id == killed.run_id and run.status == "complete" and run.resumes == 1, run
    assert run.plan_key != killed.plan_key
    assert len(entries) > at_kill and paid_twice(entries) <= CONCURRENCY
    topics = [*TOPICS, "teak table", "walnut"]
    want = expected_keys([(PINS, {"query": t}) for t in topics], CONFIG)["pinboard_pins"]
    assert key_set(output / "harvest.duckdb", "pinboard_pins") == set(want)
    assert_history_once(output, [run.run_id])


@pytest.mark.scenario
def test_fresh_after_a_kill_lets_an_incremental_query_finish_its_first_pass(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """kill -9 after 3 of 7 pages of an incremental query's first pass, then `--fresh`: the abandoned run's
    pages are landed and the new run pays one head page, then goes on where the killed run stopped (before, it
    stopped at the head page as `caught_up`, with 15 of 33 videos)."""
    profile, params = PROFILE, {"handle": "nasa", "sort_by": "latest"}
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={profile: (7, 7)}, page_size=5, latency=0.3
    )
    output = tmp_path / "out"
    query = {"id": "videos", "endpoint": profile, "params": params, "incremental": True}
    with running(config) as sb:
        spec = write_spec(tmp_path, {**job(sb.base_url, output), "queries": [query]})
        proc = start_run(spec, tmp_path, prefect_api_url)
        wait_for_requests(sb, 3, proc)
        at_kill = kill_hard(proc, sb)
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url, "--fresh"))
        entries = data_entries(sb)
    assert code == 0, out + err
    runs = all_manifests(OutputLayout(output))
    assert [r.status for r in runs] == ["abandoned", "complete"]
    assert runs[1].queries[0]["status"] == "complete"
    want = expected_keys([(profile, params)], config)["short_video_videos"]
    assert key_set(output / "harvest.duckdb", "short_video_videos") == set(want)
    # one head page, plus at most the page that was in flight at the kill
    assert len(entries) - at_kill <= 7 - at_kill + 2 and paid_twice(entries) <= 2


# ------------------------------------------------------------------------------- loading what a stop left behind
def parquet_keys(output: Path, table: str, run_id: str) -> set[tuple[Any, ...]]:
    """The primary keys of one run's Parquet files of `table`."""
    cols = ", ".join(f'"{c}"' for c in catalog.all_kinds()[table].primary_key)
    parquet = str(output / "parquet" / table / "*" / f"{run_id}-*.parquet")
    return set(
        duckdb.connect()
        .execute(f"SELECT {cols} FROM read_parquet('{parquet}', union_by_name=true)")
        .fetchall()
    )


@pytest.mark.scenario
def test_ctrl_c_while_duckdb_is_held_then_harvest_load_loads_what_landed(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """The run says `harvest load` will load what landed; it does, and `harvest runs` says so truly."""
    output = tmp_path / "out"
    output.mkdir()
    db = output / "harvest.duckdb"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        with held_duckdb(db):
            proc = start_run(spec, tmp_path, prefect_api_url)
            wait_for_requests(sb, 40, proc)
            proc.send_signal(signal.SIGINT)
            code, out, err = finish(proc)
        (stopped,) = all_manifests(OutputLayout(output))
        before = runner.invoke(app, ["runs", str(output)], env={"COLUMNS": "200"})
        loading = runner.invoke(app, ["load", str(output)], env={"COLUMNS": "200"})
        (loaded,) = all_manifests(OutputLayout(output))
        after = runner.invoke(app, ["runs", str(output)], env={"COLUMNS": "200"})
        in_db = rows(db, "SELECT run_id, status FROM runs")
        pins, landed_pins = (
            key_set(db, "pinboard_pins"),
            parquet_keys(output, "pinboard_pins", stopped.run_id),
        )
        code2, out2, err2 = finish(start_run(spec, tmp_path, prefect_api_url))
    assert code == 130 and "not loaded into DuckDB yet" in err, out + err
    assert stopped.status == "interrupted" and not stopped.loaded
    assert f"run {stopped.run_id} of job nightly was interrupted" in before.stderr
    assert f"not loaded yet: `harvest load {output}` loads what it landed" in before.stderr
    assert loading.exit_code == 0, loading.output
    assert (
        f"loaded run {stopped.run_id} (interrupted): {stopped.records} records into " in loading.stdout
        and "nothing to load" not in loading.stdout
    )
    assert loaded.loaded and in_db == [(stopped.run_id, "interrupted")]
    assert pins == landed_pins and pins  # every record the interrupted run landed is in DuckDB
    assert "what it landed is loaded" in after.stderr and "not loaded" not in after.stderr
    (listed,) = [line for line in after.stdout.splitlines() if stopped.run_id in line]
    cells = [cell.strip() for cell in listed.split("│")]
    assert loaded.records > 0 and str(loaded.records) in cells, listed  # the records it landed, not "-"
    assert code2 == 0, out2 + err2  # the loaded interrupted run still resumes, and lands everything once
    assert_landed_once(output, stopped.run_id)
    assert scalar(db, "SELECT count(*) FROM held_by_a_notebook") == 0


def kill_in_load_step(proc: subprocess.Popen[str], output: Path) -> RunManifest:
    """SIGKILL the run's process group between its final manifest (written before the load) and the end of its
    load into DuckDB; return the manifest as the kill left it."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        for path in (output / "raw").glob("*/manifest.json"):
            if read_manifest(path).status != "running" and not read_manifest(path).loaded:
                os.killpg(proc.pid, signal.SIGSTOP)  # frozen at once, wherever it is in the load
                frozen = read_manifest(path)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=WAIT)
                assert not frozen.loaded, "the load ended before the run could be stopped in it"
                return frozen
        assert proc.poll() is None, f"the run ended before its load step: {proc.communicate()}"
        time.sleep(0.002)
    raise AssertionError("the run never reached its load step")


@pytest.mark.scenario
def test_a_run_killed_in_its_load_step_is_loaded_first_by_the_next_run(
    prefect_api_url: str, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        first = kill_in_load_step(start_run(spec, tmp_path, prefect_api_url), output)
        listing = runner.invoke(app, ["runs", str(output)], env={"COLUMNS": "200"})
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
    assert first.status == "complete" and not first.loaded
    assert "complete" in listing.stdout and " no " in listing.stdout
    assert code == 0, out + err
    notes = [line for line in err.splitlines() if "earlier run" in line]
    assert notes == [
        f"loaded 1 earlier run into DuckDB first, which had landed but were not loaded: {first.run_id} "
        f"(complete, {first.records} records)"  # the run's own, not the rows its tables hold after it
    ], err
    runs = {m.run_id: m for m in all_manifests(OutputLayout(output))}
    assert len(runs) == 2 and all(m.loaded and m.status == "complete" for m in runs.values())
    db = output / "harvest.duckdb"
    assert dict(rows(db, "SELECT run_id, status FROM runs")) == {r: "complete" for r in runs}
    assert scalar(db, "SELECT count(DISTINCT run_id) FROM query_state") == 2
    for table, keys in expected_tables().items():
        assert key_set(db, table) == keys, table


@pytest.mark.scenario
def test_continue_after_a_kill_is_refused_and_a_charge_before_the_resume_leaves_the_bill_unknown(
    prefect_api_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        proc = start_run(spec, tmp_path, prefect_api_url)
        wait_for_requests(sb, 30, proc)
        at_kill = kill_hard(proc, sb)
        (killed,) = all_manifests(OutputLayout(output))

        refused = start_run(
            spec, tmp_path, prefect_api_url, "--continue", "--budget", "90", trace_imports=True
        )
        code, out, traced = finish(refused)
        err = "\n".join(messages(traced))
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        with pytest.raises(
            UsageError
        ) as in_flow:  # a deployment's run (mode=continue) is refused the same way
            run_flow(spec, budget=90, mode="continue")
        assert len(data_entries(sb)) == at_kill  # refused before anything was sent

        with sb.client() as other_job:  # another job on the same key, between the kill and the resume
            for n in range(3 * CONCURRENCY):
                assert other_job.get(PINS, params={"query": f"other job {n}"}).status_code == 200
        code2, out2, err2 = finish(start_run(spec, tmp_path, prefect_api_url))
    assert code == 2, out + err
    assert f"run {killed.run_id} of job nightly is unfinished (killed)" in err and "--fresh" in err
    assert "resume it first with `" in err and f" run {spec}` (without --continue)" in err
    # at once: refused before Prefect was even imported (nothing sent: the sandbox's count above)
    assert "prefect" not in imported_packages(traced)
    assert killed.run_id in str(in_flow.value) and "--continue" in str(in_flow.value)
    assert f"resume it first with `harvest run {spec} " in str(in_flow.value)  # the file, not `SPEC`
    assert code2 == 0, out2 + err2
    (run,) = all_manifests(OutputLayout(output))
    assert run.run_id == killed.run_id and run.status == "complete" and run.budget == 10_000
    assert run.service_billed is None and "something else used or topped up the account" in (
        run.bill_unknown or ""
    )
    assert "the service's bill: unknown (the run was killed" in out2
    assert scalar(output / "harvest.duckdb", "SELECT service_billed FROM runs") is None


@pytest.mark.scenario
@pytest.mark.parametrize("creatives_at_kill", ["ended", "paging"])
def test_a_dependent_added_after_a_kill_starts_for_the_records_its_parent_found_before(
    prefect_api_url: str, tmp_path: Path, creatives_at_kill: str
) -> None:
    """kill -9 once the creatives query has ended (or while it pages); the team then adds the materials'
    details, a query per material the creatives found. The resume does not ask the creatives' landed pages
    again, so the details must start from the records the killed session landed too: every material's detail
    is fetched, once."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        base = job(sb.base_url, output)
        base["queries"] = base["queries"][:2]  # pins and creatives: no details yet
        spec = write_spec(tmp_path, base)
        proc = start_run(spec, tmp_path, prefect_api_url)
        if creatives_at_kill == "ended":
            wait_until(lambda: creatives_ended(output), proc, "the creatives query ended")
        else:
            wait_for_requests(sb, 2, proc, CREATIVE)
        kill_hard(proc, sb)
        assert creatives_ended(output) == (creatives_at_kill == "ended")
        write_spec(tmp_path, job(sb.base_url, output))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        entries = data_entries(sb)
    assert code == 0, out + err
    (run,) = all_manifests(OutputLayout(output))
    assert run.status == "complete" and run.resumes == 1, run
    details = Counter(e.path_params.get("material_id") for e in entries if e.path_params)
    assert set(details) == set(material_ids()) and max(details.values()) == 1, details
    creatives = [e for e in entries if e.path == CREATIVE and not e.path_params]
    # the creatives' landed pages were not asked again (but for a page in flight at the kill)
    assert paid_twice(creatives) <= (0 if creatives_at_kill == "ended" else CONCURRENCY)
    assert_landed_once(output, run.run_id)


def creatives_ended(output: Path) -> bool:
    """Whether the run's journal says the creatives query ended (its pages landed)."""
    journals = list((output / "raw").glob("*/journal.jsonl"))
    return bool(journals) and "creatives" in read_journal(journals[0]).ended
