"""A declared endpoint as the sandbox reads it: the plain data of harvest's declaration format (one mapping per
path, as `docs/declaring-endpoints.md` writes it), checked only as far as serving it needs.

harvest validates declarations before a run (every error with its file and line); the sandbox stands alone, so it
reads the same mapping again and refuses, with a `ValueError` naming the path and the field, only what it could
not serve (an unknown paging style, a key that is not a column, a path it already serves). Keys it does not use
(`summary`, `description`, ...) are ignored, and so are types it does not know (made as text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from harvest.connectors.catalog.paging_styles import END_OF_PAGES, STYLE_DEFAULTS, PagingStyle
from harvest.sandbox.emulation.generic.request_form import (
    DeclaredPageNumbers,
    DeclaredPriceRule,
    FollowCursor,
    ParamRuleSet,
    read_follow,
    read_methods,
    read_page_numbers,
    read_price,
    read_rules,
    wire_text,
)

STYLES: tuple[str, ...] = get_args(PagingStyle)
"""The paging styles harvest knows; each names the traps the sandbox's endpoints of that style have."""


def _default_next(style: PagingStyle) -> tuple[tuple[str, str], ...]:
    """(request parameter, the response path the sandbox writes it at) of a style whose declaration names none:
    the first of the paths harvest reads it from."""
    return tuple((param, paths[0]) for param, paths in STYLE_DEFAULTS[style][0].items())


def _default_more(style: PagingStyle) -> str | None:
    """Where the sandbox writes a style's "more" flag when a declaration names none: the first path harvest
    reads it from."""
    flags = STYLE_DEFAULTS[style][1]
    return flags[0] if flags else None


PARAM_CHECKS = {
    "string": "text",
    "integer": "integer",
    "number": "number",
    "boolean": "bool",
    "list": "multi",
}
"""A declared parameter type -> how the sandbox's validation checks its value (`sandbox.wire.validation`)."""


@dataclass(frozen=True)
class DeclaredParam:
    name: str
    type: str
    required: bool = False
    enum: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    default: str | None = None
    """The default as it goes on the wire (`true`, `50`)."""


@dataclass(frozen=True)
class DeclaredColumn:
    name: str
    type: str
    path: str
    """Where the service puts the value: the first alternative of an `a|b` path; `$params.x` reads a request
    parameter, so nothing is put in the record."""
    joins: tuple[tuple[str, str], ...] = ()
    """(table, column) of the other tables' columns holding the same values (`joins`): the sandbox makes the
    value agree with the record the request names (`joined_values`)."""
    template: str | None = None
    """How the value is made of the record's other values (`t3_{id}`)."""
    description: str = ""
    """What the column holds, in words: the sandbox makes values that read so (`meant_values`)."""

    @property
    def from_request(self) -> bool:
        """Harvest fills it, from the request (`$params.`) or the item holding a nested record (`$parent.`)."""
        return self.path.startswith(("$params.", "$parent."))


@dataclass(frozen=True)
class DeclaredChild:
    table: str
    at: str
    """Where in a record the list is (the first alternative)."""
    columns: tuple[DeclaredColumn, ...]
    entries: bool = False
    """An object whose fields are the items (`{name, value}`), not a list."""


@dataclass(frozen=True)
class DeclaredKind:
    table: str
    at: str
    """Where the records are (the first alternative): "" for the answer itself."""
    one: bool
    key: tuple[str, ...]
    columns: tuple[DeclaredColumn, ...]
    wrap_key: str | None = None
    """`unwrap.key`: each record is sent wrapped as `{wrap_key: record, <extras>}`."""
    extras: tuple[DeclaredColumn, ...] = ()
    ignore: tuple[str, ...] = ()
    """Record paths the declaration knows and leaves in raw: the sandbox sends them, null."""
    nested: str | None = None
    """Where in an item more items of its kind are (a record path): replies to replies, a few levels deep."""
    children: tuple[DeclaredChild, ...] = ()
    """Lists of objects inside each record (child tables)."""
    first_page_only: bool = False
    """The place is sent on a query's first page only (a post beside the first page of its comments)."""
    where: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    """(record path, values): the records hold the first value at the path; each page's list also holds an item
    of another kind (another value there), as a board's pins hold a "Related Interests" module."""

    @property
    def key_paths(self) -> str:
        """The record's key as `EmulatedEndpoint.kinds` writes it: its columns' paths joined by `+`."""
        by_name = {c.name: c for c in self.columns}
        return "+".join(by_name[name].path for name in self.key)


@dataclass(frozen=True)
class DeclaredPaging:
    style: str
    next: tuple[tuple[str, str], ...] = ()
    """(request parameter, response path the service writes it at), in the declaration's order."""
    more: str | None = None
    end_values: tuple[str, ...] = ()
    """Sentinels the declaration names: the first one is what the service ends a `cursor` style's pages with,
    or any style's whose sentinels are not harvest's default (see `declared_pages`)."""
    page: DeclaredPageNumbers | None = None
    """The page-number style's parameter and bounds (`next` is empty: the client counts)."""
    follow: FollowCursor | None = None
    """Follow-up cursors its records carry (`sandbox.emulation.generic.threads`)."""

    @property
    def single(self) -> bool:
        return self.style == "single" or (not self.next and self.page is None)

    @property
    def params(self) -> tuple[str, ...]:
        """The request parameters that ask for a page past the first (cursors, a page number, a follow-up's)."""
        own = (self.page.param,) if self.page is not None else tuple(p for p, _ in self.next)
        follow = (self.follow.param,) if self.follow is not None and self.follow.param not in own else ()
        return (*own, *follow)


@dataclass(frozen=True)
class DeclaredEndpoint:
    path: str
    params: tuple[DeclaredParam, ...]
    one_of: tuple[tuple[str, ...], ...]
    paging: DeclaredPaging
    kinds: tuple[DeclaredKind, ...]
    credits: int = 1
    when: tuple[DeclaredPriceRule, ...] = ()
    newest_first: tuple[str | None, tuple[str, ...]] | None = None
    """(parameter, values) when the listing is newest first (parameter None: always)."""
    per_page: int | None = None
    per_page_param: str | None = None
    methods: tuple[str, ...] = ("GET",)
    rules: ParamRuleSet = field(default_factory=ParamRuleSet)

    def param(self, name: str) -> DeclaredParam | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def subject_params(self) -> tuple[str, ...]:
        """The parameters that name what is looked up (trigger words go there): text without an `enum`,
        required, in a `one_of` group or in the path; in the declaration's order."""
        grouped = {name for group in self.one_of for name in group}
        return tuple(
            p.name
            for p in self.params
            if p.type == "string" and not p.enum and (p.required or p.name in grouped)
        )


class _DeclarationReader:
    """Reads one declaration, each problem a `ValueError` naming the endpoint and the field."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> ValueError:
        return ValueError(f"declared endpoint {self.path}: {where}: {problem}")

    def mapping(self, value: Any, where: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(where, f"must be a mapping, got {type(value).__name__}")
        return value

    def names(self, value: Any, where: str) -> tuple[str, ...]:
        """A name or a list of names (`key`, `at`, a `next` path)."""
        if isinstance(value, str):
            return (value,)
        if isinstance(value, Sequence) and value and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise self.fail(where, "must be a name or a list of names")


def _number(r: _DeclarationReader, value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise r.fail(where, "must be a number")
    return float(value)


def _param(r: _DeclarationReader, name: str, raw: Any) -> DeclaredParam:
    where = f"params.{name}"
    spec = r.mapping(raw, where)
    enum = spec.get("enum") or ()
    if not isinstance(enum, Sequence) or isinstance(enum, str):
        raise r.fail(f"{where}.enum", "must be a list of values")
    lengths = [spec.get("min_length"), spec.get("max_length")]
    if any(v is not None and (isinstance(v, bool) or not isinstance(v, int)) for v in lengths):
        raise r.fail(where, "min_length and max_length must be integers")
    default = spec.get("default")
    return DeclaredParam(
        name,
        str(spec.get("type", "string")),
        required=bool(spec.get("required", False)),
        enum=tuple(wire_text(v) for v in enum),
        minimum=_number(r, spec.get("min"), f"{where}.min"),
        maximum=_number(r, spec.get("max"), f"{where}.max"),
        min_length=lengths[0],
        max_length=lengths[1],
        pattern=spec.get("pattern"),
        default=None if default is None else wire_text(default),
    )


def _column(r: _DeclarationReader, name: str, raw: Any, where: str) -> DeclaredColumn:
    if isinstance(raw, str):
        return DeclaredColumn(name, raw, name)
    spec = r.mapping(raw, f"{where}.{name}")
    path = spec.get("path", name)
    if isinstance(path, Sequence) and not isinstance(path, str):
        path = path[0] if path else name
    if not isinstance(path, str):
        raise r.fail(f"{where}.{name}.path", "must be a record path")
    template = spec.get("template")
    return DeclaredColumn(
        name,
        str(spec.get("type", "text")),
        path.split("|")[0],
        joins=_joins(spec.get("joins")),
        template=template if isinstance(template, str) else None,
        description=str(spec.get("description") or ""),
    )


_JOIN = re.compile(r"([a-z][a-z0-9_]*)\.([a-z_][a-z0-9_]*)")


def _joins(raw: Any) -> tuple[tuple[str, str], ...]:
    """The `table.column` entries of a column's `joins` (one or a list); anything else is harvest's to refuse."""
    entries = [raw] if isinstance(raw, str) else raw if isinstance(raw, Sequence) else []
    return tuple(
        (found.group(1), found.group(2))
        for entry in entries
        if isinstance(entry, str) and (found := _JOIN.fullmatch(entry))
    )


def _kind(r: _DeclarationReader, table: str, raw: Any) -> DeclaredKind:
    where = f"records.{table}"
    spec = r.mapping(raw, where)
    columns = tuple(
        _column(r, n, c, f"{where}.columns")
        for n, c in r.mapping(spec.get("columns"), f"{where}.columns").items()
    )
    if not columns:
        raise r.fail(f"{where}.columns", "a record kind needs at least one column")
    key = r.names(spec.get("key"), f"{where}.key")
    unknown = [k for k in key if k not in {c.name for c in columns}]
    if unknown:
        raise r.fail(f"{where}.key", f"{unknown[0]!r} is not one of its columns")
    at = spec.get("at", "")
    first_at = "" if at in ("", [""]) else r.names(at, f"{where}.at")[0].split("|")[0]
    unwrap = r.mapping(spec.get("unwrap"), f"{where}.unwrap")
    extras = r.mapping(unwrap.get("extras"), f"{where}.unwrap.extras")
    return DeclaredKind(
        table,
        first_at,
        bool(spec.get("one", False)) or first_at in (spec.get("objects") or ()),
        key,
        columns,
        wrap_key=unwrap.get("key") if unwrap else None,
        extras=tuple(_column(r, n, c, f"{where}.unwrap.extras") for n, c in extras.items()),
        ignore=tuple(spec.get("ignore") or ()),
        nested=spec.get("nested"),
        children=tuple(
            _child(r, f"{where}.children", t, c) for t, c in r.mapping(spec.get("children"), where).items()
        ),
        first_page_only=bool(spec.get("first_page_only", False)),
        where=_where(r, spec.get("where"), f"{where}.where"),
    )


def _where(r: _DeclarationReader, raw: Any, where: str) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """A kind's `where`: record path -> a value or a list of values (null: the field left out)."""
    out = []
    for path, values in r.mapping(raw, where).items():
        listed = tuple(values) if isinstance(values, list) else (values,)
        if not listed:
            raise r.fail(f"{where}.{path}", "names no value to keep")
        out.append((str(path), listed))
    return tuple(out)


def _child(r: _DeclarationReader, where: str, table: str, raw: Any) -> DeclaredChild:
    spec = r.mapping(raw, f"{where}.{table}")
    columns = r.mapping(spec.get("columns"), f"{where}.{table}.columns")
    return DeclaredChild(
        table,
        r.names(spec.get("at"), f"{where}.{table}.at")[0].split("|")[0],
        tuple(_column(r, n, c, f"{where}.{table}.columns") for n, c in columns.items()),
        bool(spec.get("entries", False)),
    )


def _paging(r: _DeclarationReader, raw: Any, tables: Sequence[str]) -> DeclaredPaging:
    spec = r.mapping(raw, "paging")
    style = spec.get("style", "single")
    if style not in STYLES:
        raise r.fail("paging.style", f"{style!r} is not a paging style; allowed: {', '.join(STYLES)}")
    follow = read_follow(spec, tables, r.fail)
    if style == "single":
        return DeclaredPaging("single", follow=follow)
    if style == "page_number":
        more = r.names(spec["more"], "paging.more")[0] if spec.get("more") else None
        return DeclaredPaging(style, (), more, page=read_page_numbers(spec, r.fail), follow=follow)
    declared_next = r.mapping(spec.get("next"), "paging.next")
    pairs = tuple((p, r.names(paths, f"paging.next.{p}")[0]) for p, paths in declared_next.items())
    more = spec.get("more")
    if more is None:  # as harvest reads it: the style's flag unless one is declared (`[]`: none)
        more = _default_more(style)
    more = r.names(more, "paging.more")[0] if more else None  # a path, or paths tried in order: the first
    ends = spec.get("end_values")
    if ends is None:  # as harvest reads it: `-end-` unless declared (`[]`: none)
        ends = END_OF_PAGES
    return DeclaredPaging(
        style, pairs or _default_next(style), more, tuple(wire_text(v) for v in ends), follow=follow
    )


def read_declaration(path: str, raw: Any) -> DeclaredEndpoint:
    """One declaration (its path and the mapping under it) in the sandbox's form."""
    r = _DeclarationReader(path)
    spec = r.mapping(raw, "the declaration")
    params = tuple(_param(r, name, p) for name, p in r.mapping(spec.get("params"), "params").items())
    kinds = tuple(_kind(r, table, k) for table, k in r.mapping(spec.get("records"), "records").items())
    if not kinds:
        raise r.fail("records", "an endpoint needs at least one record kind")
    paging = _paging(r, spec.get("paging"), [k.table for k in kinds])
    bare = next((k for k in kinds if k.at == "" and not k.one), None)
    if bare is not None and (len(kinds) > 1 or not paging.single):
        raise r.fail(f"records.{bare.table}.at", "a list that is the answer itself leaves no room for a cursor or "
                     "another kind")  # fmt: skip
    one_of = tuple(r.names(group, f"one_of[{n}]") for n, group in enumerate(spec.get("one_of") or ()))
    credits, when = read_price(spec.get("price"), r.fail)
    newest = spec.get("newest_first")
    newest_first: tuple[str | None, tuple[str, ...]] | None = None
    if isinstance(newest, Mapping):
        newest_first = (newest.get("param"), tuple(wire_text(v) for v in newest.get("values") or ()))
    elif newest:
        newest_first = (None, ())
    per_page = spec.get("records_per_page")
    if isinstance(per_page, Mapping):
        per_page = per_page.get("param")
    return DeclaredEndpoint(
        path,
        params,
        one_of,
        paging,
        kinds,
        credits,
        when,
        newest_first,
        per_page if isinstance(per_page, int) and not isinstance(per_page, bool) else None,
        per_page if isinstance(per_page, str) else None,
        read_methods(spec, r.fail),
        read_rules(spec, r.fail),
    )
