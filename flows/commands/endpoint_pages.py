"""docs/endpoints/: the endpoint reference, a Markdown page per platform and an index, written from the catalog,
never by hand (`harvest endpoints --markdown docs/endpoints`).

A test renders the pages again and compares them with docs/endpoints/, so a catalog change that is not written
out again fails, as docs/tables.md's does. A page says what a user needs to write a query and read its rows:
the parameters (type, allowed values, required, description), the price rule, the paging, and the tables with
their columns; docs/tables.md keeps the rest of a table (sources, example queries).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import duckdb

from harvest.connectors.catalog.child_kinds import ChildKind, TableKind
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.fields import DESCRIPTION
from harvest.connectors.catalog.job_catalog import Catalog, builtin
from harvest.connectors.catalog.paging_styles import Paging
from harvest.connectors.plurals import counted
from harvest.flows.commands.endpoint_list import by_platform, endpoint_info, rule_lines
from harvest.flows.commands.tables_doc import field_meta
from harvest.flows.console import say
from harvest.flows.spec import UsageError
from harvest.tasks.database.record_tables import duckdb_types

INDEX = "README.md"
GENERATED = "Generated from the catalog by `harvest endpoints --markdown docs/endpoints`; a test fails when it is stale."
READING = (
    "A price is in credits per request, and each page is a request ([Credits](../credits.md)); a query names "
    "its endpoint and parameters as [Declaring an endpoint](../declaring-endpoints.md) shows. Each table "
    "below also has `_endpoint`, `_query_id`, `_run_id` and `_fetched_at`; [Tables](../tables.md) gives "
    "every column's source and example queries."
)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(values: Any) -> str:
    return ", ".join(f"`{v}`" for v in values)


def render_pages(catalog: Catalog | None = None) -> dict[str, str]:
    """File name -> Markdown of the index and each platform's page."""
    catalog = catalog or builtin()
    groups = by_platform(catalog.endpoints.values())
    pages = {INDEX: _index(groups)}
    con = duckdb.connect()
    try:
        for platform, endpoints in groups.items():
            pages[f"{platform}.md"] = _platform_page(platform, endpoints, catalog, con)
    finally:
        con.close()
    return pages


def _refuse_others(directory: Path, names: list[str]) -> None:
    """Refused before anything is written: `directory` is a file or under one, or holds a file of a page's name
    (a team's own README.md) that harvest did not write, its GENERATED line not where every page has it.
    Overwriting it lost someone's file without a word; harvest's own pages are written again, as `make docs`
    does."""
    above = next((p for p in (directory, *directory.parents) if p.exists()), directory)
    if above.exists() and not above.is_dir():  # below a file, making the directory was a traceback
        what = f"{directory} is a file" if above == directory else f"{directory} is under {above}, a file"
        raise UsageError(f"--markdown: {what}; allowed: a directory (made when missing)")
    for name in names:
        page = directory / name
        if not page.exists():
            continue
        try:
            ours = page.read_text(encoding="utf-8").splitlines()[2:3] == [GENERATED]
        except (OSError, UnicodeDecodeError):
            ours = False
        if not ours:
            raise UsageError(
                f"--markdown: {page} is not a page harvest wrote, and would be overwritten; nothing was "
                "written. Allowed: an empty directory, a new one, or one holding only harvest's pages"
            )


def write_pages(directory: Path, catalog: Catalog | None = None) -> None:
    """The pages written into `directory` (made when missing), a line saying so."""
    pages = render_pages(catalog)
    _refuse_others(directory, list(pages))
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (directory / name).write_text(text, encoding="utf-8")
    say(f"wrote {len(pages)} pages to {directory}")


def anchor(heading: str) -> str:
    """The id of a heading naming a path (`/v1/a-b/c_d` -> `v1a-bc_d`), on GitHub and in mkdocs alike."""
    return re.sub(r"[^\w-]", "", heading.lower())


def _index(groups: dict[str, list[Endpoint]]) -> str:
    lines = [
        "# Endpoints",
        "",
        GENERATED,
        "Every endpoint harvest knows, by platform, each with its price per request; its page gives its",
        "parameters, paging and the tables it fills. `harvest endpoints WORD...` finds one from the command line.",
        "",
    ]
    for platform, endpoints in groups.items():
        count = counted(len(endpoints), "endpoint")
        lines += [f"## {platform}", "", f"[{platform}]({platform}.md): {count}.", ""]
        lines += [
            f"- [`{e.path}`]({platform}.md#{anchor(e.path)}): {e.summary} Price: {e.price.describe()}."
            for e in endpoints
        ]
        lines.append("")
    return "\n".join(lines)


def _platform_page(
    platform: str, endpoints: list[Endpoint], catalog: Catalog, con: duckdb.DuckDBPyConnection
) -> str:
    count = counted(len(endpoints), "endpoint")
    lines = [f"# {platform}", "", GENERATED, f"{count}; [every platform](README.md).", "", READING, ""]
    tables: dict[str, tuple[TableKind, list[str]]] = {}
    for endpoint in endpoints:
        lines += _endpoint_section(endpoint_info(endpoint, endpoint.path in catalog.declared), endpoint)
        for kind in endpoint.landed_kinds:
            tables.setdefault(kind.table, (kind, []))[1].append(endpoint.path)
    lines += ["## Tables", ""]
    for table, (kind, paths) in tables.items():
        lines += _table_section(table, kind, paths, con)
    return "\n".join(lines)


def _endpoint_section(info: dict[str, Any], endpoint: Endpoint) -> list[str]:
    lines = [f"## `{info['path']}`", ""]
    lines += [info["summary"], ""] if info["summary"] else []
    lines += [
        f"- Price: {info['price']}",
        f"- Paging: {paging_words(endpoint.paging, endpoint.records_per_page)}",
    ]
    if endpoint.newest_first is not None:
        lines.append(f"- Newest first{endpoint.newest_first.describe()}, so `incremental: true` is allowed")
    if "methods" in info:
        lines.append(f"- Sent as: {' or '.join(info['methods'])} (POST: the parameters in a JSON body)")
    if info.get("declared"):
        lines.append("- Declared by the job")
    tables = "; ".join(
        f"[`{t['table']}`](#{t['table']}) (key {_code(t['primary_key'])})" for t in info["tables"]
    )
    lines += [f"- Tables: {tables}", ""]
    if info["params"]:
        lines += ["| parameter | type | required | allowed values | description |", "|---|---|---|---|---|"]
        for p in info["params"]:
            kind = p["type"] + (f" ({p['constraint']})" if p["constraint"] else "")
            marks = ["yes" if p["required"] else ""] + (["in the path"] if p["in_path"] else [])
            marks += ["the cursor"] if p["name"] in info["cursor_params"] else []
            lines.append(
                f"| `{p['name']}` | {_cell(kind)} | {', '.join(m for m in marks if m)} "
                f"| {_cell(_code(p['allowed']))} | {_cell(p['description'])} |"
            )
        lines.append("")
    rules = rule_lines(info)
    lines += [*(f"- Rule: {rule}" for rule in rules), ""] if rules else []
    return lines


def paging_words(paging: Paging, per_page: int | str | None) -> str:
    """How an endpoint's pages follow one another, in words."""
    if paging.single:
        return "single page"
    if paging.page is not None:
        words = f"page numbers (`{paging.page.param}` from {paging.page.first}, step {paging.page.step})"
    else:
        sent = "; ".join(
            f"`{p}` from the answer's {' or '.join(f'`{at}`' for at in paths)}"
            for p, paths in paging.cursor.items()
        )
        words = f"{paging.style}: {sent}"
    if paging.follow is not None:
        follow = paging.follow
        words += f"; follow-ups: `{follow.param}` from each `{follow.kind}` record's `{follow.path}`"
    if isinstance(per_page, int):
        words += f"; up to {per_page} records a page"
    elif per_page:
        words += f"; up to `{per_page}` records a page"
    return words


def _table_section(
    table: str, kind: TableKind, paths: list[str], con: duckdb.DuckDBPyConnection
) -> list[str]:
    child = f" Child of [`{kind.parent}`](#{kind.parent})." if isinstance(kind, ChildKind) else ""
    lines = [
        f"### {table}",
        "",
        f"Primary key {_code(kind.primary_key)}.{child} From {_code(paths)}. "
        f"[In Tables](../tables.md#{table}).",
        "",
        "| column | type | description |",
        "|---|---|---|",
    ]
    lines += [
        f"| `{name}` | {_cell(type_)} | {_cell(field_meta(kind.schema.field(name), DESCRIPTION))} |"
        for name, type_ in duckdb_types(con, kind.schema)
        if not name.startswith("_")
    ]
    return [*lines, ""]
