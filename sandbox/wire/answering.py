"""The service proper, without HTTP: authentication, validation, billing, the envelope and the ledger.

Order of checks, as a client sees it: missing key -> 401; unknown key -> 402 (the real service's "out of
credits" message, the same body as an empty balance); bad parameters or cursor -> 400; then the answer is
billed (balance below the cost -> 402, nothing billed) and sent.

What is billed: every answer the service produced, including "not found" (200 with empty lists, 404) and
403 blocked; not 400, 401, 402. Faults: see `SandboxConfig.billed_faults` (by default slow, truncated and
malformed answers are billed; 429, 500, 503 and dropped connections are not).

Every JSON object answer carries `success`, `credits_remaining` (the balance after) and `credits_charged`,
except 401 (no key, no balance to report) and the injected 429/500/503 faults. The streaming clip endpoint's
bare array carries none.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from harvest.sandbox.config import FaultKind, SandboxConfig
from harvest.sandbox.emulation.emulated import EmulatedEndpoint
from harvest.sandbox.emulation.generate import build, make_ctx
from harvest.sandbox.emulation.generic.request_form import cache_age_seconds
from harvest.sandbox.served_paths import CREDIT_BALANCE
from harvest.sandbox.wire.billing import CreditBook, Ledger, LedgerEntry, key_id, params_dict
from harvest.sandbox.wire.faults import BODY_FAULTS, FaultSchedule, damage
from harvest.sandbox.wire.validation import InvalidRequest

OUT_OF_CREDITS = "Out of credits. Please purchase more credits."
JSON = b"application/json"


@dataclass
class WireAnswer:
    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]] = field(default_factory=lambda: [(b"content-type", JSON)])


@dataclass(frozen=True)
class BuiltPage:
    """A built page, serialised without its billing envelope (which changes with every answer)."""

    status: int
    success: bool
    envelope: bool
    body: bytes

    def enveloped(self, remaining: int, charged: int, cached_at: str | None = None) -> bytes:
        """The same bytes as serialising {"success", **body, "credits_remaining", "credits_charged"}; a cached
        answer says so (`cached: true`, `cached_at`) before its charge."""
        inner = self.body[1:-1]
        head = b'{"success":' + (b"true" if self.success else b"false")
        cached = b"" if cached_at is None else b'"cached":true,"cached_at":"%s",' % cached_at.encode("ascii")
        tail = cached + b'"credits_remaining":%d,"credits_charged":%d}' % (remaining, charged)
        return head + b"," + (inner + b"," if inner else b"") + tail


def _json(status: int, obj: Any) -> WireAnswer:
    return WireAnswer(status, orjson.dumps(obj))


def _ascii_json(obj: Any) -> bytes:
    """JSON as many platforms write it: every non-ASCII character escaped (an emoji as a surrogate pair, a lone
    surrogate as itself) and `NaN` for a number that is none. orjson writes neither."""
    return json.dumps(obj, ensure_ascii=True, allow_nan=True, separators=(",", ":")).encode("ascii")


MAINTENANCE_PAGE = (
    b"<!DOCTYPE html><html><head><title>Maintenance</title></head>"
    b"<body><h1>We'll be right back</h1><p>Scheduled maintenance.</p></body></html>"
)


def _wire_bytes(body: bytes, path: str, config: SandboxConfig) -> bytes:
    """A 200 answer's bytes as a platform sends them: another encoding, a byte order mark, or no JSON at all."""
    drift = config.drift
    if path in drift.unreadable:
        return MAINTENANCE_PAGE
    if path in drift.latin1:
        body = body.decode("utf-8").encode("latin-1", "replace")
    if path in drift.byte_order_mark:
        body = b"\xef\xbb\xbf" + body
    return body


class SandboxState:
    """Everything one running sandbox remembers: balances, the ledger and the fault clock."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.book = CreditBook(config.api_keys)
        self.ledger = Ledger()
        self._pages: dict[
            tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]], BuiltPage
        ] = {}
        self.faults = FaultSchedule(config)
        self._answered: dict[tuple[Any, ...], float] = {}
        """A request (its cache parameter left out) -> when it was first answered: what a cached answer is."""

    def record(
        self,
        n: int | None,
        path: str,
        items: list[tuple[str, str]],
        status: int | None,
        credits: int,
        fault: FaultKind | None,
        key: str | None,
        path_values: Mapping[str, str] | None = None,
        method: str = "GET",
    ) -> None:
        self.ledger.append(
            LedgerEntry(
                n=n,
                time=time.time(),
                path=path,
                params=params_dict(items),
                status=status,
                credits=credits,
                fault=None if fault is None else str(fault),
                key_id=None if key is None else key_id(key),
                path_params=dict(path_values or {}),
                method=method,
            )
        )

    def out_of_credits(self, key: str | None) -> WireAnswer:
        balance = 0 if key is None else self.book.balance(key)
        body = {
            "success": False,
            "error": "payment_required",
            "message": OUT_OF_CREDITS,
            "credits_remaining": balance,
            "credits_charged": 0,
        }
        return _json(402, body)

    def charge_fault(
        self,
        presented: str | None,
        endpoint: EmulatedEndpoint,
        fault: FaultKind,
        items: Sequence[tuple[str, str]] = (),
    ) -> tuple[int, str | None]:
        """Bill an edge fault when the config says that kind is billed: (credits billed, resolved key)."""
        key = None if presented is None else self.book.resolve(presented)
        if key is None or fault not in self.config.billed_faults:
            return 0, key
        cost = endpoint.cost(items, self.config)
        return (cost, key) if self.book.charge(key, cost) is not None else (0, key)

    def answer(
        self,
        endpoint: EmulatedEndpoint,
        items: Sequence[tuple[str, str]],
        presented: str | None,
        path_values: Mapping[str, str] | None = None,
        n: int | None = None,
        fault: FaultKind | None = None,
        invalid: InvalidRequest | None = None,
        method: str = "GET",
    ) -> WireAnswer:
        """Answer one data request (its fault, if any, is slow or a body fault: edge faults end earlier);
        `invalid`: what is wrong with a request whose parameters could not be read (a POST's body), answered
        400 after the key is checked, as any bad parameter."""
        items = list(items)
        answer, credits, key = self._answer(endpoint, items, presented, path_values or {}, fault, invalid)
        applied = fault
        if answer.status == 200 and self.config.drift.active:
            answer.body = _wire_bytes(answer.body, endpoint.path, self.config)
        if fault is not None and fault in BODY_FAULTS:
            if answer.status == 200:
                answer.body = damage(fault, answer.body, n or 0)
            else:
                applied = None
        self.record(n, endpoint.path, items, answer.status, credits, applied, key, path_values, method)
        return answer

    def _answer(
        self,
        endpoint: EmulatedEndpoint,
        items: list[tuple[str, str]],
        presented: str | None,
        path_values: Mapping[str, str],
        fault: FaultKind | None,
        invalid: InvalidRequest | None = None,
    ) -> tuple[WireAnswer, int, str | None]:
        if not presented:
            body = {"success": False, "error": "unauthorized", "message": "missing x-api-key header"}
            return _json(401, body), 0, None
        key = self.book.resolve(presented)
        if key is None:
            return self.out_of_credits(None), 0, None
        try:
            if invalid is not None:
                raise invalid
            page = self._built(endpoint, items, path_values)
        except InvalidRequest as exc:
            body = {
                "success": False,
                "error": "bad_request",
                "message": exc.message,
                "parameter": exc.parameter,
                "credits_remaining": self.book.balance(key),
                "credits_charged": 0,
            }
            return _json(400, body), 0, key
        cached_at = self._cached_at(endpoint, items, path_values, page)
        cost = 0 if cached_at is not None else endpoint.cost(items, self.config)
        if fault is not None and fault not in self.config.billed_faults:
            cost = 0
        remaining = self.book.charge(key, cost)
        if remaining is None:
            return self.out_of_credits(key), 0, key
        if not page.envelope:
            return WireAnswer(page.status, page.body), cost, key
        return WireAnswer(page.status, page.enveloped(remaining, cost, cached_at)), cost, key

    def _cached_at(
        self,
        endpoint: EmulatedEndpoint,
        items: list[tuple[str, str]],
        path_values: Mapping[str, str],
        page: BuiltPage,
    ) -> str | None:
        """When the same request was first answered, if it asks for a cached answer (`cache_max_age`) and that
        answer is young enough: it then costs 0 credits. Every answer of such an endpoint is remembered."""
        name = endpoint.cache_param
        if name is None or page.status != 200 or not page.envelope:
            return None
        asked = cache_age_seconds(dict(items).get(name))
        request = (
            endpoint.path,
            tuple(sorted(path_values.items())),
            tuple(sorted(i for i in items if i[0] != name)),
        )
        now = time.time()
        first = self._answered.setdefault(request, now)
        if asked is None or first >= now or now - first > asked:
            return None
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(first))

    def _built(
        self, endpoint: EmulatedEndpoint, items: list[tuple[str, str]], path_values: Mapping[str, str]
    ) -> BuiltPage:
        """The page for a request, serialised; with `cache_pages`, built once per distinct request."""
        cache_key = (endpoint.path, tuple(path_values.items()), tuple(items))
        if self.config.cache_pages and (hit := self._pages.get(cache_key)) is not None:
            return hit
        ctx = make_ctx(endpoint, items, self.config, path_values)
        replayed = self.config.replay.get(endpoint.path)
        if replayed is not None:
            return BuiltPage(200, True, False, replayed)
        page = build(ctx)
        drift = self.config.drift
        written_by_python = endpoint.path in drift.cut_emoji or endpoint.path in drift.nan_counts
        body = _ascii_json(page.body) if written_by_python else orjson.dumps(page.body)
        built = BuiltPage(page.status, page.success, page.envelope, body)
        if self.config.cache_pages:
            self._pages[cache_key] = built
        return built

    def credit_balance(self, presented: str | None, path: str = CREDIT_BALANCE) -> WireAnswer:
        """`GET /v1/account/credit-balance` (or the older `/v1/credit-balance`): free, never faulted."""
        if not presented:
            answer = _json(
                401, {"success": False, "error": "unauthorized", "message": "missing x-api-key header"}
            )
            key = None
        else:
            key = self.book.resolve(presented)
            answer = (
                self.out_of_credits(None)
                if key is None
                else _json(200, {"creditCount": self.book.balance(key)})
            )
        self.record(None, path, [], answer.status, 0, None, key)
        return answer
