"""What one endpoint's declaration gets wrong beyond its shape: a key that is no column, a path parameter not in
the path, a bound on a text, a record path that reads nothing, a table harvest owns, a `joins` that is no
`table.column`, a `template` of no column or parameter. Each problem is (location inside the declaration, what
is wrong, what is allowed); `flows.spec.declared` places it on its file and line. Whether a `joins` names a
column of the job's catalog needs the whole catalog (`job_catalog.join_problems`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from harvest.connectors.catalog.declarations import (
    BOOKKEEPING_TABLES,
    COLUMN,
    COLUMN_WORDS,
    ENDPOINT_PATH,
    ENDPOINT_PATH_WORDS,
    ENTRY_FIELDS,
    META_COLUMN_NAMES,
    NAME,
    NAME_WORDS,
    PARENT_PREFIX,
    POSITION,
    RESERVED_PARAMS,
    TABLE,
    TABLE_WORDS,
    ChildDecl,
    ColumnDecl,
    EndpointDecl,
    KindDecl,
    ParamDecl,
    path_params,
)
from harvest.connectors.catalog.declared_requests import effective_next
from harvest.connectors.catalog.record_paths import HOLDER_PREFIX, PARAM_PREFIX, alternatives
from harvest.connectors.catalog.request_checks import Problem
from harvest.connectors.catalog.request_checks import (
    fits as _fits,
)
from harvest.connectors.catalog.request_checks import (
    order_problems as _order_problems,
)
from harvest.connectors.catalog.request_checks import (
    page_bounds as _page_bounds,
)
from harvest.connectors.catalog.request_checks import (
    paging_problems as _paging_problems,
)
from harvest.connectors.catalog.request_checks import (
    path_problems as _path_problems,
)
from harvest.connectors.catalog.request_checks import (
    price_problems as _price_problems,
)
from harvest.connectors.catalog.request_checks import (
    rule_problems as _rule_problems,
)
from harvest.connectors.catalog.request_checks import (
    value_problem as _value_problem,
)
from harvest.connectors.plurals import a

JOIN_TARGET = re.compile(rf"^({TABLE.pattern[1:-1]})\.({COLUMN.pattern[1:-1]})$")
JOIN_WORDS = "`table.column`: a column of a record table or a child table of the job's catalog"
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
"""A template's `{column}` or `{$params.NAME}`: what a column's value is made of (`template: "t3_{id}"`)."""
TEMPLATE_WORDS = (
    "text with `{column}` for a column of the same record or `{$params.NAME}` for a request parameter "
    "(`t3_{id}`), at least one of them"
)


def declaration_problems(path: str, decl: EndpointDecl) -> Iterator[Problem]:
    """What one declaration gets wrong beyond its shape; locations are inside the declaration."""
    if not ENDPOINT_PATH.fullmatch(path):
        yield (), f"{path!r} is not an endpoint path", ENDPOINT_PATH_WORDS
    in_path = path_params(path)
    for name, param in decl.params.items():
        yield from _param_problems(name, param, in_path)
    follow = [decl.paging.follow.param] if decl.paging.follow else []
    names = list(dict.fromkeys([*decl.params, *in_path, *effective_next(decl.paging), *follow]))
    for n, group in enumerate(decl.one_of):
        for m, name in enumerate(group):
            if name not in names:
                yield ("one_of", n, m), f"{name!r} is not a parameter", ", ".join(names) or "none declared"
    for name, param in decl.params.items():
        if param.replaced_by is not None and param.replaced_by not in names:
            yield (
                ("params", name, "replaced_by"),
                f"{param.replaced_by!r} is not a parameter",
                ", ".join(names),
            )
    yield from _paging_problems(decl.paging, list(decl.records))
    yield from _page_bounds(decl)
    yield from _price_problems(decl, names)
    yield from _rule_problems(decl, names)
    yield from _order_problems(decl, names)
    if isinstance(decl.records_per_page, str) and decl.records_per_page not in names:
        yield (
            ("records_per_page",),
            f"{decl.records_per_page!r} is not a parameter",
            "a number >= 1, or " + (", ".join(names) or "a declared parameter"),
        )
    if isinstance(decl.records_per_page, int) and decl.records_per_page < 1:
        yield ("records_per_page",), f"{decl.records_per_page} records a page", "a number >= 1"
    for table, kind in decl.records.items():
        yield from _kind_problems(table, kind, names)
    yield from _child_table_clashes(decl)


def _param_problems(name: str, p: ParamDecl, in_path: list[str]) -> Iterator[Problem]:
    at: tuple[str | int, ...] = ("params", name)
    if not NAME.fullmatch(name) or name in RESERVED_PARAMS or name.startswith("model_"):
        yield (
            at,
            f"{name!r} cannot be a parameter name",
            NAME_WORDS + f" (not {', '.join(sorted(RESERVED_PARAMS))})",
        )
    if p.in_ == "path" and name not in in_path:
        yield (
            (*at, "in"),
            f"{name!r} is not a `{{{name}}}` of the path",
            "query, or add {" + name + "} to the path",
        )
    numeric = p.type in ("integer", "number")
    for key in ("min", "max"):
        if getattr(p, key) is not None and not numeric:
            yield (
                (*at, key),
                f"`{key}` bounds a number, not a {p.type}",
                "min/max on integer or number parameters",
            )
    for key in ("min_length", "max_length", "pattern"):
        if getattr(p, key) is not None and p.type != "string":
            yield (*at, key), f"`{key}` constrains text, not a {p.type}", f"{key} on string parameters"
    if p.pattern is not None:
        try:
            re.compile(p.pattern)
        except re.error as exc:
            yield (*at, "pattern"), f"not a regular expression: {exc}", "a Python regular expression"
    for n, value in enumerate(p.enum or ()):
        if not _fits(p.type, value):
            yield (*at, "enum", n), f"{value!r} is not {a(p.type)}", f"values of type {p.type}"
    if p.default is not None and p.required:
        yield (*at, "default"), "a required parameter has no default", "required: false, or no default"
    elif p.default is not None and (wrong := _value_problem(p, p.default, "its own")) is not None:
        yield (*at, "default"), *wrong
    for low, high in (("min", "max"), ("min_length", "max_length")):
        lo, hi = getattr(p, low), getattr(p, high)
        if lo is not None and hi is not None and lo > hi:
            yield (*at, low), f"{low} {lo} is above {high} {hi}: no value fits", f"{low} at most {high}"


def _table_name_problems(at: tuple[str | int, ...], table: str) -> Iterator[Problem]:
    if not TABLE.fullmatch(table) or table.endswith("_history"):
        yield at, f"{table!r} cannot be a table name", TABLE_WORDS + "; not ending in `_history` (views)"
    elif table in BOOKKEEPING_TABLES:
        yield (
            at,
            f"{table!r} is one of harvest's own tables",
            "a name other than " + ", ".join(BOOKKEEPING_TABLES),
        )


def _kind_problems(table: str, kind: KindDecl, names: list[str]) -> Iterator[Problem]:
    at: tuple[str | int, ...] = ("records", table)
    yield from _table_name_problems(at, table)
    if not kind.at:
        yield (*at, "at"), "no place to read records from", 'a record path, or "" for the answer itself'
    for n, where in enumerate(kind.at):
        if where != "":
            yield from _path_problems((*at, "at", n), where)
    for n, where in enumerate(kind.objects):
        if where not in kind.at:
            yield (*at, "objects", n), f"{where!r} is not among `at`", ", ".join(map(repr, kind.at))
    columns = dict(kind.columns) | (dict(kind.unwrap.extras) if kind.unwrap else {})
    if not kind.key:  # a table holds records by their key: `key: []` failed the run after its pages were paid
        yield (*at, "key"), "no primary key", "a column, or several: " + ", ".join(columns)
    for n, key in enumerate(kind.key):
        if key not in columns:
            yield (*at, "key", n), f"{key!r} is not a column of {table}", ", ".join(columns)
    yield from _column_problems((*at, "columns"), kind.columns, names)
    if kind.unwrap is not None:
        yield from _column_problems((*at, "unwrap", "extras"), kind.unwrap.extras, names)
        for name in set(kind.unwrap.extras) & set(kind.columns):
            yield (
                (*at, "unwrap", "extras", name),
                f"{name!r} is a column already",
                "a name no other column has",
            )
        yield from _ignored((*at, "unwrap", "ignore"), kind.unwrap.ignore)
    yield from _ignored((*at, "ignore"), kind.ignore)
    yield from _nesting_and_filter_problems(at, table, kind)
    for name, child in kind.children.items():
        yield from _child_problems((*at, "children", name), name, child, kind, names)


def _nesting_and_filter_problems(at: tuple[str | int, ...], table: str, kind: KindDecl) -> Iterator[Problem]:
    """`nested` and `where` are record paths; a `$parent.NAME` column names a column the holding item has, and
    the kind nests (only a nested item has a holder)."""
    if kind.nested is not None:
        yield from _path_problems((*at, "nested"), kind.nested)
    for path, values in kind.where.items():
        yield from _path_problems((*at, "where", path), path)
        if values == []:
            yield (*at, "where", path), "no value to keep", "a value, or a list of values"
    own = {n: c for n, c in kind.columns.items() if not (c.path or "").startswith(HOLDER_PREFIX)}
    for name, column in kind.columns.items():
        for alternative in alternatives(column.path or ""):
            if not alternative.startswith(HOLDER_PREFIX):
                continue
            read = alternative[len(HOLDER_PREFIX) :]
            if kind.nested is None:
                yield (
                    (*at, "columns", name, "path"),
                    f"{alternative!r}: only an item nested in another has one holding it",
                    "`nested: PATH` on the record kind, or a record path",
                )
            elif read not in own or column.path != alternative:
                yield (
                    (*at, "columns", name, "path"),
                    f"{alternative!r} is not a column of the item holding it",
                    ", ".join(f"{HOLDER_PREFIX}{n}" for n in own) + " (alone, not among `|` alternatives)",
                )


def _child_problems(
    at: tuple[str | int, ...], table: str, child: ChildDecl, parent: KindDecl, names: list[str]
) -> Iterator[Problem]:
    """A child table: its name, where in a record its list is, its columns (none named like the columns the
    child table has already: `position`, `parent_<key>`), and the JSON column it `replaces`."""
    yield from _table_name_problems(at, table)
    if not child.at:
        yield (*at, "at"), "no place to read the list from", "a record path inside the record"
    for n, where in enumerate(child.at):
        if where == "":
            yield (
                (*at, "at", n),
                "a child's list is inside the record, not the record itself",
                "a record path",
            )
        else:
            yield from _path_problems((*at, "at", n), where)
    taken = [POSITION, *(PARENT_PREFIX + k for k in parent.key)]
    for name in child.columns:
        if name in taken:
            yield (
                (*at, "columns", name),
                f"{name!r} is a column of every row of {table} already",
                "a name other than " + ", ".join(taken),
            )
    yield from _column_problems((*at, "columns"), child.columns, names)
    for name, column in child.columns.items():
        if HOLDER_PREFIX in (column.path or ""):
            yield (
                (*at, "columns", name, "path"),
                f"{column.path!r}: a child row's record is in `parent_<key>` already",
                "a record path inside the item",
            )
    if child.entries:
        for name, column in child.columns.items():
            for alternative in alternatives(column.path or name):
                if alternative.partition(".")[0].partition("[")[0] not in ENTRY_FIELDS:
                    yield (
                        (*at, "columns", name, "path"),
                        f"{alternative!r}: an item of `entries` is a field's name and value",
                        "name, value, or a path under value (value.x)",
                    )
    yield from _ignored((*at, "ignore"), child.ignore)
    if child.replaces is not None:
        replaced = parent.columns.get(child.replaces)
        if replaced is None or replaced.type != "json":
            jsons = [n for n, c in parent.columns.items() if c.type == "json"]
            yield (
                (*at, "replaces"),
                f"{child.replaces!r} is not a json column of the record",
                ", ".join(jsons) or "no json column: leave `replaces` out",
            )


def _child_table_clashes(decl: EndpointDecl) -> Iterator[Problem]:
    """A child table named like a record table of the endpoint, or like another child table."""
    seen = set(decl.records)
    for table, kind in decl.records.items():
        for name in kind.children:
            if name in seen:
                yield (
                    ("records", table, "children", name),
                    f"{name!r} is a table of this endpoint already",
                    "a table name of its own",
                )
            seen.add(name)


def _ignored(at: tuple[str | int, ...], paths: list[str]) -> Iterator[Problem]:
    for n, where in enumerate(paths):
        yield from _path_problems((*at, n), where)


def _column_problems(
    at: tuple[str | int, ...], columns: Mapping[str, ColumnDecl], names: list[str]
) -> Iterator[Problem]:
    yield from link_problems(at, columns, names)
    for name, column in columns.items():
        if not COLUMN.fullmatch(name) or name in META_COLUMN_NAMES:
            yield (
                (*at, name),
                f"{name!r} cannot be a column name",
                COLUMN_WORDS + "; not " + ", ".join(META_COLUMN_NAMES),
            )
        given = alternatives(column.path or name)
        if len({a.startswith(PARAM_PREFIX) for a in given}) > 1:
            yield (
                (*at, name, "path"),
                f"{column.path!r} reads both the request's parameters and the record",
                "`$params.a|$params.b` (the parameter the request gave) or record paths `a|b`, not both",
            )
            continue
        for alternative in given:
            if alternative.startswith(PARAM_PREFIX):
                param = alternative[len(PARAM_PREFIX) :]
                if param not in names:
                    yield (*at, name, "path"), f"{param!r} is not a parameter", ", ".join(names)
            elif alternative.startswith(HOLDER_PREFIX):
                continue  # a record kind's own check (`_nesting_and_filter_problems`)
            elif column.path is not None:
                yield from _path_problems((*at, name, "path"), alternative)


def link_problems(
    at: tuple[str | int, ...], columns: Mapping[str, ColumnDecl], params: Sequence[str]
) -> Iterator[Problem]:
    """What a kind's (or a child's) columns get wrong in `joins` and `template`, within the declaration."""
    for name, column in columns.items():
        for n, entry in enumerate(column.joins):
            if not JOIN_TARGET.fullmatch(entry):
                yield (*at, name, "joins", n), f"{entry!r} is not a table and a column", JOIN_WORDS
        if column.template is not None:
            yield from _template_problems((*at, name, "template"), column.template, columns, params)


def _template_problems(
    at: tuple[str | int, ...], template: str, columns: Mapping[str, Any], params: Sequence[str]
) -> Iterator[Problem]:
    names = PLACEHOLDER.findall(template)
    if not names or PLACEHOLDER.sub("", template).count("{") or PLACEHOLDER.sub("", template).count("}"):
        yield at, f"{template!r} is not a template", TEMPLATE_WORDS
        return
    read = ", ".join(name for name, column in columns.items() if column.template is None)
    asked = ", ".join(PARAM_PREFIX + p for p in params) or "none declared"
    for name in names:
        if name.startswith(PARAM_PREFIX):
            if name[len(PARAM_PREFIX) :] not in params:
                yield at, f"{name[len(PARAM_PREFIX) :]!r} is not a parameter", asked
        elif name not in columns:
            yield at, f"{name!r} is not a column of the record", f"{read}; or {asked}"
        elif columns[name].template is not None:
            yield at, f"{name!r} is made by a template itself", "a column read from the record"
