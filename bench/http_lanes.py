"""The lanes against plain httpx: what `connectors.http.lane_pool` saves a run, measured in one process.

harvest's `ServiceClient` pages through the sandbox (its own process, no quirks, pages cached) twice per round,
once on its lanes (an httpcore connection per request in flight) and once with the lanes replaced by one
`httpx.AsyncClient` whose pool holds as many connections as requests in flight (keep-alive as the lanes', the
same timeouts, TLS context and headers): everything else, the ledger, the retries, the reading of each answer,
is the same code. Rounds alternate the two, so a load that comes and goes on a shared machine weighs on both; the
figure is the CPU seconds of this process per page, and the ratio of the two within each round. Two shapes, the
ones users run:
- long paging: 10 queries x 200 pages of 100 records, 10 in flight (the main job of `bench/run.py`);
- wide fan-out: 2,000 one-page queries, 10 in flight (the shape of `bench/wide_fanout.py`).

    python bench/run.py --lanes-only [--times 3]          # writes bench/results/lanes.json
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

import httpx
from run import KEY, PATH, handles, sandbox

from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.client import PageRequest, ServiceClient
from harvest.connectors.http.lane import DEFAULT_HEADERS, KEEPALIVE_SECONDS, HttpxLane
from harvest.connectors.http.lane_pool import Wire

IN_FLIGHT = 10
SHAPES: dict[str, tuple[int, list[str]]] = {
    "long_paging": (200, handles(10)),
    "wide_fanout": (1, [f"wide{i:05d}" for i in range(2_000)]),
}
"""Shape -> (pages per query, the queries' handles)."""


class OneHttpxClient:
    """What the lanes are measured against: every request on one `httpx.AsyncClient` with a pool of `size`."""

    def __init__(self, base_url: str, client: ServiceClient) -> None:
        timeouts = client.timeouts
        self._http = httpx.AsyncClient(
            base_url=base_url,
            timeout=timeouts.to_httpx(),
            limits=httpx.Limits(
                max_connections=client.max_in_flight,
                max_keepalive_connections=client.max_in_flight,
                keepalive_expiry=KEEPALIVE_SECONDS,
            ),
            follow_redirects=False,
            headers=DEFAULT_HEADERS,
        )
        self._lane = HttpxLane(self._http)

    @contextlib.contextmanager
    def lane(self) -> Iterator[HttpxLane]:
        yield self._lane

    async def aclose(self) -> None:
        await self._http.aclose()


async def _page_all(base_url: str, names: list[str], plain_httpx: bool) -> int:
    """Every page of every handle through a `ServiceClient`, `IN_FLIGHT` queries at a time; the pages read."""
    pages = 0
    async with ServiceClient(base_url, KEY, CreditLedger(10**12), max_in_flight=IN_FLIGHT) as client:
        if (
            plain_httpx
        ):  # the client's private wire, swapped for the contender's (a bench may; a test may not)
            await client._wire.aclose()
            pool: Any = OneHttpxClient(base_url, client)
            client._wire = Wire(base_url, client.timeouts, pool)
        turns = asyncio.Semaphore(IN_FLIGHT)

        async def crawl(n: int, handle: str) -> None:
            nonlocal pages
            params: tuple[tuple[str, str], ...] = (("handle", handle), ("sort_by", "latest"))
            async with turns:
                for page in range(10**6):
                    answer = await client.get(PageRequest(f"q{n}", PATH, PATH, params, page, 1))
                    pages += 1
                    if not answer.body.get("has_more"):
                        return
                    params = (*params[:2], ("max_cursor", str(answer.body["max_cursor"])))

        await asyncio.gather(*(crawl(n, h) for n, h in enumerate(names)))
    return pages


def _measured(base_url: str, names: list[str], plain_httpx: bool) -> dict[str, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    pages = asyncio.run(_page_all(base_url, names, plain_httpx))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "pages": pages,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 2),
        "cpu_ms_per_page": cpu / pages * 1e3,
    }


def http_lanes(times: int = 3, shapes: tuple[str, ...] = tuple(SHAPES)) -> dict[str, Any]:
    """Per shape: each round's lanes and httpx runs, and the median per-page CPU and httpx/lanes ratio."""
    out: dict[str, Any] = {}
    for shape in shapes:
        per_query, names = SHAPES[shape]
        with sandbox(per_query) as base:
            asyncio.run(_page_all(base, names, plain_httpx=False))  # the sandbox builds and caches every page
            rounds = []
            for _ in range(times):
                lanes = _measured(base, names, plain_httpx=False)
                plain = _measured(base, names, plain_httpx=True)
                rounds.append({"lanes": lanes, "httpx": plain, "ratio": plain["cpu_s"] / lanes["cpu_s"]})
        out[shape] = {
            "rounds": rounds,
            "lanes_cpu_ms_per_page": round(
                statistics.median(r["lanes"]["cpu_ms_per_page"] for r in rounds), 3
            ),
            "httpx_cpu_ms_per_page": round(
                statistics.median(r["httpx"]["cpu_ms_per_page"] for r in rounds), 3
            ),
            "httpx_over_lanes": round(statistics.median(r["ratio"] for r in rounds), 2),
        }
    return out


def print_lanes(res: dict[str, Any]) -> None:
    print("client CPU per page, lanes vs one httpx.AsyncClient (median of rounds; ratio within each round)")
    for shape, r in res.items():
        ratios = ", ".join(f"{x['ratio']:.2f}" for x in r["rounds"])
        print(
            f"  {shape}: lanes {r['lanes_cpu_ms_per_page']} ms, httpx {r['httpx_cpu_ms_per_page']} ms: "
            f"httpx / lanes {r['httpx_over_lanes']}x (rounds: {ratios})"
        )
