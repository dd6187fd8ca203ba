"""Requests in flight each take a single-connection lane (`connectors.http.lane_pool`): never more lanes than connection
slots, every answer back to the query that asked, over real HTTP against the sandbox."""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.client import PageRequest, ServiceClient
from harvest.connectors.http.lane import BodyOverCap, read_capped
from harvest.connectors.http.lane_pool import Lanes
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY


def _ids(body: Any) -> list[str]:
    return [pin["id"] for pin in body["pins"]]


def _pins(base_url: str, topic: str) -> list[str]:
    answer = httpx.get(f"{base_url}{PINS}", params={"query": topic}, headers={"x-api-key": SECRET_KEY})
    return _ids(answer.json())


async def test_requests_share_at_most_one_lane_per_slot_and_each_gets_its_own_answer() -> None:
    topics = [f"topic {n}" for n in range(12)]
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (1, 1)})
    with running(config) as sb:
        ledger = CreditLedger(100)
        async with ServiceClient(sb.base_url, SECRET_KEY, ledger, max_in_flight=3) as client:
            requests = [PageRequest(t, PINS, PINS, (("query", t),), 0, 1) for t in topics]
            answers = await asyncio.gather(*(client.get(r) for r in requests))
            lanes = client.connections
            again = await client.get(requests[0])  # a lane is reused, not added
            assert client.connections == lanes
        expected = {t: _pins(sb.base_url, t) for t in topics}
        assert 1 <= lanes <= 3
        assert client.connections == 0  # closed with the client
    assert [a.status_code for a in answers] == [200] * len(topics)
    # each answer is its own query's: the sandbox serves each search term its own pins
    assert [_ids(a.body) for a in answers] == [expected[t] for t in topics]
    assert len(set(map(tuple, expected.values()))) == len(topics)
    assert again.status_code == 200 and ledger.spent == len(topics) + 1


async def test_a_lane_whose_request_raised_is_closed_and_replaced() -> None:
    """A cancellation caught while httpx cleaned up can leave a lane's one connection checked out for good:
    every later request on it would wait for the pool timeout. Such a lane is closed; the next request gets a
    new one, and an answered request's lane is kept."""
    lanes = Lanes(httpx.AsyncClient)
    with pytest.raises(asyncio.CancelledError), lanes.lane() as broken:
        raise asyncio.CancelledError
    with lanes.lane() as fresh:
        pass
    with lanes.lane() as again:
        pass
    assert fresh is not broken and again is fresh and len(lanes) == 1
    await lanes.aclose()
    assert broken.is_closed and fresh.is_closed


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_an_answer_is_refused_as_soon_as_it_passes_the_cap_while_it_arrives() -> None:
    """No Content-Length (chunked): the body is counted as it comes, and refused before more of it is held."""
    got: list[bytes] = []

    async def arriving() -> AsyncIterator[bytes]:
        for _ in range(1_000):
            got.append(b"x" * 1_000)
            yield got[-1]

    with pytest.raises(BodyOverCap) as caught:
        await read_capped(200, [], arriving(), max_bytes=4_096)
    assert len(got) == 5 and not caught.value.announced and caught.value.size == 5_000


async def test_a_body_within_the_cap_is_read_whole_and_decoded() -> None:
    body = b'{"pins": []}'
    gz = gzip.compress(body)
    headers = [(b"Content-Encoding", b"gzip"), (b"content-length", str(len(gz)).encode())]
    assert await read_capped(200, headers, _chunks(gz[:5], gz[5:]), max_bytes=len(gz)) == body
    assert await read_capped(200, [], _chunks(body), max_bytes=None) == body


async def test_an_answer_arriving_in_chunks_is_held_once_not_twice() -> None:
    """A large answer (here 16 MB in 64 KB chunks) is in memory once as it is read: its chunks held until they
    were joined made a second copy, 2x the answer at the join."""
    size, chunk = 16 * 2**20, 64 * 2**10

    async def arriving() -> AsyncIterator[bytes]:
        for n in range(size // chunk):
            yield bytes([n % 251]) * chunk

    tracemalloc.start()
    try:
        body = await read_capped(200, [], arriving(), max_bytes=None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(body) == size and body[-1] == (size // chunk - 1) % 251
    assert peak < 1.5 * size, f"the answer was held {peak / size:.1f}x while it was read"


async def test_a_compressed_body_is_capped_by_what_it_decodes_to() -> None:
    """A few KB of gzip can hold gigabytes: the cap counts decoded bytes too."""
    bomb = gzip.compress(b"0" * 10_000_000)
    assert len(bomb) < 20_000
    with pytest.raises(BodyOverCap):
        await read_capped(200, [(b"content-encoding", b"gzip")], _chunks(bomb), max_bytes=1_000_000)
