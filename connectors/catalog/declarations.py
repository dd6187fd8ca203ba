"""The declaration of an endpoint: one format for harvest's own catalog (`endpoints/<platform>.yaml`), a catalog file a
job names (`catalogs:`) and a job's inline `endpoints:` (docs/declaring-endpoints.md).

The pydantic models check the shape (keys, types, ranges) and describe every field for `harvest schema`;
`declaration_problems` checks what needs the whole declaration (a key among the columns, a path parameter in
the path, a paging parameter among the parameters, ...). Each problem is (location, problem, allowed), placed
on its file and line by the reader (`flows.spec.declared`). `plain` is the checked declaration as plain data,
every default filled: what `connectors.catalog.endpoint_build` builds an `Endpoint` from, what a run's manifest
records, and what the sandbox reads (it imports nothing of harvest).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from harvest.connectors.catalog.declared_requests import (
    METHODS,
    Decl,
    ExcludesDecl,
    Method,
    PagingDecl,
    Paths,
    PriceDecl,
    RequiresDecl,
    Scalar,
    effective_next,
    plain_paging,
    plain_requests,
    price_shorthand,
)
from harvest.connectors.catalog.paging_styles import STYLE_DEFAULTS

PARAM_TYPES = ("string", "integer", "number", "boolean", "list")
COLUMN_TYPES = ("text", "integer", "number", "boolean", "timestamp", "json", "text_list", "decimal")
ParamType = Literal["string", "integer", "number", "boolean", "list"]
ColumnType = Literal["text", "integer", "number", "boolean", "timestamp", "json", "text_list", "decimal"]
WhereValue = Scalar | None
"""A value a kind's `where` keeps: null stands for an item without the field."""

ENDPOINT_PATH = re.compile(r"^/(?:[A-Za-z0-9._~-]|/|\{[A-Za-z_][A-Za-z0-9_]*\})*$")
PATH_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
TABLE = re.compile(r"^[a-z][a-z0-9_]*$")
COLUMN = re.compile(r"^[a-z_][a-z0-9_]*$")

ENDPOINT_PATH_WORDS = "a path starting with `/`: letters, digits, `._~-`, and `{name}` for a path parameter"
NAME_WORDS = "a name of letters, digits and `_`, starting with a letter"
TABLE_WORDS = "lower-case letters, digits and `_`, starting with a letter (e.g. `shop_reviews`)"
COLUMN_WORDS = "lower-case letters, digits and `_` (snake_case: analysts never quote it)"
RESERVED_PARAMS = frozenset({"one_of", "one_of_groups", "path_params", "query_pairs", "path_values"})
"""Names the parameter model itself uses."""
BOOKKEEPING_TABLES = ("runs", "requests", "query_state", "exports")
"""harvest's own tables in harvest.duckdb (`tasks.database.bookkeeping`, `flows.handoff.export_ledger`)."""
META_COLUMN_NAMES = ("raw", "_endpoint", "_query_id", "_run_id", "_fetched_at")
"""Columns harvest adds to every record table (`connectors.catalog.records.META_COLUMNS`)."""
PARENT_PREFIX = "parent_"
"""A child table's columns holding its parent's key: `parent_<key column>` (`connectors.catalog.child_kinds`)."""
ENTRY_FIELDS = ("name", "value")
"""What an item of an `entries` child holds: one field of the object, its name and its value."""
POSITION = "position"
"""A child table's column holding an item's place in its list (0 for the first, as in the JSON of `raw`)."""


_Decl = Decl


def _column_shorthand(value: Any) -> Any:
    return {"type": value} if isinstance(value, str) else value


class ParamDecl(_Decl):
    """One request parameter, as the service documents it."""

    type: ParamType = Field("string", description="string, integer, number, boolean, or list (of strings, "
                            "sent as a repeated parameter).")  # fmt: skip
    required: bool = Field(False, strict=True, description="A query must set it (or fan out over it).")
    in_: Literal["query", "path"] = Field(
        "query", alias="in", description="path: a `{name}` of the endpoint's path (implied by the path)."
    )
    enum: list[Scalar] | None = Field(None, min_length=1, description="The values allowed, and no other.")
    min: int | float | None = Field(None, description="The smallest number allowed (integer, number).")
    max: int | float | None = Field(None, description="The largest number allowed (integer, number).")
    min_length: int | None = Field(None, strict=True, ge=0, description="The shortest text allowed.")
    max_length: int | None = Field(None, strict=True, ge=1, description="The longest text allowed.")
    pattern: str | None = Field(None, description="A regular expression the whole text must match.")
    default: Scalar | list[str] | None = Field(None, description="Sent when a query does not set it.")
    description: str | None = Field(None, description="What it means, for `harvest endpoints`.")
    replaced_by: str | None = Field(
        None, description="The parameter the service has replaced this one with: a query that sets this one runs, "
        "warned to use that one."
    )  # fmt: skip


class ColumnDecl(_Decl):
    """A typed column: its type, and where in a record it is read (its name when no path is given)."""

    type: ColumnType = Field(description="text, integer, number (a double), boolean, timestamp (TIMESTAMPTZ: "
                             "ISO text or epoch seconds/ms), json, text_list or decimal (money: DECIMAL(18,4)).")  # fmt: skip
    path: str | None = Field(
        None, description="Where in a record: a record path, `a|b` to try `b` when `a` is absent or null, or "
        "`$params.NAME` for a request parameter (`$params.a|$params.b`: the one the request gave). Default: the "
        "column's name."
    )  # fmt: skip
    description: str | None = Field(
        None, description="What the column holds: the table's column comment in DuckDB and docs. Default: one "
        "made from the type and path."
    )  # fmt: skip
    renamed_from: Paths = Field(
        default_factory=list, description="The column's earlier names: an existing table's column of such a "
        "name becomes this one, its values kept (`tasks.database.column_types`)."
    )  # fmt: skip
    joins: Paths = Field(
        default_factory=list, description="The columns of other tables holding the same values, as "
        "`table.column` (`forum_subreddits.id`): what an analyst joins this column on. Said in its comment and "
        "docs/tables.md; the sandbox's answers agree with it."
    )  # fmt: skip
    template: str | None = Field(
        None, description="How the service makes the value of the record's other values: `{column}` for a "
        "column of the same record, `{$params.NAME}` for a request parameter (`t3_{id}`: a fullname)."
    )  # fmt: skip


Column = Annotated[
    ColumnDecl,
    BeforeValidator(_column_shorthand, json_schema_input_type=ColumnType | ColumnDecl),
]


class UnwrapDecl(_Decl):
    """Items that may come wrapped as `{KEY: <record>, ...}`: columns read the record inside."""

    key: str = Field(description="The wrapper's key holding the record.")
    extras: dict[str, Column] = Field(default_factory=dict, description="Columns read from the wrapper.")
    ignore: list[str] = Field(default_factory=list, description="Wrapper paths known and left in `raw`.")


class ChildDecl(_Decl):
    """A list of objects inside each record, landing in a table of its own: one row per item, keyed by the
    record's key (`parent_<key>`) and the item's `position` in the list."""

    at: Paths = Field(description="Where in a record the list is: a record path, or several tried in order.")
    columns: dict[str, Column] = Field(
        min_length=1, description="The item's columns: column -> type, or {type, path, description}."
    )
    entries: bool = Field(
        False, strict=True, description="true: `at` is an object, and each of its fields is an item "
        "`{name, value}` (an object whose fields are not known in advance)."
    )  # fmt: skip
    ignore: list[str] = Field(
        default_factory=list, description="Item paths known and left in the record's `raw`."
    )
    replaces: str | None = Field(
        None, description="The record's `json` column holding the same list: kept, and marked deprecated in "
        "the table docs."
    )  # fmt: skip


class KindDecl(_Decl):
    """One kind of record, landing in one table."""

    at: Paths = Field(description="Where the records are: a record path (`\"\"` is the answer itself), or "
                      "several tried in order.")  # fmt: skip
    one: bool = Field(
        False, strict=True, description="true: the location holds one object (a detail answer)."
    )
    objects: list[str] = Field(
        default_factory=list,
        description="Locations among `at` that hold one object while the others hold lists.",
    )
    key: Paths = Field(description="The primary key: a column, or several.")
    columns: dict[str, Column] = Field(
        min_length=1, description="Column -> type, or {type, path, description}."
    )
    unwrap: UnwrapDecl | None = None
    ignore: list[str] = Field(default_factory=list, description="Record paths known and left in `raw`.")
    nested: str | None = Field(
        None, description="Where in an item more items of its kind are, a record path (`replies.items`), to any "
        "depth: each nested item is a record too, and a `$parent.NAME` column reads the item holding it."
    )  # fmt: skip
    children: dict[str, ChildDecl] = Field(
        default_factory=dict,
        description="Child table -> a list of objects inside each record (one row per item).",
    )
    # Record kinds as the service's answers hold them: places on the first page only, items of other kinds
    # mixed into a list.
    first_page_only: bool = Field(
        False, strict=True, description="true: the place is on a query's first page only; absent from a later "
        "page, it is no drift."
    )  # fmt: skip
    where: dict[str, WhereValue | list[WhereValue]] = Field(
        default_factory=dict, description="Record path -> a value or a list of values: only the items holding "
        "one of them at each path are records (null: the field is absent); the others are counted, not landed."
    )  # fmt: skip


def _methods_shorthand(value: Any) -> Any:
    """`method: POST` is `[POST]`: one type to check, so a wrong value gets one error, not one per union arm,
    placed on `method` itself where a single word was written."""
    if not isinstance(value, str):
        return value
    if value not in METHODS:
        raise ValueError(f"{value!r} is not a method harvest sends")
    return [value]


class NewestFirstDecl(_Decl):
    """`true` (always newest first), or the parameter values that list newest first."""

    param: str | None = Field(None, description="The parameter that orders the listing.")
    values: list[Scalar] = Field(default_factory=list, description="Its values that list newest first.")


def _newest_first_shorthand(value: Any) -> Any:
    if value is True:
        return {}
    return None if value is False else value


class EndpointDecl(_Decl):
    """An endpoint of the service: parameters, paging, price and the records its answers hold."""

    summary: str = ""
    params: dict[str, ParamDecl] = Field(default_factory=dict)
    one_of: list[list[str]] = Field(
        default_factory=list, description="Groups of parameters: at least one of each group is required."
    )
    paging: PagingDecl = Field(default_factory=PagingDecl)  # type: ignore[arg-type]
    price: Annotated[PriceDecl, BeforeValidator(price_shorthand, json_schema_input_type=int | PriceDecl)] = (
        Field(
            default_factory=PriceDecl,  # type: ignore[arg-type]
            description="Credits per request (a number), or {credits, when: [...]}.",
        )
    )
    newest_first: Annotated[
        NewestFirstDecl | None,
        BeforeValidator(_newest_first_shorthand, json_schema_input_type=bool | NewestFirstDecl),
    ] = Field(
        None, description="true, or {param, values}: the listing is newest first (incremental queries)."
    )
    records_per_page: int | str | None = Field(
        None, description="The most records a page holds, or the parameter that sets it."
    )
    records: dict[str, KindDecl] = Field(min_length=1, description="Record table -> where its records are.")
    # ---- how requests are sent, and which parameters go together (`connectors.catalog.declared_requests`)
    method: Annotated[
        list[Method],
        BeforeValidator(_methods_shorthand, json_schema_input_type=Method | list[Method]),
    ] = Field(
        ["GET"], description="GET, POST (the parameters in a JSON body), or [GET, POST]: the first is the "
        "default, a query picks with `method:`."
    )  # fmt: skip
    exactly_one_of: list[list[str]] = Field(
        default_factory=list, description="Groups of parameters: exactly one of each group is required."
    )
    requires: list[RequiresDecl] = Field(
        default_factory=list, description="[{param, value, needs: [...]}]: a parameter that needs others."
    )
    excludes: list[ExcludesDecl] = Field(
        default_factory=list, description="[{param, excludes: [...]}]: a parameter that rules others out."
    )


class CatalogFile(_Decl):
    """A catalog file: the same top level as each of harvest's own (`connectors/catalog/endpoints/*.yaml`)."""

    endpoints: dict[str, EndpointDecl] = Field(min_length=1)


# ---------------------------------------------------------------------------------------------- plain data
def path_params(path: str) -> list[str]:
    return PATH_PARAM.findall(path)


def plain(path: str, decl: EndpointDecl) -> dict[str, Any]:
    """The checked declaration as plain data, every default filled (docs/declaring-endpoints.md, "The plain
    form"): `next` and `more` are the style's where not given, a `{name}` of the path is a required path
    parameter, a column is `{type, path, description}` with its path, lists are lists."""
    data = decl.model_dump(mode="json", by_alias=True)
    order = data["newest_first"]
    data["newest_first"] = bool(order) if order is None or order["param"] is None else order
    params = data["params"]
    for name in path_params(path):
        params.setdefault(
            name, ParamDecl.model_validate({"required": True}).model_dump(mode="json", by_alias=True)
        )
        params[name]["in"] = "path"
    paging = data["paging"]
    paging["next"] = effective_next(decl.paging)
    if paging["more"] is None:
        paging["more"] = list(STYLE_DEFAULTS[decl.paging.style][1])
    if paging["end_values"] is None:
        paging["end_values"] = ["-end-"]
    plain_paging(paging)
    follow = [paging["follow"]["param"]] if "follow" in paging else []
    for name in [*paging["next"], *follow]:  # a parameter of its own: a query may start from a cursor
        kind = {"type": "integer"} if name == paging.get("param") else {}
        params.setdefault(name, ParamDecl.model_validate(kind).model_dump(mode="json", by_alias=True))
    plain_requests(data)
    for kind in data["records"].values():
        kind["columns"] = _plain_columns(kind["columns"])
        if kind["unwrap"] is not None:
            kind["unwrap"]["extras"] = _plain_columns(kind["unwrap"]["extras"])
        for child in kind["children"].values():
            child["columns"] = _plain_columns(child["columns"])
        if not kind["children"]:
            del kind["children"]  # left out when empty: a landed spec's hash stays valid
        _plain_kind_keys(kind)
    return data


def _plain_kind_keys(kind: dict[str, Any]) -> None:
    """`first_page_only` and `where` in the plain form (`where` values as lists) only when declared: a kind
    without them reads, hashes and records as one written where the keys did not exist (a landed spec's hash
    and its recorded declaration stay valid)."""
    if not kind["first_page_only"]:
        del kind["first_page_only"]
    if kind["where"]:
        kind["where"] = {path: v if isinstance(v, list) else [v] for path, v in kind["where"].items()}
    else:
        del kind["where"]


def _plain_columns(columns: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each column as `{type, path, description}`, and `renamed_from`, `joins` and `template` only when it has
    them (a column without them reads, hashes and records as one written where the keys did not exist)."""
    plain_columns = {}
    for name, column in columns.items():
        column = {**column, "path": column["path"] or name}
        for optional in ("renamed_from", "joins", "template"):
            if not column.get(optional):
                column.pop(optional, None)
        plain_columns[name] = column
    return plain_columns


# Where a job declares one of its own endpoints: the file (a catalog file it names, or the spec itself) and the
# line of each place in the declaration. A page that does not match a job's own declaration is no change of the
# service: the fix is in the user's file, and the drift message (`connectors.reading.drift_message`) names it.


@dataclass(frozen=True)
class DeclaredAt:
    file: str
    lines: Mapping[tuple[str, ...], int] = field(default_factory=dict)
    """A place inside the endpoint's declaration (`("records", table, "at")`) -> its line in `file`."""

    def where(self, *place: str) -> str:
        """`FILE:LINE` of the place, or of the nearest enclosing place that has a line; `FILE` without."""
        for end in range(len(place), -1, -1):
            if place[:end] in self.lines:
                return f"{self.file}:{self.lines[place[:end]]}"
        return self.file


def declared_places(
    where: Mapping[str, tuple[str, int | None]],
    lines: Mapping[str, Mapping[tuple[str | int, ...], int] | None],
) -> dict[str, DeclaredAt]:
    """Endpoint path -> where it is declared, from a spec's declarations (path -> (file, line of the endpoint))
    and each file's line map (location in the file -> line)."""
    out = {}
    for path, (file, line) in where.items():
        found: dict[tuple[str, ...], int] = {(): line} if line else {}
        for loc, n in (lines.get(file) or {}).items():
            if loc[:2] == ("endpoints", path):
                found[tuple(str(part) for part in loc[2:])] = n
        out[path] = DeclaredAt(file, found)
    return out
