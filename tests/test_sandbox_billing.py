"""Authentication, credits and the ledger, over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from harvest.sandbox.wire.serving import RunningSandbox
from tests.endpoints import CREATIVE, CREATIVE_DETAIL, EMBED, FEED, OLD_BALANCE, PINS, REELS, TWEETS

OUT_OF_CREDITS = {
    "success": False,
    "error": "payment_required",
    "message": "Out of credits. Please purchase more credits.",
    "credits_remaining": 0,
    "credits_charged": 0,
}


def test_missing_key_is_401_and_free(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(api_keys={"k": 10})
    with sb.client(key="") as client:
        response = client.get(PINS, params={"query": "q"})
        balance = client.get(OLD_BALANCE)
    assert response.status_code == 401
    assert response.json() == {
        "success": False,
        "error": "unauthorized",
        "message": "missing x-api-key header",
    }
    assert balance.status_code == 401
    assert sb.balance("k") == 10 and sb.billed_total("k") == 0


def test_unknown_key_looks_exactly_like_an_empty_balance(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    sb = sandbox_factory(api_keys={"rich": 10, "broke": 0})
    with sb.client(key="wrong") as wrong, sb.client(key="broke") as broke:
        unknown = wrong.get(PINS, params={"query": "q"})
        empty = broke.get(PINS, params={"query": "q"})
        unknown_balance = wrong.get(OLD_BALANCE)
    assert unknown.status_code == empty.status_code == unknown_balance.status_code == 402
    assert unknown.json() == empty.json() == OUT_OF_CREDITS
    assert sb.balance("rich") == 10


def test_balance_runs_out_mid_crawl(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(api_keys={"k": 3}, pages=(6, 6))
    statuses, remaining = [], []
    with sb.client() as client:
        params = {"query": "rugs"}
        for _ in range(5):
            response = client.get(PINS, params=params)
            statuses.append(response.status_code)
            if response.status_code != 200:
                break
            body = response.json()
            remaining.append(body["credits_remaining"])
            params = {"query": "rugs", "cursor": body["cursor"]}
        balance = client.get(OLD_BALANCE).json()
    assert statuses == [200, 200, 200, 402]
    assert remaining == [2, 1, 0]
    assert balance == {"creditCount": 0}
    assert sb.billed_total("k") == 3
    assert [e.credits for e in sb.ledger if e.path == PINS] == [1, 1, 1, 0]


def test_cost_table(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(api_keys={"k": 12}, costs={PINS: 5, EMBED: 0})
    with sb.client() as client:
        pins = client.get(PINS, params={"query": "q"}).json()
        embed = client.get(EMBED, params={"handle": "h"}).json()
        tweets = client.get(TWEETS, params={"url": "u"}).json()
        assert (pins["credits_charged"], pins["credits_remaining"]) == (5, 7)
        assert (embed["credits_charged"], embed["credits_remaining"]) == (0, 7)
        assert (tweets["credits_charged"], tweets["credits_remaining"]) == (1, 6)
        client.get(PINS, params={"query": "q"})  # 6 -> 1
        refused = client.get(PINS, params={"query": "q"})
        still_free = client.get(EMBED, params={"handle": "h"})
    assert refused.status_code == 402
    assert refused.json()["credits_remaining"] == 1  # nothing billed
    assert still_free.status_code == 200
    assert sb.balance("k") == 1 and sb.billed_total("k") == 11


def test_credit_balance_is_free(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(api_keys={"k": 2})
    with sb.client() as client:
        answers = [client.get(OLD_BALANCE).json() for _ in range(5)]
    assert answers == [{"creditCount": 2}] * 5
    assert sb.balance("k") == 2


def test_not_found_and_blocked_are_billed(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(api_keys={"k": 10})
    with sb.client() as client:
        deactivated = client.get(REELS, params={"handle": "missing_user"})
        gone = client.get(FEED, params={"handle": "missing.mb.example"})
        blocked = client.get(PINS, params={"query": "blocked content"})
        no_material = client.get("/v1/creative/materials/video:0123456789abffff")
    assert deactivated.status_code == 200 and deactivated.json()["credits_charged"] == 1
    assert gone.status_code == 404 and gone.json()["credits_charged"] == 1
    assert blocked.status_code == 403 and blocked.json()["credits_charged"] == 1
    assert no_material.status_code == 404 and no_material.json()["credits_charged"] == 1
    assert sb.balance("k") == 6 and sb.billed_total("k") == 4


def test_concurrent_requests_never_overspend(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(api_keys={"k": 10})

    def call(i: int) -> int:
        with sb.client() as client:
            return client.get(PINS, params={"query": f"q{i}"}).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(call, range(30)))
    assert sorted(statuses) == [200] * 10 + [402] * 20
    assert sb.balance("k") == 0 and sb.billed_total("k") == 10


def test_balances_are_per_key(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(api_keys={"a": 5, "b": 5})
    with sb.client(key="a") as a, sb.client(key="b") as b:
        a.get(PINS, params={"query": "q"})
        a.get(PINS, params={"query": "q"})
        b.get(PINS, params={"query": "q"})
        assert a.get(OLD_BALANCE).json() == {"creditCount": 3}
        assert b.get(OLD_BALANCE).json() == {"creditCount": 4}
    assert (sb.billed_total("a"), sb.billed_total("b")) == (2, 1)


def test_ledger_endpoint_lists_requests_without_keys(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(api_keys={"secret-key-123": 5})
    with sb.client() as client:
        client.get(PINS, params={"query": "tables", "trim": "true"})
        client.get(OLD_BALANCE)
        ledger = httpx.get(sb.base_url + "/_sandbox/ledger")
    assert "secret-key-123" not in ledger.text
    entries = ledger.json()
    assert [(e["path"], e["status"], e["credits"]) for e in entries] == [
        (PINS, 200, 1),
        (OLD_BALANCE, 200, 0),
    ]
    assert entries[0]["params"] == {"query": "tables", "trim": "true"}
    assert entries[0]["n"] == 1 and entries[0]["fault"] is None
    assert isinstance(entries[0]["time"], float)


def test_ledger_names_the_material_a_detail_request_asked_for(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    sb = sandbox_factory(fault_plan={2: "drop"})
    with sb.client() as client:
        material = client.get(CREATIVE, params={"query": "shoes"}).json()["data"][0]["material_id"]
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(f"/v1/creative/materials/{material}")
        client.get(f"/v1/creative/materials/{material}")
        client.get("/v1/creative/materials/video:nonsense")
    detail = [e for e in sb.ledger if e.path == CREATIVE_DETAIL]
    assert [(e.path_params, e.status, e.fault) for e in detail] == [
        ({"material_id": material}, None, "drop"),
        ({"material_id": material}, 200, None),
        ({"material_id": "video:nonsense"}, 404, None),
    ]
    assert all(e.path_params == {} for e in sb.ledger if e not in detail)
