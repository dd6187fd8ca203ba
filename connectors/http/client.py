"""The HTTP client of the retrieval service: one connection per slot (`lane_pool`), every attempt paid via the ledger.

Money rules, in the order they apply to each attempt:
1. Reserve the endpoint's cost in the ledger first. No reservation -> `BudgetExhausted`, nothing is sent.
   The ledger holds at least what the service was seen charging for the endpoint, grants an endpoint whose
   price no answer has shown yet one request at a time, and checks the reservation once more when the
   connection slot is taken (`sending`): topped up, or reserved again when the price rose meanwhile. When the
   run stopped while the request waited for its slot (Ctrl-C, a refused key), the reservation is released and
   nothing is sent (`RunStopped`).
2. Send. If the request provably never reached the service (connect error/timeout, no pooled connection),
   release the reservation. Otherwise settle it: to the body's `credits_charged` when an answer carries it,
   to 0 for a gateway's 502/503/504 that is not the service's JSON (it never reached the service), else keep
   it whole (an unknown charge counts as spent: timeouts, dropped connections, truncated pages, cancellation).
3. Every JSON object answer (errors too) updates the account balance seen by the ledger.
Retries (stamina, exponential backoff with jitter) cover 429 (honouring `Retry-After`, capped by
`max_wait`), 500/502/503/504, timeouts and dropped connections. Each retry is a new attempt and reserves again,
so retries can never spend past the budget. 400/401/402/403/404 are answers, not failures: they raise typed
errors at once, carrying the (paid) answer. Redirects are not followed: the key header would go to any host.
A 2xx is paid for once. Its body is read tolerantly (`connectors.reading.json_body`: what real services send that strict
JSON refuses is repaired and counted). One that still cannot be read is asked for again only when it was
plausibly damaged on the wire (cut short against its Content-Length, or JSON that ends early), once, and not
when the same bytes come back; otherwise it is the service's answer: `UnreadableAnswer`, kept by the pager in
the raw store. An answer past `max_answer_bytes` is not read (`AnswerTooLarge`), counted as spent. The key is sent
only in the `x-api-key` header, redacted from all the client copies out of an answer or an exception, reprs, `Attempt`s.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

import httpx

from harvest.connectors import errors, refusal_errors
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.credits.reservations import Reservation
from harvest.connectors.errors import HarvestError, ServiceAnswer
from harvest.connectors.http import answers
from harvest.connectors.http.answers import JSON, Response, int_field, problem, shows_price, typed_error
from harvest.connectors.http.auth import REDACTED, ApiKey, redact_in_http_logs
from harvest.connectors.http.balance import AccountBalance
from harvest.connectors.http.in_flight import InFlight
from harvest.connectors.http.lane import BodyCut, BodyOverCap, ReceivedAnswer
from harvest.connectors.http.lane_pool import Lanes, Wire, lane_maker
from harvest.connectors.http.pace import Pace, RateLimitedTooLong
from harvest.connectors.http.page_call import PageCall, with_retries
from harvest.connectors.http.retry import (
    Retryable,
    RetryPolicy,
    SlowDown,
    Timeouts,
    on_the_wire,
    parse_retry_after,
)
from harvest.connectors.paging.page_request import Attempt, PageRequest, pairs_to_dict
from harvest.connectors.reading.json_body import read_body

__all__ = ["JSON", "Attempt", "PageRequest", "Response", "RetryPolicy", "ServiceClient", "Timeouts"]

log = logging.getLogger("harvest.client")

JSON_BODY = {"content-type": "application/json"}
DEFAULT_MAX_ANSWER_BYTES = 32 * 2**20
"""The largest answer read (`service.max_answer_mb`): a page of this service is a few KB to a few MB, and reading
an answer of 8 MB or more takes about its own size above the run's own (`bench/answer_memory.py`)."""


class ServiceClient:
    """Async client of the retrieval service; `async with ServiceClient(...) as client:` for one run."""

    def __init__(
        self,
        base_url: str,
        api_key: str | ApiKey,
        ledger: CreditLedger,
        timeouts: Timeouts = Timeouts(),
        retry: RetryPolicy = RetryPolicy(),
        on_attempt: Callable[[Attempt], None] | None = None,
        max_in_flight: int = 16,
        unbilled_statuses: frozenset[int] = frozenset(),
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        pace: Pace | None = None,
        lanes: Lanes | None = None,
    ) -> None:
        """`lanes`: how requests reach the service (the client's seam, as httpx's `transport`), the client's to
        close; made for `base_url` when not given (`lane_pool.lane_maker`)."""
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self._key = api_key if isinstance(api_key, ApiKey) else ApiKey(api_key)
        redact_in_http_logs(self._key)
        self.base_url = base_url.rstrip("/")
        self.ledger = ledger
        self.timeouts = timeouts
        self.retry = retry
        self.on_attempt = on_attempt
        self.max_in_flight = max_in_flight
        self.max_answer_bytes = max_answer_bytes
        self.pace = pace or Pace()
        """How fast requests leave: as fast as the service allows (`connectors.http.pace`), shared by the run."""
        # Statuses known not to be billed (settled to 0 when the body names no charge). Empty by default:
        # whether the real service bills 429/5xx is unknown, and an unknown charge counts as spent.
        self.unbilled_statuses = unbilled_statuses
        # Held only around sending, after the reservation: a request waiting for a slot must not block the
        # ledger (breadth-first waits need the lagging queries to send), and the pool never times out.
        self._slots = asyncio.Semaphore(max_in_flight)
        # Until one answer shows the key is accepted, requests go one at a time: a wrong key then costs one
        # request, not one per query (the real service answers 402 to an unknown key).
        self.key_accepted = False
        self._first_request = asyncio.Lock()
        self._in_flight = InFlight()
        url = httpx.URL(self.base_url)
        if url.scheme == "http" and url.host not in {"localhost", "127.0.0.1", "::1"}:
            log.warning("base_url %s is plain http: the API key travels unencrypted", self.base_url)
        if url.userinfo:
            raise ValueError("base_url must not carry a user name or password")
        self._lanes = Lanes(lane_maker(self.base_url, timeouts)) if lanes is None else lanes
        self._wire = Wire(self.base_url, timeouts, self._lanes)
        """Pages and the balance alike go out on it."""
        self.balance = AccountBalance(self._wire, self._key, ledger, retry)

    def __repr__(self) -> str:
        return f"ServiceClient(base_url={self.base_url!r}, api_key={REDACTED}, ledger={self.ledger!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def connections(self) -> int:
        """Connections open to the service now: one a request in flight or idle, at most `max_in_flight`."""
        return len(self._lanes)

    async def aclose(self) -> None:
        await self._wire.aclose()

    def abort(self) -> int:
        """Cancel the requests in flight now (a second Ctrl-C, or the grace time ran out); returns how many.

        Their reservations count as spent (the service may have answered), and their queries stop as
        `interrupted` with the cursor of the aborted page, so a resume asks for it again.
        """
        return self._in_flight.abort()

    def scrub(self, text: str) -> str:
        """`text` with the key cut out: for messages made from exceptions the client did not raise."""
        return self._key.scrub(text)

    async def credit_balance(self) -> int | None:
        """The account's balance from the service's free balance endpoint (`connectors.http.balance.PATH`):
        proves the key before anything is paid.

        Raises `Unauthorized`/`OutOfCredits` when the service refuses the key, `NotTheService` when something
        else answers; None when retries ran out (down): the run then proves the key with its first paid request.
        """
        count = await self.balance.read()
        if count is not None:
            self.key_accepted = True
        return count

    # ---- the one public call -------------------------------------------------------------------------

    async def get(self, request: PageRequest) -> Response:
        """One page (a GET, or a POST where the request says: alike in every other way), paying through the
        ledger, retrying transient failures (module docstring); done, it counts for breadth-first (`page_done`)."""
        if not request.path.startswith("/") or request.path.startswith("//"):
            # An absolute URL would replace base_url and carry the key header to another host.
            raise ValueError(
                f"path must be a service path starting with one '/', got {self._key.scrub(request.path)!r}"
            )
        safe = {
            k: self._key.scrub(v) if isinstance(v, str) else v
            for k, v in pairs_to_dict(request.params).items()
        }
        call = PageCall(request, safe)
        response = await with_retries(call, self._paced, self.retry)
        self.ledger.page_done(request.query_id, request.page)
        return response

    async def _paced(self, call: PageCall) -> Response:
        """One attempt, however often the service asks it to slow down (429): each refusal waits what the
        service asked (or a backoff) and takes its turn again; past the run's `max_wait` without any accepted
        answer, the call stops as `RateLimited` (resumable, like a budget stop)."""
        while True:
            try:
                return await self._attempt(call)
            except SlowDown as refused:
                try:
                    wait = self.pace.wait_after_refusal(
                        refused.retry_after, call.refusals, self.retry.max_wait
                    )
                except RateLimitedTooLong as exc:
                    raise errors.RateLimited(
                        exc.waited, credits=call.credits, query_id=call.request.query_id,
                        endpoint=call.request.endpoint,
                    ) from None  # fmt: skip
                call.refusals += 1
                await asyncio.sleep(wait)

    async def _attempt(self, call: PageCall) -> Response:
        """Reserve, wait for the pace, take a connection slot, send, and settle: one attempt of a call."""
        request, ledger = call.request, self.ledger
        while True:
            reservation = await ledger.reserve(
                request.query_id,
                request.page,
                request.cost,
                query_cap=request.query_cap,
                price_key=request.price_key or request.endpoint,
            )
            if reservation is None:
                refusal = ledger.refusal(request.query_id)
                if refusal is not None and refusal.kind == "budget" and await self.balance.settle_refusals():
                    continue  # refusals the service did not bill went back to the budget: ask again
                raise refusal_errors.refused(refusal, request, call.credits, call.attempts, call.tried)
            async with contextlib.AsyncExitStack() as turn:
                try:
                    call.turn_at = await self.pace.turn()
                    if not self.key_accepted:
                        # One at a time until an answer proves the key, taken after the reservation: a request
                        # waiting for credits (breadth-first) must not keep the lagging queries from sending.
                        await turn.enter_async_context(self._first_request)
                    await self._slots.acquire()
                except BaseException:
                    ledger.release(reservation)  # cancelled while waiting for its turn: nothing was sent
                    raise
                if ledger.stopped is not None:  # the run stopped while it waited for a slot: never send it
                    self._slots.release()
                    ledger.release(reservation)
                    raise refusal_errors.stopped(ledger.stopped, request, call.credits, sent=False)
                try:
                    # The last price check (topped up if the endpoint was seen costing more since it was
                    # granted), and durable from here: a crash counts this request as spent.
                    sent = ledger.sending(reservation)
                    if sent is None:
                        continue  # the price rose past what is left while it waited: reserve again at it
                    call.attempts, call.reservation = call.attempts + 1, sent.id
                    started_at, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
                    http_response = await self._sent(call, sent, started_at, t0)
                finally:
                    self._slots.release()
                return self._answer(call, sent, http_response, started_at, t0)

    async def _sent(
        self, call: PageCall, reservation: Reservation, started_at: dt.datetime, t0: float
    ) -> ReceivedAnswer:
        """The HTTP answer, or the error that says what became of the reservation."""
        ledger = self.ledger
        try:
            return await self._send(call.request)
        except BodyCut as cut:
            counted = call.keep(ledger, reservation, cut.status)
            why = self._key.scrub(f"cut short: {cut}")[:300]
            call.record(self.on_attempt, started_at, t0, cut.status, counted, why)
            received = self._key.scrub_answer(cut.received)
            raise call.unreadable(
                cut.status, received, f"was cut short ({cut})", self._key.scrub, on_the_wire=True
            ) from None
        except BodyOverCap as big:
            counted = call.keep(ledger, reservation, big.status)
            call.record(self.on_attempt, started_at, t0, big.status, counted, f"answer too large: {big}")
            raise errors.AnswerTooLarge(
                str(big), self.max_answer_bytes / 2**20, credits=call.credits,
                query_id=call.request.query_id, endpoint=call.request.endpoint,
            ) from None  # fmt: skip
        except httpx.HTTPError as exc:
            raise self._not_answered(call, reservation, exc, started_at, t0) from None
        except BaseException as exc:
            # Cancelled (or worse) mid-flight: the service may have billed it.
            counted = call.keep(ledger, reservation)
            aborted = isinstance(exc, asyncio.CancelledError) and self._in_flight.aborting
            call.record(
                self.on_attempt, started_at, t0, None, counted, "aborted at stop" if aborted else "cancelled"
            )
            if aborted:
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                raise refusal_errors.stopped(
                    self.ledger.stopped, call.request, call.credits, sent=True
                ) from None
            raise

    def _not_answered(
        self,
        call: PageCall,
        reservation: Reservation,
        exc: httpx.HTTPError,
        started_at: dt.datetime,
        t0: float,
    ) -> Exception:
        """What a failure on the wire makes of the attempt (`connectors.http.retry.on_the_wire`): a request that
        never left gives its reservation back; one that may have reached the service keeps it."""
        retry, why = on_the_wire(exc, self._key.describe), self._key.describe(exc)
        if retry is not None and retry.sent:
            call.record(self.on_attempt, started_at, t0, None, call.keep(self.ledger, reservation), why)
            return Retryable(f"{why} (reservation kept: it may have been billed)")
        self.ledger.release(reservation)
        call.record(self.on_attempt, started_at, t0, None, 0, why)
        if retry is not None:
            return retry
        # Unsendable (bad URL, local protocol error): it never left, and retrying cannot help.
        return HarvestError(
            f"the request could not be sent: {why}", credits=call.credits,
            query_id=call.request.query_id, endpoint=call.request.endpoint,
        )  # fmt: skip

    async def _send(self, request: PageRequest) -> ReceivedAnswer:
        """A GET with the parameters in the query string, or a POST of its JSON body (the cursor in it too)."""
        posted = request.method == "POST"
        with self._in_flight.sending():
            return await self._wire.send(
                request.path, () if posted else request.params,
                {"x-api-key": self._key.reveal(), **(JSON_BODY if posted else {})},
                self.max_answer_bytes, request.method, request.body,
            )  # fmt: skip

    def _answer(
        self,
        call: PageCall,
        reservation: Reservation,
        http_response: ReceivedAnswer,
        started_at: dt.datetime,
        t0: float,
    ) -> Response:
        """Settle what the answer says it cost, record the attempt, and say what the answer means."""
        ledger, status = self.ledger, http_response.status_code
        raw = self._key.scrub_answer(http_response.content, status)
        read = read_body(raw)
        body = read.value
        charged, remaining = int_field(body, "credits_charged"), int_field(body, "credits_remaining")
        if remaining is not None:
            ledger.observe_remaining(remaining)
        unbilled = charged is None and (
            status in self.unbilled_statuses or answers.from_the_edge(status, body)
        )
        refusal = status in answers.REFUSALS or answers.foreign(status, body)
        counted = ledger.settle(
            reservation, 0 if unbilled else charged, priced=shows_price(status, body), refusal=refusal,
            answered=True,
        )  # fmt: skip
        if refusal and charged is None and not unbilled:
            call.refused_credits += counted
        if status == 429:
            self.pace.refused_one(call.turn_at)
        else:
            self.pace.accepted(call.turn_at)
        call.credits += counted
        self._note_key(status)
        answer = ServiceAnswer(status, body, raw)
        error = problem(status, body, raw, read.problem)
        error = self._key.scrub(error)[:300] if error else None
        duration_ms = call.record(self.on_attempt, started_at, t0, status, counted, error)
        if error is None:
            assert body is not None
            return Response(
                status, body, raw, charged, remaining, duration_ms, call.attempts, call.credits, read.repairs
            )
        if 200 <= status < 300:
            assert read.problem is not None
            raise call.unreadable(status, raw, read.problem if read.ends_early else None, self._key.scrub)
        if status == 429:
            raise SlowDown(parse_retry_after(http_response.header("retry-after")))
        if status in self.retry.retry_statuses:
            raise Retryable(error, response=answer)
        raise typed_error(
            answer,
            self._key.scrub,
            self._key.source,
            credits=call.credits,
            query_id=call.request.query_id,
            endpoint=call.request.endpoint,
        )

    def _note_key(self, status: int) -> None:
        """401 and 402 stop the whole run: every other request would get the same answer (and 402 is also
        the real service's answer to an unknown key). Any other answer from past the key check proves it."""
        if status in (401, 402):
            what = (
                "the API key was refused (401)"
                if status == 401
                else f"out of credits, or the API key is not valid (402; the key: {self._key.source})"
            )
            self.ledger.stop("stopped", f"the service answered {what}")
        elif status < 500 and status != 429:
            self.key_accepted = True
