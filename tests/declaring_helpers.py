"""Declared endpoints in tests: a built-in endpoint declared again under a path harvest does not know, served
by the sandbox at the built-in path (a test-only route alias in front of the sandbox's ASGI app: nothing of
the sandbox changes), so every guarantee test can run over a declared endpoint as it runs over a built-in one.

`/v1/declared/pins` is pin search declared in a job's spec: its table `declared_pins`, read from the same
answers through the declaration alone (the plain declaration of `endpoints.yaml`'s pin search, renamed). The
sandbox's kinds map onto it as onto `pinboard_pins` (`tests.crawl_helpers.sandbox_kind`: the path's platform
segment is `declared`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from harvest.connectors.catalog import job_catalog
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.records import RecordKind
from harvest.sandbox.config import SandboxConfig, configured
from harvest.sandbox.wire.serving import RunningSandbox
from tests.endpoints import FEED, PINS, PROFILE

ALIASES = {"/v1/declared/pins": PINS, "/v1/declared/videos": PROFILE, "/v1/declared/feed": FEED}
"""Declared path -> the built-in path the sandbox serves it at."""


def builtin_declaration(path: str) -> dict[str, Any]:
    """A built-in endpoint's plain declaration, as its catalog file writes it."""
    return job_catalog.builtin_declarations()[path]


def declared_copy(path: str) -> dict[str, Any]:
    """The declaration of `path` (a key of ALIASES): its built-in endpoint's, its tables `declared_<kind>`."""
    source = builtin_declaration(ALIASES[path])
    platform = ALIASES[path].split("/")[2].replace("-", "_") + "_"

    def renamed(table: str) -> str:
        return "declared_" + table.removeprefix(platform)

    records = {
        renamed(t): {
            **k,
            **({"children": {renamed(c): v for c, v in k["children"].items()}} if "children" in k else {}),
        }
        for t, k in source["records"].items()
    }
    return {**source, "summary": f"{ALIASES[path]}, declared by a job", "records": records}


@dataclass(frozen=True)
class Variant:
    """One endpoint as a test asks for it: the built-in one, or its declared copy."""

    name: str
    path: str
    tables: Mapping[str, str] = field(default_factory=dict)
    """The built-in table -> the table the variant lands it in."""
    declared: Mapping[str, Any] = field(default_factory=dict)
    """The spec's `endpoints:` (empty for a built-in endpoint)."""

    def table(self, builtin_table: str) -> str:
        return self.tables.get(builtin_table, builtin_table)

    def spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A job spec asking this variant: `endpoints:` declares it."""
        return {**spec, "endpoints": dict(self.declared)} if self.declared else spec

    def endpoint(self, costs: Mapping[str, int] | None = None) -> Endpoint:
        return job_catalog.for_job(self.declared).overridden(costs)[self.path]


def builtin(path: str) -> Variant:
    return Variant("built-in", path)


def declared(path: str) -> Variant:
    """The declared copy of ALIASES[path]."""
    source = ALIASES[path]
    copy = declared_copy(path)
    tables = dict(zip(builtin_declaration(source)["records"], copy["records"], strict=True))
    for builtin_kind, copied in zip(
        builtin_declaration(source)["records"].values(), copy["records"].values(), strict=True
    ):
        tables |= dict(zip(builtin_kind.get("children", {}), copied.get("children", {}), strict=True))
    return Variant("declared", path, tables, {path: copy})


def variants(builtin_path: str) -> list[Any]:
    """pytest params: the built-in endpoint and its declared copy."""
    path = next(p for p, source in ALIASES.items() if source == builtin_path)
    return [pytest.param(builtin(builtin_path), id="built-in"), pytest.param(declared(path), id="declared")]


def declared_kinds() -> dict[str, RecordKind]:
    """The record kinds of every declared copy, by table (for helpers that look a table's key up)."""
    copies = {path: declared_copy(path) for path in ALIASES}
    return {t: k for t, k in job_catalog.for_job(copies).kinds().items() if t.startswith("declared_")}


class _Aliased:
    """The sandbox's ASGI app behind a route alias: a request for a declared path is served at its built-in
    path (the sandbox's ledger records the built-in path)."""

    def __init__(self, app: Any, aliases: Mapping[str, str]) -> None:
        self.app, self.aliases = app, dict(aliases)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in self.aliases:
            served = self.aliases[scope["path"]]
            scope = {**scope, "path": served, "raw_path": served.encode()}
        await self.app(scope, receive, send)


def aliased_sandbox(config: SandboxConfig | None = None, **overrides: Any) -> RunningSandbox:
    """A sandbox serving the declared copies too, started (the caller stops it)."""
    sb = RunningSandbox(configured(config, **overrides), served=lambda app: _Aliased(app, ALIASES))
    return sb.start()


@contextmanager
def aliased(config: SandboxConfig | None = None, **overrides: Any) -> Iterator[RunningSandbox]:
    sb = aliased_sandbox(config, **overrides)
    try:
        yield sb
    finally:
        sb.stop()


# ---------------------------------------------------------------------------------------------- requests
VALUES: dict[str, Any] = {
    "url": "https://www.example.com/sample/1",
    "handle": "examplehandle",
    "query": "coffee",
    "hashtag": "coffee",
    "subreddit": "Fitness",
    "region": "US",
    "country": "US",
    "language": "en",
    "material_id": "video:sample",
}
"""A request value by parameter name, for tests that need any value a declaration allows."""


def request_of(path: str) -> dict[str, Any]:
    """The parameters a query of a built-in endpoint needs: each required one, and the first of each "one of"
    group (`one_of`, `exactly_one_of`), with a value its declaration allows."""
    decl = job_catalog.builtin_declarations()[path]
    params = decl["params"]
    wanted = [n for n, p in params.items() if p["required"]]
    for group in [*decl["one_of"], *decl.get("exactly_one_of", [])]:
        if not set(group) & set(wanted):
            wanted.append(group[0])
    return {name: _value(name, params[name]) for name in wanted}


def _value(name: str, param: Mapping[str, Any]) -> Any:
    if param["enum"]:
        return param["enum"][0]
    if name in VALUES:
        return VALUES[name]
    kind = param["type"]
    if kind == "integer":
        return max(1, int(param["min"] or 1))
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if kind == "list":
        return ["example"]
    return "123456789" if name.lower().endswith("id") else f"example-{name}"
