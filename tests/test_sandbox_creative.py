"""Creative materials: limit, order, filters and the detail endpoint, over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harvest.sandbox.config import Quirks
from harvest.sandbox.wire.serving import RunningSandbox
from tests.endpoints import CREATIVE
from tests.fixtures_sandbox import http_crawl


@pytest.fixture(scope="module")
def creative() -> Any:
    """Enough materials per query for filters to keep some: 6 to 8 default pages of 20."""
    from harvest.sandbox.wire.serving import running

    with running(pages=(6, 8), quirks=Quirks(repeat_items=False), api_keys={"k": 10**6}) as sb:
        yield sb


def crawl(sb: RunningSandbox, **params: Any) -> list[dict[str, Any]]:
    with sb.client() as client:
        bodies, collected = http_crawl(client, CREATIVE, params)
    assert sum(len(b["data"]) for b in bodies) == bodies[0]["metadata"]["total"]
    return collected.get("materials", [])


def test_default_page_size_and_limit(creative: RunningSandbox) -> None:
    with creative.client() as client:
        default = client.get(CREATIVE, params={"query": "soda"}).json()
        five = client.get(CREATIVE, params={"query": "soda", "limit": 5}).json()
    assert len(default["data"]) == 20
    assert len(five["data"]) == 5
    assert [m["material_id"] for m in five["data"]] == [m["material_id"] for m in default["data"][:5]]
    assert default["metadata"]["total"] == five["metadata"]["total"] > 100
    assert len(crawl(creative, query="soda", limit=37)) == default["metadata"]["total"]


def test_orders_are_real(creative: RunningSandbox) -> None:
    relevance = crawl(creative, query="soda")
    latest = crawl(creative, query="soda", order="latest")
    oldest = crawl(creative, query="soda", order="oldest")
    scores = [m["relevance"] for m in relevance]
    assert scores == sorted(scores, reverse=True)
    assert [m["created_at"] for m in latest] == sorted((m["created_at"] for m in relevance), reverse=True)
    assert [m["created_at"] for m in oldest] == sorted(m["created_at"] for m in relevance)
    assert {m["material_id"] for m in latest} == {m["material_id"] for m in relevance}


def test_language_filter(creative: RunningSandbox) -> None:
    everything = crawl(creative, query="soda")
    german = crawl(creative, query="soda", language="de")
    assert german and all(m["language"] == "de" for m in german)
    assert german == [m for m in everything if m["language"] == "de"]


def test_tag_filters_keep_materials_with_all_tags(creative: RunningSandbox) -> None:
    everything = crawl(creative, query="soda")
    both = crawl(creative, query="soda", style_tags=["ugc", "humor"])
    assert [m["material_id"] for m in both] == [
        m["material_id"] for m in everything if {"ugc", "humor"} <= set(m["style_tags"])
    ]
    cta = crawl(creative, query="soda", cta_type_tags=["shop_now"], style_tags=["bold"])
    assert cta and all("shop_now" in m["cta_type_tags"] and "bold" in m["style_tags"] for m in cta)
    assert crawl(creative, query="soda", style_tags=["no-such-tag"]) == []


def test_every_returned_id_resolves(creative: RunningSandbox) -> None:
    with creative.client() as client:
        page = client.get(CREATIVE, params={"query": "energy drink", "limit": 12}).json()["data"]
        for material in page:
            detail = client.get(f"{CREATIVE}/{material['material_id']}")
            assert detail.status_code == 200
            data = detail.json()["data"]
            assert (data["material_id"], data["type"], data["title"]) == (
                material["material_id"],
                material["type"],
                material["title"],
            )
            assert set(material["style_tags"]) <= set(data["structured_tags"])
            assert client.get(f"{CREATIVE}/{material['material_id']}").json()["data"] == data


@pytest.mark.parametrize(
    "material_id",
    ["video:0123456789abcdef", "audio:0123456789abcdef", "video:xyz", "video", "image:0123456789ABCDEF"],
)
def test_unknown_or_ill_formed_material_is_404(
    sandbox_factory: Callable[..., RunningSandbox], material_id: str
) -> None:
    sb = sandbox_factory(api_keys={"k": 10})
    with sb.client() as client:
        response = client.get(f"{CREATIVE}/{material_id}")
    assert response.status_code == 404
    assert response.json()["success"] is False
    assert sb.billed_total("k") == 1
