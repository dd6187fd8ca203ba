"""`runner: {kind: dask}`: the connector tasks run on a local Dask cluster of processes, in rounds of grants.

The same job run locally and on Dask lands the same tables for the same credits; under a short budget the
spending never passes it, page counts end within one of each other, and no page is paid twice.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.sandbox.config import BILLED_FAULTS_DEFAULT, FaultKind, SandboxConfig
from harvest.sandbox.expected import expected_pages
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.declaring_helpers import Variant, aliased, builtin_declaration, variants
from tests.endpoints import AUDIENCE, CREATIVE, CREATIVE_DETAIL, FEED, PINS, SHORT_PROFILE
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, rows, run_flow, scalar, write_spec
from tests.net_helpers import free_port
from tests.process_helpers import dies_with_parent

TOPICS = ["oak", "elm", "ash", "fir"]
CONFIG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 9), CREATIVE: (2, 2)}, page_size=4
)
RECORD_TABLES = ("pinboard_pins", "creative_materials", "creative_material_details")


pytestmark = pytest.mark.usefixtures("api_key")  # harvest's key in the environment (conftest)


def job(base_url: str, output: Path, runner: dict[str, Any], credits: int = 1000) -> dict[str, Any]:
    queries = [
        {"id": "pins", "endpoint": PINS, "for_each": {"query": TOPICS}},
        {"id": "creatives", "endpoint": CREATIVE, "params": {"query": "desks", "limit": 5}},
        {"id": "details", "endpoint": CREATIVE_DETAIL, "for_each": {"material_id": {"from": "creatives", "field": "material_id"}}},
    ]  # fmt: skip
    return job_spec(base_url, output, queries, name="dask-job", credits=credits, concurrency=4, runner=runner)


def table(db: Path, name: str) -> list[tuple[Any, ...]]:
    cols = [r[0] for r in rows(db, "SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [name])]
    data = [c for c in cols if not c.startswith("_")]
    return sorted(rows(db, f'SELECT {", ".join(data)} FROM "{name}"'), key=repr)


def paid(entries: list[Any]) -> Counter[tuple[Any, ...]]:
    return Counter(
        (e.path, e.path_params.get("material_id"), tuple(sorted(e.params.items()))) for e in entries
    )


@pytest.mark.scenario
def test_local_and_dask_land_the_same_tables_for_the_same_credits(
    prefect_harness: None, tmp_path: Path
) -> None:
    results = {}
    for name, runner in (
        ("local", {"kind": "local"}),
        ("dask", {"kind": "dask", "workers": 2, "round_pages": 2}),
    ):
        with running(CONFIG) as sb:
            output = tmp_path / name
            summary = run_flow(write_spec(tmp_path, job(sb.base_url, output, runner), f"{name}.yaml"))
            results[name] = (summary, paid(data_entries(sb)), sb.billed_total(), output / "harvest.duckdb")
    (local, local_paid, local_billed, local_db), (dask, dask_paid, dask_billed, dask_db) = results.values()
    assert local.status == dask.status == "complete", dask
    assert local_paid == dask_paid and set(dask_paid.values()) == {1}, "the same pages, each paid once"
    assert local_billed == dask_billed == local.credits_spent == dask.credits_spent
    for name in RECORD_TABLES:
        assert table(local_db, name) == table(dask_db, name), name
    assert scalar(dask_db, "SELECT count(*) FROM query_state WHERE status = 'complete'") == len(dask.queries)


@pytest.mark.scenario
@pytest.mark.parametrize("pins", variants(PINS))
def test_a_short_budget_on_dask_is_never_passed_and_shared_breadth_first(
    prefect_harness: None, dask_address: str, tmp_path: Path, pins: Variant
) -> None:
    """The same when the pins are an endpoint the job declares: Dask workers build it from the run."""
    budget, round_pages = 13, 5
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (9, 9)}, page_size=3)
    runner = {"kind": "dask", "address": dask_address, "round_pages": round_pages}
    spec = pins.spec(job("", tmp_path / "out", runner, credits=budget))
    spec["queries"] = [{**spec["queries"][0], "endpoint": pins.path}]
    with aliased(config) as sb:
        spec["service"]["base_url"] = sb.base_url
        summary = run_flow(write_spec(tmp_path, spec))
        billed, entries = sb.billed_total(), data_entries(sb)
    assert sum(expected_pages(PINS, {"query": t}, config) for t in TOPICS) > budget
    assert round_pages * len(TOPICS) > budget, "one round must make the queries compete for the budget"
    assert billed == summary.credits_spent == budget
    assert set(paid(entries).values()) == {1}
    pages = [q["pages"] for q in summary.queries]
    assert sorted(pages) == [3, 3, 3, 4], pages  # 13 credits, 4 queries at 1 credit a page: a fair share each
    per_topic = Counter(e.params["query"] for e in entries)
    assert sorted(per_topic.values()) == [3, 3, 3, 4] and set(per_topic) == set(TOPICS), per_topic
    assert {q["status"] for q in summary.queries} == {"budget_exhausted"}


def test_the_balance_floor_holds_on_dask(prefect_harness: None, dask_address: str, tmp_path: Path) -> None:
    """`budget.min_balance` on Dask: the grants never take the account below the floor, the run stops there."""
    config = SandboxConfig(api_keys={SECRET_KEY: 60}, pages_by_path={PINS: (30, 30)}, page_size=3)
    spec = job("", tmp_path / "out", {"kind": "dask", "address": dask_address, "round_pages": 5}, credits=100)
    spec["budget"]["min_balance"] = 40
    spec["queries"] = [{"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}]
    with running(config) as sb:
        spec["service"]["base_url"] = sb.base_url
        summary = run_flow(write_spec(tmp_path, spec))
        balance, billed = sb.balance(), sb.billed_total()
    (query,) = summary.queries
    assert query["status"] == summary.status == "budget_exhausted", summary
    assert balance == 40 and billed == summary.credits_spent == 20, (balance, billed)
    assert "floor of 40 credits" in query["error"], query


def test_a_local_cluster_serves_no_dashboard_and_takes_no_fixed_port() -> None:
    """Nothing of a run's local cluster listens on :8787 (the dashboard's port), and no dashboard is served; its
    connections keep a short log of their messages."""
    import urllib.error
    import urllib.request
    import warnings

    from harvest.flows.orchestrator.dask_runner import dask_task_runner
    from harvest.flows.spec import parse_spec

    spec = parse_spec(yaml.safe_dump(job("http://127.0.0.1:9", Path("out"), {"kind": "dask", "workers": 1})))
    with warnings.catch_warnings(record=True) as caught, dask_task_runner(spec) as runner:
        warnings.simplefilter("always")
        scheduler = runner.client.cluster.scheduler  # the client starts the cluster
        bound = [sock.getsockname() for sock in scheduler.http_server._sockets.values()]
        assert bound and all(host == "127.0.0.1" and port != 8787 for host, port, *_ in bound), bound
        with pytest.raises(urllib.error.HTTPError) as status:
            urllib.request.urlopen(f"http://127.0.0.1:{bound[0][1]}/status", timeout=60)
        assert status.value.code == 404
        # each connection keeps 10 batches of messages, not 1,000 (a round's task each: 4,000 one-page queries
        # held ~70 MB more in each worker and ~340 MB in harvest's process), in its workers too
        import dask

        assert dask.config.get("distributed.admin.low-level-log-length") == 10
        kept = runner.client.run(lambda: dask.config.get("distributed.admin.low-level-log-length"))
        assert list(kept.values()) == [10], kept
    assert not [w for w in caught if "8787" in str(w.message)], [str(w.message) for w in caught]


@pytest.fixture
def keyless_cluster(prefect_api_url: str, tmp_path: Path) -> Iterator[str]:
    """A Dask scheduler and one worker in processes of their own whose environment has no HARVEST_API_KEY, as
    workers on other machines that were not given it: the scheduler's address."""
    env = {k: v for k, v in os.environ.items() if k != "HARVEST_API_KEY"}
    env["PREFECT_API_URL"] = prefect_api_url
    address = f"tcp://127.0.0.1:{free_port()}"
    dask = [sys.executable, "-m", "dask"]
    procs = [
        subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                          "--no-dashboard"], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=dies_with_parent),
        subprocess.Popen([*dask, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard"],
                         env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=dies_with_parent),
    ]  # fmt: skip
    from distributed import Client

    try:
        with Client(address, timeout=120) as client:
            client.wait_for_workers(1, timeout=120)
        yield address
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=60)


@pytest.mark.scenario
def test_workers_without_the_key_stop_the_run_at_its_first_round_and_count_nothing(
    keyless_cluster: str, tmp_path: Path
) -> None:
    """The flow has the key, its workers do not: every round of the first grant fails before sending
    anything. The run stops there with one message naming what is missing, and nothing is counted as spent."""
    spec = job("", tmp_path / "out", {"kind": "dask", "address": keyless_cluster, "round_pages": 2})
    spec["queries"] = spec["queries"][:1]
    with running(CONFIG) as sb:
        spec["service"]["base_url"] = sb.base_url
        summary = run_flow(write_spec(tmp_path, spec))
        entries = data_entries(sb)
    assert entries == [] and summary.credits_spent == 0, (entries, summary.credits_spent)
    assert summary.status == "failed", summary  # exit 1: the run could not collect, and says why once
    assert "a Dask worker could not read the API key" in (summary.error or "")
    assert "HARVEST_API_KEY" in (summary.error or "") and SECRET_KEY not in str(summary)
    assert {q["status"] for q in summary.queries} == {"stopped"} and len(summary.queries) == len(TOPICS)
    assert {q["credits"] for q in summary.queries} == {0}
    assert scalar(tmp_path / "out" / "harvest.duckdb", "SELECT credits_spent FROM runs") == 0


def test_dask_rounds_grant_within_a_fan_outs_cap_breadth_first() -> None:
    """A round's grants (what the flow's ledger reserves for a worker) stay within each fan-out's
    `max_credits_total` as the ledger reports it, one page at a time to the query with the fewest pages."""
    from harvest.connectors.paging.pager import QuerySpec
    from harvest.flows.run.dask.grants import Running, allocate

    running = [Running(QuerySpec(f"c[n={n}]", CREATIVE_DETAIL, {}), cost=2, pages=n % 2) for n in range(4)]
    running.append(Running(QuerySpec("pins", PINS, {}), cost=1))
    left = {"c[n=0]": 7, "c[n=1]": 7, "c[n=2]": 7, "c[n=3]": 7}
    grants = allocate(running, free=100, round_pages=3, fanout_left=left.get)
    assert sum(grants[q] * 2 for q in left) == 6 and grants["pins"] == 3  # a 4th page would pass the cap of 7
    assert {q: grants[q] for q in left} == {"c[n=0]": 2, "c[n=1]": 0, "c[n=2]": 1, "c[n=3]": 0}
    pages = [r.pages + grants[r.spec.query_id] for r in running[:4]]
    assert max(pages) - min(pages) <= 1  # those behind first: 2, 1, 1, 1 pages


def test_a_round_grants_an_endpoint_no_answer_priced_yet_one_page() -> None:
    """A fan-out of 200 queries on an endpoint whose price no answer has shown: a round grants it one page, to
    the first query breadth-first, and every query of a priced endpoint its pages beside it; one that cannot be
    granted (its cap spent) leaves the page to the next. Once the endpoint is priced, all 200 are granted."""
    from harvest.connectors.paging.pager import QuerySpec
    from harvest.flows.run.dask.grants import Running, allocate

    fan = [Running(QuerySpec(f"posts[h={n:03}]", FEED, {}), cost=1, price_key=FEED) for n in range(200)]
    running = [*fan, Running(QuerySpec("pins", PINS, {}), cost=1, price_key=PINS)]
    first = allocate(running, free=1000, round_pages=3, priced={PINS})
    assert {q: n for q, n in first.items() if n} == {"posts[h=000]": 1, "pins": 3}
    fan[0].spec, fan[0].credits = QuerySpec("posts[h=000]", FEED, {}, max_credits=4), 4
    capped = allocate(running, free=1000, round_pages=3, priced={PINS})
    assert {q: n for q, n in capped.items() if n} == {"posts[h=001]": 1, "pins": 3}
    priced = allocate(running, free=1000, round_pages=3, priced={PINS, FEED})
    assert sum(1 for n in priced.values() if n == 3) == 200  # all but the capped one


@pytest.mark.scenario
def test_a_dependent_query_no_request_fits_in_is_said_on_dask_as_it_is_locally(
    prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """The job declares an audience endpoint whose price its `handle` decides: 26 credits a request for these
    two handles, 1 for any other, so `harvest validate` accepts the dependent query's `max_credits` of 10 (a
    handle its parent gives may fit). The parent gives these two: no run can send one. On Dask as locally, the
    run says which queries could not send a request and why, not that the budget had no credits left (998 of
    1000 were), and exits 1; nothing is paid for them."""
    handles = ["acme", "zeta"]
    priced = {"credits": 1, "when": [{"param": "handle", "value": h, "credits": 26} for h in handles]}
    endpoints = {"/v1/declared/audience": {**builtin_declaration(AUDIENCE), "price": priced}}
    queries = [
        {"id": "profile", "endpoint": SHORT_PROFILE, "for_each": {"handle": handles}},
        {"id": "audience", "endpoint": "/v1/declared/audience",
         "for_each": {"handle": {"from": "profile", "field": "handle"}}, "max_credits": 10},
    ]  # fmt: skip
    said: dict[str, tuple[int, str, int]] = {}
    for name, runner in (("local", {"kind": "local"}), ("dask", {"kind": "dask", "address": dask_address})):
        with running(CONFIG) as sb:
            spec = job_spec(
                sb.base_url, tmp_path / name, queries, name="capped", credits=1000, runner=runner,
                endpoints=endpoints,
            )  # fmt: skip
            result = CliRunner().invoke(
                app, ["run", str(write_spec(tmp_path, spec, f"{name}.yaml"))], env={"COLUMNS": "2000"}
            )
            said[name] = (result.exit_code, result.stderr, sb.billed_total())
    for name, (code, err, billed) in said.items():
        assert code == 1, (name, err)
        assert billed == len(handles), (name, billed)  # the profiles, nothing for their audiences
        assert "never started" not in err and "no credits left" not in err, (name, err)
    line = next(x for x in said["local"][1].splitlines() if "could not send a request" in x)
    assert line.startswith(
        "2 queries could not send a request, their max_credits below what one request costs: 2 of 2 audience "
        "(max_credits 10, a request 26 credits: "
    ), line
    assert line in said["dask"][1].splitlines(), said["dask"][1]


def test_dask_rounds_grant_and_hold_the_price_the_service_was_seen_charging(
    prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """The service charges 5 where the catalog says 1; rounds of 2 pages, a budget of 12. The first round pays 5
    for its first page (the price unseen: one request's excess); its worker reports the price, so the next round
    grants a page at 5 and its worker holds 5 from its first request: 10 of 12, two pages. (Workers that started
    each round from the catalog's price paid 5 a round for grants of 2: 15 of 12.) The next plain night on Dask,
    with a budget of 4, holds 5 from the first and grants nothing."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={FEED: (10, 10)}, costs={FEED: 5}
    )
    queries = [{"id": "posts", "endpoint": FEED, "params": {"handle": "nasa"}}]
    runner = {"kind": "dask", "address": dask_address, "round_pages": 2}
    output = tmp_path / "out"
    with running(config) as sb:
        spec = write_spec(
            tmp_path, job_spec(sb.base_url, output, queries, name="risen", credits=12, runner=runner)
        )
        night = CliRunner().invoke(app, ["run", str(spec)])
        billed, answered = sb.billed_total(), len(data_entries(sb))
        next_night = CliRunner().invoke(app, ["run", str(spec), "--budget", "4"])
        billed_next = sb.billed_total()
    assert night.exit_code == 0 and next_night.exit_code == 0, night.output + next_night.output
    assert "credits spent: 10 of a budget of 12" in night.stdout, night.stdout
    assert billed == 10 and answered == 2, (billed, answered)
    assert "credits spent: 0 of a budget of 4" in next_night.stdout, next_night.stdout
    assert billed_next == billed, f"the next night paid {billed_next - billed} with a budget of 4"
    assert f"{FEED}: every request holds 5 credits from the first" in next_night.stderr, next_night.stderr
    db = output / "harvest.duckdb"
    assert rows(db, "SELECT credits_spent, budget FROM runs ORDER BY started") == [(10, 12), (0, 4)]
    assert rows(db, "SELECT sum(credits), count(*) FROM requests") == [(10, 2)]
    assert scalar(db, "SELECT pages FROM query_state") == 2


@pytest.mark.scenario
def test_a_fan_out_on_an_endpoint_no_answer_priced_yet_passes_no_budget_on_dask(
    prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """The service charges 5 where the catalog says 1; four queries fan out on the endpoint, rounds of 2 pages, a
    budget of 12. The first round grants the endpoint one page, to one query, which pays 5 (the price unseen:
    one request's excess, as locally); the next grants a page at 5 to the next query: 10 of 12, a page each for
    two queries. (Granted to all four at the catalog's price, each worker paid 5 for its first page: 20 of 12.)"""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={FEED: (10, 10)}, costs={FEED: 5}
    )
    queries = [{"id": "posts", "endpoint": FEED, "for_each": {"handle": ["nasa", "esa", "jaxa", "isro"]}}]
    runner = {"kind": "dask", "address": dask_address, "round_pages": 2}
    output = tmp_path / "out"
    with running(config) as sb:
        spec = job_spec(sb.base_url, output, queries, name="fanned", credits=12, runner=runner)
        night = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, spec))])
        billed, answered = sb.billed_total(), len(data_entries(sb))
    assert night.exit_code == 0, night.output
    assert "credits spent: 10 of a budget of 12" in night.stdout, night.stdout
    assert billed == 10 and answered == 2, f"billed {billed} for {answered} answers, of a budget of 12"
    db = output / "harvest.duckdb"
    assert rows(db, "SELECT sum(credits), count(*) FROM requests") == [(10, 2)]
    assert sorted(rows(db, "SELECT query_id, pages FROM query_state WHERE pages > 0")) == [
        ("posts[handle=esa]", 1),
        ("posts[handle=isro]", 1),
    ], "breadth-first: a page each, the first two by id"


@pytest.mark.scenario
def test_queries_a_fan_out_s_cap_left_unstarted_are_said_on_dask_as_locally(
    prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """Four queries fan out under `max_credits_total: 2` with 1,000 credits of budget: a page each for two, the
    other two never start. On Dask as locally the night names the fan-out's cap as why, not the run's budget
    (Dask said "the run's budget spent" with 2 of 1,000 credits spent: a user would raise `--budget` for
    nothing), and exits 0 as the job's `unstarted_exit_code` says. The cap holds across `--continue` (it paid 2
    more), which on Dask as locally has nothing to continue."""
    queries = [
        {"id": "posts", "endpoint": FEED, "for_each": {"handle": ["nasa", "esa", "jaxa", "isro"]},
         "max_credits_total": 2},
    ]  # fmt: skip
    said: dict[str, tuple[int, str, int]] = {}
    for name, runner in (("local", {"kind": "local"}), ("dask", {"kind": "dask", "address": dask_address})):
        with running(CONFIG) as sb:
            spec = job_spec(sb.base_url, tmp_path / name, queries, name="capped", credits=1000, runner=runner)
            path = str(write_spec(tmp_path, spec, f"{name}.yaml"))
            result = CliRunner().invoke(app, ["run", path], env={"COLUMNS": "2000"})
            again = CliRunner().invoke(app, ["run", path, "--continue"])
            continued = " ".join(again.output.split())  # what stopped them, and what would go on
            assert "nothing to continue" in continued, (name, again.output)
            assert re.search(r"stopped [2-4] queries at their max_credits_total", continued), (
                name,
                again.output,
            )
            assert "raise it in the spec, then `--continue` picks them up" in continued, (name, again.output)
            said[name] = (result.exit_code, result.stderr, sb.billed_total())
    why = "2 queries never started, their fan-out's cap (max_credits_total) spent before their turn: 2 of 4 posts ("
    for name, (_, err, _) in said.items():  # which two depends on the order each runner grants in
        (line,) = [x for x in err.splitlines() if "never started" in x]
        assert line.startswith(why) and line.count("posts[handle=") == 2, (name, err)
    assert [(code, billed) for code, _, billed in said.values()] == [(0, 2), (0, 2)], said


def test_a_free_page_the_ledger_refuses_after_an_overcharge_ends_the_dask_rounds(
    prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """The service charges 5 for the posts where the catalog says 1, and nothing for pins (`costs: {pins: 0}`);
    a budget of 3. The first round grants each endpoint one page (their prices unseen): the posts' page pays 5,
    past the budget, and one pins query all its free pages. The other pins query's free pages are then refused
    by the ledger (spent is past the budget), as locally: it ends `budget_exhausted` with nothing paid, and the
    run ends. (Rounds that granted it a free page again and again, each refused, never ended.)"""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE},
        pages_by_path={FEED: (3, 3), PINS: (2, 2)},
        costs={FEED: 5, PINS: 0},
    )
    queries = [
        {"id": "posts", "endpoint": FEED, "params": {"handle": "nasa"}},
        {"id": "pins", "endpoint": PINS, "for_each": {"query": ["elm", "oak"]}},
    ]
    runner = {"kind": "dask", "address": dask_address, "round_pages": 2}
    with running(config) as sb:
        spec = job_spec(
            sb.base_url,
            tmp_path / "out",
            queries,
            credits=3,
            runner=runner,
            costs={PINS: 0},
            allow_lower_costs=True,
        )
        summary = run_flow(write_spec(tmp_path, spec))
        billed, entries = sb.billed_total(), data_entries(sb)
    assert billed == summary.credits_spent == 5, (billed, summary.credits_spent)
    ended = {q["query_id"]: (q["status"], q["pages"], q["credits"]) for q in summary.queries}
    assert ended == {
        "posts": ("budget_exhausted", 1, 5),
        "pins[query=elm]": ("complete", 3, 0),  # its 2 pages and the empty one that ends them
        "pins[query=oak]": ("budget_exhausted", 0, 0),
    }, ended
    assert Counter(e.path for e in entries) == {FEED: 1, PINS: 3}, "no page of pins[query=oak] was asked"


def dask_night(
    tmp_path: Path,
    dask_address: str,
    config: SandboxConfig,
    queries: list[dict[str, Any]],
    credits: int,
    **more: Any,
) -> tuple[Any, int, int]:
    """The job run on Dask with rounds of one page through the CLI: (result, credits billed, requests sent)."""
    runner = {"kind": "dask", "address": dask_address, "round_pages": 1}
    with running(config) as sb:
        spec = job_spec(
            sb.base_url, tmp_path / "out", queries, name="parity", credits=credits, runner=runner, **more
        )
        result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, spec))], env={"COLUMNS": "2000"})
        return result, sb.billed_total(), len(data_entries(sb))


ONE_QUERY = [{"id": "pins", "endpoint": PINS, "params": {"query": "trail"}, "max_pages": 3}]


@pytest.mark.scenario
def test_a_page_the_service_keeps_failing_is_given_up_on_dask_after_the_policys_attempts(
    prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """Every request answered 500, each billed a credit. A round's grant holds one page, so it ends among the
    page's retries; the next round's retries count on from the attempts already made: the query fails after 5
    attempts and 5 credits, as on the local runner (each round trying the page anew spent the whole budget of
    100 on 500s)."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, fault_rate=1.0, fault_kinds=[FaultKind.SERVER_ERROR],
        billed_faults=BILLED_FAULTS_DEFAULT | {FaultKind.SERVER_ERROR},
    )  # fmt: skip
    result, billed, sent = dask_night(tmp_path, dask_address, config, ONE_QUERY, 100)
    assert result.exit_code == 1, result.output
    assert (billed, sent) == (5, 5)
    assert "harvest: pins: failed, 0 pages, 0 records, 5 credits" in result.stderr, result.stderr
    assert "gave up after 5 attempt(s)" in result.output, result.output
    assert "credits spent: 5 of a budget of 100; records: 0; status: failed" in result.stdout, result.stdout


@pytest.mark.scenario
def test_429s_on_dask_are_waits_not_attempts_as_locally(
    prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """The first page is answered 429 four times (Retry-After 1), then 500 twice, then as usual. Locally the 429s
    are waits, the 500s 2 of the 5 attempts, and the query completes; on Dask, rounds of one page, the attempts
    carried from round to round count the 500s alone, so it completes too (counting the 429s gave up on it)."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)}, retry_after="1",
        fault_plan_by_path={PINS: [FaultKind.RATE_LIMIT] * 4 + [FaultKind.SERVER_ERROR] * 2},
    )  # fmt: skip
    result, billed, sent = dask_night(tmp_path, dask_address, config, ONE_QUERY, 100)
    assert result.exit_code == 0, result.output
    assert (billed, sent) == (3, 9), result.output  # 3 pages; 4 refusals and 2 failures before the first
    assert "harvest: pins: max_pages, 3 pages, 30 records" in result.stderr, result.stderr
    assert "credits spent: 3 of a budget of 100" in result.stdout, result.stdout  # the 6 refusals settled


def test_an_answer_cut_short_twice_on_dask_is_asked_for_once_more_only_as_locally(
    prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """Every answer a billed 200 whose JSON is cut in the middle, the same bytes each time. Locally it is asked
    for once more, comes back the same, and is the service's answer: 2 requests, 2 credits. On Dask, rounds of
    one page, the damaged answer travels with the page to the next round: 2 as well (each round asking anew
    paid the retry policy's 5)."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)}, fault_rate=1.0,
        fault_kinds=[FaultKind.TRUNCATED],
    )  # fmt: skip
    result, billed, sent = dask_night(tmp_path, dask_address, config, ONE_QUERY, 20)
    assert result.exit_code == 1, result.output
    assert (billed, sent) == (2, 2), result.output
    assert "damaged on both tries" in result.output, result.output


def test_a_402_on_dask_stops_the_run_as_locally(
    prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """The account holds 1 credit: after the first billed page every request is answered 402. The first round
    sends one page of each endpoint no answer has priced yet (pins, feed); one of them is answered 402, and the
    run stops there as the local runner does, not granting the other queries a round to be refused in."""
    config = SandboxConfig(api_keys={SECRET_KEY: 1}, pages_by_path={PINS: (3, 3), FEED: (3, 3)})
    queries = [
        {"id": "pins", "endpoint": PINS, "for_each": {"query": ["oak", "elm", "ash"]}, "max_pages": 3},
        {"id": "feed", "endpoint": FEED, "params": {"handle": "acme.example"}, "max_pages": 3},
    ]
    result, billed, sent = dask_night(tmp_path, dask_address, config, queries, 40)
    assert result.exit_code == 1, result.output
    assert (billed, sent) == (1, 2), result.output
    assert "402" in result.output, result.output


def test_a_storm_of_429s_on_dask_ends_rate_limited_after_max_wait_as_locally(
    prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """Every request answered 429 (Retry-After 1), `max_wait_seconds: 3`, a budget of 10. Locally the query stops
    `rate_limited` after 3 s without an accepted answer (3 requests). On Dask each round's pace counts from the
    run's last accepted answer, so it stops too, after as few; each round's pace counting anew went on round
    after round until the budget's 10 credits were counted, and the run said the budget was spent."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)}, fault_rate=1.0,
        fault_kinds=[FaultKind.RATE_LIMIT], retry_after="1",
    )  # fmt: skip
    result, billed, sent = dask_night(
        tmp_path, dask_address, config, ONE_QUERY, 10, rate_limit={"max_wait_seconds": 3}
    )
    assert result.exit_code == 0, result.output
    assert billed == 0 and sent <= 5, (billed, sent, result.output)
    assert "harvest: pins: rate_limited, 0 pages, 0 records" in result.stderr, result.stderr
    assert "never started" not in result.output, result.output


@pytest.mark.scenario
def test_refusals_the_service_did_not_bill_go_back_to_a_short_budget_on_dask_as_locally(
    prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """The first page is answered 500 twice (not billed), then as usual; a budget of 3 for 3 pages. Locally the
    refusals count until the budget runs short, then the balance shows they were not billed and they go back:
    3 pages. On Dask the rounds do the same before they end for want of credits (they ended after 1 page, the
    two refusals counted as spent)."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)},
        fault_plan_by_path={PINS: [FaultKind.SERVER_ERROR] * 2},
    )  # fmt: skip
    result, billed, sent = dask_night(tmp_path, dask_address, config, ONE_QUERY, 3)
    assert result.exit_code == 0, result.output
    assert (billed, sent) == (3, 5), result.output
    assert "harvest: pins: max_pages, 3 pages, 30 records" in result.stderr, result.stderr
    assert "credits spent: 3 of a budget of 3" in result.stdout, result.stdout
