"""The client's own error handling and money rules, against a scripted transport (no network)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
import stamina

from connectors.client import Attempt, PageRequest, RetryPolicy, ServiceClient
from connectors.errors import (
    BadRequest,
    BudgetExhausted,
    Forbidden,
    HarvestError,
    NotFound,
    OutOfCredits,
    ServiceUnavailable,
    Unauthorized,
    UnexpectedResponse,
)
from connectors.ledger import CreditLedger
from connectors.retry import Retryable, parse_retry_after

KEY = "sk-live-7f3a9c1e5b2d"
BASE = "https://service.test"
FAST = RetryPolicy(attempts=5, initial=0, max_wait=0, jitter=False)

Step = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


@pytest.fixture(autouse=True)
def real_retries() -> Iterator[None]:
    """Whatever other tests did to stamina's global switches, these tests exercise the real retry loop."""
    was_active = stamina.is_active()
    stamina.set_active(True)
    with stamina.set_testing(False):
        yield
    stamina.set_active(was_active)


class Script:
    """A fake service: answers the scripted steps in order and remembers every request it saw."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.steps:
            raise AssertionError(f"unexpected extra request {request.url}")
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        if callable(step) and not isinstance(step, httpx.Response):
            return step(request)
        return step


def js(status: int, body: Any, **headers: str) -> httpx.Response:
    headers = {"content-type": "application/json", **headers}
    return httpx.Response(status, content=orjson.dumps(body), headers=headers)


def ok(records: list[Any] | None = None, charged: int | None = 1, remaining: int = 900) -> httpx.Response:
    body: dict[str, Any] = {"success": True, "items": records or [], "credits_remaining": remaining}
    if charged is not None:
        body["credits_charged"] = charged
    return js(200, body)


def text(status: int, content: str) -> httpx.Response:
    return httpx.Response(status, content=content.encode(), headers={"content-type": "text/plain"})


class Harness:
    def __init__(self, script: Script, budget: int = 100, **kw: Any) -> None:
        self.script = script
        self.ledger = CreditLedger(budget, min_balance=kw.pop("min_balance", None))
        self.attempts: list[Attempt] = []
        self.client = ServiceClient(
            BASE,
            KEY,
            self.ledger,
            retry=kw.pop("retry", FAST),
            on_attempt=self.attempts.append,
            transport=httpx.MockTransport(script),
            **kw,
        )

    async def get(self, cost: int = 1, page: int = 0, **kw: Any) -> Any:
        return await self.client.get(
            page_request(
                "/v1/pinboard/search",
                kw.pop("query", [("query", "cats")]),
                cost=cost,
                query_id="q1",
                page=page,
                endpoint="/v1/pinboard/search",
                **kw,
            )
        )


def page_request(
    path: str,
    query: Any,
    *,
    cost: int = 1,
    query_id: str = "q",
    page: int = 0,
    endpoint: str = "/x",
    query_cap: int | None = None,
) -> PageRequest:
    return PageRequest(query_id, endpoint, path, tuple(query), page, cost, query_cap)


@pytest.fixture
async def make() -> Any:
    made: list[Harness] = []

    def _make(*steps: Step, **kw: Any) -> Harness:
        h = Harness(Script(*steps), **kw)
        made.append(h)
        return h

    yield _make
    for h in made:
        await h.client.aclose()


# ---- success -------------------------------------------------------------------------------------


async def test_success_settles_to_credits_charged_and_sends_the_key_header(make: Any) -> None:
    h = make(ok([{"id": "p1"}], charged=1, remaining=41))
    resp = await h.get(cost=2, query=[("query", "a b&c=d"), ("tag", "x"), ("tag", "y")])
    assert resp.status_code == 200 and resp.body["items"] == [{"id": "p1"}]
    assert (resp.credits_charged, resp.credits_remaining, resp.attempts, resp.credits) == (1, 41, 1, 1)
    assert orjson.loads(resp.raw) == resp.body
    assert h.ledger.spent == 1 and h.ledger.reserved == 0  # reserved 2 by the table, settled to the 1 charged
    assert h.ledger.account_remaining == 41
    [req] = h.script.requests
    assert req.headers["x-api-key"] == KEY
    assert req.url.path == "/v1/pinboard/search"
    assert req.url.params.multi_items() == [("query", "a b&c=d"), ("tag", "x"), ("tag", "y")]
    [att] = h.attempts
    assert (att.query_id, att.endpoint, att.page, att.attempt, att.status_code, att.credits, att.error) == (
        "q1",
        "/v1/pinboard/search",
        0,
        1,
        200,
        1,
        None,
    )
    assert att.params == {"query": "a b&c=d", "tag": ["x", "y"]}
    assert att.started_at.tzinfo is dt.UTC and att.duration_ms >= 0


async def test_bare_array_without_credits_keeps_the_reservation(make: Any) -> None:
    h = make(js(200, [{"data": {"clip": {"id": "c1"}}}, {}, {}]))
    resp = await h.get(cost=1)
    assert isinstance(resp.body, list) and resp.credits_charged is None
    assert h.ledger.spent == 1  # unknown charge counts as spent


async def test_cached_answer_charged_zero(make: Any) -> None:
    h = make(js(200, {"success": True, "cached": True, "credits_charged": 0, "credits_remaining": 5}))
    resp = await h.get(cost=1)
    assert resp.credits == 0 and h.ledger.spent == 0


async def test_path_with_colon_and_base_path_prefix() -> None:
    script = Script(ok())
    ledger = CreditLedger(5)
    transport = httpx.MockTransport(script)
    async with ServiceClient(BASE + "/api/", KEY, ledger, retry=FAST, transport=transport) as c:
        await c.get(
            page_request(
                "/v1/creative/materials/video:abc",
                [],
                query_id="m",
                endpoint="/v1/creative/materials/{material_id}",
            )
        )
    assert script.requests[0].url.path == "/api/v1/creative/materials/video:abc"


async def test_a_200_with_flags_is_an_answer_not_a_failure(make: Any) -> None:
    body = {"success": True, "account_deactivated": True, "credits_charged": 1, "credits_remaining": 3}
    h = make(js(200, body))
    resp = await h.get()
    assert resp.body["account_deactivated"] is True and resp.attempts == 1


async def test_success_marks_the_page_done_for_breadth_first(make: Any) -> None:
    h = make(ok())
    h.ledger.register("q1")
    await h.get(page=0)
    assert h.ledger._share._next_page["q1"] == 1


# ---- answers that are errors: not retried --------------------------------------------------------


async def test_400_carries_message_parameter_and_the_paid_answer(make: Any) -> None:
    body = {
        "success": False,
        "error": "bad_request",
        "message": "unknown handle",
        "parameter": "handle",
        "credits_charged": 1,
        "credits_remaining": 77,
    }
    h = make(js(400, body))
    with pytest.raises(BadRequest) as info:
        await h.get()
    err = info.value
    assert (err.parameter, err.service_message, err.credits) == ("handle", "unknown handle", 1)
    assert "'handle'" in str(err) and "unknown handle" in str(err) and "400" in str(err)
    assert err.response is not None and err.response.status_code == 400 and err.response.body == body
    assert len(h.script.requests) == 1 and h.ledger.spent == 1 and h.ledger.account_remaining == 77
    assert h.attempts[0].error is not None and "400" in h.attempts[0].error


async def test_400_without_json(make: Any) -> None:
    h = make(text(400, "Bad Request"))
    with pytest.raises(BadRequest) as info:
        await h.get()
    assert info.value.parameter is None and info.value.response is not None
    assert info.value.response.body is None and info.value.response.raw == b"Bad Request"
    assert info.value.credits == 1  # no credits_charged: the reservation is kept


@pytest.mark.parametrize(
    ("status", "body", "error", "phrase"),
    [
        (
            401,
            {"success": False, "error": "unauthorized", "message": "missing x-api-key header"},
            Unauthorized,
            "no API key was sent",
        ),
        (
            402,
            {
                "success": False,
                "error": "payment_required",
                "message": "Out of credits. Please purchase more credits.",
            },
            OutOfCredits,
            "out of credits, or the API key is not valid",
        ),
        (403, {"success": False, "error": "forbidden"}, Forbidden, "source platform blocks this content"),
        (404, {"success": False, "error": "not_found"}, NotFound, "not found (404)"),
    ],
)
async def test_typed_errors_are_not_retried(
    make: Any, status: int, body: dict[str, Any], error: type[HarvestError], phrase: str
) -> None:
    h = make(js(status, body))
    with pytest.raises(error) as info:
        await h.get()
    assert phrase in str(info.value)
    assert len(h.script.requests) == 1
    assert info.value.response is not None and info.value.response.status_code == status
    assert h.ledger.spent == 1  # no credits_charged in the body: unknown counts as spent


async def test_404_success_true_is_a_billed_not_found(make: Any) -> None:
    body = {"success": True, "error": "not_found", "credits_charged": 1, "credits_remaining": 12}
    h = make(js(404, body))
    with pytest.raises(NotFound) as info:
        await h.get()
    err = info.value
    assert err.service_success and err.credits == 1 and "billed" in str(err)
    assert err.response is not None and err.response.body == body
    assert h.ledger.spent == 1 and h.ledger.account_remaining == 12


async def test_redirects_are_not_followed(make: Any) -> None:
    h = make(httpx.Response(302, headers={"location": "https://elsewhere.test/steal"}))
    with pytest.raises(UnexpectedResponse) as info:
        await h.get()
    assert info.value.status_code == 302 and len(h.script.requests) == 1


# ---- transient failures: retried -----------------------------------------------------------------


async def test_429_with_retry_after_then_200(make: Any) -> None:
    h = make(
        js(
            429,
            {"success": False, "error": "rate_limited", "credits_charged": 0, "credits_remaining": 50},
            **{"retry-after": "0.05"},
        ),
        ok(),
        retry=RetryPolicy(attempts=3, initial=0, max_wait=1, jitter=False),
    )
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    resp = await h.get()
    assert loop.time() - t0 >= 0.04  # Retry-After honoured
    assert resp.attempts == 2 and resp.credits == 1 and h.ledger.spent == 1
    assert [a.status_code for a in h.attempts] == [429, 200]
    assert [a.credits for a in h.attempts] == [0, 1]


def test_retry_after_is_honoured_but_capped() -> None:
    client = ServiceClient(BASE, KEY, CreditLedger(1), retry=RetryPolicy(max_wait=30))
    assert client._backoff(Retryable("429", retry_after=7)) == 7
    assert client._backoff(Retryable("429", retry_after=600)) == 30
    assert client._backoff(Retryable("503")) is True
    assert client._backoff(BadRequest("x", None)) is False


def test_parse_retry_after() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after("5") == 5.0
    assert parse_retry_after(" 2.5 ") == 2.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:10 GMT", now=now) == 10.0
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
    assert parse_retry_after(None) is None


async def test_500_then_200(make: Any) -> None:
    h = make(js(500, {"success": False, "error": "internal", "credits_charged": 0}), ok())
    resp = await h.get()
    assert resp.attempts == 2 and resp.credits == 1 and h.ledger.spent == 1


async def test_500_without_credits_keeps_its_reservation(make: Any) -> None:
    h = make(js(500, {"success": False, "error": "internal"}), ok())
    resp = await h.get()
    assert resp.credits == 2 and h.ledger.spent == 2


async def test_unbilled_statuses_settle_to_zero_when_configured(make: Any) -> None:
    h = make(text(503, "x"), js(500, {"success": False}), ok(), unbilled_statuses=frozenset({503}))
    resp = await h.get()
    assert resp.attempts == 3 and [a.credits for a in h.attempts] == [0, 1, 1] and h.ledger.spent == 2


async def test_503_text_plain_then_200(make: Any) -> None:
    h = make(text(503, "upstream connect error or disconnect/reset before headers"), ok())
    resp = await h.get()
    assert resp.attempts == 2 and h.ledger.spent == 2  # the 503's charge is unknown: kept
    assert h.attempts[0].status_code == 503 and "upstream connect error" in (h.attempts[0].error or "")


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ReadTimeout("timed out"),
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
        httpx.ReadError("connection reset"),
        httpx.WriteTimeout("write timed out"),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_maybe_sent_failures_are_retried_and_kept(make: Any, failure: Exception) -> None:
    h = make(failure, ok())
    resp = await h.get()
    assert resp.attempts == 2 and h.ledger.spent == 2 and h.ledger.reserved == 0
    first = h.attempts[0]
    assert first.status_code is None and first.credits == 1 and type(failure).__name__ in (first.error or "")


async def test_a_body_that_does_not_decode_is_retried_and_kept_as_spent(make: Any) -> None:
    """A corrupt gzip body came from the service: it may have been billed, so the reservation is kept."""
    h = make(
        lambda _: httpx.Response(
            200, headers={"content-encoding": "gzip"}, stream=httpx.ByteStream(b"not gzip at all")
        ),
        ok(),
    )
    resp = await h.get()
    assert resp.attempts == 2 and h.ledger.spent == 2


async def test_truncated_json_then_200(make: Any) -> None:
    h = make(httpx.Response(200, content=b'{"success": true, "items": [{"id": "p1"'), ok())
    resp = await h.get()
    assert resp.attempts == 2 and h.ledger.spent == 2  # the truncated page was probably billed
    assert "not a JSON" in (h.attempts[0].error or "")


async def test_json_scalar_200_is_malformed(make: Any) -> None:
    h = make(httpx.Response(200, content=b'"ok"'), ok())
    assert (await h.get()).attempts == 2


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ConnectError("[Errno 111] Connection refused"),
        httpx.ConnectTimeout("connect timed out"),
        httpx.PoolTimeout("no connection"),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_never_sent_failures_are_released(make: Any, failure: Exception) -> None:
    h = make(failure, ok())
    resp = await h.get()
    assert resp.attempts == 2 and resp.credits == 1 and h.ledger.spent == 1 and h.ledger.reserved == 0
    assert h.attempts[0].credits == 0


async def test_retries_exhausted(make: Any) -> None:
    h = make(*[text(503, "Service Unavailable")] * 5)
    with pytest.raises(ServiceUnavailable) as info:
        await h.get()
    err = info.value
    assert err.attempts == 5 and err.credits == 5 and "503" in err.last_cause
    assert "5 attempt(s)" in str(err) and "503" in str(err)
    assert err.response is not None and err.response.raw == b"Service Unavailable"
    assert len(h.script.requests) == 5 and h.ledger.spent == 5
    assert [a.attempt for a in h.attempts] == [1, 2, 3, 4, 5]


async def test_retries_exhausted_on_connect_errors_cost_nothing(make: Any) -> None:
    h = make(*[httpx.ConnectError("refused")] * 5)
    with pytest.raises(ServiceUnavailable) as info:
        await h.get()
    assert info.value.attempts == 5 and info.value.credits == 0 and h.ledger.spent == 0
    assert "could not connect" in info.value.last_cause


async def test_backoff_grows_when_not_zeroed(make: Any) -> None:
    h = make(
        text(503, "x"),
        text(503, "x"),
        ok(),
        retry=RetryPolicy(attempts=3, initial=0.02, max_wait=1, jitter=False),
    )
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await h.get()
    assert loop.time() - t0 >= 0.02 + 0.04 - 0.005


# ---- the budget ----------------------------------------------------------------------------------


async def test_no_request_when_the_budget_is_exhausted(make: Any) -> None:
    h = make(budget=0)
    with pytest.raises(BudgetExhausted) as info:
        await h.get()
    assert h.script.requests == [] and h.attempts == []
    assert "no request was sent" in str(info.value) and info.value.credits == 0


async def test_retries_stop_at_the_budget(make: Any) -> None:
    h = make(text(503, "x"), text(503, "x"), budget=2)
    with pytest.raises(BudgetExhausted) as info:
        await h.get()
    assert len(h.script.requests) == 2 and h.ledger.spent == 2
    assert info.value.credits == 2 and info.value.attempts == 2


async def test_query_cap_is_passed_to_the_ledger(make: Any) -> None:
    h = make(ok(), budget=10)
    await h.get(query_cap=1)
    with pytest.raises(BudgetExhausted, match="cap of 1"):
        await h.get(page=1, query_cap=1)
    assert len(h.script.requests) == 1


async def test_min_balance_floor_stops_requests(make: Any) -> None:
    h = make(ok(remaining=3), budget=10, min_balance=5)
    await h.get()
    with pytest.raises(BudgetExhausted, match="floor"):
        await h.get(page=1)
    assert len(h.script.requests) == 1


async def test_cancelled_mid_flight_keeps_the_reservation() -> None:
    started = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        started.set()
        await asyncio.sleep(3600)
        raise AssertionError

    ledger = CreditLedger(5)
    attempts: list[Attempt] = []
    async with ServiceClient(
        BASE, KEY, ledger, retry=FAST, transport=httpx.MockTransport(hang), on_attempt=attempts.append
    ) as client:
        task = asyncio.create_task(
            client.get(page_request("/x", [], cost=1, query_id="q", page=0, endpoint="/x"))
        )
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert ledger.spent == 1 and ledger.reserved == 0
    assert attempts[0].error == "cancelled" and attempts[0].credits == 1


async def test_max_in_flight_limits_concurrent_requests() -> None:
    running = peak = 0

    async def slow(request: httpx.Request) -> httpx.Response:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return ok()

    ledger = CreditLedger(100, policy="greedy")
    async with ServiceClient(
        BASE, KEY, ledger, retry=FAST, transport=httpx.MockTransport(slow), max_in_flight=3
    ) as client:
        await asyncio.gather(
            *(
                client.get(page_request("/x", [], cost=1, query_id=f"q{i}", page=0, endpoint="/x"))
                for i in range(12)
            )
        )
    assert peak == 3 and ledger.spent == 12


async def test_a_failing_attempt_recorder_does_not_lose_the_page(caplog: pytest.LogCaptureFixture) -> None:
    def boom(attempt: Attempt) -> None:
        raise RuntimeError("disk full")

    ledger = CreditLedger(5)
    async with ServiceClient(
        BASE, KEY, ledger, retry=FAST, transport=httpx.MockTransport(Script(ok())), on_attempt=boom
    ) as client:
        resp = await client.get(page_request("/x", [], cost=1, query_id="q", page=0, endpoint="/x"))
    assert resp.status_code == 200 and "on_attempt callback failed" in caplog.text


# ---- the key never leaks -------------------------------------------------------------------------


async def test_the_key_never_appears_in_errors_attempts_or_reprs(
    make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = f"invalid key {KEY}"
    cases: list[tuple[list[Step], type[HarvestError]]] = [
        ([js(400, {"success": False, "message": echo, "parameter": f"x{KEY}"})], BadRequest),
        ([js(401, {"success": False, "message": echo})], Unauthorized),
        ([js(402, {"success": False, "message": echo})], OutOfCredits),
        ([js(403, {"success": False, "message": echo})], Forbidden),
        ([js(404, {"success": True, "error": echo})], NotFound),
        ([js(418, {"message": echo})], UnexpectedResponse),
        ([text(503, echo)] * 5, ServiceUnavailable),
        ([httpx.ReadTimeout(echo)] * 5, ServiceUnavailable),
        ([httpx.ConnectError(echo)] * 5, ServiceUnavailable),
        ([httpx.UnsupportedProtocol(echo)], HarvestError),
    ]
    seen: list[str] = []
    for steps, expected in cases:
        h = make(*steps)
        with pytest.raises(expected) as info:
            await h.get()
        err = info.value
        seen += [str(err), repr(err), repr(err.response), repr(pickle.loads(pickle.dumps(err)))]
        if err.response is not None:
            seen += [err.response.raw.decode(errors="replace"), repr(err.response.body)]
        seen += [repr(a) for a in h.attempts]
        seen += [repr(h.client), repr(h.ledger)]
    h = make(budget=0)
    with pytest.raises(BudgetExhausted) as info:
        await h.get()
    seen += [str(info.value), repr(info.value), caplog.text]
    leaks = [s for s in seen if KEY in s]
    assert not leaks, leaks[:3]
    assert "stamina.retry_scheduled" in caplog.text  # retries were logged, and without the key
    assert any("***" in s for s in seen)


async def test_the_key_is_not_sent_in_params_records(make: Any) -> None:
    h = make(ok())
    await h.get(query=[("q", f"token {KEY}")])
    assert KEY not in repr(h.attempts)


def test_errors_survive_pickling() -> None:
    from connectors.errors import ServiceAnswer

    answer = ServiceAnswer(404, {"success": True}, b'{"success": true}')
    for err in [
        BadRequest("bad", "handle", credits=1, response=answer, query_id="q", endpoint="/e"),
        NotFound(credits=1, response=answer),
        ServiceUnavailable(attempts=5, last_cause="HTTP 503", credits=5),
        BudgetExhausted(query_id="q", endpoint="/e", page_index=3, cost=1, reason="the budget is spent"),
        OutOfCredits(),
    ]:
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and back.__dict__ == err.__dict__


async def test_absolute_urls_are_refused_as_paths(make: Any) -> None:
    h = make()
    for path in ("https://elsewhere.test/x", "//elsewhere.test/x", "v1/x"):
        with pytest.raises(ValueError, match="path must be"):
            await h.client.get(page_request(path, [], cost=1, query_id="q", page=0, endpoint="/x"))
    assert h.script.requests == [] and h.ledger.reserved == 0


def test_constructor_validates() -> None:
    with pytest.raises(HarvestError):
        ServiceClient(BASE, "  ", CreditLedger(1))
    with pytest.raises(ValueError):
        ServiceClient(BASE, KEY, CreditLedger(1), max_in_flight=0)
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)


async def test_a_short_key_is_not_cut_out_of_answers() -> None:
    """A two-letter key would match inside ordinary data: the cursor must come back whole, or paging breaks."""
    body = {"success": True, "items": [{"id": "p1"}], "cursor": "cG4uMTk1LmRhOTAwYg", "credits_charged": 1}
    script = Script(js(200, body))
    ledger = CreditLedger(10)
    async with ServiceClient(BASE, "k1", ledger, retry=FAST, transport=httpx.MockTransport(script)) as client:
        resp = await client.get(
            page_request("/v1/pinboard/search", [], cost=1, query_id="q", page=0, endpoint="/e")
        )
    assert resp.body["cursor"] == "cG4uMTk1LmRhOTAwYg" and b"cG4uMTk1LmRhOTAwYg" in resp.raw


async def test_a_query_waiting_for_credits_does_not_hold_the_first_request_gate(make: Any) -> None:
    """A resumed run, key not proven yet (no balance endpoint), a short budget: query A asks for its page 5 and
    must wait while B lags at page 0. B's first request must still go out: before, A waited for credits while
    holding the one-request-at-a-time gate, and B waited for the gate: the run hung."""
    h = make(ok(), ok())
    h.ledger = ledger = CreditLedger(3)
    h.client.ledger = ledger
    ledger.register("A", 5)
    ledger.register("B", 0)
    lead = asyncio.create_task(
        h.client.get(page_request("/v1/pinboard/search", [("query", "a")], query_id="A", page=5))
    )
    await asyncio.sleep(0.05)
    assert not lead.done()  # B needs the credits for pages 0-4 first
    async with asyncio.timeout(5):
        lag = await h.client.get(page_request("/v1/pinboard/search", [("query", "b")], query_id="B", page=0))
    assert lag.status_code == 200
    ledger.finish("B")  # B is done: A may have what is left
    async with asyncio.timeout(5):
        assert (await lead).status_code == 200
    assert ledger.spent == 2
