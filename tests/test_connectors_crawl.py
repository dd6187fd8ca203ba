"""Every endpoint paged to its end by harvest's real pager, client and ledger against the sandbox over HTTP.

The sandbox runs with its quirks at their real defaults (unknown parameters ignored, a dangling cursor on the
last page, repeated items on searches, real not-found shapes) and 2 to 5 pages a query, so paging really
happens. For each query: the distinct records per kind equal the sandbox's full crawl, no request is made
after the last page, and the credits harvest counted are what the sandbox billed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.credits.ledger import CreditLedger
from harvest.sandbox.config import Drift, Quirks, SandboxConfig
from harvest.sandbox.emulation import endpoint_table as emulated_table
from harvest.sandbox.emulation.creative import material_id
from harvest.sandbox.expected import expected_pages
from harvest.sandbox.wire.serving import RunningSandbox, running
from tests.crawl_helpers import (
    expected,
    harvested,
    query_entries,
    real_retries,  # noqa: F401  (fixture)
    run_query,
    sandbox_path,
)
from tests.endpoints import (
    ADVERTISERS,
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
    TWEETS,
    VIDEO_SEARCH,
)

pytestmark = pytest.mark.usefixtures("real_retries")

CONFIG = SandboxConfig(
    api_keys={"crawl-key": 10**6}, quirks=Quirks(), pages=(2, 5), page_size=7, creative_default_limit=9
)

BASE: dict[str, dict[str, Any]] = {
    CREATIVE: {"query": "running shoes", "order": "latest"},
    CREATIVE_DETAIL: {"material_id": material_id(CONFIG.seed, "running shoes", 3)},
    PHOTOS: {"url": "https://network-a.example/acme"},
    GROUP: {"group_id": "1234567", "sort_by": "CHRONOLOGICAL"},
    FORUM: {"subreddit": "python", "query": "typing", "sort": "top"},
    CLIP: {"url": "https://clips.streaming.example/FastClip"},
    COMMUNITY_POST: {"url": "https://video-platform.example/post/Ugkx9"},
    POST: {"url": "https://mb.example/profile/bob.mb.example/post/3kx"},
    FEED: {"handle": "alice.mb.example"},
    TWEETS: {"url": "https://mba.example/i/communities/7"},
    ADVERTISERS: {"query": "globex"},
    EMBED: {"handle": "natgeo"},
    REELS: {"user_id": "173560420"},
    PINS: {"query": "garden ideas"},
    VIDEO_SEARCH: {"query": "lofi", "uploadDate": "this_week"},
    COMMENT_REPLIES: {"continuationToken": "Eg0SC2RRdzR3OVdnWGNR"},
    SHOP: {"url": "https://shop.example/acme", "region": "DE"},
    PROFILE: {"handle": "chef", "sort_by": "popular"},
}

ENDPOINTS = catalog.endpoints()
EMULATED = emulated_table.BY_PATH


def _cases() -> list[Any]:
    cases = []
    for path, params in BASE.items():
        cases.append(pytest.param(path, params, id=path))
        if "trim" in ENDPOINTS[path].params.model_fields:
            cases.append(pytest.param(path, {**params, "trim": True}, id=f"{path}-trim"))
    # a repeated (list) parameter and an explicit page size travel through the pager's cursor rewriting
    filtered = {"query": "sneakers", "style_tags": ["ugc"], "limit": 2}
    cases.append(pytest.param(CREATIVE, filtered, id="/v1/creative/materials-filtered"))
    return cases


CASES = _cases()


def test_cases_cover_every_endpoint_and_trim() -> None:
    """Every endpoint the sandbox emulates with code of its own, and the ones served from their declarations
    that were (the catalog's others are paged from their declarations in tests/test_sandbox_declared.py)."""
    assert set(EMULATED) <= set(BASE) <= set(ENDPOINTS)
    trimmed = {c.values[0] for c in CASES if c.values[1].get("trim")}
    assert trimmed == {REELS, PINS, PROFILE}


@pytest.fixture(scope="module")
def crawl_sandbox() -> Iterator[RunningSandbox]:
    with running(CONFIG) as sb:
        yield sb


@pytest.mark.parametrize(("path", "params"), CASES)
async def test_endpoint_paged_to_its_end(
    crawl_sandbox: RunningSandbox, path: str, params: dict[str, Any]
) -> None:
    endpoint = ENDPOINTS[path]
    ledger = CreditLedger(1000)
    run = await run_query(crawl_sandbox, endpoint, params, ledger=ledger)
    entries = query_entries(crawl_sandbox, endpoint, params)
    want_pages = expected_pages(sandbox_path(endpoint, params), params, CONFIG)

    # the records: every kind, every distinct record, nothing missing, nothing extra
    got, want = harvested(endpoint, run.pages, params), expected(endpoint, params, CONFIG)
    assert got == want
    assert any(want.values()), "the case must have records to compare"
    if not endpoint.paging.single:
        assert want_pages >= 2, "a paged case must really page"

    # the requests: exactly the pages of a full crawl, none after the last one, each answered 200
    assert run.outcome.status == "complete", run.outcome
    assert len(entries) == want_pages == len(run.pages) == run.outcome.pages
    assert [e.status for e in entries] == [200] * want_pages
    assert run.pages[-1].cursor_out is None or run.pages[-1].record_count == 0

    # the money: what harvest counted is what the sandbox billed, page by page and in total
    billed = sum(e.credits for e in entries)
    assert billed == want_pages * endpoint.cost
    assert ledger.spent == run.outcome.credits == billed == sum(p.credits for p in run.pages)
    assert ledger.reserved == 0


async def test_the_interfaces_own_names_are_read_as_well() -> None:
    """`--drift interface-names`: every endpoint answering with the interface's names (`views`, a flat tweet
    author, flat replies with `parent_uri`, `price.amount`, a plain list of other clips, no `-end-` page) lands
    the same records, nothing lost, and no column the catalog reads at either name comes empty."""
    config = dataclasses.replace(CONFIG, drift=Drift(interface_names=True))
    with running(config) as sb:
        for case in CASES:
            path, params = case.values
            endpoint = ENDPOINTS[path]
            run = await run_query(sb, endpoint, params, ledger=CreditLedger(1000))
            assert run.outcome.status == "complete", (path, run.outcome)
            assert harvested(endpoint, run.pages, params) == expected(endpoint, params, config), path
            assert run.outcome.extraction.lost == 0 and run.outcome.extraction.empty_columns == [], path
            assert len(run.pages) == expected_pages(sandbox_path(endpoint, params), params, config), path
