"""What an answer of the service means: a usable page, something to try again, or a typed error.

The service's errors are not documented: statuses follow docs/service-shapes.md, bodies may be JSON or not (a
503 from the edge is text/plain), and a 2xx whose body cannot be read is damaged (`connectors.http.client` decides
whether it is worth one more try). 400/401/402/403/404 are answers, not failures: they raise typed errors at
once, carrying the (paid) answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harvest.connectors.errors import (
    BadRequest,
    Forbidden,
    HarvestError,
    NotFound,
    NotTheService,
    OutOfCredits,
    ServiceAnswer,
    Unauthorized,
    UnexpectedResponse,
)
from harvest.connectors.reading.json_body import read_body

JSON = dict[str, Any] | list[Any]


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
    repairs: dict[str, int] = field(default_factory=dict)
    """What reading the body repaired (`connectors.reading.json_body`), by kind."""


REFUSALS = frozenset({429, 500, 502, 503, 504})
"""Answers that refuse a request rather than answer it: their charge is unknown (counted at the reservation),
and what the account's balance shows the service did not bill goes back to the budget (`CreditLedger.reconcile`)."""


def parse_body(raw: bytes) -> JSON | None:
    """The JSON object or array of an answer (read as `connectors.reading.json_body` reads any), or None."""
    return read_body(raw).value


PRICED_STATUSES = frozenset({403, 404})
"""Refusals the service bills like a page (besides 2xx): what they cost is the endpoint's price."""


def shows_price(status: int, body: JSON | None) -> bool:
    """Whether an answer shows what its endpoint costs: one the service bills as a page, with a readable body.
    A damaged body leaves the charge unknown; 429, 5xx and 400-402 are not the price of a page, nor is a 403 or
    404 that is not the service's (no envelope)."""
    if status in PRICED_STATUSES:
        return envelope(body)
    return body is not None and 200 <= status < 300


def foreign(status: int, body: JSON | None) -> bool:
    """An error answer that is not the service's (no envelope): its charge is unknown, and the account's balance
    settles it like a refusal's (`CreditLedger.reconcile`): something else answered."""
    return status >= 400 and not envelope(body)


def what_answered(status: int, raw: bytes, content_type: str | None = None) -> str:
    """An answer in one line for a person: its status, its type and the start of its body, literally."""
    kind = f" ({content_type.split(';')[0].strip()})" if content_type else ""
    text = " ".join(raw[:200].decode("utf-8", "replace").split())
    if len(text) > 80:
        text = text[:77] + "..."
    return f"HTTP {status}{kind}" + (f": {text!r}" if text else ", no body")


EDGE_STATUSES = frozenset({502, 503, 504})
"""Statuses a gateway in front of the service answers when it could not reach it."""


def envelope(body: JSON | None) -> bool:
    """Whether a body is the service's own: a JSON object with its `success` flag (every answer of the service
    carries it, errors included); a proxy's page, an edge's plain text or another server's JSON does not."""
    return isinstance(body, dict) and isinstance(body.get("success"), bool)


def from_the_edge(status: int, body: JSON | None) -> bool:
    """A gateway's 502/503/504 that is not the service's answer (text/plain "upstream connect error", an HTML
    page): the request never reached the service, which bills nothing for it (docs/credits.md)."""
    return status in EDGE_STATUSES and not envelope(body)


def int_field(body: JSON | None, name: str) -> int | None:
    if not isinstance(body, dict):
        return None
    value = body.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def str_field(body: JSON | None, name: str) -> str | None:
    if not isinstance(body, dict):
        return None
    value = body.get(name)
    return value if isinstance(value, str) and value else None


def problem(status: int, body: JSON | None, raw: bytes, unreadable: str | None = None) -> str | None:
    """None for a usable answer, else a short description for logs and the attempt record (not redacted)."""
    if 200 <= status < 300:
        if body is None:
            why = unreadable or "not a JSON object or array"
            return f"HTTP {status} with a body that cannot be read: {why} ({len(raw):,} bytes)"
        return None
    message = str_field(body, "message") or str_field(body, "error")
    if message is None and body is None and raw:
        message = raw[:120].decode("utf-8", "replace").strip()
    return f"HTTP {status}" + (f": {message}" if message else "")


def refuses_key(status: int, body: JSON | None) -> bool:
    """A 402 the service itself sent: its envelope, or a JSON object with its message (`message` or `error`
    text). The service answers a wrong key so, as an account out of credits; another server's 402 (no JSON,
    other JSON) is not the service's."""
    return status == 402 and (envelope(body) or bool(str_field(body, "message") or str_field(body, "error")))


def typed_error(
    answer: ServiceAnswer, redact: Callable[[str], str], key_source: str | None = None, **common: Any
) -> HarvestError:
    """The error a final (not retried) status means; `common` says where and what it cost; `key_source`, where
    the key came from (a 402 names it)."""
    status, body = answer.status_code, answer.body
    common["response"] = answer
    if status == 402:
        return OutOfCredits(**common) if key_source is None else OutOfCredits(key_source=key_source, **common)
    if status == 400:
        message = str_field(body, "message") or str_field(body, "error")
        parameter = str_field(body, "parameter")
        return BadRequest(
            redact(message) if message else None, redact(parameter) if parameter else None, **common
        )
    known: dict[int, type[Unauthorized | Forbidden | NotFound]] = {
        401: Unauthorized, 403: Forbidden, 404: NotFound,
    }  # fmt: skip
    if status == 404 and not envelope(body):  # a wrong base_url's 404 page: never the service's "not found"
        return NotTheService(
            common.get("endpoint") or "the service", redact(what_answered(404, answer.raw)), **common
        )
    if status in known:
        return known[status](**common)
    return UnexpectedResponse(status, **common)
