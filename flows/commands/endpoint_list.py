"""`harvest endpoints`: the catalog as a user reads it (text) or a program does (`--json`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import typer

from connectors.catalog import endpoints as catalog
from connectors.catalog.endpoints import Endpoint
from flows.console import literal, out, say
from flows.spec import describe_params


def show_endpoints(as_json: bool) -> None:
    infos = [_endpoint_info(e) for e in catalog.endpoints().values()]
    if as_json:
        typer.echo(json.dumps(infos, indent=2))
        return
    for info in infos:
        paging = "single page" if info["paging"] == "single" else f"paging: {info['paging']}"
        head = literal(info["path"], style="bold") + literal(f"  {info['cost']} credit/request, {paging}")
        out.print(head, soft_wrap=True)
        for line in _describe_endpoint(info):
            say(line)
        out.print()


def _endpoint_info(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "path": endpoint.path,
        "summary": endpoint.summary,
        "cost": endpoint.cost,
        "paging": endpoint.paging.style,
        "cursor_params": list(endpoint.paging.request_params),
        "params": [asdict(p) for p in describe_params(endpoint.params)],
        "one_of": list(endpoint.params.one_of),
        "tables": [
            {"table": k.table, "primary_key": list(k.primary_key), "columns": [f.name for f in k.columns]}
            for k in endpoint.kinds
        ],
    }


def _describe_endpoint(info: dict[str, Any]) -> list[str]:
    """The lines `harvest endpoints` prints under an endpoint's path."""
    lines = [f"  {info['summary']}"]
    for p in info["params"]:
        marks = {
            "path": p["in_path"],
            "required": p["required"],
            "cursor": p["name"] in info["cursor_params"],
        }
        flags = ", ".join(name for name, on in marks.items() if on)
        allowed = f": {', '.join(p['allowed'])}" if p["allowed"] else ""
        extra = f" ({p['constraint']})" if p["constraint"] else ""
        lines.append(f"    {p['name']}: {p['type']}{allowed}{extra}" + (f" [{flags}]" if flags else ""))
    if info["one_of"]:
        lines.append(f"    at least one of: {', '.join(info['one_of'])}")
    tables = ", ".join(f"{t['table']} (key {', '.join(t['primary_key'])})" for t in info["tables"])
    lines.append(f"  tables: {tables}")
    return lines
