"""Injected faults: each kind on the wire, what is billed, and the repeatable schedule."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest

from harvest.sandbox.config import FaultKind, SandboxConfig
from harvest.sandbox.wire.faults import decide
from harvest.sandbox.wire.serving import RunningSandbox
from tests.endpoints import EMBED, OLD_BALANCE, PINS

Q = {"query": "chairs"}


def one_faulted_call(
    sandbox_factory: Callable[..., RunningSandbox], kind: str, **overrides: object
) -> tuple[RunningSandbox, httpx.Response, httpx.Response]:
    """Request 1 gets the fault; request 2 is the same request, unfaulted."""
    sb = sandbox_factory(api_keys={"k": 100}, fault_plan={1: kind}, **overrides)
    with sb.client() as client:
        faulted = client.get(PINS, params=Q)
        clean = client.get(PINS, params=Q)
    return sb, faulted, clean


def test_rate_limit(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb, faulted, clean = one_faulted_call(sandbox_factory, "rate_limit", retry_after="0")
    assert faulted.status_code == 429
    assert faulted.headers["retry-after"] == "0"
    assert faulted.json()["success"] is False
    assert clean.status_code == 200
    assert sb.billed_total("k") == 1  # only the clean call


def test_server_error_is_json(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb, faulted, clean = one_faulted_call(sandbox_factory, "server_error")
    assert faulted.status_code == 500
    assert faulted.json()["error"] == "internal_error"
    assert clean.status_code == 200 and sb.billed_total("k") == 1


def test_unavailable_is_plain_text(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb, faulted, _ = one_faulted_call(sandbox_factory, "unavailable")
    assert faulted.status_code == 503
    assert faulted.headers["content-type"].startswith("text/plain")
    assert faulted.text.startswith("upstream connect error"), "the real service's edge answers so"
    with pytest.raises(json.JSONDecodeError):
        faulted.json()
    assert sb.billed_total("k") == 1


def test_truncated_body_is_billed(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb, faulted, clean = one_faulted_call(sandbox_factory, "truncated")
    assert faulted.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        faulted.json()
    assert 0 < len(faulted.content) < len(clean.content)
    assert clean.content.startswith(faulted.content[:40])
    assert sb.billed_total("k") == 2
    assert clean.json()["credits_remaining"] == 98


def test_malformed_body_is_billed(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb, faulted, clean = one_faulted_call(sandbox_factory, "malformed")
    assert faulted.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        faulted.json()
    assert clean.json()["pins"]  # the same request, unfaulted, is fine
    assert sb.billed_total("k") == 2


def test_dropped_connection(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(api_keys={"k": 100}, fault_plan={1: "drop"})
    with sb.client() as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(PINS, params=Q)
        assert client.get(PINS, params=Q).status_code == 200
    first = sb.ledger[0]
    assert (first.status, first.fault, first.credits) == (None, "drop", 0)
    assert sb.billed_total("k") == 1


def test_slow_answer_is_billed_even_if_the_client_gave_up(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    sb = sandbox_factory(api_keys={"k": 100}, fault_plan={1: "slow", 2: "slow"}, slow_seconds=0.4)
    with sb.client() as client:
        start = time.monotonic()
        response = client.get(PINS, params=Q)
        assert response.status_code == 200 and time.monotonic() - start >= 0.4
        with pytest.raises(httpx.ReadTimeout):
            client.get(PINS, params=Q, timeout=0.1)
    deadline = time.monotonic() + 120  # a hang guard: the slow answer is billed 0.4 s after it was asked
    while sb.billed_total("k") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sb.billed_total("k") == 2
    assert [e.fault for e in sb.ledger] == ["slow", "slow"]


def test_unbilled_fault_kinds_are_configurable(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(
        api_keys={"k": 100}, fault_plan={1: "truncated", 2: "rate_limit"}, billed_faults={"rate_limit"}
    )
    with sb.client() as client:
        client.get(PINS, params=Q)
        client.get(PINS, params=Q)
    assert [(e.fault, e.credits) for e in sb.ledger] == [("truncated", 0), ("rate_limit", 1)]


def test_fault_plan_by_path(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(fault_plan_by_path={PINS: [None, "server_error"]})
    with sb.client() as client:
        statuses = [
            client.get(PINS, params=Q).status_code,
            client.get(EMBED, params={"handle": "h"}).status_code,
            client.get(PINS, params=Q).status_code,
            client.get(PINS, params=Q).status_code,
        ]
    assert statuses == [200, 200, 500, 200]


def statuses_under(sb: RunningSandbox, n: int) -> list[int | str]:
    out: list[int | str] = []
    with sb.client() as client:
        for i in range(n):
            try:
                out.append(client.get(PINS, params={"query": f"q{i}"}).status_code)
            except httpx.TransportError as exc:
                out.append(type(exc).__name__)
            client.get(OLD_BALANCE)  # not a data request: does not move the schedule
    return out


def test_same_seed_same_schedule(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    kinds = ["rate_limit", "server_error", "unavailable", "drop"]
    a = statuses_under(sandbox_factory(seed=7, fault_rate=0.4, fault_kinds=kinds, retry_after="0"), 30)
    b = statuses_under(sandbox_factory(seed=7, fault_rate=0.4, fault_kinds=kinds, retry_after="0"), 30)
    c = statuses_under(sandbox_factory(seed=8, fault_rate=0.4, fault_kinds=kinds, retry_after="0"), 30)
    assert a == b
    assert a != c
    assert {429, 500, 503, "RemoteProtocolError"} <= set(a) | set(c)
    assert 200 in a


def test_schedule_rate_and_kinds() -> None:
    config = SandboxConfig(seed=3, fault_rate=0.25, fault_kinds=["rate_limit", "unavailable"])
    faults = [decide(config, n, PINS, n - 1) for n in range(1, 2001)]
    hit = [f for f in faults if f is not None]
    assert 400 < len(hit) < 600
    assert set(hit) == {FaultKind.RATE_LIMIT, FaultKind.UNAVAILABLE}
    assert all(decide(SandboxConfig(seed=3), n, PINS, n) is None for n in range(1, 200))


def test_ledger_numbers_data_requests(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(fault_plan={2: "server_error"})
    with sb.client() as client:
        client.get(PINS, params=Q)
        client.get(OLD_BALANCE)
        client.get(PINS, params=Q)
    assert [(e.n, e.status, e.fault) for e in sb.ledger] == [
        (1, 200, None),
        (None, 200, None),
        (2, 500, "server_error"),
    ]
