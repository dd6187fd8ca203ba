"""Declared endpoints as the sandbox serves them: each declaration becomes an `EmulatedEndpoint` like the
built-in ones (its parameters checked as declared, its price, its "not found", its pages built by
`declared_pages`), so serving, billing, faults, trigger words, drift and `sandbox.expected` treat it as they treat
those.

What a declaration leaves to the sandbox:
- identity: every parameter but the cursors and the records-per-page one decides which records exist;
- subjects (trigger words `missing`, `blocked`, `nonexistent`): the text parameters that name what is looked up,
  those required, in a `one_of` group, or in the path;
- paging parameters are accepted even when `params` does not list them (or the ignored-parameter quirk would
  answer the first page again to a client following cursors).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from harvest.sandbox.emulation.emulated import (
    EmulatedEndpoint,
    EndpointTable,
    NewItems,
    NotFoundAnswer,
    QueryParam,
)
from harvest.sandbox.emulation.endpoint_table import BUILT_IN
from harvest.sandbox.emulation.generic import declared_pages
from harvest.sandbox.emulation.generic.declared_form import (
    PARAM_CHECKS,
    DeclaredEndpoint,
    DeclaredParam,
    read_declaration,
)
from harvest.sandbox.emulation.generic.request_form import CACHE_PARAM
from harvest.sandbox.emulation.page import Ctx, ServedPage

if TYPE_CHECKING:
    from harvest.sandbox.config import SandboxConfig

_TRUE = frozenset({"true", "1"})


def _query_param(decl: DeclaredEndpoint, param: DeclaredParam, in_path: bool) -> QueryParam:
    cursors = set(decl.paging.params)
    grouped = {name for group in decl.one_of for name in group}
    is_text = param.type == "string"
    return QueryParam(
        param.name,
        required=param.required or in_path,
        enum=param.enum,
        check=PARAM_CHECKS.get(param.type, "text"),  # type: ignore[arg-type]
        identity=param.name not in cursors and param.name != decl.per_page_param,
        subject=is_text and not param.enum and (param.required or param.name in grouped or in_path),
        default=param.default,
        minimum=param.minimum,
        maximum=param.maximum,
        min_length=param.min_length,
        max_length=param.max_length,
        pattern=param.pattern,
    )


def _params(decl: DeclaredEndpoint, in_path: tuple[str, ...]) -> tuple[QueryParam, ...]:
    params = [_query_param(decl, p, p.name in in_path) for p in decl.params]
    named = {p.name for p in params}
    counted = ("max_cursor", "page_number")
    for name in decl.paging.params:
        if name not in named:
            check = "nonneg_int" if decl.paging.style in counted and name != _follow_param(decl) else "text"
            params.append(QueryParam(name, check=check))  # type: ignore[arg-type]
    implied = [QueryParam(n, required=True, identity=True, subject=True) for n in in_path if n not in named]
    return (*implied, *params)


def _canonical(decl: DeclaredEndpoint, name: str, value: str) -> str:
    param = decl.param(name)
    if param is not None and param.type == "boolean":
        return "true" if value.lower() in _TRUE else "false"
    return value


def _follow_param(decl: DeclaredEndpoint) -> str | None:
    return decl.paging.follow.param if decl.paging.follow is not None else None


def price(decl: DeclaredEndpoint, items: Sequence[tuple[str, str]]) -> int:
    """Credits of one answer: the highest `credits` of the `price.when` rules whose parameter has one of their
    values (any value, for a rule without one; a parameter left out counts at its default), else the declared
    credits. What lowers a price by outcome is the answer's (a cached one: `sandbox.wire.answering`)."""
    given = {p.name: p.default for p in decl.params if p.default is not None}
    given.update(dict(items))
    priced = [
        rule.credits
        for rule in decl.when
        if rule.credits is not None
        and (value := given.get(rule.param)) not in (None, "")
        and (not rule.values or _canonical(decl, rule.param, value) in rule.values)
    ]
    return max(priced) if priced else decl.credits


def _build(decl: DeclaredEndpoint, ctx: Ctx) -> ServedPage:
    if decl.paging.single:
        return declared_pages.single(ctx, decl)
    return declared_pages.paged(ctx, decl)


def emulated(decl: DeclaredEndpoint) -> EmulatedEndpoint:
    """The sandbox's endpoint answering as `decl` declares."""
    probe = EmulatedEndpoint(decl.path, (), {}, builder=partial(_build, decl))
    newest, missing = decl.newest_first, declared_pages.not_found_body(decl)
    return EmulatedEndpoint(
        decl.path,
        _params(decl, probe.path_names),
        {kind.table: kind.key_paths for kind in decl.kinds},
        builder=partial(_build, decl),
        not_found=NotFoundAnswer(missing, envelope=isinstance(missing, dict)),
        one_of=decl.one_of[0] if decl.one_of else (),
        also_one_of=decl.one_of[1:],
        search=not decl.paging.single and newest is None,
        paged=not decl.paging.single,
        new_items=None if newest is None else NewItems(newest[0], newest[1]),
        price=partial(price, decl),
        methods=decl.methods,
        param_check=decl.rules.check,
        cache_param=CACHE_PARAM if decl.param(CACHE_PARAM) is not None else None,
    )


_CATALOGS: dict[int, tuple[Mapping[str, Any], list[EmulatedEndpoint]]] = {}
"""id(catalog) -> (the catalog, its endpoints): a catalog's endpoints depend on it alone, and the sandboxes of a
process are mostly handed the same one, so it is read once; the last few are kept, not every one ever seen."""
_KEPT_CATALOGS = 4


def _catalog_endpoints(catalog: Mapping[str, Any], built_in: EndpointTable) -> list[EmulatedEndpoint]:
    known = _CATALOGS.get(id(catalog))
    if known is not None and known[0] is catalog and built_in is BUILT_IN:
        return known[1]
    endpoints = [
        emulated(read_declaration(path, declaration))
        for path, declaration in catalog.items()
        if built_in.match(path) is None and path not in built_in.by_path
    ]
    if built_in is BUILT_IN:
        while len(_CATALOGS) >= _KEPT_CATALOGS:
            del _CATALOGS[next(iter(_CATALOGS))]
        _CATALOGS[id(catalog)] = (catalog, endpoints)
    return endpoints


def declared_table(
    declared: Mapping[str, Any], built_in: EndpointTable, catalog: Mapping[str, Any] | None = None
) -> EndpointTable:
    """The built-in endpoints, the catalog's endpoints the built-in ones do not emulate, and the declared ones
    (a declared path of the catalog's is served as declared: the job's own description of it); `ValueError` for
    a declaration the sandbox cannot serve, or a path of a built-in endpoint."""
    added = [e for e in _catalog_endpoints(catalog or {}, built_in) if e.path not in declared]
    for path, declaration in declared.items():
        if built_in.match(path) is not None or path in built_in.by_path:
            raise ValueError(
                f"declared endpoint {path}: the sandbox already serves {path} (a built-in endpoint)"
            )
        added.append(emulated(read_declaration(path, declaration)))
    return EndpointTable((*built_in.endpoints, *added))


def served(config: SandboxConfig) -> EndpointTable:
    """Every endpoint `config`'s sandbox serves (the built-in ones, the catalog's, and its declared ones), built
    once per config."""
    table = config.__dict__.get("_served")
    if table is None:
        table = declared_table(config.declared, BUILT_IN, config.catalog)
        object.__setattr__(config, "_served", table)
    return table
