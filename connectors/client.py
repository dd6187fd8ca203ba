"""The HTTP client of the retrieval service: one connection pool per run, every attempt paid via the ledger.

Money rules, in the order they apply to each attempt:

1. Reserve the endpoint's cost in the ledger first. No reservation -> `BudgetExhausted`, nothing is sent.
2. Send. If the request provably never reached the service (connect error/timeout, no pooled connection),
   release the reservation. Otherwise settle it: to the body's `credits_charged` when an answer carries it,
   else keep it whole (an unknown charge counts as spent: timeouts, dropped connections, 503 text/plain,
   truncated pages, cancellation mid-flight).
3. Every JSON object answer (errors too) updates the account balance seen by the ledger.

Retries (stamina, exponential backoff with jitter) cover 429 (honouring `Retry-After`, capped by
`max_wait`), 500/502/503/504, timeouts, dropped connections and 2xx bodies that are not JSON. Each retry is a
new attempt and reserves again, so retries can never spend past the budget. 400/401/402/403/404 are answers,
not failures: they raise typed errors at once, carrying the (paid) answer. Redirects are not followed: the
key header would follow them to any host.

The key is sent only in the `x-api-key` header. It is redacted from everything the client copies out of an
answer or an exception, and never appears in reprs or `Attempt` records.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import httpx
import orjson
import stamina

from connectors.auth import REDACTED, ApiKey, redact
from connectors.errors import (
    BadRequest,
    BudgetExhausted,
    Forbidden,
    HarvestError,
    NotFound,
    OutOfCredits,
    RunStopped,
    ServiceAnswer,
    ServiceUnavailable,
    Unauthorized,
    UnexpectedResponse,
)
from connectors.ledger import CreditLedger, Reservation

__all__ = ["Attempt", "Response", "RetryPolicy", "ServiceClient", "Timeouts"]

log = logging.getLogger("harvest.client")

JSON = dict[str, Any] | list[Any]

MIN_REDACTED_KEY = 16
"""Keys at least this long are cut out of answers (messages are always redacted)."""

# Failures where the request bytes never left this machine: the reservation goes back.
_NEVER_SENT: tuple[type[Exception], ...] = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Failures after the request may have reached the service: retried, the reservation is kept.
_MAYBE_SENT: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `read` follows the official client (60 s); `total` caps one attempt (a trickling body)."""

    connect: float = 10.0
    read: float = 60.0
    write: float = 10.0
    pool: float = 60.0
    total: float | None = 120.0

    def to_httpx(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts per request and how long to wait between them.

    Waits grow as initial * 2**n (+ up to `jitter` seconds, True = 1 s), capped at `max_wait`; a 429's
    Retry-After replaces the computed wait, also capped at `max_wait`. `deadline` bounds the whole call
    (None: attempts alone decide). Tests set initial=0, max_wait=0, jitter=False for instant retries.
    """

    attempts: int = 5
    initial: float = 0.5
    max_wait: float = 30.0
    jitter: bool | float = True
    deadline: float | None = None
    retry_statuses: frozenset[int] = frozenset({429, 500, 502, 503, 504})

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")

    @property
    def jitter_seconds(self) -> float:
        if self.jitter is True:
            return 1.0
        if self.jitter is False:
            return 0.0
        return float(self.jitter)


@dataclass(frozen=True)
class Attempt:
    """One HTTP attempt, paid or not: the row of the run's `requests` table."""

    query_id: str
    endpoint: str
    path: str
    params: tuple[tuple[str, str], ...]
    page: int
    attempt: int
    status_code: int | None
    credits: int  # what the ledger counted: settled amount, reservation kept, 0 when released
    duration_ms: float
    error: str | None
    started_at: dt.datetime


@dataclass(frozen=True)
class Response:
    """A successful answer. `credits` is what the ledger counted over all attempts of the call."""

    status_code: int
    body: JSON
    raw: bytes = field(repr=False)
    credits_charged: int | None
    credits_remaining: int | None
    duration_ms: float
    attempts: int
    credits: int


class _Retryable(Exception):
    """Internal: this attempt failed in a way worth another try."""

    def __init__(
        self, cause: str, *, retry_after: float | None = None, response: ServiceAnswer | None = None
    ) -> None:
        super().__init__(cause)
        self.cause = cause
        self.retry_after = retry_after
        self.response = response


def parse_retry_after(value: str | None, *, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait per a Retry-After header (delta-seconds or HTTP date); None if absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = (when - (now or dt.datetime.now(dt.UTC))).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


def _parse_body(raw: bytes) -> JSON | None:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict | list) else None


def _int_field(body: JSON | None, name: str) -> int | None:
    if not isinstance(body, dict):
        return None
    value = body.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_field(body: JSON | None, name: str) -> str | None:
    if not isinstance(body, dict):
        return None
    value = body.get(name)
    return value if isinstance(value, str) and value else None


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
        transport: httpx.AsyncBaseTransport | None = None,
        max_in_flight: int = 16,
        unbilled_statuses: frozenset[int] = frozenset(),
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self._key = api_key if isinstance(api_key, ApiKey) else ApiKey(api_key)
        self._key_bytes = self._key.reveal().encode()
        self.base_url = base_url.rstrip("/")
        self.ledger = ledger
        self.timeouts = timeouts
        self.retry = retry
        self.on_attempt = on_attempt
        self.max_in_flight = max_in_flight
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
        self._in_flight: set[asyncio.Task[Any]] = set()
        self._aborting = False
        url = httpx.URL(self.base_url)
        if url.scheme == "http" and url.host not in {"localhost", "127.0.0.1", "::1"}:
            log.warning("base_url %s is plain http: the API key travels unencrypted", self.base_url)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeouts.to_httpx(),
            limits=httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight),
            transport=transport,
            follow_redirects=False,
            headers={"user-agent": "harvest/0.1", "accept": "application/json"},
        )

    def __repr__(self) -> str:
        return f"ServiceClient(base_url={self.base_url!r}, api_key={REDACTED}, ledger={self.ledger!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def abort(self) -> int:
        """Cancel the requests in flight now (a second Ctrl-C, or the grace time ran out); returns how many.

        Their reservations count as spent (the service may have answered), and their queries stop as
        `interrupted` with the cursor of the aborted page, so a resume asks for it again.
        """
        self._aborting = True
        tasks = [t for t in self._in_flight if not t.done()]
        for task in tasks:
            task.cancel("harvest: aborted at stop")
        return len(tasks)

    async def credit_balance(self) -> int | None:
        """The account's balance from `GET /v1/credit-balance` (free): proves the key before anything is paid.

        Raises `Unauthorized`/`OutOfCredits` when the service refuses the key; None when the endpoint gave no
        usable answer (not offered, down): the run then proves the key with its first paid request instead.
        """
        try:
            response = await self._http.get("/v1/credit-balance", headers={"x-api-key": self._key.reveal()})
        except httpx.HTTPError as exc:
            log.warning("could not read the credit balance: %s", redact(str(exc), self._key))
            return None
        body = _parse_body(self._redact_bytes(response.content))
        if response.status_code in (401, 402):
            answer = ServiceAnswer(response.status_code, body, b"")
            error = Unauthorized if response.status_code == 401 else OutOfCredits
            raise error(response=answer, endpoint="/v1/credit-balance")
        count = _int_field(body, "creditCount")
        if response.status_code != 200 or count is None:
            log.warning(
                "the credit balance endpoint answered HTTP %d without a balance", response.status_code
            )
            return None
        self.key_accepted = True
        self.ledger.observe_remaining(count)
        return count

    # ---- the one public call -------------------------------------------------------------------------

    async def get(
        self,
        path: str,
        query: Sequence[tuple[str, str]],
        *,
        cost: int,
        query_id: str,
        page_index: int,
        endpoint: str,
        query_cap: int | None = None,
    ) -> Response:
        """GET one page, paying through the ledger, retrying transient failures; see the module docstring.

        On success the page counts as done for the breadth-first policy (`ledger.page_done`).
        """
        if not path.startswith("/") or path.startswith("//"):
            # An absolute URL would replace base_url and carry the key header to another host.
            raise ValueError(f"path must be a service path starting with one '/', got {self._text(path)!r}")
        call = _Call(
            self,
            path,
            tuple((str(k), str(v)) for k, v in query),
            cost,
            query_id,
            page_index,
            endpoint,
            query_cap,
        )
        policy = self.retry
        try:
            async for attempt in stamina.retry_context(
                on=self._backoff,
                attempts=policy.attempts,
                timeout=policy.deadline,
                wait_initial=policy.initial,
                wait_max=policy.max_wait,
                wait_jitter=policy.jitter_seconds,
            ):
                with attempt:
                    response = await call.attempt()
                    self.ledger.page_done(query_id, page_index)
                    return response
        except _Retryable as exc:
            raise ServiceUnavailable(
                attempts=call.attempts,
                last_cause=exc.cause,
                credits=call.credits,
                response=exc.response,
                query_id=query_id,
                endpoint=endpoint,
            ) from None
        raise AssertionError("unreachable: stamina either returns, raises or re-raises")  # pragma: no cover

    def _backoff(self, exc: Exception) -> bool | float:
        if not isinstance(exc, _Retryable):
            return False
        if exc.retry_after is not None:
            return min(exc.retry_after, self.retry.max_wait)
        return True

    # ---- helpers used by _Call -----------------------------------------------------------------------

    def _redact_bytes(self, raw: bytes) -> bytes:
        """An answer with the key cut out, should the service echo it. A key shorter than
        `MIN_REDACTED_KEY` is left alone in answers: it would match ordinary data (a cursor, an id) and
        corrupt it; real keys are long random strings."""
        if len(self._key_bytes) < MIN_REDACTED_KEY or self._key_bytes not in raw:
            return raw
        return raw.replace(self._key_bytes, REDACTED.encode())

    def _text(self, text: str) -> str:
        return redact(text, self._key)

    def _emit(self, record: Attempt) -> None:
        if self.on_attempt is None:
            return
        try:
            self.on_attempt(record)
        except Exception:
            # The ledger is already consistent; a failing recorder must not turn a paid page into a failure.
            log.exception("on_attempt callback failed for %s attempt %d", record.query_id, record.attempt)


class _Call:
    """State of one get(): attempt count and credits counted across attempts."""

    def __init__(
        self,
        client: ServiceClient,
        path: str,
        params: tuple[tuple[str, str], ...],
        cost: int,
        query_id: str,
        page_index: int,
        endpoint: str,
        query_cap: int | None,
    ) -> None:
        self.client = client
        self.path = path
        self.params = params
        self.cost = cost
        self.query_id = query_id
        self.page_index = page_index
        self.endpoint = endpoint
        self.query_cap = query_cap
        self.attempts = 0
        self.credits = 0
        self.safe_params = tuple((k, client._text(v)) for k, v in params)

    async def attempt(self) -> Response:
        client = self.client
        if not client.key_accepted:
            async with client._first_request:  # one at a time until an answer proves the key
                if not client.key_accepted:
                    return await self._attempt()
        return await self._attempt()

    def _refused(self) -> HarvestError:
        refusal = self.client.ledger.refusal(self.query_id)
        reason = refusal.reason if refusal else "the ledger refused it"
        if refusal is not None and refusal.kind != "budget":
            return RunStopped(
                status=refusal.kind,
                reason=reason,
                credits=self.credits,
                query_id=self.query_id,
                endpoint=self.endpoint,
                page_index=self.page_index,
            )
        return BudgetExhausted(
            query_id=self.query_id,
            endpoint=self.endpoint,
            page_index=self.page_index,
            cost=self.cost,
            reason=reason,
            credits=self.credits,
            attempts=self.attempts,
        )

    async def _attempt(self) -> Response:
        ledger = self.client.ledger
        reservation = await ledger.reserve(
            self.query_id, self.page_index, self.cost, query_cap=self.query_cap, price_key=self.endpoint
        )
        if reservation is None:
            raise self._refused()
        try:
            await self.client._slots.acquire()
        except BaseException:
            ledger.release(reservation)  # cancelled while waiting for a slot: nothing was sent
            raise
        try:
            ledger.sending(reservation)  # durable from here: a crash counts this request as spent
        except BaseException:
            self.client._slots.release()
            raise
        self.attempts += 1
        started_at = dt.datetime.now(dt.UTC)
        t0 = time.perf_counter()
        try:
            http_response = await self._send()
        except _NEVER_SENT as exc:
            ledger.release(reservation)
            self._record(started_at, t0, None, 0, self._describe(exc))
            raise _Retryable(f"could not connect: {self._describe(exc)}") from None
        except _MAYBE_SENT as exc:
            counted = self._keep(reservation)
            self._record(started_at, t0, None, counted, self._describe(exc))
            raise _Retryable(f"{self._describe(exc)} (reservation kept: it may have been billed)") from None
        except httpx.HTTPError as exc:
            # Unsendable request (bad URL, local protocol error): it never left, and retrying cannot help.
            ledger.release(reservation)
            self._record(started_at, t0, None, 0, self._describe(exc))
            raise HarvestError(
                f"the request could not be sent: {self._describe(exc)}",
                credits=self.credits,
                query_id=self.query_id,
                endpoint=self.endpoint,
            ) from None
        except BaseException as exc:
            # Cancelled (or worse) mid-flight: the service may have billed it.
            counted = self._keep(reservation)
            aborted = isinstance(exc, asyncio.CancelledError) and self.client._aborting
            self._record(started_at, t0, None, counted, "aborted at stop" if aborted else "cancelled")
            if aborted:
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                raise self._aborted() from None
            raise
        finally:
            self.client._slots.release()
        return self._answer(reservation, http_response, started_at, t0)

    def _aborted(self) -> RunStopped:
        stop = self.client.ledger.stopped
        return RunStopped(
            status=stop.kind if stop else "interrupted",
            reason=(stop.reason if stop else "the run was stopped") + "; the request in flight was abandoned",
            credits=self.credits,
            query_id=self.query_id,
            endpoint=self.endpoint,
            page_index=self.page_index,
        )

    async def _send(self) -> httpx.Response:
        request = self.client._http.get(
            self.path, params=list(self.params), headers={"x-api-key": self.client._key.reveal()}
        )
        total = self.client.timeouts.total
        current = asyncio.current_task()
        if current is not None:
            self.client._in_flight.add(current)
        try:
            if total is None:
                return await request
            async with asyncio.timeout(total):
                return await request
        except TimeoutError:
            raise httpx.ReadTimeout(f"no complete answer within {total:g} s") from None
        finally:
            if current is not None:
                self.client._in_flight.discard(current)

    def _keep(self, reservation: Reservation) -> int:
        counted = self.client.ledger.settle(reservation, None)
        self.credits += counted
        return counted

    def _describe(self, exc: BaseException) -> str:
        text = str(exc).strip() or "no detail"
        return self.client._text(f"{type(exc).__name__}: {text}")[:300]

    def _record(
        self, started_at: dt.datetime, t0: float, status: int | None, credits: int, error: str | None
    ) -> float:
        duration_ms = (time.perf_counter() - t0) * 1000
        self.client._emit(
            Attempt(
                query_id=self.query_id,
                endpoint=self.endpoint,
                path=self.client._text(self.path),
                params=self.safe_params,
                page=self.page_index,
                attempt=self.attempts,
                status_code=status,
                credits=credits,
                duration_ms=duration_ms,
                error=error,
                started_at=started_at,
            )
        )
        return duration_ms

    def _answer(
        self, reservation: Reservation, http_response: httpx.Response, started_at: dt.datetime, t0: float
    ) -> Response:
        ledger = self.client.ledger
        status = http_response.status_code
        raw = self.client._redact_bytes(http_response.content)
        body = _parse_body(raw)
        charged = _int_field(body, "credits_charged")
        remaining = _int_field(body, "credits_remaining")
        if remaining is not None:
            ledger.observe_remaining(remaining)
        if charged is None and status in self.client.unbilled_statuses:
            counted = ledger.settle(reservation, 0)
        else:
            counted = ledger.settle(reservation, charged)
        self.credits += counted
        self._note_key(status)
        answer = ServiceAnswer(status, body, raw)
        error = self._classify(status, body, raw)
        duration_ms = self._record(started_at, t0, status, counted, error)
        if error is None:
            assert body is not None
            return Response(
                status_code=status,
                body=body,
                raw=raw,
                credits_charged=charged,
                credits_remaining=remaining,
                duration_ms=duration_ms,
                attempts=self.attempts,
                credits=self.credits,
            )
        retry_statuses = self.client.retry.retry_statuses
        if 200 <= status < 300 or status in retry_statuses:
            retry_after = None
            if status == 429:
                retry_after = parse_retry_after(http_response.headers.get("retry-after"))
            raise _Retryable(error, retry_after=retry_after, response=answer)
        raise self._typed_error(status, body, answer)

    def _note_key(self, status: int) -> None:
        """401 and 402 stop the whole run: every other request would get the same answer (and 402 is also
        the real service's answer to an unknown key). Any other answer from past the key check proves it."""
        client = self.client
        if status in (401, 402):
            what = (
                "the API key was refused (401)"
                if status == 401
                else "out of credits, or the API key is not valid (402)"
            )
            client.ledger.stop("stopped", f"the service answered {what}")
        elif status < 500 and status != 429:
            client.key_accepted = True

    def _classify(self, status: int, body: JSON | None, raw: bytes) -> str | None:
        """None for a usable answer, else a short description for logs and the Attempt record."""
        if 200 <= status < 300:
            if body is None:
                return f"HTTP {status} with a body that is not a JSON object or array ({len(raw)} bytes)"
            return None
        message = _str_field(body, "message") or _str_field(body, "error")
        if message is None and body is None and raw:
            message = raw[:120].decode("utf-8", "replace").strip()
        return self.client._text(f"HTTP {status}" + (f": {message}" if message else ""))[:300]

    def _typed_error(self, status: int, body: JSON | None, answer: ServiceAnswer) -> HarvestError:
        common: dict[str, Any] = {
            "credits": self.credits,
            "response": answer,
            "query_id": self.query_id,
            "endpoint": self.endpoint,
        }
        if status == 400:
            message = _str_field(body, "message") or _str_field(body, "error")
            parameter = _str_field(body, "parameter")
            return BadRequest(
                self.client._text(message) if message else None,
                self.client._text(parameter) if parameter else None,
                **common,
            )
        if status == 401:
            return Unauthorized(**common)
        if status == 402:
            return OutOfCredits(**common)
        if status == 403:
            return Forbidden(**common)
        if status == 404:
            return NotFound(**common)
        return UnexpectedResponse(status, **common)
