"""`harvest endpoints`: the catalog as a user reads it (text) or a program does (`--json`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import typer

from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.job_catalog import Catalog, builtin
from harvest.flows.console import literal, out, say
from harvest.flows.spec import describe_params


def show_endpoints(as_json: bool, catalog: Catalog | None = None) -> None:
    """The built-in endpoints, then those a job declares (`harvest endpoints --spec SPEC`)."""
    catalog = catalog or builtin()
    infos = [_endpoint_info(e, e.path in catalog.declared) for e in catalog.endpoints.values()]
    if as_json:
        typer.echo(json.dumps(infos, indent=2))
        return
    for endpoint, info in zip(catalog.endpoints.values(), infos, strict=True):
        paging = "single page" if info["paging"] == "single" else f"paging: {info['paging']}"
        declared = " (declared by the job)" if info.get("declared") else ""
        head = literal(info["path"], style="bold") + literal(
            f"  {endpoint.price.describe()}, {paging}{declared}"
        )
        out.print(head, soft_wrap=True)
        for line in _describe_endpoint(info):
            say(line)
        out.print()


def _endpoint_info(endpoint: Endpoint, declared: bool) -> dict[str, Any]:
    """An endpoint for a program: a declared one says so, and a price per parameter value comes as `price_when`
    (the built-in endpoints have none)."""
    info: dict[str, Any] = {
        "path": endpoint.path,
        "summary": endpoint.summary,
        "cost": endpoint.cost,
        "paging": endpoint.paging.style,
        "cursor_params": list(endpoint.paging.request_params),
        "params": [asdict(p) for p in describe_params(endpoint.params)],
        "one_of": list(endpoint.params.one_of),
        "tables": [
            {"table": k.table, "primary_key": list(k.primary_key), "columns": [f.name for f in k.columns]}
            | ({"parent": k.parent} if isinstance(k, ChildKind) else {})
            for k in endpoint.landed_kinds
        ],
    }
    if len(endpoint.params.one_of_groups) > 1:
        info["one_of_groups"] = [list(group) for group in endpoint.params.one_of_groups]
    if endpoint.price.when:
        info["price_when"] = [
            {k: v for k, v in asdict(r).items() if v is not None} for r in endpoint.price.when
        ]
    if endpoint.price.least is not None:
        info["price_least"] = endpoint.price.least
    if endpoint.methods != ("GET",):
        info["methods"] = list(endpoint.methods)
    if (follow := endpoint.paging.follow) is not None:
        info["follow"] = {"param": follow.param, "from": follow.path, "kind": follow.kind}
    rules = endpoint.params.param_rules
    info |= {"exactly_one_of": [list(g) for g in rules.exactly_one_of]} if rules.exactly_one_of else {}
    info |= {"requires": [asdict(r) for r in rules.requires]} if rules.requires else {}
    info |= {"excludes": [asdict(r) for r in rules.excludes]} if rules.excludes else {}
    if declared:
        info["declared"] = True
    return info


def _describe_endpoint(info: dict[str, Any]) -> list[str]:
    """The lines `harvest endpoints` prints under an endpoint's path."""
    lines = [f"  {info['summary']}"] if info["summary"] else []
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
    for group in info.get("one_of_groups") or ([info["one_of"]] if info["one_of"] else []):
        lines.append(f"    at least one of: {', '.join(group)}")
    lines += [f"    exactly one of: {', '.join(group)}" for group in info.get("exactly_one_of", ())]
    for need in info.get("requires", ()):
        value = need["value"]
        shown = json.dumps(value) if isinstance(value, bool) else value
        what = need["param"] if value is None else f"{need['param']}={shown}"
        lines.append(f"    {what} needs: {', '.join(need['needs'])}")
    lines += [f"    {r['param']} excludes: {', '.join(r['excludes'])}" for r in info.get("excludes", ())]
    if "methods" in info:
        lines.append(f"  sent as: {' or '.join(info['methods'])} (POST: the parameters in a JSON body)")
    if "follow" in info:
        follow = info["follow"]
        lines.append(f"  follow-ups: {follow['param']} from {follow['kind']}.{follow['from']}, each a page")
    tables = ", ".join(
        f"{t['table']} ("
        + (f"child of {t['parent']}, " if "parent" in t else "")
        + f"key {', '.join(t['primary_key'])})"
        for t in info["tables"]
    )
    lines.append(f"  tables: {tables}")
    return lines
