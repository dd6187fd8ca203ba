"""The client against real sockets on 127.0.0.1: refused connections, silent servers, dropped answers, what goes
on the wire (`tests.scripted_server` plays the server).

`tests/test_client.py` runs the client's money rules the same way; these are about the connections themselves.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator

import httpx
import pytest
import stamina

from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.errors import ServiceUnavailable
from harvest.connectors.http.client import RetryPolicy, ServiceClient, Timeouts
from harvest.connectors.http.lane import Origin, decoded
from harvest.connectors.http.lane_pool import behind_proxy
from harvest.connectors.paging.page_request import PageRequest
from tests.scripted_server import Drop, Hang, Reply, ScriptedServer

KEY = "sk-live-net-0123456789"
FAST = RetryPolicy(attempts=2, initial=0, max_wait=0, jitter=False)


@pytest.fixture(autouse=True)
def real_retries() -> Iterator[None]:
    was_active = stamina.is_active()
    stamina.set_active(True)
    with stamina.set_testing(False):
        yield
    stamina.set_active(was_active)


async def _get(base_url: str, ledger: CreditLedger, timeouts: Timeouts = Timeouts()) -> None:
    async with ServiceClient(base_url, KEY, ledger, timeouts=timeouts, retry=FAST) as client:
        await client.get(
            PageRequest("q", "/v1/pinboard/search", "/v1/pinboard/search", (("query", "x"),), page=0, cost=1)
        )


PINS = b'{"success": true, "pins": [{"id": "p1"}], "credits_charged": 1, "credits_remaining": 9}'
ANSWER = Reply(200, PINS, (("content-type", "application/json"),))


async def test_connection_refused_releases_every_reservation() -> None:
    ledger = CreditLedger(10)
    async with ScriptedServer(accepting="refuse") as server:
        with pytest.raises(ServiceUnavailable) as info:
            await _get(server.url, ledger)
    assert info.value.attempts == 2 and info.value.credits == 0
    assert "could not connect" in info.value.last_cause
    assert (ledger.spent, ledger.reserved) == (0, 0)


async def test_silent_server_times_out_and_keeps_the_reservations() -> None:
    ledger = CreditLedger(10)
    async with ScriptedServer(Hang(), Hang()) as server:
        with pytest.raises(ServiceUnavailable) as info:
            await _get(server.url, ledger, Timeouts(connect=1, read=0.2))
    assert "ReadTimeout" in info.value.last_cause and info.value.credits == 2
    assert (ledger.spent, ledger.reserved) == (2, 0)
    assert len(server.requests) == 2
    server.check()


async def test_trickling_server_hits_the_total_timeout() -> None:
    trickle = Drop((b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n", *[b"{"] * 50), every=0.05)
    ledger = CreditLedger(10)
    async with ScriptedServer(trickle, trickle) as server:
        with pytest.raises(ServiceUnavailable) as info:
            await _get(server.url, ledger, Timeouts(connect=1, read=1, total=0.3))
    assert "no complete answer within 0.3 s" in info.value.last_cause
    assert ledger.spent == 2
    server.check()


async def test_dropped_connection_then_success() -> None:
    body = b'{"success": true, "pins": [], "credits_charged": 1, "credits_remaining": 9}'
    ledger = CreditLedger(10)
    async with ScriptedServer(
        Drop((b'HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n{"success": tr',)),  # closes mid-body
        Reply(200, body, (("content-type", "application/json"),)),
    ) as server:
        await _get(server.url, ledger)
    assert len(server.requests) == 2
    assert ledger.spent == 2  # the dropped answer may have been billed: kept; the good one charged 1
    server.check()


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_a_compressed_answer_is_decoded(coding: str) -> None:
    """Lanes ask for gzip/deflate as httpx did (it saves the service's bandwidth) and decode what comes."""
    packed = ANSWER.encoded("gzip") if coding == "gzip" else ANSWER.encoded("deflate")
    ledger = CreditLedger(10)
    async with (
        ScriptedServer(packed) as server,
        ServiceClient(server.url, KEY, ledger, retry=FAST) as client,
    ):
        response = await client.get(
            PageRequest("q", "/v1/pinboard/search", "/v1/pinboard/search", (("query", "x"),), 0, 1)
        )
    assert isinstance(response.body, dict)
    assert response.body["pins"] == [{"id": "p1"}] and ledger.spent == 1
    assert b"accept-encoding: gzip, deflate" in server.requests[0].head.lower()


async def test_the_request_line_is_what_httpx_would_send() -> None:
    """Paths and params with spaces, `;`, `&`, `#` and non-ASCII text are encoded as httpx encodes them (a `;`
    is sent, not cut off), under the base URL's path, with a Host header and the key only in its own header."""
    params = (("query", "cats & dogs #1 été"), ("query", "a+b/c"), ("page", "2"))
    path = "/v1/pins/été;v=2 x"  # the catalog quotes path values; a direct caller may not
    ledger = CreditLedger(10)
    async with (
        ScriptedServer(ANSWER) as server,
        ServiceClient(server.url + "/api/", KEY, ledger, retry=FAST) as client,
    ):
        await client.get(PageRequest("q", "/v1/pins", path, params, 0, 1))
    expected = httpx.URL(server.url + "/api" + path, params=list(params))
    [received] = server.requests
    request_line, *header_lines = received.head.decode("latin-1").split("\r\n")
    assert request_line == f"GET {expected.raw_path.decode('ascii')} HTTP/1.1"
    headers = {h.split(":", 1)[0].lower(): h.split(":", 1)[1].strip() for h in header_lines if h}
    assert headers["host"] == expected.netloc.decode("ascii") and headers["x-api-key"] == KEY
    assert KEY not in request_line
    assert received.query == list(params)


async def test_a_connection_the_server_closed_while_idle_is_replaced_without_a_failed_attempt() -> None:
    """Servers close idle kept-alive connections; the next request on that lane opens a new one instead of
    failing (a failed attempt would count as possibly billed)."""
    closing = Reply(200, PINS, (("content-type", "application/json"),), close=True)  # kept alive, then closed
    ledger = CreditLedger(10)
    attempts: list[object] = []
    request = PageRequest("q", "/v1/pinboard/search", "/v1/pinboard/search", (("query", "x"),), 0, 1)
    async with (
        ScriptedServer(closing, closing) as server,
        ServiceClient(server.url, KEY, ledger, retry=FAST, on_attempt=attempts.append) as client,
    ):
        await client.get(request)
        await server.requests[0].closed.wait()  # the server has closed the connection the lane keeps
        await client.get(request)
    assert server.connections == 2 and len(attempts) == 2 and ledger.spent == 2
    server.check()


async def test_behind_a_proxy_from_the_environment_requests_go_through_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`HTTP_PROXY` etc. are honoured as httpx honours them: the request goes to the proxy, in absolute form."""
    ledger = CreditLedger(10)
    async with ScriptedServer(ANSWER, ANSWER) as proxy:
        for name in ("ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("http_proxy", proxy.url)
        assert behind_proxy("http://service.invalid") and not behind_proxy("https://service.invalid")
        async with ServiceClient("http://service.invalid", KEY, ledger, retry=FAST) as client:
            await client.get(
                PageRequest("q", "/v1/pinboard/search", "/v1/pinboard/search", (("query", "x"),), 0, 1)
            )
        # NO_PROXY is httpx's to apply (its matching differs from urllib's): the lanes stay httpx clients
        monkeypatch.setenv("NO_PROXY", ".service.invalid")
        monkeypatch.setenv("no_proxy", ".service.invalid")
        assert behind_proxy("http://service.invalid")
        async with ServiceClient("http://service.invalid", KEY, ledger, retry=FAST) as client:
            await client.get(
                PageRequest("q", "/v1/pinboard/search", "/v1/pinboard/search", (("query", "y"),), 0, 1)
            )
    # httpx does not exempt the bare host for `.service.invalid`: both requests went through the proxy
    assert [r.head.split(b"\r\n")[0] for r in proxy.requests] == [
        b"GET http://service.invalid/v1/pinboard/search?query=x HTTP/1.1",
        b"GET http://service.invalid/v1/pinboard/search?query=y HTTP/1.1",
    ]
    assert all(r.headers["x-api-key"] == KEY for r in proxy.requests)
    assert ledger.spent == 2
    proxy.check()


def test_decoding_keeps_a_body_that_does_not_decode() -> None:
    """A corrupt compressed body passes on as it came: it then reads as a body that is not JSON, retried with its
    reservation kept, instead of an error that would release a paid reservation."""
    assert decoded(gzip.compress(PINS), "gzip") == PINS
    assert decoded(zlib.compress(PINS)[2:-4], "deflate") == PINS  # raw deflate
    assert decoded(gzip.compress(gzip.compress(PINS)), "gzip, gzip") == PINS
    assert decoded(b"not gzip", "gzip") == b"not gzip"
    assert decoded(PINS, "identity") == PINS and decoded(PINS, None) == PINS


def test_the_origin_is_parsed_as_httpx_parses_it() -> None:
    """The Host header carries an IPv6 address in brackets and drops the scheme's default port."""
    v6 = Origin.of("http://[::1]:8080")
    assert (v6.host, v6.port, v6.netloc) == (b"::1", 8080, b"[::1]:8080")
    api = Origin.of("https://API.Example.com:443/base/")
    assert (api.host, api.port, api.netloc, api.path) == (
        b"api.example.com",
        443,
        b"api.example.com",
        b"/base",
    )
    assert api.url(api.target("/v1/x", [("q", "a b")])) == "https://api.example.com/base/v1/x?q=a+b"


def test_a_base_url_with_credentials_is_refused() -> None:
    with pytest.raises(ValueError, match="user name or password"):
        ServiceClient("https://user:pw@api.example.com", KEY, CreditLedger(10))
