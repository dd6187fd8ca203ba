"""A job's catalog: harvest's own endpoints (`connectors/catalog/endpoints/<platform>.yaml`, one catalog file per
platform) and those the job declares (`catalogs:`, `endpoints:`), as one mapping of path to `Endpoint`.

Nothing reads a global list of endpoints: a spec's checks, its plan and its run read the job's catalog, and
what works on an output directory (load, rebuild, export, history views, table checks) reads the catalog of
the declarations its runs' manifests recorded (`of_runs`), so a declared kind's table is known without the spec.
A column's `joins` names a column of the job's catalog (`join_problems`): the built-in catalog's are checked
when it is read, a job's with its spec.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import marshal
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from harvest.connectors.catalog.child_kinds import ChildKind, TableKind
from harvest.connectors.catalog.declaration_checks import JOIN_TARGET
from harvest.connectors.catalog.declarations import PARENT_PREFIX, POSITION, CatalogFile, plain
from harvest.connectors.catalog.endpoint_build import build_endpoint
from harvest.connectors.catalog.endpoints import Endpoint, UnknownEndpoint
from harvest.connectors.catalog.fields import type_name
from harvest.connectors.catalog.records import RecordKind
from harvest.connectors.catalog.shape_overrides import Shapes, overridden_kind

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Signature = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]
"""What makes two record kinds one table: (primary key, (column, type) in order)."""


@dataclass(frozen=True)
class Catalog:
    endpoints: Mapping[str, Endpoint]
    """Every endpoint by documented path: the built-in ones first, then the declared ones in declared order."""
    declared: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The declared ones' plain declarations (`connectors.catalog.declarations.plain`), as a manifest records."""

    def get(self, path: str) -> Endpoint:
        try:
            return self.endpoints[path]
        except KeyError:
            raise UnknownEndpoint(path) from None

    def kinds(self) -> dict[str, TableKind]:
        """Every record kind and child kind by table name (kinds shared by endpoints appear once: the first, a
        built-in one before a declared one of the same table)."""
        kinds: dict[str, TableKind] = {}
        for endpoint in self.endpoints.values():
            for kind in endpoint.landed_kinds:
                kinds.setdefault(kind.table, kind)
        return kinds

    def overridden(
        self, costs: Mapping[str, int] | None = None, shapes: Shapes | None = None
    ) -> dict[str, Endpoint]:
        """The endpoints with a job's cost and shape overrides applied."""
        costs, shapes = costs or {}, shapes or {}
        unknown = (set(costs) | set(shapes)) - set(self.endpoints)
        if unknown:
            raise UnknownEndpoint(sorted(unknown)[0])
        return {path: _overridden(e, costs, shapes) for path, e in self.endpoints.items()}

    def newest_first_listings(self) -> str:
        """The endpoints (and parameter values) where `incremental: true` is allowed, for error messages."""
        return ", ".join(
            f"{e.path}{e.newest_first.describe()}"
            for e in self.endpoints.values()
            if e.newest_first is not None
        )


def _overridden(endpoint: Endpoint, costs: Mapping[str, int], shapes: Shapes) -> Endpoint:
    tables = shapes.get(endpoint.path, {})
    kinds = tuple(overridden_kind(k, tables) for k in endpoint.kinds)
    if endpoint.path in costs:
        endpoint = replace(endpoint, price=endpoint.price.overridden(costs[endpoint.path]))
    return replace(endpoint, kinds=kinds)


BUILTIN_DIR = Path(__file__).with_name("endpoints")
"""harvest's own catalog files, one per platform (package data); a declaration that waits for a key harvest does
not take yet goes in `pending/` beside it, which is not read."""


def builtin_files() -> list[Path]:
    return sorted(BUILTIN_DIR.glob("*.yaml"))


def parsed(file: Path) -> Any:
    """A catalog file's YAML, parsed once per content as Python compiles a module once per source: parsing the
    built-in files took ~0.24 s of every harvest process's start, reading them back from a marshal file beside
    them (`__pycache__/`, keyed by a hash of the file's bytes and PyYAML's version) ~5 ms. Where that folder
    cannot be written (a read-only install) or the YAML holds what marshal cannot (a date), it is parsed each time."""
    text = file.read_bytes()
    key = f"{hashlib.blake2b(text, digest_size=16).hexdigest()} {yaml.__version__}"
    cache = file.parent / "__pycache__" / f"{file.stem}.{sys.implementation.cache_tag}.marshal"
    try:
        stored_key, stored = marshal.loads(cache.read_bytes())
        if stored_key == key:
            return stored
    except (OSError, ValueError, EOFError, TypeError):
        pass
    data = yaml.load(text.decode("utf-8"), Loader=_LOADER)
    try:
        blob = marshal.dumps((key, data))
        cache.parent.mkdir(exist_ok=True)
        partial = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
        partial.write_bytes(blob)
        os.replace(partial, cache)  # whole or not at all, whatever other process reads it meanwhile
    except (OSError, ValueError):
        pass
    return data


@functools.cache
def builtin_declarations() -> dict[str, dict[str, Any]]:
    """Path -> plain declaration of each of harvest's own endpoints, file by file: what the catalog is built from,
    and what the sandbox serves an endpoint it emulates no other way from. A path in two files is an error."""
    declared: dict[str, dict[str, Any]] = {}
    files: dict[str, str] = {}
    for file in builtin_files():
        data = parsed(file)
        for path, decl in CatalogFile.model_validate(data).endpoints.items():
            if path in declared:
                raise ValueError(f"{file.name}: {path} is declared in another catalog file too")
            declared[path] = plain(path, decl)
            files[path] = file.name
    for path, at, problem, allowed in join_problems(declared, declared_tables(declared)):
        field = ".".join(str(part) for part in ("endpoints", path, *at))
        raise ValueError(f"{files[path]}: {field}: {problem} (allowed: {allowed})")
    return declared


@functools.cache
def builtin() -> Catalog:
    """harvest's own endpoints, read once per process."""
    return Catalog(
        {path: build_endpoint(path, decl, lazy=True) for path, decl in builtin_declarations().items()}
    )


def for_job(declared: Mapping[str, Mapping[str, Any]] | None) -> Catalog:
    """The built-in catalog and a job's declared endpoints (plain declarations, already checked against it:
    `flows.spec.declared`); the built-in one itself when the job declares none."""
    if not declared:
        return builtin()
    return _for_job(_canonical(declared))


def of_runs(declarations: Iterable[Mapping[str, Mapping[str, Any]] | None]) -> Catalog:
    """The catalog of an output directory: the built-in endpoints and what its runs declared (each run's
    manifest records its declarations; a path's latest declaration wins), so a declared kind's table is
    loaded, rebuilt, exported and checked without the spec."""
    merged: dict[str, Mapping[str, Any]] = {}
    for declared in declarations:
        merged.update({path: d for path, d in (declared or {}).items() if path not in builtin().endpoints})
    return for_job(merged)


def _canonical(declared: Mapping[str, Mapping[str, Any]]) -> str:
    return json.dumps(declared, separators=(",", ":"), default=str)


@functools.lru_cache(maxsize=16)
def _for_job(text: str) -> Catalog:
    """Built once per distinct set of declarations in a process (a spec is checked, planned and run)."""
    declared = json.loads(text)
    own = {path: build_endpoint(path, decl) for path, decl in declared.items()}
    return Catalog({**builtin().endpoints, **own}, declared)


def kind_signature(kind: RecordKind | ChildKind) -> Signature:
    """A record kind's key and columns; its children's tables are theirs (`child_signatures`)."""
    return kind.primary_key, tuple((f.name, type_name(f)) for f in kind.columns)


def declared_signature(kind: Mapping[str, Any]) -> Signature:
    """The signature of a plain declaration's record kind."""
    columns = dict(kind["columns"]) | (dict(kind["unwrap"]["extras"]) if kind.get("unwrap") else {})
    return tuple(kind["key"]), tuple((name, column["type"]) for name, column in columns.items())


def declared_child_signatures(kind: Mapping[str, Any]) -> dict[str, Signature]:
    """Child table -> its signature, as `kind_signature` gives it for the child kind built from `kind`."""
    columns = dict(kind["columns"]) | (dict(kind["unwrap"]["extras"]) if kind.get("unwrap") else {})
    parents = tuple((PARENT_PREFIX + k, columns[k]["type"]) for k in kind["key"] if k in columns)
    return {
        table: (
            (*(name for name, _ in parents), POSITION),
            (*parents, (POSITION, "integer"), *((n, c["type"]) for n, c in child["columns"].items())),
        )
        for table, child in kind.get("children", {}).items()
    }


def describe_signature(signature: Signature) -> str:
    key, columns = signature
    return f"key {', '.join(key)}; columns " + ", ".join(f"{name} ({kind})" for name, kind in columns)


def join_problems(
    declarations: Mapping[str, Mapping[str, Any]], tables: Mapping[str, Sequence[str]]
) -> Iterator[tuple[str, tuple[str | int, ...], str, str]]:
    """(endpoint path, location inside its declaration, problem, allowed) of each `joins` entry of plain
    declarations naming no table or no column of `tables` (table -> its columns: the job's catalog)."""
    for path, decl in declarations.items():
        for table, kind in decl["records"].items():
            places: list[tuple[tuple[str | int, ...], Mapping[str, Any]]] = [
                (("records", table, "columns"), kind["columns"])
            ]
            if kind.get("unwrap"):
                places.append((("records", table, "unwrap", "extras"), kind["unwrap"]["extras"]))
            places += [
                (("records", table, "children", child, "columns"), c["columns"])
                for child, c in kind.get("children", {}).items()
            ]
            for at, columns in places:
                for name, column in columns.items():
                    for n, entry in enumerate(column.get("joins", ())):
                        found = JOIN_TARGET.fullmatch(entry)
                        if found is None:
                            continue  # the declaration's own check says so
                        where = (*at, name, "joins", n)
                        target, col = found.groups()
                        if target not in tables:
                            near = difflib.get_close_matches(target, list(tables), n=3)
                            said = f" ({', '.join(near)}, ...)" if near else ""
                            yield (
                                path,
                                where,
                                f"{target!r} is not a table",
                                f"a table of the job's catalog{said}",
                            )
                        elif col not in tables[target]:
                            yield (
                                path,
                                where,
                                f"{col!r} is not a column of {target}",
                                ", ".join(tables[target]),
                            )


def declared_tables(declarations: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Table -> its columns, of plain declarations: each record table's columns (its wrapper's too) and each
    child table's (the parent's key as `parent_<key>`, the item's `position`, the item's columns)."""
    tables: dict[str, list[str]] = {}
    for decl in declarations.values():
        for table, kind in decl["records"].items():
            extras = kind["unwrap"]["extras"] if kind.get("unwrap") else {}
            tables.setdefault(table, [*kind["columns"], *extras])
            for child, c in kind.get("children", {}).items():
                parent = [f"{PARENT_PREFIX}{k}" for k in kind["key"]]
                tables.setdefault(child, [*parent, POSITION, *c["columns"]])
    return tables
