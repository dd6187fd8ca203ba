"""One single-connection httpx client per request in flight, instead of one shared pool.

httpx's shared pool rescans every connection and waiting request on each request (httpcore's
`_assign_requests_to_connections`). With 10 requests in flight that came to ~0.3 ms of CPU per page, about a tenth
of what harvest spends on a page; a client that owns one connection has nothing to scan. A request takes a lane
only after its connection slot (the service client's semaphore), so there are never more lanes in use than slots,
and each lane keeps its connection alive for the next request that takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from collections.abc import Callable, Iterator

import httpx

from connectors.retry import Timeouts


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context per process (httpx builds one per client, ~40 ms of loading CA certificates; a Dask
    worker opens a client per round). Built as httpx would (certifi, `SSL_CERT_FILE`/`SSL_CERT_DIR`)."""
    return httpx.create_ssl_context()


def http_client(
    base_url: str, timeouts: Timeouts, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """A client with one kept-alive connection that never follows a redirect (the key header would follow it)."""
    return httpx.AsyncClient(
        base_url=base_url,
        timeout=timeouts.to_httpx(),
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        transport=transport,
        follow_redirects=False,
        verify=_tls(),
        headers={"user-agent": "harvest/0.1", "accept": "application/json"},
    )


class Lanes:
    def __init__(self, make: Callable[[], httpx.AsyncClient], own: bool = True) -> None:
        """`make` builds a lane; `own`: the lanes are this object's to close (False: `make` hands out a client
        someone else closes, as with an injected transport)."""
        self._make = make
        self._own = own
        self._idle: list[httpx.AsyncClient] = []
        self._all: list[httpx.AsyncClient] = []
        """The lanes this object owns (none when `own` is False)."""
        self._closing: set[asyncio.Task[None]] = set()

    @contextlib.contextmanager
    def lane(self) -> Iterator[httpx.AsyncClient]:
        """A client for one request, back to the idle ones after an answer. A request that raised (timeout,
        dropped connection, cancellation) may have left the lane's one connection half-used (a second
        cancellation while httpx was cleaning it up kept it checked out for good), so that lane is closed and
        the next request gets a new one."""
        client = self._idle.pop() if self._idle else self._new()
        try:
            yield client
        except BaseException:
            self._retire(client)
            raise
        self._idle.append(client)

    def _new(self) -> httpx.AsyncClient:
        client = self._make()
        if self._own:
            self._all.append(client)
        return client

    def _retire(self, client: httpx.AsyncClient) -> None:
        if not self._own:
            self._idle.append(client)
            return
        self._all.remove(client)
        closing = asyncio.get_running_loop().create_task(client.aclose())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    def __len__(self) -> int:
        return len(self._all)

    async def aclose(self) -> None:
        for client in self._all:
            await client.aclose()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
