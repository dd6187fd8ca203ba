"""The wire to the service: one single-connection lane per request in flight, instead of one shared pool.

httpx's shared pool rescans every connection and waiting request on each request (httpcore's
`_assign_requests_to_connections`): with 10 requests in flight that came to ~0.3 ms of CPU per page, about a tenth
of what harvest spends on a page; a lane that owns one connection has nothing to scan. A lane is an httpcore
connection (`connectors.http.lane.CoreLane`), or an httpx client when the environment names a proxy. A request
takes a lane only after its connection slot (the service client's semaphore), so there are never more lanes in
use than slots, and each lane keeps its connection alive for the next request that takes it.

The lanes (with `connectors.http.lane`, ~390 lines) stay because they measure: `python bench/run.py --lanes-only`
(`bench/http_lanes.py`, part of `make bench`) pages the same `ServiceClient` on its lanes and on one
`httpx.AsyncClient` with a pool of as many connections as requests in flight, round after round. On 2026-11-29 (2
cores, loaded by other work; ratios within a round) a page cost the client 8.9 ms of CPU on the lanes against 11.8
ms on httpx (median; httpx / lanes 1.06, 1.34, 1.21 in three rounds) in long paging (10 queries x 200 pages) and
4.4 ms against 7.0 ms (1.62, 1.59, 1.58) in a wide fan-out (2,000 one-page queries). When httpx's client comes
within noise of them on both shapes, the lanes go and httpx's client and transport are the seam.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence

import httpx

from harvest.connectors.http.lane import (
    DEFAULT_HEADERS,
    CoreLane,
    HttpxLane,
    Lane,
    Origin,
    ReceivedAnswer,
    http_client,
)
from harvest.connectors.http.retry import Timeouts


def behind_proxy(base_url: str) -> bool:
    """Whether the environment names a proxy for `base_url`'s scheme (``HTTP(S)_PROXY``, ``ALL_PROXY``, either
    case). httpx's client then decides, `NO_PROXY` included: its matching differs from urllib's (`.example.com`
    does not exempt `example.com`), so the exemptions are left to it."""
    proxies = urllib.request.getproxies_environment()
    return bool(proxies.get(httpx.URL(base_url).scheme) or proxies.get("all"))


def lane_maker(base_url: str, timeouts: Timeouts) -> Callable[[], Lane]:
    """How this client's lanes are built: httpcore, or httpx behind a proxy."""
    if behind_proxy(base_url):
        return lambda: HttpxLane(http_client(base_url, timeouts))
    return functools.partial(CoreLane, timeouts)


class Lanes:
    def __init__(self, make: Callable[[], Lane]) -> None:
        """`make` builds a lane; the lanes are this object's to close."""
        self._make = make
        self._idle: list[Lane] = []
        self._all: list[Lane] = []
        """Every lane open now: idle or serving a request."""
        self._closing: set[asyncio.Task[None]] = set()

    @contextlib.contextmanager
    def lane(self) -> Iterator[Lane]:
        """A lane for one request, back to the idle ones after an answer. A request that raised (timeout,
        dropped connection, cancellation) may have left the lane's one connection half-used (a second
        cancellation while the connection was being cleaned up kept it checked out for good), so that lane is
        closed and the next request gets a new one."""
        lane = self._idle.pop() if self._idle else self._new()
        try:
            yield lane
        except BaseException:
            self._retire(lane)
            raise
        self._idle.append(lane)

    def _new(self) -> Lane:
        lane = self._make()
        self._all.append(lane)
        return lane

    def _retire(self, lane: Lane) -> None:
        self._all.remove(lane)
        closing = asyncio.get_running_loop().create_task(lane.aclose())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    def __len__(self) -> int:
        return len(self._all)

    async def aclose(self) -> None:
        while self._all:
            await self._all.pop().aclose()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


class Wire:
    """Requests to the service at `base_url`, each on a lane, each attempt bounded by `timeouts.total`: the one
    way a page and the balance are sent. Raises httpx's errors (`connectors.http.retry.on_the_wire` says what
    each means) and the lane's `BodyCut`/`BodyOverCap`."""

    def __init__(self, base_url: str, timeouts: Timeouts, lanes: Lanes | None = None) -> None:
        """`lanes`: the wire's, to close with it (made for `base_url` when not given)."""
        self.origin = Origin.of(base_url)
        self.url = base_url.rstrip("/")
        self._total = timeouts.total
        self._lanes = Lanes(lane_maker(base_url, timeouts)) if lanes is None else lanes

    async def send(
        self,
        path: str,
        params: Sequence[tuple[str, str]] = (),
        headers: Mapping[str, str] = {},
        max_bytes: int | None = None,
        method: str = "GET",
        content: bytes | None = None,
    ) -> ReceivedAnswer:
        """`params` go in the query string; a POST sends `content` (its parameters) instead."""
        target = self.origin.target(path, params)
        with self._lanes.lane() as lane:
            sending = lane.send(
                self.origin, target, {**DEFAULT_HEADERS, **headers}, max_bytes, method, content
            )
            try:
                if self._total is None:
                    return await sending
                async with asyncio.timeout(self._total):
                    return await sending
            except TimeoutError:
                raise httpx.ReadTimeout(f"no complete answer within {self._total:g} s") from None

    async def aclose(self) -> None:
        await self._lanes.aclose()
