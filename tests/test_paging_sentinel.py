"""End-of-pages sentinels: a cursor value that means "no more" (pin search's `"-end-"`) ends paging on the page
that carries it, with or without records there, and is never sent back: sent, it would be a paid request for
nothing. Harvest's real pager, client and ledger against the sandbox over HTTP, the sandbox's ledger as witness.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.paging_styles import Paging
from harvest.sandbox.config import Drift
from harvest.sandbox.expected import expected_pages
from harvest.sandbox.wire.serving import RunningSandbox
from tests.crawl_helpers import (
    expected,
    harvested,
    real_retries,  # noqa: F401  (fixture)
    run_query,
)
from tests.endpoints import PINS

pytestmark = pytest.mark.usefixtures("real_retries")

PARAMS = {"query": "italian pot roast"}
Factory = Callable[..., RunningSandbox]


def sent_cursors(sb: RunningSandbox) -> list[str | None]:
    return [e.params.get("cursor") for e in sb.ledger if e.path == PINS]


async def test_a_sentinel_on_a_page_with_pins_ends_paging_there(sandbox_factory: Factory) -> None:
    """The last page of pins carries `-end-` itself: its pins land, and no request follows it."""
    sb = sandbox_factory(pages=(3, 3), page_size=5, drift=Drift(sentinel_with_records=True))
    endpoint = catalog.endpoints()[PINS]
    run = await run_query(sb, endpoint, PARAMS)

    assert run.outcome.status == "complete", run.outcome
    assert run.pages[-1].record_count > 0 and run.pages[-1].body["cursor"] == "-end-"
    assert run.pages[-1].cursor_out is None and run.outcome.next_cursor is None
    assert "-end-" not in sent_cursors(sb) and len(sent_cursors(sb)) == 3 == len(run.pages)
    assert harvested(endpoint, run.pages, PARAMS) == expected(endpoint, PARAMS, sb.config)
    assert run.outcome.credits == sb.billed_total() == 3


async def test_the_page_that_ends_pin_search_is_paid_once_and_never_followed(
    sandbox_factory: Factory,
) -> None:
    """As the service ends pin search: the last page of pins carries a cursor, the page behind it answers
    `"cursor": "-end-"` and no `pins` (billed). harvest asks for that page once, lands nothing from it, and stops
    there: not drift, not a request with `-end-`."""
    sb = sandbox_factory(pages=(3, 3), page_size=5)
    endpoint = catalog.endpoints()[PINS]
    run = await run_query(sb, endpoint, PARAMS)

    assert run.outcome.status == "complete" and run.outcome.extraction.lost == 0
    last = run.pages[-1]
    assert last.body == {"success": True, "cursor": "-end-", "credits_remaining": last.body["credits_remaining"],
                         "credits_charged": 1}  # fmt: skip
    assert last.record_count == 0 and last.cursor_out is None
    assert len(run.pages) == expected_pages(PINS, PARAMS, sb.config) == 4
    assert "-end-" not in sent_cursors(sb) and len(sent_cursors(sb)) == 4


def test_the_sentinels_are_declared_per_endpoint() -> None:
    """Every paging style ends on `-end-` unless its declaration names others; a cursor that only contains the
    word is a cursor."""
    pins = catalog.endpoints()[PINS].paging
    assert pins.end_values == ("-end-",)
    assert pins.next_cursor({"pins": [], "cursor": "-end-"}) is None
    assert pins.next_cursor({"cursor": "abc-end-"}) == {"cursor": "abc-end-"}
    own = Paging("cursor", {"cursor": ("cursor",)}, end_values=("DONE", "-1"))
    assert own.next_cursor({"cursor": "DONE"}) is None and own.next_cursor({"cursor": -1}) is None
    assert own.next_cursor({"cursor": "-end-"}) == {"cursor": "-end-"}
    assert all(e.paging.single or "-end-" in e.paging.end_values for e in catalog.ENDPOINTS)
