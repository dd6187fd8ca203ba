"""A pydantic error in a user's words: which field (dotted, as written in the YAML), what is wrong, what is
allowed."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from harvest.connectors.catalog.declarations import (
    COLUMN_TYPES,
    CatalogFile,
    ChildDecl,
    ColumnDecl,
    EndpointDecl,
    KindDecl,
    NewestFirstDecl,
    ParamDecl,
    UnwrapDecl,
)
from harvest.connectors.catalog.declared_requests import (
    MAX_PRICE,
    ExcludesDecl,
    FollowDecl,
    PagingDecl,
    PriceDecl,
    PriceRuleDecl,
    RequiresDecl,
)
from harvest.connectors.catalog.params import Params
from harvest.flows.spec.describe import field_info, keys
from harvest.flows.spec.job_options import CRON_ALLOWED, Export, RateLimit, Runner, Schedule
from harvest.flows.spec.model import Budget, FromQuery, JobSpec, Query, Service, ShapeOverride
from harvest.flows.spec.service_url import URL_ALLOWED
from harvest.flows.spec.yaml_reader import Loc

_GROUPS: dict[str, type[BaseModel]] = {
    "service": Service, "budget": Budget, "schedule": Schedule, "runner": Runner, "export": Export,
    "rate_limit": RateLimit,
}  # fmt: skip
_COLUMNS_ALLOWED = "{<column>: <type>, or {type, path, description}}; types: " + ", ".join(COLUMN_TYPES)
_ALLOWED_OVERRIDES: dict[tuple[type[BaseModel], str], str] = {
    (Service, "base_url"): URL_ALLOWED,
    (Schedule, "cron"): CRON_ALLOWED,
    (Schedule, "timezone"): "an IANA time zone name, e.g. UTC, Europe/Berlin, America/New_York",
    (Query, "for_each"): "{<parameter>: [values...]} or {<parameter>: {from: <query id>, field: <column>}}",
    (Query, "endpoint"): "a documented path; `harvest endpoints` lists them",
    (FromQuery, "from"): "the id of another query of this spec",
    (FromQuery, "field"): "a column of the parent's record tables (`harvest endpoints` lists them)",
    (
        JobSpec,
        "costs",
    ): "{<endpoint path>: <credits per request, an integer, at least the catalog's price, at most "
    f"{MAX_PRICE}>}}",
    (
        JobSpec,
        "shapes",
    ): "{<endpoint path>: {<record table>: {records: <record path or list>, fields: {<column>: "
    "<record path or list>}}}}",
    (ShapeOverride, "records"): "a record path, or a list of them (e.g. `[1].data.user.clips.edges[].node`)",
    (ShapeOverride, "fields"): "{<column>: <record path, or a list of them>}",
    (JobSpec, "queries"): "a non-empty list of queries with keys: " + ", ".join(Query.model_fields),
    (JobSpec, "endpoint_declarations"): "{<endpoint path>: <declaration>} (docs/declaring-endpoints.md)",
    (JobSpec, "catalogs"): "a list of catalog files, relative to the spec's directory",
    (CatalogFile, "endpoints"): "{<endpoint path>: <declaration>} (docs/declaring-endpoints.md)",
    (EndpointDecl, "records"): "{<table>: {at: <record path>, key: <column>, columns: {<column>: <type>}}}",
    (EndpointDecl, "one_of"): "groups of parameter names, e.g. [[url, id]]",
    (
        EndpointDecl,
        "price",
    ): "credits per request (a number), or {credits: N, least: N, when: [{param, value, credits, least}]}",
    (EndpointDecl, "exactly_one_of"): "groups of parameter names, e.g. [[url, product_id]]",
    (EndpointDecl, "method"): "GET, POST, or [GET, POST] (the first is the default)",
    (EndpointDecl, "newest_first"): "true, false, or {param: <parameter>, values: [...]}",
    (EndpointDecl, "records_per_page"): "a number >= 1, or the parameter that sets it",
    (KindDecl, "columns"): _COLUMNS_ALLOWED,
    (KindDecl, "at"): 'a record path, or a list of them; "" for the answer itself',
    (KindDecl, "key"): "a column name, or a list of them",
    (ChildDecl, "at"): "a record path inside the record, or a list of them",
    (ChildDecl, "columns"): _COLUMNS_ALLOWED,
}


_DECLARATION_TREE: dict[tuple[type[BaseModel], str], tuple[bool, type[BaseModel]]] = {
    (EndpointDecl, "params"): (True, ParamDecl), (EndpointDecl, "paging"): (False, PagingDecl),
    (EndpointDecl, "price"): (False, PriceDecl), (PriceDecl, "when"): (True, PriceRuleDecl),
    (EndpointDecl, "newest_first"): (False, NewestFirstDecl), (EndpointDecl, "records"): (True, KindDecl),
    (KindDecl, "columns"): (True, ColumnDecl), (KindDecl, "unwrap"): (False, UnwrapDecl),
    (UnwrapDecl, "extras"): (True, ColumnDecl), (KindDecl, "children"): (True, ChildDecl),
    (ChildDecl, "columns"): (True, ColumnDecl),
    (PagingDecl, "follow"): (False, FollowDecl), (EndpointDecl, "requires"): (True, RequiresDecl),
    (EndpointDecl, "excludes"): (True, ExcludesDecl),
}  # fmt: skip
"""A declaration's models: (model, key) -> (whether a name or an index comes first, the model below it)."""


def declaration_owner(loc: Loc) -> tuple[tuple[type[BaseModel], str] | None, Loc]:
    """The model and key a location inside one endpoint's declaration names, and the location without the
    union tags pydantic adds (`newest_first.function-before[...]`), which name no key of the YAML."""
    model: type[BaseModel] = EndpointDecl
    found: tuple[type[BaseModel], str] | None = None
    clean: list[str | int] = []
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        named = _field(model, part) if isinstance(part, str) else None
        if named is None:  # a key the model does not have (an unknown key: the model says what is allowed)
            if isinstance(part, str):
                found = (model, part)
                clean.append(part)
            break
        name = named[0]
        found = (model, name)
        clean.append(part)
        below = _DECLARATION_TREE.get((model, name))
        if below is None:  # a leaf: what follows is a list index, or a union's tag
            clean += [p for p in parts[:1] if isinstance(p, int)]
            break
        keyed, model = below
        if keyed and parts:
            clean.append(parts.pop(0))
    return found, tuple(clean)


def dotted(loc: Loc) -> str:
    """A location as a user would point at it: `queries[0].params.limit`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.match(r"^[A-Za-z_][\w-]*$", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


def normalise(loc: Loc) -> Loc:
    """Drop the union tags pydantic puts after `for_each.<param>` and inside a declaration: they name no key
    of the YAML."""
    if len(loc) > 4 and loc[0] == "queries" and loc[2] == "for_each" and loc[4] in ("values", "ref"):
        return loc[:4] + loc[5:]
    if len(loc) > 2 and loc[0] == "endpoints":
        return loc[:2] + declaration_owner(loc[2:])[1]
    return loc


def _field(model: type[BaseModel], key: str) -> tuple[str, FieldInfo] | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return name, info
    return None


def _allowed(model: type[BaseModel], key: str) -> str:
    found = _field(model, key)
    if found is None:
        return ", ".join(keys(model))
    name, info = found
    if (model, name) in _ALLOWED_OVERRIDES:
        return _ALLOWED_OVERRIDES[(model, name)]
    return field_info(name, info).describe()


def owner(loc: Loc, root: type[BaseModel] = JobSpec) -> tuple[type[BaseModel], str] | None:
    """The model and key a (normalised) error location names, for the `allowed` part of a message; `root`:
    the model of the whole file (a job spec, or a catalog file)."""
    if len(loc) > 2 and loc[0] == "endpoints":
        return declaration_owner(loc[2:])[0]
    if root is CatalogFile:  # a key beside `endpoints` is the file's own (an unknown one: `endpoint:`)
        return (CatalogFile, loc[0]) if loc and isinstance(loc[0], str) else None
    match loc:
        case (str(key),):
            return JobSpec, key
        case ("service" | "budget" | "schedule" | "runner" | "export" | "rate_limit" as group, str(key)):
            return _GROUPS[group], key
        case ("costs", *_):
            return JobSpec, "costs"
        case ("endpoints", *_):
            return JobSpec, "endpoints"
        case ("catalogs", *_):
            return JobSpec, "catalogs"
        case ("shapes", str(), str(), str(key), *_):
            return ShapeOverride, key
        case ("shapes", *_):
            return JobSpec, "shapes"
        case ("queries", int()):
            return JobSpec, "queries"
        case ("queries", int(), "for_each", _, str(key), *_):
            return FromQuery, key
        case ("queries", int(), str(key), *_):
            return Query, key
    return None


_KEY_PLACES = {
    "api_key_env": "names an environment variable (letters, digits, _), not the key itself; the value is not shown",
    "api_key_secret": "names a Prefect Secret block (lower-case letters, digits, -), not the key itself; the value "
    "is not shown",
}
"""What a refused value of a field naming where the key lives says: never the value, which is most often the
key written there by mistake (printed, and kept in Prefect's database by a team's flow)."""

_EMPTY = {"model_type": "keys", "dict_type": "keys", "list_type": "items"}
"""What a YAML key with nothing under it (null) should have held, by the pydantic error it gets."""


def closest(word: str, choices: list[str]) -> list[str]:
    """The names a typo was probably meant to be, closest first: none when none is close (difflib's own cutoff,
    0.6: at 0.5 `min` would be offered `joins`, two letters in common)."""
    return difflib.get_close_matches(word, choices, n=3, cutoff=0.6)


def closest_hint(word: str, choices: list[str]) -> str:
    """` (the closest: ...)` after a name that is not one of `choices`, or nothing when none is close."""
    close = closest(word, choices)
    return f" (the closest: {', '.join(close)})" if close else ""


def explain(error: Mapping[str, Any], owner: tuple[type[BaseModel], str] | None) -> tuple[str, str | None]:
    """(problem, allowed) of one pydantic error."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    model, key = owner if owner else (None, None)
    allowed = _allowed(model, key) if model and key else None
    if kind == "extra_forbidden":
        names = list(model.model_fields) if model else []
        return f"unknown key {key!r}{closest_hint(str(key), names)}", allowed
    if kind == "missing":
        return "required, but missing", allowed
    if value is None and kind in _EMPTY:
        field = model.model_fields.get(key) if model and key else None
        optional = ", or leave it out" if field is not None and not field.is_required() else ""
        return f"empty: nothing is written under it (write its {_EMPTY[kind]} there{optional})", allowed
    if model is Service and key in _KEY_PLACES:
        return _KEY_PLACES[key], allowed
    if kind == "literal_error":
        return f"{value!r} is not allowed", ctx.get("expected", allowed)
    if kind == "value_error":
        return str(ctx.get("error", error["msg"])), allowed
    message = error["msg"][:1].lower() + error["msg"][1:]
    if kind == "for_each_value":
        return f"{message}, got {value!r}", allowed
    hint = ""
    if isinstance(value, bool) and kind in ("string_type", "string_pattern_mismatch"):
        hint = " (YAML reads unquoted yes/no/on/off/true/false as booleans: quote the value)"
    return f"{message}, got {value!r}{hint}", allowed


def params_problem(error: Mapping[str, Any], params: type[Params]) -> tuple[str, str | None]:
    """(problem, allowed) of an error from an endpoint's parameter model."""
    loc = error["loc"]
    if not loc:
        return str((error.get("ctx") or {}).get("error", error["msg"])), ", ".join(params.one_of) or None
    name = str(loc[0])
    info = params.model_fields.get(name)
    if error["type"] == "extra_forbidden":
        hint = closest_hint(name, list(params.model_fields))
        return f"{name!r} is not a parameter of this endpoint{hint}", ", ".join(params.model_fields)
    allowed = field_info(name, info, params.path_params).describe() if info else None
    if error["type"] == "missing":
        problem = f"required parameter {name!r} is missing (set it in params, or fan out over it)"
        return problem, f"{name} (required): {allowed}" if allowed else f"{name} (required)"
    return explain(error, None)[0], allowed
