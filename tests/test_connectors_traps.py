"""The service's traps (`docs/service-shapes.md`), each sprung on harvest's real pager, client and ledger
against the sandbox over HTTP: what a user would check is the records kept, the requests sent and the credits.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog import job_catalog
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.paging_styles import Paging
from harvest.connectors.catalog.records import keys_of
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.client import Timeouts
from harvest.connectors.paging.page_request import Attempt
from harvest.connectors.paging.pager import Page
from harvest.sandbox.config import BILLED_FAULTS_DEFAULT, Drift, FaultKind, Quirks
from harvest.sandbox.expected import crawl, expected_pages
from harvest.sandbox.wire.serving import RunningSandbox
from tests.crawl_helpers import (
    FAST,
    entry_cursor,
    expected,
    harvested,
    query_entries,
    real_retries,  # noqa: F401  (fixture)
    run_query,
    sandbox_path,
    wait_for_entries,
)
from tests.declaring_helpers import request_of
from tests.endpoints import (
    CLIP,
    COMMENT_REPLIES,
    COMMUNITY_POST,
    CREATIVE,
    CREATIVE_DETAIL,
    EMBED,
    FEED,
    FORUM,
    GROUP,
    PHOTOS,
    PINS,
    POST,
    PROFILE,
    REELS,
    SHOP,
    VIDEO_SEARCH,
)

pytestmark = pytest.mark.usefixtures("real_retries")

ENDPOINTS = catalog.endpoints()
DECLARATIONS = job_catalog.builtin_declarations()
Factory = Callable[..., RunningSandbox]

PAGED: dict[str, dict[str, Any]] = {
    CREATIVE: {"query": "sneakers"},
    PHOTOS: {"url": "https://network-a.example/acme"},
    GROUP: {"url": "https://network-a.example/groups/hikers"},
    FORUM: {"subreddit": "python", "query": "asyncio"},
    FEED: {"handle": "alice.mb.example"},
    REELS: {"handle": "natgeo"},
    PINS: {"query": "garden ideas"},
    VIDEO_SEARCH: {"query": "lofi"},
    COMMENT_REPLIES: {"continuationToken": "Eg0SC2RRdzR3OVdnWGNR"},
    SHOP: {"url": "https://shop.example/acme"},
    PROFILE: {"handle": "chef"},
}


"""The hand-picked queries above spring the traps that need a known answer; every other paged endpoint of the
catalog (each service endpoint a built-in) is asked with the parameters its declaration requires."""
CATALOG_PAGED: dict[str, dict[str, Any]] = {
    path: PAGED.get(path) or request_of(path) for path, e in ENDPOINTS.items() if not e.paging.single
}


def test_every_paged_endpoint_is_covered() -> None:
    assert set(PAGED) <= set(CATALOG_PAGED), "a hand-picked trap case is no longer a paged built-in"
    assert len(CATALOG_PAGED) > len(PAGED), "the catalog's declared paged endpoints are missing"
    styles = {e.paging.style for p, e in ENDPOINTS.items() if not e.paging.single}
    assert styles == {ENDPOINTS[p].paging.style for p in CATALOG_PAGED}


def _keys(endpoint: Endpoint, page: Page, params: dict[str, Any]) -> list[Any]:
    kind = endpoint.kinds[0]
    return keys_of(kind, page.records.get(kind.table, []), params)


# ---------------------------------------------------------------------------------------------- (a) misspelled cursor
def misspelled(paging: Paging) -> Paging:
    """The same paging style with every cursor parameter misspelled (`cursor` -> `cursr`), a counted page
    number's too (`page` -> `pae`)."""
    typo = {name: name[:-2] + name[-1] for name in paging.cursor}
    page = paging.page and dataclasses.replace(paging.page, param=typo[paging.page.param])
    return dataclasses.replace(paging, cursor={typo[n]: src for n, src in paging.cursor.items()}, page=page)


@pytest.mark.parametrize("path", list(CATALOG_PAGED))
async def test_misspelled_cursor_stops_as_a_loop_after_two_requests(
    sandbox_factory: Factory, path: str
) -> None:
    sb = sandbox_factory(pages=(3, 3), page_size=5, catalog=DECLARATIONS)  # as the sandbox harvest starts
    endpoint = dataclasses.replace(ENDPOINTS[path], paging=misspelled(ENDPOINTS[path].paging))
    params = CATALOG_PAGED[path]
    ledger = CreditLedger(100)
    run = await run_query(sb, endpoint, params, ledger=ledger)

    entries = query_entries(sb, endpoint, params)
    follow = endpoint.paging.follow  # a thread's follow-up pages are other pages, asked in between
    listing = [e for e in entries if not (follow and follow.param in e.params)]
    assert run.outcome.status == "loop_detected"
    assert "already used" in (run.outcome.error or "")
    assert len(sb.ledger) == len(entries) and len(listing) == 2, "exactly two requests, not one more"
    assert entries[-1] is listing[-1], "the repeat was the last request"
    # the service ignored the misspelled name and answered page 1 twice; both were paid and both kept
    assert all(e.status == 200 and e.credits == 1 for e in entries)
    first = set(endpoint.paging.first_request() or {})  # a counted page number is sent on page 1 too
    assert set(listing[1].params) - set(listing[0].params) | first == set(endpoint.paging.cursor)
    pages = [p for p in run.pages if not (follow and follow.param in (p.cursor_in or {}))]
    assert len(pages) == 2 and pages[0].records == pages[1].records
    assert len(run.pages) == len(entries)
    assert ledger.spent == run.outcome.credits == sb.billed_total() == len(entries)
    assert run.outcome.next_cursor is None, "resuming from the looping cursor would loop again"


async def test_misspelled_cursor_refused_when_the_service_is_strict(sandbox_factory: Factory) -> None:
    """With unknown parameters refused (not the real service), the typo fails loudly after page 1, unbilled."""
    sb = sandbox_factory(pages=(3, 3), quirks=Quirks(ignore_unknown_params=False))
    path = PINS
    endpoint = dataclasses.replace(ENDPOINTS[path], paging=misspelled(ENDPOINTS[path].paging))
    run = await run_query(sb, endpoint, PAGED[path])
    assert run.outcome.status == "failed" and "'cursr'" in (run.outcome.error or "")
    assert [e.status for e in sb.ledger] == [200, 400]
    assert len(run.pages) == 1 and run.outcome.credits == sb.billed_total() == 1


# ---------------------------------------------------------------------------------------------- (b) dangling cursor
@pytest.mark.parametrize(
    ("path", "flag"),
    [
        (PROFILE, lambda b: b["has_more"] == 0 and b["max_cursor"]),
        (
            REELS,
            lambda b: b["paging_info"]["more_available"] is False and b["paging_info"]["max_id"],
        ),
        (SHOP, lambda b: b["has_more"] is False and b["cursor"]),
        (PHOTOS, lambda b: b["next_page_id"] is None and b["cursor"]),
    ],
)
async def test_last_page_with_a_cursor_is_the_last_request(
    sandbox_factory: Factory, path: str, flag: Callable[[Any], Any]
) -> None:
    sb = sandbox_factory(pages=(2, 2))
    endpoint, params = ENDPOINTS[path], PAGED[path]
    run = await run_query(sb, endpoint, params)

    last = run.pages[-1]
    assert flag(last.body), "the trap is set: the last page still carries a cursor"
    assert run.outcome.status == "complete" and last.cursor_out is None
    assert len(sb.ledger) == 2 == expected_pages(path, params, sb.config)
    if path != PHOTOS:  # a lone photos `cursor` is refused (400): nothing to follow
        assert expected_pages(path, params, sb.config, follow_dangling=True) == 3, "following it costs a page"
    dangling = {str(v) for k, v in last.body.items() if k in ("max_cursor", "cursor")}
    dangling |= {str(last.body.get("paging_info", {}).get("max_id"))}
    sent = {str(v) for e in sb.ledger for v in (entry_cursor(endpoint, e) or {}).values()}
    assert not sent & dangling, "the dangling cursor was never sent"
    assert all(e.status == 200 for e in sb.ledger)
    assert harvested(endpoint, run.pages, params) == expected(endpoint, params, sb.config)


@pytest.mark.parametrize("path", [PROFILE, REELS])
async def test_trimmed_answer_without_a_more_flag_stops_at_the_empty_page(
    sandbox_factory: Factory, path: str
) -> None:
    """Trimmed answers drop `has_more` / `more_available`: the dangling cursor cannot be told from a real one,
    so it is followed once, answers an empty (billed) page, and paging stops there."""
    sb = sandbox_factory(pages=(2, 2))
    endpoint, params = ENDPOINTS[path], {**PAGED[path], "trim": True}
    run = await run_query(sb, endpoint, params)

    assert run.outcome.status == "complete"
    assert [p.record_count > 0 for p in run.pages] == [True, True, False]
    assert run.pages[2].cursor_in == run.pages[1].cursor_out
    assert len(sb.ledger) == 3 == expected_pages(path, params, sb.config)
    assert run.outcome.credits == sb.billed_total() == 3
    assert harvested(endpoint, run.pages, params) == expected(endpoint, params, sb.config)


# ---------------------------------------------------------------------------------------------- (c) repeated items
@pytest.mark.parametrize(
    "path",
    [
        CREATIVE,
        PINS,
        VIDEO_SEARCH,
    ],
)
async def test_repeated_items_across_pages(sandbox_factory: Factory, path: str) -> None:
    sb = sandbox_factory(pages=(3, 3), page_size=6, creative_default_limit=6)
    endpoint, params = ENDPOINTS[path], PAGED[path]
    run = await run_query(sb, endpoint, params)

    # pin search ends with a page of its own: `"cursor": "-end-"` and no pins, as on the service
    assert run.outcome.status == "complete" and len(run.pages) == (4 if path == PINS else 3)
    keys = [_keys(endpoint, p, params) for p in run.pages if p.record_count]
    assert len(keys) == 3
    for before, after in itertools.pairwise(keys):
        assert before[-1] == after[0], "the trap is set: a page starts with the previous page's last record"
    # every page kept whole (the duplicate is on two pages; DuckDB dedupes later) ...
    flat = [k for page in keys for k in page]
    assert len(flat) == len(set(flat)) + 2
    # ... and the distinct records are exactly the full crawl's
    assert harvested(endpoint, run.pages, params) == expected(endpoint, params, sb.config)


# ---------------------------------------------------------------------------------------------- (d) not found, blocked
async def test_feed_404_success_true_is_not_found_kept_and_billed(sandbox_factory: Factory) -> None:
    sb = sandbox_factory()
    path = FEED
    run = await run_query(sb, ENDPOINTS[path], {"handle": "missing.mb.example"})

    assert run.outcome.status == "not_found"
    assert [e.status for e in sb.ledger] == [404]
    (page,) = run.pages
    assert page.status_code == 404 and page.body["success"] is True and page.body["error"] == "not_found"
    assert page.record_count == 0 and [orjson.loads(raw) for raw in run.kept] == [page.body]  # kept as paid
    assert page.credits == run.outcome.credits == sb.billed_total() == 1


@pytest.mark.parametrize("real", [True, False], ids=["real-shapes", "uniform-404"])
async def test_unknown_material_404_is_not_found_and_billed(sandbox_factory: Factory, real: bool) -> None:
    sb = sandbox_factory(quirks=Quirks(real_not_found=real))
    path = CREATIVE_DETAIL
    run = await run_query(sb, ENDPOINTS[path], {"material_id": "video:0123456789abffff"})

    assert run.outcome.status == "not_found"
    assert [e.status for e in sb.ledger] == [404]
    (page,) = run.pages
    assert page.status_code == 404 and page.record_count == 0
    assert page.credits == run.outcome.credits == sb.billed_total() == 1


async def test_uniform_404_not_found_on_a_paged_endpoint(sandbox_factory: Factory) -> None:
    sb = sandbox_factory(quirks=Quirks(real_not_found=False))
    run = await run_query(sb, ENDPOINTS[REELS], {"handle": "missing_user"})
    assert run.outcome.status == "not_found" and [e.status for e in sb.ledger] == [404]
    assert len(run.pages) == 1 and run.pages[0].body["success"] is False
    assert run.outcome.credits == sb.billed_total() == 1


@pytest.mark.parametrize(
    ("path", "params", "records"),
    [
        (REELS, {"handle": "missing_user"}, 0),
        (REELS, {"handle": "missing_user", "trim": True}, 0),
        (PROFILE, {"handle": "missing_user"}, 0),
        (PROFILE, {"handle": "missing_user", "trim": True}, 0),
        (PHOTOS, {"url": "https://network-a.example/missing"}, 0),
        (PINS, {"query": "missing"}, 0),
        (SHOP, {"url": "https://shop.example/missing"}, 0),
        (CLIP, {"url": "https://clips.streaming.example/missing"}, 0),
        (POST, {"url": "https://mb.example/profile/missing/post/1"}, 0),
        # kinds located at the body itself: the flagged body is the one record
        (EMBED, {"handle": "missing_user"}, 1),
        (COMMUNITY_POST, {"url": "https://video-platform.example/post/missing"}, 1),
    ],
)
async def test_200_not_found_is_billed_and_says_not_found_where_it_can(
    sandbox_factory: Factory, path: str, params: dict[str, Any], records: int
) -> None:
    """An account flagged deactivated, or a single answer without its key, is `not_found`; an empty search is
    simply `complete`."""
    sb = sandbox_factory()
    run = await run_query(sb, ENDPOINTS[path], params)

    assert [e.status for e in sb.ledger] == [200], "one request, no paging on the empty answer"
    (page,) = run.pages
    assert page.record_count == records
    deactivated = isinstance(page.body, dict) and page.body.get("account_deactivated") is True
    keyless = records and page.report.kept == 0
    assert run.outcome.status == ("not_found" if deactivated or keyless else "complete"), page.body
    assert page.report.lost == 0, "a not-found answer is not drift"
    if records:
        (flagged,) = [r for recs in page.records.values() for r in recs]
        assert flagged is page.body
    assert page.credits == run.outcome.credits == sb.billed_total() == 1


async def test_403_blocked_fails_clearly_and_is_counted(sandbox_factory: Factory) -> None:
    sb = sandbox_factory()
    run = await run_query(sb, ENDPOINTS[PINS], {"query": "blocked cats"})

    assert run.outcome.status == "failed"
    assert "the source platform blocks this content (403)" in (run.outcome.error or "")
    assert [e.status for e in sb.ledger] == [403], "not retried"
    assert run.outcome.credits == sb.billed_total() == 1
    assert sum(p.record_count for p in run.pages) == 0


# ---------------------------------------------------------------------------------------------- (e) faults
SLOW_SECONDS = 1.0
READ_TIMEOUT = 0.5
RETRY_AFTER = 0.3


@pytest.mark.parametrize("fault", [f for f in FaultKind if f is not FaultKind.MALFORMED])
async def test_fault_on_second_request_still_completes(sandbox_factory: Factory, fault: FaultKind) -> None:
    """Three pages, a fault on the second request: the query completes, each page delivered once and in order,
    the faulted request retried once, and every credit counted.

    A slow answer needs a read timeout shorter than it, and on a busy machine a normal answer can outlast that
    timeout too: the service then answered (and billed) a page whose answer harvest never saw, and harvest
    rightly asks again. Such attempts are counted from harvest's own record of them (status None, not the
    faulted request), never guessed: every other count must hold exactly."""
    sb = sandbox_factory(
        pages=(3, 3),
        page_size=5,
        fault_plan={2: fault},
        slow_seconds=SLOW_SECONDS,
        retry_after=str(RETRY_AFTER),
        drift=Drift(sentinel_with_records=True),  # the third page of pins ends pin search itself
    )
    path = PINS
    endpoint, params = ENDPOINTS[path], PAGED[path]
    budget = 10
    ledger = CreditLedger(budget)
    timeouts = Timeouts(read=READ_TIMEOUT) if fault is FaultKind.SLOW else Timeouts()
    retry = dataclasses.replace(
        FAST, max_wait=5.0
    )  # no computed waits (initial=0), but Retry-After is honoured
    attempts: list[Attempt] = []
    run = await run_query(
        sb, endpoint, params, ledger=ledger, timeouts=timeouts, retry=retry, on_attempt=attempts.append
    )

    assert run.outcome.status == "complete", run.outcome
    assert harvested(endpoint, run.pages, params) == expected(endpoint, params, sb.config)
    want_cursors = [None, *[p.next for p in crawl(path, params, sb.config)][:-1]]
    assert [p.cursor_in for p in run.pages] == want_cursors, "each page delivered once, in order"
    entries = wait_for_entries(sb, len(attempts))
    (faulted,) = [i for i, e in enumerate(entries) if e.fault is not None]
    # attempts (one at a time: in the sandbox's order) that got no answer, the faulted one's own left out
    unanswered = sum(a.status_code is None for i, a in enumerate(attempts) if i != faulted)
    if fault is not FaultKind.SLOW:
        assert unanswered == 0, attempts  # no short timeout: every other answer was read
    assert len(entries) == len(attempts) == 4 + unanswered, "three pages, one retry, one per answer not seen"
    assert entries[faulted].fault == fault and entries[faulted].params == entries[faulted + 1].params
    if fault is FaultKind.RATE_LIMIT:
        assert entries[2].time - entries[1].time >= RETRY_AFTER, "the retry waited as Retry-After asked"
    billed = sb.billed_total()
    assert billed == 3 + (fault in BILLED_FAULTS_DEFAULT) + unanswered
    # an unknown charge counts as spent: harvest counted every request but the edge's 503 (it never reached the
    # service, which does not bill it), and the budget held
    assert billed <= ledger.spent == 4 + unanswered - (fault is FaultKind.UNAVAILABLE) <= budget
    assert ledger.reserved == 0


# ---------------------------------------------------------------------------------------------- (f) 402 mid-query
async def test_402_in_the_middle_stops_keeps_earlier_pages_and_the_cursor(sandbox_factory: Factory) -> None:
    sb = sandbox_factory(api_keys={"small-key": 50}, pages=(4, 4), page_size=5)
    path = PINS
    endpoint, params = ENDPOINTS[path], PAGED[path]

    def drain(page: Page) -> None:
        if page.index == 0:
            sb.set_balance(0)

    ledger = CreditLedger(100)
    run = await run_query(sb, endpoint, params, after_page=drain, ledger=ledger)

    assert run.outcome.status == "stopped", "a 402 stops the whole run, not just this query"
    assert "out of credits, or the API key is not valid" in (run.outcome.error or "")
    assert ledger.stopped is not None and "402" in ledger.stopped.reason
    assert len(run.pages) == 1 and run.pages[0].record_count > 0, "the page before it is kept"
    assert [e.status for e in sb.ledger] == [200, 402], "no further requests"
    assert run.outcome.next_cursor == run.pages[0].cursor_out is not None, (
        "resumable from the page not fetched"
    )
    assert run.outcome.credits == sb.billed_total() == 1
    assert sandbox_path(endpoint, params) == path


async def test_402_in_the_middle_names_where_the_key_comes_from_never_the_url(
    sandbox_factory: Factory,
) -> None:
    """The service cannot tell an empty account from a wrong key (one message for both): the query and the
    run's stop say both, and name the environment variable that holds the key; the URL answered, so not it."""
    from harvest.connectors.http.auth import ApiKey
    from harvest.connectors.http.client import ServiceClient
    from harvest.connectors.paging.pager import QuerySpec
    from tests.crawl_helpers import collect

    sb = sandbox_factory(api_keys={"small-key-0123456789": 50}, pages=(4, 4), page_size=5)
    path = PINS
    ledger = CreditLedger(100)
    key = ApiKey(sb.key, source="the environment variable HARVEST_API_KEY")
    async with ServiceClient(sb.base_url, key, ledger) as client:
        run = await collect(
            QuerySpec("q", path, dict(PAGED[path])), ENDPOINTS[path], client, ledger,
            lambda page: sb.set_balance(0),
        )  # fmt: skip
    said = [run.outcome.error or "", ledger.stopped.reason if ledger.stopped else ""]
    for text in said:
        assert "out of credits, or the API key is not valid" in text, said
        assert "the environment variable HARVEST_API_KEY" in text and sb.base_url not in text, said
    assert "base_url" not in " ".join(said)
