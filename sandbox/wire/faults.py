"""Fault injection: which request gets which fault, and what each fault looks like on the wire.

The schedule is a pure function of (seed, request number): a test with a given seed and rate sees the same
faults on every run. Forced plans (`fault_plan` by request number, `fault_plan_by_path` by the i-th request to
a path) take precedence over the random schedule, so a test of one fault kind is exact."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter
from collections.abc import Callable

import orjson
from starlette.types import Message, Send

from harvest.sandbox.config import FaultKind, SandboxConfig
from harvest.sandbox.emulation.stablehash import hnum, unit

EDGE_FAULTS = frozenset({FaultKind.RATE_LIMIT, FaultKind.SERVER_ERROR, FaultKind.UNAVAILABLE, FaultKind.DROP})
"""Faults answered before the request reaches the service proper (no authentication, no validation)."""
BODY_FAULTS = frozenset({FaultKind.TRUNCATED, FaultKind.MALFORMED})
"""Faults that damage the body of a 200 answer after it was produced (and billed)."""


class FaultSchedule:
    def __init__(self, config: SandboxConfig) -> None:
        self._config = config
        self._n = 0
        self._per_path: Counter[str] = Counter()
        self._lock = threading.Lock()

    def next(self, path: str) -> tuple[int, FaultKind | None]:
        """Number the next data request (1-based) and decide its fault."""
        with self._lock:
            self._n += 1
            n = self._n
            i = self._per_path[path]
            self._per_path[path] += 1
        return n, decide(self._config, n, path, i)


def decide(config: SandboxConfig, n: int, path: str, i: int) -> FaultKind | None:
    """The fault of request number `n`, the `i`-th (0-based) request to `path`."""
    if n in config.fault_plan:
        return FaultKind(config.fault_plan[n])
    by_path = config.fault_plan_by_path.get(path)
    if by_path is not None and i < len(by_path):
        forced = by_path[i]
        return None if forced is None else FaultKind(forced)
    if config.fault_rate > 0 and unit(config.seed, "fault", n) < config.fault_rate:
        kinds = [FaultKind(k) for k in config.fault_kinds]
        return kinds[hnum(config.seed, "fault-kind", n) % len(kinds)]
    return None


def edge_response(kind: FaultKind, retry_after: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Status, headers and body of a 429, 500 or 503 fault (the 503 body is the edge's plain text)."""
    if kind is FaultKind.RATE_LIMIT:
        body = {
            "success": False,
            "error": "rate_limited",
            "message": "Too many requests. Please retry later.",
        }
        return (
            429,
            [(b"content-type", b"application/json"), (b"retry-after", retry_after.encode())],
            orjson.dumps(body),
        )
    if kind is FaultKind.SERVER_ERROR:
        body = {
            "success": False,
            "error": "internal_error",
            "message": "Internal server error. Please try again.",
        }
        return 500, [(b"content-type", b"application/json")], orjson.dumps(body)
    if kind is FaultKind.UNAVAILABLE:
        return 503, [(b"content-type", b"text/plain")], EDGE_503
    raise ValueError(f"not an edge response fault: {kind}")


EDGE_503 = b"upstream connect error or disconnect/reset before headers. reset reason: connection failure"
"""The real service's edge 503 (its notes): plain text, and not billed."""
PROXY_PAGE = b"\n<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>\n"


def damage(kind: FaultKind, body: bytes, n: int = 0) -> bytes:
    """A truncated body (its JSON ends part-way, though whole against its length: where depends on the request
    number `n`, as a flaky proxy's cut would) or a malformed one (an error page a proxy wrote after the
    document: whole, and no reading takes it)."""
    if kind is FaultKind.TRUNCATED:
        return body[: len(body) // 3 + n % max(1, len(body) // 3)]  # two cuts of one page differ in length
    if kind is FaultKind.MALFORMED:
        return body + PROXY_PAGE
    raise ValueError(f"not a body fault: {kind}")


class DroppedConnection(Exception):
    """Raised inside the app to make the server close the connection when the transport is not reachable."""


async def drop_connection(send: Send) -> None:
    """Close the connection without sending a byte of response.

    uvicorn's HTTP/1.1 `send` is a bound method of the request cycle, which holds the transport: closing it
    and yielding lets uvicorn see the disconnect, so it sends nothing (the client reads EOF: httpx raises
    `RemoteProtocolError`). Elsewhere, fall back to starting a response and raising, which makes the server
    close the connection mid-answer.
    """
    if await _close_transport(send):
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1000")]})
    raise DroppedConnection("dropped connection (fault injection)")


async def _close_transport(send: Send) -> bool:
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None or not hasattr(transport, "close"):
        return False
    transport.close()
    for _ in range(3):
        await asyncio.sleep(0)
    return True


def cut_send(send: Send) -> Send:
    """A `send` that announces the whole answer (its Content-Length) and then closes the connection half-way
    through the body, as a network that drops a connection does: the client reads fewer bytes than announced."""

    async def cutting(message: Message) -> None:
        if message["type"] != "http.response.body":
            await send(message)
            return
        body = message.get("body", b"")
        await send({"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True})
        if not await _close_transport(send):
            raise DroppedConnection("connection cut half-way through the body (fault injection)")

    return cutting


class RateGate:
    """The service's rate limit: a token bucket of `burst` requests refilled at `rate` a second."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = float(burst or max(1, math.ceil(rate)))
        self._tokens = self.burst
        self._clock = clock
        self._at = clock()
        self._lock = threading.Lock()

    def admit(self) -> bool:
        """Whether a request may go through now (it takes a token); False: answer 429."""
        if self.rate <= 0:
            return True
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True
