"""The ASGI application: a raw ASGI fault gate in front of a Starlette app.

The gate numbers each request to a data endpoint, decides its fault, and answers the edge faults itself
(429, 500, 503, dropped connection) before anything else, as a real edge would; a slow fault waits and then
lets the request through. It must be the outermost layer so that it gets the server's own `send` (needed to
drop a connection without a response).

Test-only routes: `GET /_sandbox/ledger` (every answered request) and
`GET /_sandbox/expected?path=<documented path>&<params>` (pages and records of a full crawl).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from harvest.sandbox.config import FaultKind, SandboxConfig
from harvest.sandbox.emulation.emulated import EmulatedEndpoint, EndpointTable
from harvest.sandbox.emulation.generic.declared_endpoints import served
from harvest.sandbox.emulation.generic.request_form import json_items
from harvest.sandbox.expected import expected_pages, full_crawl
from harvest.sandbox.served_paths import CREDIT_BALANCE, OLD_CREDIT_BALANCE
from harvest.sandbox.wire.answering import SandboxState, WireAnswer
from harvest.sandbox.wire.faults import EDGE_FAULTS, RateGate, cut_send, drop_connection, edge_response
from harvest.sandbox.wire.validation import InvalidRequest

KEY_HEADER = "x-api-key"


def _response(answer: WireAnswer) -> Response:
    response = Response(answer.body, status_code=answer.status)
    for name, value in answer.headers:
        response.headers[name.decode()] = value.decode()
    return response


async def _data(request: Request) -> Response:
    state: SandboxState = request.app.state.sandbox
    endpoint = served(state.config).match(request.url.path)
    assert endpoint is not None  # routes exist only for served paths
    items, invalid = await _items(request, {p.name: p.check for p in endpoint.params})
    answer = state.answer(
        endpoint,
        items,
        request.headers.get(KEY_HEADER),
        endpoint.path_values(request.scope["path"]),
        request.scope.get("sandbox.n"),
        request.scope.get("sandbox.fault"),
        invalid,
        request.method,
    )
    return _response(answer)


async def _items(
    request: Request, checks: dict[str, str]
) -> tuple[list[tuple[str, str]], InvalidRequest | None]:
    """A request's parameters: the query string of a GET, the JSON body of a POST (a body that is not a JSON
    object of values, each of its parameter's type: nothing, and what is wrong with it)."""
    if request.method != "POST":
        return request.query_params.multi_items(), None
    try:
        return json_items(await request.body(), orjson.loads, checks), None
    except InvalidRequest as exc:
        return [], exc


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """A request's whole body, and a `receive` that hands it on again (the fault gate reads a POST's
    parameters before the app does)."""
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    sent = False

    async def again() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return body, again


async def _balance(request: Request) -> Response:
    state: SandboxState = request.app.state.sandbox
    return _response(state.credit_balance(request.headers.get(KEY_HEADER), request.url.path))


async def _ledger(request: Request) -> Response:
    state: SandboxState = request.app.state.sandbox
    return Response(
        orjson.dumps([e.as_dict() for e in state.ledger.entries()]), media_type="application/json"
    )


async def _expected(request: Request) -> Response:
    state: SandboxState = request.app.state.sandbox
    items = [(k, v) for k, v in request.query_params.multi_items() if k != "path"]
    path = request.query_params.get("path", "")
    params: dict[str, Any] = {}
    for name, value in items:
        params.setdefault(name, []).append(value)
    flat = {k: v[0] if len(v) == 1 else v for k, v in params.items()}
    try:
        body = {
            "pages": expected_pages(path, flat, state.config),
            "pages_following_dangling": expected_pages(path, flat, state.config, follow_dangling=True),
            "records": full_crawl(path, flat, state.config),
        }
    except (InvalidRequest, ValueError) as exc:
        return Response(orjson.dumps({"error": str(exc)}), status_code=400, media_type="application/json")
    return Response(orjson.dumps(body), media_type="application/json")


def _routes(table: EndpointTable) -> list[Route]:
    routes = [Route(e.path, _data, methods=list(e.methods)) for e in table.endpoints]
    routes += [Route(path, _balance, methods=["GET"]) for path in (CREDIT_BALANCE, OLD_CREDIT_BALANCE)]
    routes.append(Route("/_sandbox/ledger", _ledger, methods=["GET"]))
    routes.append(Route("/_sandbox/expected", _expected, methods=["GET"]))
    return routes


class SandboxApp:
    """The ASGI callable: `state` is the sandbox's memory, `config` what it emulates."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self.state = SandboxState(self.config)
        self.rate_gate = RateGate(self.config.rate, self.config.rate_burst)
        self.table = served(self.config)
        """The endpoints served: the built-in ones and the config's declared ones."""
        self.inner = Starlette(routes=_routes(self.table))
        self.inner.state.sandbox = self.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.table.match(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None:
            await self.inner(scope, receive, send)
            return
        if scope.get("method") == "POST":  # its parameters: what an edge fault bills and records too
            scope["sandbox.body"], receive = await _buffered(receive)
        n, fault = self.state.faults.next(endpoint.path)
        if not self.rate_gate.admit():  # the service's rate limit comes first; a fault it decided is moot
            await self._edge_fault(scope, send, endpoint, n, FaultKind.RATE_LIMIT)
            return
        scope["sandbox.n"] = n
        scope["sandbox.fault"] = fault
        if fault in EDGE_FAULTS:
            assert fault is not None
            await self._edge_fault(scope, send, endpoint, n, fault)
            return
        if fault is FaultKind.SLOW:
            await asyncio.sleep(self.config.slow_seconds)
        if self.config.latency:
            await asyncio.sleep(self.config.latency)
        await self.inner(scope, receive, cut_send(send) if fault is FaultKind.CUT else send)

    async def _edge_fault(
        self, scope: Scope, send: Send, endpoint: EmulatedEndpoint, n: int, fault: FaultKind
    ) -> None:
        request = Request(scope)
        presented = request.headers.get(KEY_HEADER)
        items = request.query_params.multi_items()
        if scope.get("method") == "POST":
            try:
                items = json_items(scope.get("sandbox.body", b""), orjson.loads)
            except InvalidRequest:
                items = []
        credits, key = self.state.charge_fault(presented, endpoint, fault, items)
        path_values = endpoint.path_values(scope["path"])
        if fault is FaultKind.DROP:
            self.state.record(
                n, endpoint.path, items, None, credits, fault, key, path_values, scope["method"]
            )
            await drop_connection(send)
            return
        status, headers, body = edge_response(fault, self.config.retry_after)
        self.state.record(n, endpoint.path, items, status, credits, fault, key, path_values, scope["method"])
        headers = [*headers, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def create_app(config: SandboxConfig | None = None) -> SandboxApp:
    return SandboxApp(config)
