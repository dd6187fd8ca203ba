"""An `Endpoint` from its plain declaration (`connectors.catalog.declarations.plain`): the one way an endpoint
comes to be, built-in (`endpoints/<platform>.yaml`) or declared by a job, and again from a run's manifest."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.declared_params import params_model
from harvest.connectors.catalog.endpoints import Endpoint, NewestFirst, ParamsModel, Price, PriceRule
from harvest.connectors.catalog.fields import COLUMN_TYPES, Field
from harvest.connectors.catalog.paging_styles import Follow, PageNumbers, Paging
from harvest.connectors.catalog.params import ParamRules
from harvest.connectors.catalog.records import RecordKind, Unwrap


def build_endpoint(path: str, decl: Mapping[str, Any], *, lazy: bool = False) -> Endpoint:
    """`lazy`: the parameter model is made when first asked for (the built-in catalog's, whose declarations
    the tests check), else at once (a job's own, so that pydantic's refusal comes with the spec's reading)."""
    return Endpoint(
        path=path,
        summary=decl["summary"],
        params_model=ParamsModel(
            functools.partial(params_model, path, decl["params"], decl["one_of"], ParamRules.of(decl)),
            eager=not lazy,
        ),
        paging=_paging(decl["paging"]),
        kinds=tuple(_kind(table, kind) for table, kind in decl["records"].items()),
        price=_price(decl["price"]),
        newest_first=_newest_first(decl["newest_first"]),
        records_per_page=decl["records_per_page"],
        methods=tuple(decl.get("method", ("GET",))),
    )


def _paging(paging: Mapping[str, Any]) -> Paging:
    follow = paging.get("follow")
    numbers = paging["style"] == "page_number"
    return Paging(
        paging["style"],
        {param: tuple(paths) for param, paths in paging["next"].items()},
        tuple(paging["more"]),
        tuple(paging["end_values"]),
        page=PageNumbers(*(paging[k] for k in ("param", "first", "step", "last", "pages")))
        if numbers
        else None,
        follow=Follow(follow["param"], follow["from"], follow["kind"]) if follow else None,
    )


def _price(price: Mapping[str, Any]) -> Price:
    rules = tuple(
        PriceRule(r["param"], r.get("value"), r.get("credits"), r.get("least")) for r in price["when"]
    )
    return Price(price["credits"], rules, price.get("least"))


def _newest_first(order: bool | Mapping[str, Any]) -> NewestFirst | None:
    if order is True:
        return NewestFirst()
    if not order:
        return None
    assert isinstance(order, Mapping)
    return NewestFirst(order["param"], tuple(order["values"]))


def _columns(columns: Mapping[str, Mapping[str, Any]]) -> tuple[Field, ...]:
    return tuple(
        replace(
            COLUMN_TYPES[c["type"]](name, c["path"]),
            description=c.get("description") or "",
            renamed_from=tuple(c.get("renamed_from") or ()),
            joins=tuple(c.get("joins") or ()),
            template=c.get("template"),
        )
        for name, c in columns.items()
    )


def _kind(table: str, kind: Mapping[str, Any]) -> RecordKind:
    unwrap = kind.get("unwrap")
    fields = _columns(kind["columns"])
    extras = _columns(unwrap["extras"]) if unwrap else ()
    by_name = {f.name: f for f in fields + extras}
    parent_key = tuple(by_name[k] for k in kind["key"] if k in by_name)
    return RecordKind(
        table,
        tuple(kind["at"]),
        tuple(kind["key"]),
        fields,
        Unwrap(unwrap["key"], extras, tuple(unwrap["ignore"])) if unwrap else None,
        tuple(kind["ignore"]),
        objects=tuple(kind["at"]) if kind["one"] else tuple(kind["objects"]),
        nested=kind["nested"],
        children=tuple(
            _child(name, table, parent_key, child) for name, child in kind.get("children", {}).items()
        ),
        first_page_only=kind.get("first_page_only", False),
        where=tuple((path, tuple(values)) for path, values in kind.get("where", {}).items()),
    )


def _child(table: str, parent: str, parent_key: tuple[Field, ...], child: Mapping[str, Any]) -> ChildKind:
    """A child kind: its items read as a record kind without a key, located inside each parent record."""
    item = RecordKind(
        table, tuple(child["at"]), (), _columns(child["columns"]), ignore=tuple(child["ignore"])
    )
    return ChildKind(table, parent, parent_key, item, child["replaces"], child["entries"])
