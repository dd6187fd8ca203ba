"""The client against real sockets on 127.0.0.1: refused connections, silent servers, dropped answers.

The scripted-transport tests assume how httpx classifies these failures; these check it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager

import pytest
import stamina

from connectors.client import RetryPolicy, ServiceClient, Timeouts
from connectors.errors import ServiceUnavailable
from connectors.ledger import CreditLedger
from connectors.page_request import PageRequest

KEY = "sk-live-net-0123456789"
FAST = RetryPolicy(attempts=2, initial=0, max_wait=0, jitter=False)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture(autouse=True)
def real_retries() -> Iterator[None]:
    was_active = stamina.is_active()
    stamina.set_active(True)
    with stamina.set_testing(False):
        yield
    stamina.set_active(was_active)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def _serve(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> None:
    await reader.readuntil(b"\r\n\r\n")


async def _get(base_url: str, ledger: CreditLedger, timeouts: Timeouts = Timeouts()) -> None:
    async with ServiceClient(base_url, KEY, ledger, timeouts=timeouts, retry=FAST) as client:
        await client.get(
            PageRequest("q", "/v1/pinboard/search", "/v1/pinboard/search", (("query", "x"),), page=0, cost=1)
        )


async def test_connection_refused_releases_every_reservation() -> None:
    ledger = CreditLedger(10)
    with pytest.raises(ServiceUnavailable) as info:
        await _get(f"http://127.0.0.1:{_free_port()}", ledger)
    assert info.value.attempts == 2 and info.value.credits == 0
    assert "could not connect" in info.value.last_cause
    assert (ledger.spent, ledger.reserved) == (0, 0)


async def test_silent_server_times_out_and_keeps_the_reservations() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await asyncio.sleep(5)
        writer.close()

    ledger = CreditLedger(10)
    async with _serve(silent) as url:
        with pytest.raises(ServiceUnavailable) as info:
            await _get(url, ledger, Timeouts(connect=1, read=0.2))
    assert "ReadTimeout" in info.value.last_cause and info.value.credits == 2
    assert (ledger.spent, ledger.reserved) == (2, 0)


async def test_trickling_server_hits_the_total_timeout() -> None:
    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
        for _ in range(50):
            writer.write(b"{")
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.close()

    ledger = CreditLedger(10)
    async with _serve(trickle) as url:
        with pytest.raises(ServiceUnavailable) as info:
            await _get(url, ledger, Timeouts(connect=1, read=1, total=0.3))
    assert "no complete answer within 0.3 s" in info.value.last_cause
    assert ledger.spent == 2


async def test_dropped_connection_then_success() -> None:
    calls = 0

    async def flaky(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal calls
        await _read_request(reader)
        calls += 1
        if calls == 1:
            writer.write(b'HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n{"success": tr')
            await writer.drain()
            writer.close()  # closes mid-body
            return
        body = b'{"success": true, "pins": [], "credits_charged": 1, "credits_remaining": 9}'
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        await writer.drain()
        writer.close()

    ledger = CreditLedger(10)
    async with _serve(flaky) as url:
        await _get(url, ledger)
    assert calls == 2
    assert ledger.spent == 2  # the dropped answer may have been billed: kept; the good one charged 1
