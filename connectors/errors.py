"""Typed errors of the service client and the credit ledger.

Every message is written for a person running a collection, not for a debugger: it says what happened and
what to do. Messages never contain the API key: the client redacts anything it copies from the service (see
`connectors.http.auth.redact`) before it builds an error, and these classes never format request headers.

Errors that follow an answer of the service carry it as `response` (a `ServiceAnswer`: status, parsed
body or None, raw bytes) and the credits the ledger counted for the call, because such answers are usually
billed and the caller should keep the paid raw page. All errors survive pickling (Prefect and Dask move
them between processes), which plain exceptions with keyword-only constructors do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harvest.connectors.paging.page_request import Tried
from harvest.connectors.reading.not_found import SAID, not_found_words

__all__ = [
    "AnswerTooLarge",
    "BadRequest",
    "BudgetExhausted",
    "Forbidden",
    "HarvestError",
    "MissingApiKey",
    "NotFound",
    "NotTheService",
    "OutOfCredits",
    "RunStopped",
    "ServiceAnswer",
    "ServiceUnavailable",
    "Unauthorized",
    "UnexpectedResponse",
    "UnreadableAnswer",
]


@dataclass(frozen=True, repr=False)
class ServiceAnswer:
    """One HTTP answer of the service, kept whole because it may have been paid for.

    `body` is the parsed JSON (object or array) or None when the bytes are not JSON (503 text/plain from the
    edge, truncated pages). The repr leaves the bytes out: answers can be large.
    """

    status_code: int
    body: Any
    raw: bytes

    def __repr__(self) -> str:
        kind = "none" if self.body is None else type(self.body).__name__
        return f"ServiceAnswer(status_code={self.status_code}, body=<{kind}>, raw=<{len(self.raw)} bytes>)"


def _rebuild(cls: type[HarvestError], args: tuple[Any, ...], state: dict[str, Any]) -> HarvestError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class HarvestError(Exception):
    """Base of every error harvest raises on purpose.

    `credits` is what the ledger counted for the whole call that failed (all attempts), `response` the last
    answer of the service when there was one (keep its `raw`: it was probably paid for).
    """

    def __init__(
        self,
        message: str,
        *,
        credits: int = 0,
        response: ServiceAnswer | None = None,
        query_id: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        message += _where(endpoint, query_id)  # every message says where it happened
        super().__init__(message)
        self.message = message
        self.credits = credits
        self.response = response
        self.query_id = query_id
        self.endpoint = endpoint

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, credits={self.credits}, response={self.response!r})"


def _where(endpoint: str | None, query_id: str | None) -> str:
    parts = []
    if endpoint:
        parts.append(endpoint)
    if query_id:
        parts.append(f"query {query_id!r}")
    return f" [{', '.join(parts)}]" if parts else ""


class MissingApiKey(HarvestError):
    """No usable API key was found; raised before anything is sent."""


class BudgetExhausted(HarvestError):
    """The ledger refused the credits for the next attempt, not sent (`attempts`: those sent). `cap_below_price`:
    {max_credits, price} when one request costs more than the query's whole cap; `capped`: `Refusal.capped`."""

    def __init__(
        self,
        *,
        query_id: str,
        endpoint: str,
        page_index: int,
        cost: int,
        reason: str,
        credits: int = 0,
        attempts: int = 0,
        cap_below_price: dict[str, int] | None = None,
        capped: str | None = None,
        tried: Tried | None = None,
    ) -> None:
        sent = f"sent none after {attempts} attempt(s) with no page" if attempts else "no request was sent"
        super().__init__(
            f"credit budget exhausted: page {page_index} needs {cost} credit(s) but {reason}; {sent}",
            credits=credits,
            query_id=query_id,
            endpoint=endpoint,
        )
        self.page_index = page_index
        self.cost = cost
        self.reason = reason
        self.attempts = attempts
        self.cap_below_price, self.capped = cap_below_price, capped
        self.tried = tried or Tried()
        """What the call's attempts at the page established (a Dask round's next call goes on from it)."""


class RunStopped(HarvestError):
    """The whole run stopped sending (Ctrl-C, a refused key, an empty account); the query keeps its cursor.

    `status` is the query status it leads to: `interrupted` (resumable) or `stopped` (the service refused).
    """

    def __init__(
        self,
        *,
        status: str,
        reason: str,
        page_index: int,
        query_id: str,
        endpoint: str,
        credits: int = 0,
        response: ServiceAnswer | None = None,
    ) -> None:
        super().__init__(
            f"stopped before page {page_index}: {reason}",
            credits=credits,
            response=response,
            query_id=query_id,
            endpoint=endpoint,
        )
        self.status = status
        self.reason = reason
        self.page_index = page_index


class BadRequest(HarvestError):
    """400: the service rejected a parameter (also its answer for handles or URLs that do not exist)."""

    def __init__(
        self,
        service_message: str | None,
        parameter: str | None,
        *,
        credits: int = 0,
        response: ServiceAnswer | None = None,
        query_id: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        text = "the service rejected the request as invalid (400)"
        if parameter:
            text += f"; parameter {parameter!r}"
        if service_message:
            text += f": {service_message}"
        text += ". Check the query's parameters (a handle or URL that does not exist also answers 400)"
        super().__init__(
            text,
            credits=credits,
            response=response,
            query_id=query_id,
            endpoint=endpoint,
        )
        self.service_message = service_message
        self.parameter = parameter


class _AnsweredError(HarvestError):
    """An error status with a fixed explanation: the class says what happened, the call says where."""

    explanation = ""

    def __init__(
        self,
        *,
        credits: int = 0,
        response: ServiceAnswer | None = None,
        query_id: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        super().__init__(
            self.explanation,
            credits=credits,
            response=response,
            query_id=query_id,
            endpoint=endpoint,
        )


class Unauthorized(_AnsweredError):
    """401: the service saw no key (or refused it)."""

    explanation = (
        "the service refused the request: no API key was sent, or it was not accepted (401). "
        "Set the API key (by default the environment variable HARVEST_API_KEY, or the configured Prefect "
        "Secret block)"
    )


class OutOfCredits(HarvestError):
    """402: the real service answers this both for an empty balance and for an unknown key, with the same
    message; the error names where the key came from (`key_source`), never the URL (the URL answered)."""

    def __init__(self, *, key_source: str = "the key given to harvest", **common: Any) -> None:
        super().__init__(
            "out of credits, or the API key is not valid: the service answers 402 with the same message for "
            f"both (it does not say which). Check the API key ({key_source}) and the account's balance",
            **common,
        )
        self.key_source = key_source


class Forbidden(_AnsweredError):
    """403: the source platform blocks this content; retrying does not help."""

    explanation = "the source platform blocks this content (403); it cannot be collected through the service"


class NotFound(HarvestError):
    """404. With `success: true` in the body it is a billed, legitimate "no such user" answer."""

    def __init__(
        self,
        *,
        credits: int = 0,
        response: ServiceAnswer | None = None,
        query_id: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        body = response.body if response is not None else None
        self.service_success = isinstance(body, dict) and body.get("success") is True
        words = not_found_words(body)  # a private page, an age-restricted one, no such page: told apart
        billed = " (the service answered success: true, and such answers are billed)"
        said = f"; {SAID}{words}" if words else ""
        detail = (billed if self.service_success else "") + said
        super().__init__(
            f"not found (404): the requested item does not exist at the source{detail}",
            credits=credits,
            response=response,
            query_id=query_id,
            endpoint=endpoint,
        )


class NotTheService(HarvestError):
    """Something answered that is not the service: no envelope (`success`) where every answer of the service has
    one. A wrong `base_url` (`/v1` appended, another host) answers 404 pages: never the service's "not found"."""

    def __init__(self, where: str, answered: str, unreachable: bool = False, **common: Any) -> None:
        super().__init__(
            f"{where} does not answer as the service does: {answered}. Check `service.base_url` (the "
            "service's address without /v1, as in the spec's example) or --base-url",
            **common,
        )
        self.where, self.answered, self.unreachable = where, answered, unreachable


class UnexpectedResponse(HarvestError):
    """A status the client has no rule for (3xx, 405, 501, ...): not retried, reported as is."""

    def __init__(
        self,
        status_code: int,
        *,
        credits: int = 0,
        response: ServiceAnswer | None = None,
        query_id: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        super().__init__(
            f"the service answered with unexpected HTTP status {status_code}; not retried",
            credits=credits,
            response=response,
            query_id=query_id,
            endpoint=endpoint,
        )
        self.status_code = status_code


class ServiceUnavailable(HarvestError):
    """Retries ran out on transient failures (429, 5xx, timeouts, dropped connections, unparseable pages)."""

    def __init__(
        self, *, attempts: int, last_cause: str, credits: int = 0, provisional: int = 0, **common: Any
    ) -> None:
        """`provisional`: of `credits`, those counted for refusals no answer priced (the balance settles them)."""
        stop = "" if last_cause.endswith((".", "!", "?")) else "."  # the service's message may end a sentence
        held = f" ({provisional} of them for refusals no answer said were billed: the account's balance settles them)"
        super().__init__(
            f"the service is unavailable: gave up after {attempts} attempt(s); last cause: {last_cause}{stop} "
            f"{credits} credit(s) were counted for these attempts{held if provisional else ''}; try again later",
            credits=credits,
            **common,
        )
        self.attempts = attempts
        self.last_cause = last_cause


class UnreadableAnswer(HarvestError):
    """A 2xx answer no reading takes (`connectors.reading.json_body`), kept by the pager in the raw store.

    The service's own (`damaged` False: whole but not readable, or the same bytes twice): paid once and not asked
    for again; its query stops as `drift`, and `harvest rebuild` lands it once harvest can read it. Cut on the
    wire on both tries (`damaged`): the page is asked for again only by a later run (`--continue`)."""

    def __init__(
        self,
        problem: str,
        *,
        damaged: bool = False,
        credits: int = 0,
        response: ServiceAnswer | None = None,
        query_id: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        if damaged:
            text = (
                f"the service's answer came damaged on both tries ({problem}); stopped here, `harvest run SPEC "
                "--continue` asks for this page again"
            )
        else:
            text = (
                f"the service's answer could not be read ({problem}); it was paid once and is kept in the raw "
                "store (`harvest raw`): not asked for again, `harvest rebuild` lands it once harvest can read it"
            )
        super().__init__(text, credits=credits, response=response, query_id=query_id, endpoint=endpoint)
        self.problem = problem
        self.damaged = damaged


class AnswerTooLarge(HarvestError):
    """An answer larger than the job reads (`service.max_answer_mb`): not read, counted as spent."""

    def __init__(
        self,
        what: str,
        max_mb: float,
        *,
        credits: int = 0,
        query_id: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        super().__init__(
            f"the answer is larger than the job reads ({what}; `service.max_answer_mb` is {max_mb:g}): not read, "
            f"counted as spent. Raise `service.max_answer_mb` in the spec to read such answers (memory grows with "
            f"them), then `harvest run SPEC --continue` asks for this page again",
            credits=credits,
            query_id=query_id,
            endpoint=endpoint,
        )


class RateLimited(HarvestError):
    """The service refused every request (429) for the run's whole `rate_limit.max_wait_seconds`: the query stops
    with its cursor, like a budget stop, and the next run (or `--continue`) goes on from there."""

    def __init__(
        self, waited: float, *, credits: int = 0, query_id: str | None = None, endpoint: str | None = None
    ) -> None:
        super().__init__(
            f"the service kept asking harvest to slow down (429) and accepted no request for {waited:.0f} s; "
            "stopped waiting (`rate_limit.max_wait_seconds`), the query keeps its cursor: the next run or "
            "`harvest run SPEC --continue` goes on from there",
            credits=credits,
            query_id=query_id,
            endpoint=endpoint,
        )
