"""Shared helpers of the connector tests: run harvest's real pager, client and ledger against a sandbox over
HTTP, and compare what came back with what the sandbox says a full crawl holds and what it billed.

Harvest names its record kinds by table (`pinboard_pins`); the sandbox by kind (`pins`). A table is the
platform segment of the path (`/v1/pinboard/...` -> `pinboard`) joined to the sandbox kind, which
`sandbox_kind` undoes (and every test checks the mapping covers the sandbox's kinds exactly).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import stamina

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.fields import PARAM_PREFIX
from harvest.connectors.catalog.records import RecordKind, keys_of
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.client import RetryPolicy, ServiceClient, Timeouts
from harvest.connectors.paging.page_request import Attempt
from harvest.connectors.paging.pager import Page, QueryOutcome, QueryPager, QuerySpec
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.emulation.endpoint_table import BY_PATH
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.billing import LedgerEntry, params_dict
from harvest.sandbox.wire.serving import RunningSandbox

FAST = RetryPolicy(attempts=5, initial=0, max_wait=0, jitter=False)
"""Instant retries: a 429's Retry-After is capped by max_wait=0."""
ENVELOPE = frozenset({"success", "credits_remaining", "credits_charged"})


@pytest.fixture
def real_retries() -> Iterator[None]:
    """Whatever other tests did to stamina's global switches, these tests run the real retry loop."""
    was_active = stamina.is_active()
    stamina.set_active(True)
    with stamina.set_testing(False):
        yield
    stamina.set_active(was_active)


# ---------------------------------------------------------------------------------------------- kinds, keys
def sandbox_kind(endpoint: Endpoint, kind: RecordKind) -> str:
    """The sandbox's name of a record kind: its table's, for an endpoint served from its declaration; without
    the platform's prefix for one emulated with code of its own."""
    if endpoint.path not in BY_PATH:
        return kind.table
    platform = endpoint.path.split("/")[2].replace("-", "_")
    prefix = platform + "_"
    assert kind.table.startswith(prefix), (kind.table, endpoint.path)
    return kind.table.removeprefix(prefix)


def sandbox_path(endpoint: Endpoint, params: Mapping[str, Any]) -> str:
    """The request path (the detail endpoint carries the material id), as `full_crawl` wants it."""
    return endpoint.url_path(endpoint.params.model_validate(params))


def _normalise(kind: RecordKind, record: Any) -> Any:
    """A record without the envelope (kinds located at the body itself carry it) and without fields harvest
    takes from the request rather than the record (the embed's handle, part of the key instead); a record that
    came wrapped (a thread's reply in its view) is the record inside."""
    if kind.unwrap is not None:
        record = kind.unwrap.inner(record)
    if not isinstance(record, dict):
        return record
    from_params = {f.name for f in kind.fields if f.path.startswith(PARAM_PREFIX)}
    return {k: v for k, v in record.items() if k not in ENVELOPE and k not in from_params}


def distinct_by_key(
    endpoint: Endpoint, records_by_table: Sequence[Mapping[str, list[Any]]], params: Mapping[str, Any]
) -> dict[str, dict[Any, Any]]:
    """sandbox kind -> {primary key (as harvest extracts it): record, first seen}."""
    out: dict[str, dict[Any, Any]] = {sandbox_kind(endpoint, k): {} for k in endpoint.kinds}
    for records in records_by_table:
        for kind in endpoint.kinds:
            recs = records.get(kind.table, [])
            bucket = out[sandbox_kind(endpoint, kind)]
            for key, rec in zip(keys_of(kind, recs, params), recs, strict=True):
                bucket.setdefault(key, _normalise(kind, rec))
    return out


def harvested(
    endpoint: Endpoint, pages: Sequence[Page], params: Mapping[str, Any]
) -> dict[str, dict[Any, Any]]:
    return distinct_by_key(endpoint, [p.records for p in pages], params)


def expected(
    endpoint: Endpoint, params: Mapping[str, Any], config: SandboxConfig
) -> dict[str, dict[Any, Any]]:
    """The full crawl per the sandbox, keyed the way harvest keys records."""
    want = full_crawl(sandbox_path(endpoint, params), params, config)
    kinds = {sandbox_kind(endpoint, k) for k in endpoint.kinds}
    assert set(want) == kinds, f"harvest's kinds {sorted(kinds)} != the sandbox's {sorted(want)}"
    as_tables = {k.table: want[sandbox_kind(endpoint, k)] for k in endpoint.kinds}
    return distinct_by_key(endpoint, [as_tables], params)


# ---------------------------------------------------------------------------------------------- running
@dataclass
class Run:
    pages: list[Page]
    outcome: QueryOutcome
    kept: list[bytes]
    """Each paid answer's bytes as the pager handed them to its raw store (`keep`), in order."""
    follow_ups: int = 0
    """Of its pages, the follow-up requests its records handed out (`connectors.paging.follow_ups`)."""


async def collect(
    spec: QuerySpec, endpoint: Endpoint, client: ServiceClient, ledger: CreditLedger, after_page: Any = None
) -> Run:
    """Page a query to its end, as a caller would, keeping each paid answer's bytes; `after_page(page)` runs
    after each page is received."""
    pages: list[Page] = []
    kept: list[bytes] = []
    pager = QueryPager(spec, endpoint, client, ledger, keep=lambda page: kept.append(page.raw))
    async with contextlib.aclosing(pager.pages()) as it:
        async for page in it:
            pages.append(page)
            if after_page is not None:
                after_page(page)
    return Run(pages, pager.outcome, kept, pager.start.follow.asked)


async def run_query(
    sb: RunningSandbox,
    endpoint: Endpoint,
    params: Mapping[str, Any],
    *,
    ledger: CreditLedger | None = None,
    query_id: str = "q",
    max_pages: int | None = None,
    max_credits: int | None = None,
    timeouts: Timeouts = Timeouts(),
    retry: RetryPolicy = FAST,
    after_page: Any = None,
    on_attempt: Callable[[Attempt], None] | None = None,
) -> Run:
    """Page one query to its end through harvest's pager, client and ledger; `on_attempt` sees every HTTP
    attempt as the client records it (status None: no answer came, e.g. a read timeout)."""
    ledger = ledger if ledger is not None else CreditLedger(10**6)
    spec = QuerySpec(query_id, endpoint.path, dict(params), max_pages=max_pages, max_credits=max_credits)
    async with ServiceClient(
        sb.base_url, sb.key, ledger, timeouts=timeouts, retry=retry, on_attempt=on_attempt
    ) as client:
        return await collect(spec, endpoint, client, ledger, after_page)


# ---------------------------------------------------------------------------------------------- the sandbox's side
def cursor_params(endpoint: Endpoint) -> frozenset[str]:
    return frozenset(endpoint.paging.request_params)


def query_entries(sb: RunningSandbox, endpoint: Endpoint, params: Mapping[str, Any]) -> list[LedgerEntry]:
    """The sandbox's ledger entries of one query: its path and its parameters, whatever the cursor."""
    model = endpoint.params.model_validate(params)
    cursors = cursor_params(endpoint)
    want = {k: v for k, v in params_dict(model.query_pairs()).items() if k not in cursors}
    return [
        e
        for e in sb.ledger
        if e.path == endpoint.path and {k: v for k, v in e.params.items() if k not in cursors} == want
    ]


def entry_cursor(endpoint: Endpoint, entry: LedgerEntry) -> dict[str, Any] | None:
    got = {k: v for k, v in entry.params.items() if k in cursor_params(endpoint)}
    return got or None


def data_entries(sb: RunningSandbox) -> list[LedgerEntry]:
    """Requests to data endpoints in the order they arrived (a slow one is recorded when it is answered)."""
    return sorted((e for e in sb.ledger if e.n is not None), key=lambda e: e.n or 0)


def paid_twice(entries: Sequence[LedgerEntry]) -> int:
    """Requests for the same page (path, path parameters, parameters and cursor) beyond the first."""
    seen = Counter(
        (
            e.path,
            tuple(sorted(e.path_params.items())),
            tuple(sorted((k, str(v)) for k, v in e.params.items())),
        )
        for e in entries
    )
    return sum(n - 1 for n in seen.values())


ENTRIES_TIMEOUT = 120.0
"""How long to wait for the sandbox to have answered what a test knows was sent: a hang guard (the wait ends
as soon as the count is reached), long enough for a machine busy with a second test session."""


def wait_for_entries(sb: RunningSandbox, count: int, timeout: float = ENTRIES_TIMEOUT) -> list[LedgerEntry]:
    """The data requests the sandbox answered, once it has answered `count` (a slow answer the client gave
    up on is still being billed after the client moved on); fewer only after `timeout`."""
    deadline = time.monotonic() + timeout
    while len(entries := data_entries(sb)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return entries


async def async_wait_for_entries(
    sb: RunningSandbox, count: int, timeout: float = ENTRIES_TIMEOUT
) -> list[LedgerEntry]:
    deadline = time.monotonic() + timeout
    while len(entries := data_entries(sb)) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return entries
