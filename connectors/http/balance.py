"""The account's balance, free to read: it proves the URL and the key before anything is paid, and settles what
refusals cost.

`GET /v1/account/credit-balance` (`PATH`; `/v1/credit-balance` before the service moved it, `OLD_PATH`, read where
the new one answers 404) costs nothing and answers `{"creditCount": N}`. `harvest run` reads it before Prefect
starts (`read_before_run`): a URL where something else answers (a 404 page, HTML, other JSON, nothing listening, a
name that does not resolve, TLS refused) or a refused key stops there, in about a second. A run reads it before
its first request and after its last (the service's own bill, `flows.run.bill`), on the wire its pages go out on
(`lane_pool.Wire`), and when the budget runs low while the ledger holds refusals it counted at their reservation (429s, 5xx: their charge unknown): what the
balance did not fall by was not billed and goes back to the budget (`CreditLedger.reconcile`), so a run can spend
its whole budget however often the service asked it to slow down. Every reading is retried as a page request is
(429 with its `Retry-After`, 5xx, dropped connections): it is free, and without it the refusals stay counted.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import weakref
from functools import partial

import httpx

from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.error_chain import error_chain
from harvest.connectors.errors import (
    HarvestError,
    NotTheService,
    OutOfCredits,
    ServiceAnswer,
    ServiceUnavailable,
    Unauthorized,
)
from harvest.connectors.http.answers import envelope, int_field, parse_body, refuses_key, what_answered
from harvest.connectors.http.auth import ApiKey
from harvest.connectors.http.lane import BodyCut
from harvest.connectors.http.lane_pool import Wire
from harvest.connectors.http.page_call import backoff
from harvest.connectors.http.retry import Retryable, RetryPolicy, Timeouts, on_the_wire, parse_retry_after
from harvest.connectors.retries import aretried

log = logging.getLogger("harvest.client")

PATH = "/v1/account/credit-balance"
"""Where the service answers the account's balance."""
OLD_PATH = "/v1/credit-balance"
"""Where it answered before: asked when `PATH` answers 404 (a service or a stand-in from before the move), and
from then on for that base URL."""
_ANSWERS_AT_OLD_PATH: weakref.WeakSet[Wire] = weakref.WeakSet()
"""The wires whose service answers the balance at `OLD_PATH` (its 404 at `PATH` said so): a run asks there."""
CHECK_TIMEOUTS = Timeouts(connect=5.0, read=10.0, write=5.0, pool=5.0, total=15.0)
"""The connection check's: a service that answers at all answers its balance in milliseconds."""
CHECK_RETRY = RetryPolicy(attempts=3, initial=0.25, max_wait=2.0, jitter=0.1)
"""A 429/5xx or a dropped connection at the check is tried again briefly; still failing, the run goes on and
its own requests follow the full retry rules (the edge's transient 503 must not fail a nightly run). Every try
timed out (nothing answered at all) ends the check as nothing listening does: a run would wait minutes a request
on a service that says nothing (`docs/decisions.md`, "A service that answers nothing")."""


async def read_balance(
    wire: Wire, key: ApiKey, policy: RetryPolicy, *, connect_is_final: bool = False
) -> int:
    """The account's balance, sent on the wire pages go out on and retried as a page is (`policy`: 429 with its
    Retry-After, 5xx, dropped connections).

    Raises `Unauthorized`/`OutOfCredits` when the service refuses the key, `NotTheService` when something else
    answers (or nothing can: with `connect_is_final`, a refused connection, a name that does not resolve or a
    failed TLS handshake end it at once), `ServiceUnavailable` when the retries ran out."""
    attempts = unanswered = 0

    async def once() -> int:
        nonlocal attempts, unanswered
        attempts += 1
        try:
            return await _read_once(wire, key, connect_is_final)
        except _NoAnswer:
            unanswered += 1
            raise

    try:
        return await aretried(policy.backoff, partial(backoff, policy), once)
    except Retryable as exc:
        if connect_is_final and unanswered == attempts:  # not busy: silent, or nothing there
            raise NotTheService(wire.url + PATH, f"{exc.cause}, {attempts} tries in a row", True) from None
        raise ServiceUnavailable(attempts=attempts, last_cause=exc.cause, endpoint=PATH) from None


class _NoAnswer(Retryable):
    """The attempt timed out: the connection was not made, or made and nothing came back in time. A busy service
    answers (429, 503); one that answers nothing to a free request that takes milliseconds is not answering."""


async def _read_once(wire: Wire, key: ApiKey, connect_is_final: bool) -> int:
    path = OLD_PATH if wire in _ANSWERS_AT_OLD_PATH else PATH
    where = wire.url + path
    try:
        response = await wire.send(path, headers={"x-api-key": key.reveal()})
    except BodyCut as cut:
        raise Retryable(key.scrub(f"cut short: {cut}")) from None
    except httpx.HTTPError as exc:
        retry = on_the_wire(exc, key.describe)
        reason = unreachable(exc) if retry is not None and not retry.sent and connect_is_final else None
        if retry is None or reason is not None:  # unsendable, or nothing there to answer
            raise NotTheService(where, key.scrub(reason or key.describe(exc)), reason is not None) from None
        if isinstance(exc, httpx.ConnectTimeout):
            raise _NoAnswer("no connection could be made in time", sent=False) from None
        if isinstance(exc, httpx.TimeoutException):
            raise _NoAnswer("it took the connection and answered nothing in time", sent=retry.sent) from None
        raise retry from None
    raw = key.scrub_answer(response.content, response.status_code)
    body, status = parse_body(raw), response.status_code
    count = int_field(body, "creditCount")
    if status == 200 and count is not None:
        return count
    if status == 401 and envelope(body):
        raise Unauthorized(response=ServiceAnswer(status, body, raw), endpoint=path)
    if refuses_key(status, body):  # a wrong key or an empty account: the service says the same to both
        raise OutOfCredits(key_source=key.source, response=ServiceAnswer(status, body, raw), endpoint=path)
    if status == 404 and path == PATH:  # a service from before the move, or no service at all
        _ANSWERS_AT_OLD_PATH.add(wire)
        try:
            return await _read_once(wire, key, connect_is_final)
        except NotTheService:
            _ANSWERS_AT_OLD_PATH.discard(wire)  # not there either: the new place is the one named
    answered = key.scrub(what_answered(status, raw, response.header("content-type")))
    if status == 429 or status >= 500:
        raise Retryable(answered, retry_after=parse_retry_after(response.header("retry-after")))
    raise NotTheService(where, answered)


def unreachable(exc: BaseException) -> str | None:
    """Why nothing at the URL can answer, when no retry within a second would change it: nothing listening, a
    name that does not resolve, a TLS handshake refused. None for what may pass (a timeout, a resolver that
    failed for now)."""
    for seen in error_chain(exc):
        if isinstance(seen, socket.gaierror):
            if seen.errno in (socket.EAI_AGAIN, getattr(socket, "EAI_SYSTEM", None)):
                return None
            return f"the host name does not resolve ({seen.strerror or seen})"
        if isinstance(seen, ssl.SSLError):
            return f"the TLS handshake failed ({seen.reason or seen}; an https:// URL to a plain-HTTP port?)"
        if isinstance(seen, ConnectionRefusedError) or getattr(seen, "errno", None) == errno.ECONNREFUSED:
            return "nothing is listening there (connection refused)"
    return None


async def read_before_run(base_url: str, key: ApiKey, timeouts: Timeouts = CHECK_TIMEOUTS) -> int | None:
    """The balance read once before anything starts: the URL answers as the service does and the key is
    accepted (else `NotTheService`, `Unauthorized`, `OutOfCredits`). None when the service was there but busy
    (429/5xx, dropped connections, timeouts, past a few brief tries): the run's own rules take it from there."""
    wire = Wire(base_url, timeouts)
    try:
        return await read_balance(wire, key, CHECK_RETRY, connect_is_final=True)
    except ServiceUnavailable as exc:
        log.warning("the service's balance could not be read before the run: %s", exc)
        return None
    finally:
        await wire.aclose()


class AccountBalance:
    def __init__(
        self, wire: Wire, key: ApiKey, ledger: CreditLedger, retry: RetryPolicy = RetryPolicy()
    ) -> None:
        self._wire = wire
        self._key = key
        self._ledger = ledger
        self._retry = retry
        self.first: int | None = None
        """The session's first reading: where its bill starts."""
        self.earlier_bill = 0
        """What the run's earlier sessions (before a kill) were billed, as their readings tell (`flows.run.bill`):
        the refusals and requests in flight they counted are settled with this session's (`settle_refusals`)."""
        self._settling = asyncio.Lock()
        self._settled_with: tuple[int, int] | None = None
        """(refusal credits, credits spent) when the balance was last read to settle: read again only once either
        changed (more refusals counted, or answers in flight then have settled since)."""

    async def read(self) -> int | None:
        """The account's balance, retried like a page; raises `Unauthorized`/`OutOfCredits` when the service
        refuses the key and `NotTheService` when something else answers; None when the retries ran out."""
        try:
            count = await read_balance(self._wire, self._key, self._retry)
        except ServiceUnavailable as exc:
            log.warning("could not read the credit balance: %s", exc)
            return None
        if self.first is None:
            self.first = count
        self._ledger.observe_remaining(count)
        return count

    def billed(self, now: int) -> int | None:
        """The run's bill so far, from this session's first reading and `now`."""
        return None if self.first is None else self.earlier_bill + self.first - now

    async def settle_refusals(self) -> bool:
        """Read the balance and give back what refusals were counted and not billed; whether any came back.
        One reading at a time, and none while nothing changed since the last."""
        spent = self._ledger.spent
        async with self._settling:
            seen = (self._ledger.refused_unknown, self._ledger.spent)
            if self.first is not None and seen[0] and seen != self._settled_with:
                self._settled_with = seen
                try:
                    now = await self.read()
                except HarvestError:
                    now = None
                billed = None if now is None else self.billed(now)
                if billed is not None:
                    self._ledger.reconcile(billed)
        return self._ledger.spent < spent  # this reading, or one another query made while this one waited
