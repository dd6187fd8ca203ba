"""`harvest endpoints`: the catalog as a user reads it (text, by platform) or a program does (`--json`), all of it
or the endpoints that hold every word asked for (`harvest endpoints video comments`)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.job_catalog import Catalog, builtin
from harvest.connectors.plurals import counted
from harvest.flows.console import literal, note, out, say
from harvest.flows.spec import describe_params

WIDTH = 80
"""Every sentence fits 80 columns; a value wider than a line (a long path) runs past it, whole."""

KEEP = "\x00"
"""A space `wrapped` never breaks a line at (`[path, required]` stays whole)."""

NO_MATCH = 1
"""The exit code when no endpoint holds every word: as `grep` and `harvest runs` finding nothing
(docs/decisions.md)."""


def platform_of(path: str) -> str:
    """The platform an endpoint belongs to: its path's second segment (`/v1/video-platform/...`)."""
    parts = path.strip("/").split("/")
    return parts[1] if len(parts) > 1 else parts[0]


def searched_text(endpoint: Endpoint) -> str:
    """What a word is looked for in: the path, the summary, the parameters' and the tables' names."""
    names = [*endpoint.params.model_fields, *(k.table for k in endpoint.landed_kinds)]
    return "\n".join([endpoint.path, endpoint.summary, *names]).lower()


def by_platform(endpoints: Iterable[Endpoint]) -> dict[str, list[Endpoint]]:
    """The endpoints under their platform, platforms and endpoints in catalog order (the built-in ones first)."""
    groups: dict[str, list[Endpoint]] = {}
    for endpoint in endpoints:
        groups.setdefault(platform_of(endpoint.path), []).append(endpoint)
    return groups


def show_endpoints(
    as_json: bool, catalog: Catalog | None, words: Sequence[str] | None, markdown: Path | None = None
) -> int:
    """The built-in endpoints, then those a job declares (`harvest endpoints --spec SPEC`), those holding every
    word of `words` (case-insensitive) when there are any; the exit code (`NO_MATCH` when none holds them).
    `markdown`: the reference pages written into that directory instead (`flows.commands.endpoint_pages`)."""
    if markdown is not None:
        if words or as_json:
            raise typer.BadParameter("--markdown writes every endpoint's page: leave out words and --json")
        from harvest.flows.commands.endpoint_pages import write_pages

        write_pages(markdown, catalog)
        return 0
    catalog = catalog or builtin()
    wanted = [w.lower() for word in words or () for w in word.split()]
    everything = by_platform(catalog.endpoints.values())
    shown = by_platform(e for e in catalog.endpoints.values() if all(w in searched_text(e) for w in wanted))
    if as_json:
        infos = [endpoint_info(e, e.path in catalog.declared) for group in shown.values() for e in group]
        typer.echo(json.dumps(infos, indent=2))
    else:
        for platform, group in shown.items():
            _print_platform(platform, group, len(everything[platform]), catalog)
    count = sum(len(group) for group in shown.values())
    if wanted and not count:
        for line in wrapped(
            f"No endpoint holds every word of: {' '.join(wanted)}. A word is looked for in each endpoint's "
            f"path, summary, parameter names and table names; `harvest endpoints` lists all "
            f"{len(catalog.endpoints)}."
        ):
            note(line)
        return NO_MATCH
    if wanted and not as_json:
        hold = "holds" if count == 1 else "hold"
        say(f"{count} of {len(catalog.endpoints)} endpoints {hold} every word of: {' '.join(wanted)}")
    return 0


def _print_platform(platform: str, group: list[Endpoint], of: int, catalog: Catalog) -> None:
    count = counted(len(group), "endpoint")
    heading = f"{platform}: {count}" + (f" of {of}" if of != len(group) else "")
    out.print(literal(heading, style="bold"), soft_wrap=True)
    say("=" * len(heading))
    out.print()
    for endpoint in group:
        info = endpoint_info(endpoint, endpoint.path in catalog.declared)
        head = _head(endpoint.path, info["price"])
        out.print(literal(head[0], style="bold"), soft_wrap=True)
        for line in [*head[1:], *_describe_endpoint(info)]:
            say(line)
        out.print()


def _head(path: str, price: str) -> list[str]:
    """An endpoint's path and price rule, the rule broken between its parts (`1 credit; 10 with ...`)."""
    first, *rules = price.split("; ")
    lines = [f"{path}  {first}"]
    for rule in rules:
        if len(lines[-1]) + len(f"; {rule};") <= WIDTH:
            lines[-1] += f"; {rule}"
        else:
            lines[-1] += ";"
            lines += wrapped(rule, indent=4, hang=2)
    return lines


def wrapped(text: str, indent: int = 0, hang: int = 0) -> list[str]:
    """`text` in lines of at most `WIDTH` columns, broken between words only (never at `KEEP`, a space that
    holds its words together): the first line indented by `indent`, the next ones by `indent + hang`."""
    first = " " * indent
    lines = textwrap.wrap(
        text,
        WIDTH,
        initial_indent=first,
        subsequent_indent=first + " " * hang,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [line.replace(KEEP, " ") for line in lines]


def endpoint_info(endpoint: Endpoint, declared: bool) -> dict[str, Any]:
    """An endpoint for a program: a declared one says so, and a price per parameter value comes as `price_when`
    (`price` says the whole rule in words)."""
    descriptions = {name: f.description or "" for name, f in endpoint.params.model_fields.items()}
    info: dict[str, Any] = {
        "path": endpoint.path,
        "platform": platform_of(endpoint.path),
        "summary": endpoint.summary,
        "cost": endpoint.cost,
        "price": endpoint.price.describe(),
        "paging": endpoint.paging.style,
        "cursor_params": list(endpoint.paging.request_params),
        "params": [
            asdict(p) | {"description": descriptions[p.name]} for p in describe_params(endpoint.params)
        ],
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
    if (newest := endpoint.newest_first) is not None:  # where `incremental: true` is allowed
        info["newest_first"] = (
            {"param": newest.param, "values": list(newest.values)} if newest.param else True
        )
        info["incremental"] = f"newest first{newest.describe()}, so incremental: true is allowed"
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


def rule_lines(info: dict[str, Any]) -> list[str]:
    """The rules between an endpoint's parameters, a sentence each (`at least one of: url, group_id`)."""
    lines = [f"at least one of: {', '.join(g)}" for g in info.get("one_of_groups") or [info["one_of"]] if g]
    lines += [f"exactly one of: {', '.join(group)}" for group in info.get("exactly_one_of", ())]
    for need in info.get("requires", ()):
        value = need["value"]
        shown = json.dumps(value) if isinstance(value, bool) else value
        what = need["param"] if value is None else f"{need['param']}={shown}"
        lines.append(f"{what} needs: {', '.join(need['needs'])}")
    lines += [f"{r['param']} excludes: {', '.join(r['excludes'])}" for r in info.get("excludes", ())]
    return lines


def _describe_endpoint(info: dict[str, Any]) -> list[str]:
    """The lines `harvest endpoints` prints under an endpoint's path and price."""
    lines = wrapped(info["summary"], indent=2) if info["summary"] else []
    paging = "single page" if info["paging"] == "single" else f"paging: {info['paging']}"
    lines += wrapped(paging + ("; declared by the job" if info.get("declared") else ""), indent=2)
    lines += wrapped(info["incremental"], indent=2, hang=2) if "incremental" in info else []
    for p in info["params"]:
        marks = {
            "path": p["in_path"],
            "required": p["required"],
            "cursor": p["name"] in info["cursor_params"],
        }
        flags = f",{KEEP}".join(name for name, on in marks.items() if on)
        allowed = f": {', '.join(p['allowed'])}" if p["allowed"] else ""
        extra = f" ({p['constraint']})" if p["constraint"] else ""
        line = f"{p['name']}: {p['type']}{allowed}{extra}" + (f" [{flags}]" if flags else "")
        lines += wrapped(line, indent=4, hang=2)
    lines += [row for rule in rule_lines(info) for row in wrapped(rule, indent=4, hang=2)]
    if "methods" in info:
        sent = f"sent as: {' or '.join(info['methods'])} (POST: the parameters in a JSON body)"
        lines += wrapped(sent, indent=2, hang=2)
    if "follow" in info:
        follow = info["follow"]
        more = f"follow-ups: {follow['param']} from {follow['kind']}.{follow['from']}, each a page"
        lines += wrapped(more, indent=2, hang=2)
    tables = ", ".join(
        f"{t['table']} ("
        + (f"child of {t['parent']}, " if "parent" in t else "")
        + f"key {', '.join(t['primary_key'])})"
        for t in info["tables"]
    )
    lines += wrapped(f"tables: {tables}", indent=2, hang=2)
    return lines
