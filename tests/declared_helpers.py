"""Declared endpoints for sandbox tests, and a client that pages their answers by the declaration's paging
signals alone (apart from harvest's pager, so a crawl with it checks the wire against the declaration); paths
are read with harvest's one path reader."""

from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from harvest.connectors.catalog.record_paths import MISSING, alternatives, first

ROOT = Path(__file__).resolve().parent.parent

COLUMNS: dict[str, Any] = {
    "item_id": {"type": "text", "path": "id"},
    "title": "text",
    "views": {"type": "integer", "path": "stats.views|views"},
    "score": {"type": "number", "path": "stats.score"},
    "verified": {"type": "boolean", "path": "author.verified"},
    "published_at": {"type": "timestamp", "path": "publishedAt"},
    "extra": "json",
    "tags": {"type": "text_list", "path": "tagList[].name"},
    "first_image": {"type": "text", "path": "images[0].url"},
    "asked": {"type": "text", "path": "$params.q"},
}
"""One column of each type, at plain, nested, alternative, indexed and mapped paths, and one from the request."""


def declaration(style: str = "single", records_at: str = "items", **paging: Any) -> dict[str, Any]:
    """A declared endpoint of a paging style: a required query `q`, one list of records at `records_at`."""
    decl: dict[str, Any] = {
        "params": {"q": {"type": "string", "required": True}},
        "paging": {"style": style, **paging},
        "records": {"things": {"at": records_at, "key": "item_id", "columns": copy.deepcopy(COLUMNS)}},
    }
    return decl


def dig(doc: Any, path: str | list[str]) -> Any:
    """The value at a record path (`a|b`, or the list of a plain declaration's paging: the first alternative that
    is there), MISSING when none is: read by harvest's own reader."""
    return first(doc, tuple(alternatives(path) if isinstance(path, str) else path))


def column_path(spec: Any, name: str) -> tuple[str, str]:
    """(type, path) of a declared column."""
    if isinstance(spec, str):
        return spec, name
    return spec["type"], spec.get("path", name)


def fits(kind: str, value: Any) -> bool:
    """Whether a wire value is of a declared column type."""
    if kind == "text":
        return isinstance(value, str) and value != ""
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "timestamp":
        return (
            isinstance(value, str) and datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None
        )
    if kind == "json":
        return isinstance(value, dict | list)
    if kind == "text_list":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    raise AssertionError(kind)


def records(body: Any, kind: dict[str, Any]) -> list[dict[str, Any]]:
    """A kind's records in an answer, read where the declaration says they are."""
    found = dig(body, kind.get("at", ""))
    if found is MISSING or found is None:
        return []
    items = [found] if kind.get("one") else found
    wrap = (kind.get("unwrap") or {}).get("key")
    return [item[wrap] if wrap else item for item in items]


def next_request(body: Any, paging: dict[str, Any]) -> dict[str, str] | None:
    """The parameters of the next page, read from the declaration's end-of-pages signals; None at the end."""
    more = paging.get("more")
    flag = dig(body, more) if more else MISSING
    if flag is not MISSING and not flag:
        return None
    out = {}
    for param, path in paging.get("next", {}).items():
        value = dig(body, path)
        if (
            value is MISSING
            or value in (None, "", 0, False)
            or str(value) in paging.get("end_values", ["-end-"])
        ):
            return None
        out[param] = str(value)
    return out or None


def http_pages(client: httpx.Client, path: str, decl: dict[str, Any], params: dict[str, str]) -> list[Any]:
    """Every answer a client reading the declaration gets, following its cursors to the end."""
    bodies, request = [], dict(params)
    for _ in range(100):
        response = client.get(path, params=request)
        assert response.status_code == 200, (response.status_code, response.text[:300])
        bodies.append(response.json())
        nxt = next_request(bodies[-1], decl["paging"])
        if nxt is None:
            return bodies
        request = {**params, **nxt}
    raise AssertionError(f"{path} did not end within 100 pages")
