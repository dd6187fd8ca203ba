"""The sandbox serves every endpoint harvest's catalog describes: the ones it emulates with code of their own
(`sandbox.emulation.endpoint_table`) with the same record kinds in the same order, corresponding primary keys and
the same parameters; every other one from its declaration (`sandbox.emulation.generic`), as harvest hands its
catalog to the sandboxes it starts.

The catalog (`connectors.catalog.endpoints`, what harvest reads) and the sandbox's table (what the service answers)
are written apart; an endpoint added or changed on one side only fails here, by name, instead of somewhere deep in
an end-to-end test.
"""

from __future__ import annotations

import re
import typing
from typing import Any, Literal

import pytest

from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.fields import PARAM_PREFIX
from harvest.connectors.catalog.records import RecordKind
from harvest.sandbox.emulation import endpoint_table as sandbox_table
from harvest.sandbox.emulation.emulated import EmulatedEndpoint

CATALOG: dict[str, Endpoint] = {e.path: e for e in catalog.ENDPOINTS}
SANDBOX: dict[str, EmulatedEndpoint] = {e.path: e for e in sandbox_table.ENDPOINTS}
BOTH = sorted(set(CATALOG) & set(SANDBOX))


def snake(wire_name: str) -> str:
    """harvest's column name for a wire field name: `aweme_id` stays, `channelId` becomes `channel_id`."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", wire_name).lower()


def platform(path: str) -> str:
    """The platform a path belongs to, as harvest prefixes its table names: `/v1/photo-app/...` -> `photo_app`."""
    return snake(path.split("/")[2].replace("-", "_"))


def literal_values(annotation: Any) -> set[str]:
    """The allowed values of a `Literal[...]` (or `Literal[...] | None`) annotation; empty for any other."""
    if typing.get_origin(annotation) is Literal:
        return {str(v) for v in typing.get_args(annotation)}
    return {v for arg in typing.get_args(annotation) for v in literal_values(arg)}


def test_every_catalog_path_is_served() -> None:
    """Each emulated endpoint is one of the catalog's; each other catalog endpoint is served from its declaration."""
    from harvest.connectors.catalog.job_catalog import builtin_declarations
    from harvest.sandbox.config import SandboxConfig
    from harvest.sandbox.emulation.generic.declared_endpoints import served

    assert len(CATALOG) == len(catalog.ENDPOINTS) and len(SANDBOX) == len(sandbox_table.ENDPOINTS)
    assert sorted(set(SANDBOX) - set(CATALOG)) == [], (
        "emulated by the sandbox, not in connectors.catalog.endpoints"
    )
    table = served(SandboxConfig(catalog=builtin_declarations()))
    assert sorted(p for p in CATALOG if p not in table.by_path) == [], "in the catalog, not served"
    assert len(BOTH) == len(SANDBOX)


KEYED_FURTHER = {"video_platform_shelves": ("first_item_id",)}
"""Trailing key columns the sandbox's key has no part for: the service repeats a shelf's title ("Shorts") from page
to page, so harvest keys a shelf by its first item too; the sandbox numbers its shelves' titles (`#1`)."""


def _asked_first(kind: RecordKind, wire_fields: list[str]) -> tuple[str, ...]:
    """The key's leading columns holding what the request asked (`search_query`) that the sandbox's key, one
    request's view of its records, leaves out."""
    asked: list[str] = []
    for column in kind.primary_key:
        fld = kind.field(column)
        if fld is None or not fld.request_params or set(fld.request_params) & set(wire_fields):
            break
        asked.append(column)
    return tuple(asked)


@pytest.mark.parametrize("path", BOTH)
def test_record_kinds_line_up(path: str) -> None:
    """Kind by kind, in order: the table is `<platform>_<sandbox kind>` and its primary key columns are the
    snake_case of the sandbox's key fields, read from those wire fields (or from the request's parameter). A key
    the service sends under another name than the interface's (`product_id|id`) is read from both, in the same
    order, and its column keeps the interface's name."""
    harvest_kinds = CATALOG[path].kinds
    sandbox_kinds = list(SANDBOX[path].kinds.items())
    assert [k.table for k in harvest_kinds] == [f"{platform(path)}_{name}" for name, _ in sandbox_kinds]
    for kind, (_, key) in zip(harvest_kinds, sandbox_kinds, strict=True):
        wire_fields = key.split("+")
        asked = _asked_first(kind, wire_fields)  # a search's results are keyed by the search first
        own = kind.primary_key[len(asked) : len(kind.primary_key) - len(KEYED_FURTHER.get(kind.table, ()))]
        assert kind.primary_key[len(asked) + len(own) :] == KEYED_FURTHER.get(kind.table, ()), kind.table
        assert own == tuple(snake(f.split("|")[-1]) for f in wire_fields), kind.table
        for column, wire in zip(own, wire_fields, strict=True):
            read = kind.field(column)
            assert read is not None, (kind.table, column)
            assert read.path in (wire, PARAM_PREFIX + wire), (kind.table, column, read.path)


@pytest.mark.parametrize("path", BOTH)
def test_parameters_agree(path: str) -> None:
    """The catalog's parameter model and the sandbox's declared parameters: the same names, the same required
    ones, the same "one of" pair, the same enumerated values; path parameters on both sides."""
    model = CATALOG[path].params
    emulated = SANDBOX[path]
    in_path = set(model.path_params)
    fields = {name: info for name, info in model.model_fields.items() if name not in in_path}
    declared = {p.name: p for p in emulated.params}
    assert set(fields) == set(declared)
    assert in_path == ({emulated.path_param} if emulated.path_param else set())
    assert {n for n, info in fields.items() if info.is_required()} == {
        n for n, p in declared.items() if p.required
    }
    assert set(model.one_of) == set(emulated.one_of)
    for name, info in fields.items():
        allowed = literal_values(info.annotation)
        if declared[name].check == "flag":  # the service takes any value as on; harvest sends `true` only
            continue
        if allowed or declared[name].enum:
            assert allowed == set(declared[name].enum), name


@pytest.mark.parametrize("path", BOTH)
def test_paging_agrees(path: str) -> None:
    """A single-page endpoint on one side is one on the other; cursor parameters are declared by both. Where the
    sandbox shows new items at a listing's front, harvest knows the listing is newest first, under the same
    condition."""
    harvest, emulated = CATALOG[path], SANDBOX[path]
    assert harvest.paging.single == (not emulated.paged)
    assert set(harvest.paging.request_params) <= emulated.names
    if emulated.new_items is not None:
        assert harvest.newest_first is not None
        assert (harvest.newest_first.param, harvest.newest_first.values) == (
            emulated.new_items.param,
            emulated.new_items.values,
        )
