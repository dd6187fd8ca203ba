"""Paging the service really uses, declared: page numbers the client counts, POST with every parameter
(the cursor too) in a JSON body, and follow-up cursors per comment thread. Each runs harvest's pager, client and
ledger against the sandbox over HTTP, which serves the endpoints from their declarations alone
(`tests/data/declared/surface-requests.yaml`); the sandbox's own crawl says what a full crawl holds, its ledger
what was asked and billed.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.records import keys_of
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.client import ServiceClient
from harvest.connectors.paging.pager import Page, QueryOutcome, QueryPager, QuerySpec
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import expected_pages, full_crawl
from harvest.sandbox.wire.serving import RunningSandbox, running
from tests.crawl_helpers import FAST, Run, collect, data_entries, run_query
from tests.flow_helpers import write_spec
from tests.surface_helpers import COMMENTS, CREATORS, LIBRARY_ADS, SEARCH, declared, endpoint, variant

KEY = "surface-key"


def sandbox(decls: dict[str, dict[str, Any]], **overrides: Any) -> Any:
    return running(SandboxConfig(api_keys={KEY: 10**6}, declared=decls, page_size=4, **overrides))


def keys(ep: Endpoint, table: str, records: list[Any], params: dict[str, Any]) -> Counter[Any]:
    return Counter(keys_of(ep.kind(table), records, params))


def landed(ep: Endpoint, run: Run, table: str, params: dict[str, Any]) -> set[Any]:
    return {k for page in run.pages for k in keys(ep, table, page.records.get(table, []), params)}


def crawled(ep: Endpoint, table: str, params: dict[str, Any], config: SandboxConfig) -> set[Any]:
    """The keys of a full crawl as harvest reads them (the sandbox names its kinds by table for declarations)."""
    return set(keys(ep, table, full_crawl(ep.path, params, config)[table], params))


# ---------------------------------------------------------------------------------------------- page numbers
PAGES = [
    pytest.param(declared(SEARCH), SEARCH, {"query": "standing desks"}, 20, list(range(1, 12)),
                 id="last: 11 is the last page asked, never 12 (400)"),
    pytest.param(declared(CREATORS), CREATORS, {}, 3, [1, 2, 3], id="a false more flag ends it"),
    pytest.param(variant(CREATORS, paging={"style": "page_number", "pages": "pagination.pages"}), CREATORS, {},
                 3, [1, 2, 3], id="the answer's count of pages ends it"),
    pytest.param(variant(CREATORS, paging={"style": "page_number", "first": 0, "step": 2},
                         params={"page": {"type": "integer", "min": 0}}),
                 CREATORS, {}, 3, [0, 2, 4, 6], id="first 0, step 2: an empty page ends it"),
]  # fmt: skip


@pytest.mark.parametrize(("decls", "path", "params", "pages", "asked"), PAGES)
def test_page_numbers_count_up_and_end_where_the_declaration_says(
    decls: dict[str, Any], path: str, params: dict[str, Any], pages: int, asked: list[int]
) -> None:
    ep = endpoint(path, decls)
    table = ep.kinds[0].table
    with sandbox(decls, pages_by_path={path: (pages, pages)}) as sb:
        run = asyncio.run(run_query(sb, ep, params))
        entries = data_entries(sb)
        config = sb.config
    assert [int(e.params["page"]) for e in entries] == asked
    assert {e.status for e in entries} == {200}  # never a page past `last`: the service answers those 400
    assert run.outcome.status == "complete" and run.outcome.pages == len(asked) == run.outcome.credits
    assert landed(ep, run, table, params) == crawled(ep, table, params, config)


# ---------------------------------------------------------------------------------------------- POST
async def _page(sb: RunningSandbox, ep: Endpoint, params: dict[str, Any], method: str | None) -> Run:
    ledger = CreditLedger(10**6)
    spec = QuerySpec("q", ep.path, params, method=method)
    async with ServiceClient(sb.base_url, KEY, ledger, retry=FAST) as client:
        return await collect(spec, ep, client, ledger)


def test_a_post_sends_every_parameter_and_the_cursor_in_a_json_body_paid_once_like_a_get() -> None:
    """The ad library search is POST only; a failed POST is retried and paid once, as a GET is. The forum
    comments take both: GET unless the query says POST. The sandbox refuses a body whose values are not of
    their declared JSON type (a boolean sent as text), so `trim: true` goes as JSON `true`."""
    decls = declared(LIBRARY_ADS, COMMENTS)
    ads, comments = endpoint(LIBRARY_ADS, decls), endpoint(COMMENTS, decls)
    ad_params, post_params = {"query": "running shoes", "status": "ACTIVE"}, {"url": "https://f.example/p/1"}
    faults = {LIBRARY_ADS: [None, "server_error"]}  # the second request answers 500: not billed, retried
    with sandbox(decls, pages=(3, 3), fault_plan_by_path=faults) as sb:
        run = asyncio.run(_page(sb, ads, ad_params, None))
        posted = data_entries(sb)
        got = asyncio.run(_page(sb, comments, {**post_params, "trim": True}, "POST"))
        by_post = data_entries(sb)[len(posted) :]
        gets = asyncio.run(_page(sb, comments, {**post_params, "trim": True}, None))
        by_get = data_entries(sb)[len(posted) + len(by_post) :]
        config = sb.config
    billed = [e for e in posted if e.credits]
    assert {e.method for e in posted} == {"POST"}
    assert [e.status for e in posted][:3] == [200, 500, 200]
    assert len(billed) == run.outcome.pages == expected_pages(LIBRARY_ADS, ad_params, config, True)
    assert [e.params.get("cursor") is None for e in billed] == [True] + [False] * (len(billed) - 1)
    assert all(e.params["query"] == "running shoes" and e.params["status"] == "ACTIVE" for e in billed)
    assert sum(e.credits for e in posted) == len(billed)  # the 500 was billed nothing, every page once
    assert run.outcome.credits == len(billed) + 1  # a refusal counts until the balance settles it, as a GET's
    assert len(set(map(bytes, run.kept))) == len(run.kept) == len(billed)  # each answer kept once
    table = ads.kinds[0].table
    assert landed(ads, run, table, ad_params) == crawled(ads, table, ad_params, config)
    assert {e.method for e in by_post} == {"POST"} and {e.status for e in by_post} == {200}
    assert {e.params["trim"] for e in by_post} == {"true"}
    assert {e.method for e in by_get} == {"GET"} and len(by_get) == len(by_post)
    assert got.outcome.status == gets.outcome.status == "complete"


# ---------------------------------------------------------------------------------------------- follow-ups
def test_each_thread_cursor_is_asked_once_and_its_replies_land() -> None:
    """A comment thread with more replies carries a cursor of its own (`replies.more.cursor`): each is one more
    request of the query, paid once, its answer read with the same declaration (its own next page and its
    replies' threads followed in turn). The repeat-items quirk hands the same thread's cursor out twice."""
    decls = declared(COMMENTS)
    ep, params = endpoint(COMMENTS, decls), {"url": "https://forum.example/r/desks/1"}
    with sandbox(decls, pages=(3, 3)) as sb:
        run = asyncio.run(run_query(sb, ep, params))
        entries = data_entries(sb)
        config = sb.config
    asked = Counter(e.params.get("cursor") for e in entries)
    table = "example_forum_post_comments"
    assert run.outcome.status == "complete"
    assert max(asked.values()) == 1, "a cursor was paid twice"
    assert (
        len(entries) == run.outcome.pages == run.outcome.credits == expected_pages(COMMENTS, params, config)
    )
    assert landed(ep, run, table, params) == crawled(ep, table, params, config)
    assert run.follow_ups > 3 and run.outcome.pages - run.follow_ups == 3  # the query's own 3 pages


async def _pager(
    sb: RunningSandbox, ep: Endpoint, spec: QuerySpec, budget: int
) -> tuple[Run, QueryOutcome, dict[str, Any] | None]:
    """A query paged under a budget: what it got, how it ended, and the follow-ups it left waiting."""
    ledger = CreditLedger(budget)
    pages: list[Page] = []
    async with ServiceClient(sb.base_url, KEY, ledger, retry=FAST) as client:
        pager = QueryPager(spec, ep, client, ledger, keep=lambda page: None)
        async for page in pager.pages():
            pages.append(page)
    left = pager.start.follow.plain() if pager.start.follow.left else None
    return Run(pages, pager.outcome, [], pager.start.follow.asked), pager.outcome, left


def _roles(pages: list[Page]) -> list[str]:
    """Each page as the query's own (its cursor is the one the previous own page handed on) or a follow-up."""
    roles, own = [], None
    for page in pages:
        if page.cursor_in == own and (own is not None or not roles):
            roles.append("own")
            own = page.cursor_out
        else:
            roles.append("follow-up")
    return roles


def test_a_short_budget_takes_turns_and_the_next_run_asks_what_was_left_once() -> None:
    """Breadth-first: the query's own pages and the follow-ups take turns while both wait, so a short budget
    buys comments of every page and the first threads; the budget holds; a later run (`--continue`) starts
    from the waiting follow-ups and the query's next page, and pays none of the first run's again."""
    decls = declared(COMMENTS)
    ep, params = endpoint(COMMENTS, decls), {"url": "https://forum.example/r/chairs/2"}
    with sandbox(decls, pages=(3, 3)) as sb:
        first, stopped, left = asyncio.run(_pager(sb, ep, QuerySpec("q", COMMENTS, params), budget=7))
        billed_first = sb.billed_total()
        spec = QuerySpec("q", COMMENTS, params, start_cursor=stopped.next_cursor, follow_state=left)
        rest, ended, _ = asyncio.run(_pager(sb, ep, spec, budget=1000))
        entries = data_entries(sb)
        config = sb.config
    assert _roles(first.pages) == ["own", "follow-up", "own", "follow-up", "own", "follow-up", "follow-up"]
    assert stopped.status == "budget_exhausted" and stopped.credits == billed_first == 7
    assert stopped.next_cursor is None and left is not None and left["top_ended"] and left["waiting"]
    assert ended.status == "complete"
    assert max(Counter(e.params.get("cursor") for e in entries).values()) == 1, "a request was paid twice"
    assert len(entries) == expected_pages(COMMENTS, params, config)
    table = "example_forum_post_comments"
    assert landed(ep, first, table, params) | landed(ep, rest, table, params) == crawled(
        ep, table, params, config
    )


def test_the_pages_page_number_and_post_examples_validate(tmp_path: Path) -> None:
    """docs/declaring-endpoints.md stays true: its page-number and POST declarations, saved in a catalog file,
    validate and plan."""
    page = (Path(__file__).parent.parent / "docs" / "declaring-endpoints.md").read_text()
    blocks = [
        re.search(rf"### {section}\n.*?```yaml\n(.*?)```", page, re.DOTALL)
        for section in ("Page numbers", "POST")
    ]
    assert all(blocks)
    (tmp_path / "catalog.yaml").write_text("endpoints:\n" + "".join(b.group(1) for b in blocks if b))
    spec = write_spec(tmp_path, {
        "name": "docs", "budget": {"credits": 10}, "catalogs": ["catalog.yaml"],
        "queries": [{"endpoint": CREATORS, "params": {"sortBy": "follower"}, "max_pages": 2},
                    {"endpoint": LIBRARY_ADS, "params": {"query": "shoes"}, "method": "POST", "max_pages": 3}],
    })  # fmt: skip
    planned = CliRunner().invoke(app, ["plan", str(spec)], env={"COLUMNS": "200"})
    assert planned.exit_code == 0, planned.output
    assert "2 pages" in planned.stdout and "3 pages" in planned.stdout
