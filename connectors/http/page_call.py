"""A page is one call to the client, however many attempts it takes, and the money is counted per call.

Retries, 429 waits and a damaged answer asked for once more are all attempts of the same call: what they counted
together is what the page cost (`Response.credits`) and what an error that ends the call reports, and whether an
answer may be asked for again depends on the call's earlier answers. So that bookkeeping, and the loop that
repeats a call's attempts, live with the call; the client decides what each single attempt does with the money.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.credits.reservations import Reservation
from harvest.connectors.errors import ServiceAnswer, ServiceUnavailable, UnreadableAnswer
from harvest.connectors.http.answers import REFUSALS, Response
from harvest.connectors.http.retry import Retryable, RetryPolicy
from harvest.connectors.paging.page_request import Attempt, PageRequest, Tried
from harvest.connectors.reading.json_body import read_body
from harvest.connectors.retries import aretried

__all__ = ["PageCall", "backoff", "with_retries"]

log = logging.getLogger("harvest.client")


@dataclass
class PageCall:
    """One get(): the page asked for, and what its attempts so far counted."""

    request: PageRequest
    safe_params: dict[str, Any]
    attempts: int = 0
    credits: int = 0
    refused_credits: int = 0
    """Of `credits`, those counted for refusals (429, 5xx) whose charge no answer said: the balance settles them."""
    refusals: int = 0
    """429s this call met: its waits grow with them when the service names none."""
    turn_at: float = 0.0
    """When the pace gave this call's latest attempt its turn (`Pace.turn`): a 429 to it is of the burst
    before the pace's last cut, or a sign that the pace is still too fast."""
    damaged: list[tuple[bytes, bool]] = field(default_factory=list)
    """The 2xx answers of this call that came damaged: (digest, cut on the wire). One more try, once."""
    reservation: int | None = None
    """The id of the reservation the latest attempt was sent under (`Attempt.reservation`)."""

    def __post_init__(self) -> None:
        self.damaged = [*self.request.tried.damaged, *self.damaged]  # an earlier round's (`Tried`)

    @property
    def tried(self) -> Tried:
        """What this call's attempts and an earlier round's established at the page: the attempts the retry
        policy counts (a 429 is a wait, not one), the damaged answers."""
        return Tried(self.request.tried.attempts + self.attempts - self.refusals, tuple(self.damaged))

    def one_more_try(self, raw: bytes, on_the_wire: bool) -> bool:
        """Whether a 2xx that came damaged may be asked for again: only the first time."""
        self.damaged.append((hashlib.blake2b(raw, digest_size=16).digest(), on_the_wire))
        return len(self.damaged) == 1

    @property
    def damaged_by_the_network(self) -> bool:
        """Damaged on both tries, and not the service's doing: both cut short on the wire (the protocol says the
        answer was incomplete), or different bytes. JSON that ends early twice in the same bytes is the
        service's own answer."""
        if len(self.damaged) < 2:
            return False
        (first, wire1), (last, wire2) = self.damaged[0], self.damaged[-1]
        return (wire1 and wire2) or first != last

    def unreadable(
        self, status: int, raw: bytes, cut: str | None, scrub: Callable[[str], str], on_the_wire: bool = False
    ) -> Exception:
        """What a 2xx that cannot be read means. Cut short (`cut`: against its Content-Length, or its JSON ends
        early) it may have been damaged on the wire: one more try, once, and not when the same bytes came back.
        Otherwise the answer is the service's: it is not asked for again (`UnreadableAnswer`, kept, paid once)."""
        answer = ServiceAnswer(status, None, raw)
        if cut is not None and self.one_more_try(raw, on_the_wire):
            return Retryable(f"HTTP {status}, the body {cut} (asked once more)", response=answer)
        problem = read_body(raw).problem or "not JSON"
        damaged = self.damaged_by_the_network
        if len(self.damaged) > 1:
            problem += "; cut short twice" if damaged else "; the same answer came twice"
        return UnreadableAnswer(
            scrub(problem)[:300], damaged=damaged, credits=self.credits, response=answer,
            query_id=self.request.query_id, endpoint=self.request.endpoint,
        )  # fmt: skip

    def keep(self, ledger: CreditLedger, reservation: Reservation, status: int | None = None) -> int:
        """Settle a reservation whose charge no answer named. `status`: the one that came before the body broke
        off; the service billed before it sent it, so the charge is not a lost answer's (the balance may show
        it free): a refusal's when it refused, an unread page's otherwise (`Settlement.settle`)."""
        refusal = status is not None and status in REFUSALS
        counted = ledger.settle(reservation, None, refusal=refusal, answered=status is not None)
        self.credits += counted
        return counted

    def record(
        self,
        on_attempt: Callable[[Attempt], None] | None,
        started_at: dt.datetime,
        t0: float,
        status: int | None,
        credits: int,
        error: str | None,
    ) -> float:
        duration_ms = (time.perf_counter() - t0) * 1000
        request = self.request
        if on_attempt is not None:
            attempt = Attempt(
                request.query_id, request.endpoint, self.safe_params, request.page, self.attempts, status,
                credits, duration_ms, error, started_at, self.reservation,
            )  # fmt: skip
            try:
                on_attempt(attempt)
            except Exception:
                # The ledger is consistent; a failing recorder must not turn a paid page into a failure.
                log.exception("on_attempt callback failed for %s attempt %d", request.query_id, self.attempts)
        return duration_ms


async def with_retries(
    call: PageCall, attempt: Callable[[PageCall], Awaitable[Response]], policy: RetryPolicy
) -> Response:
    """The call's answer: `attempt` tried under `policy` (`connectors.retries`) while it fails in a way a
    retry may fix; `ServiceUnavailable` when the retries ran out."""
    request = call.request
    if request.tried.attempts:  # an earlier round's attempts at this page count (`PageRequest.tried`)
        policy = replace(policy, attempts=max(1, policy.attempts - request.tried.attempts))
    try:
        return await aretried(policy.backoff, partial(backoff, policy), partial(attempt, call))
    except Retryable as exc:
        raise ServiceUnavailable(
            attempts=request.tried.attempts + call.attempts, last_cause=exc.cause, credits=call.credits, provisional=call.refused_credits,
            response=exc.response,
            query_id=request.query_id, endpoint=request.endpoint,
        ) from None  # fmt: skip


def backoff(policy: RetryPolicy, exc: Exception) -> bool | float:
    if not isinstance(exc, Retryable):
        return False
    if exc.retry_after is not None:
        return min(exc.retry_after, policy.max_wait)
    return True
