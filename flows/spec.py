"""The job spec: what a user writes in YAML, checked completely before a single credit is spent.

Every problem is reported at once, each as `<file>:<line>: <field>: <problem>; allowed: <...>`, because a spec
that fails one problem at a time costs a round trip per typo. Validation is in two passes: pydantic checks
the shape (unknown keys, types, ranges), then `_semantic_problems` checks what needs the endpoint catalog or
the other queries (parameters, fan-out values, parent queries, cycles, unique ids). Line numbers come from the
YAML node tree, matched to each problem's location by its longest known prefix.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from connectors import catalog
from connectors.catalog import Endpoint
from connectors.params import Params
from flows.job_options import Export, Runner, Schedule
from flows.spec_yaml import PRINTABLE, Loc, UnreadableSpec, load_yaml, read_spec_text

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
ENV_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
BLOCK_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
PATTERN_WORDS = {
    NAME_PATTERN: "lower-case letters, digits, '_' and '-', starting with a letter or digit",
    ID_PATTERN: "letters, digits, '_', '.' and '-', starting with a letter or digit",
    ENV_PATTERN: "an environment variable name (letters, digits and '_')",
    BLOCK_PATTERN: "a Prefect block name (lower-case letters, digits and '-')",
}
BASE_URL_ENV = "HARVEST_BASE_URL"
SANDBOX = "sandbox"
URL_ALLOWED = "an http(s) URL without credentials or query string (scheme://host[:port][/path]), or `sandbox`"
_SECRET_WORDS = re.compile(r"key|token|secret|pass|pwd|auth|sig|credential|session|bearer", re.IGNORECASE)
"""Query parameter names that carry a credential (api_key, access_token, apikey, signature, ...)."""
_DEFER = "harvest_defer_semantic_checks"
"""Validation context flag: `load_spec` runs the semantic checks itself, to place them on lines."""


class UsageError(Exception):
    """A mistake in how harvest was called or configured: exit code 2, and nothing was spent."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    field: str
    problem: str
    allowed: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        text = f"{where}: {self.field}: {self.problem}" if self.field else f"{where}: {self.problem}"
        return f"{text}; allowed: {self.allowed}" if self.allowed else text


class SpecError(UsageError):
    """An invalid job spec, with every problem found (one per line of the message)."""

    def __init__(self, problems: list[Problem]):
        self.problems = tuple(sorted(problems, key=lambda p: p.line or 0))
        super().__init__("\n".join(str(p) for p in self.problems))


# ------------------------------------------------------------------------------------------------- models
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Service(_Model):
    """Where requests go and where the API key comes from (never the key itself: specs get committed)."""

    base_url: str | None = Field(
        None, description="Service URL, or `sandbox`. Absent: HARVEST_BASE_URL or --base-url."
    )
    api_key_env: str = Field(
        "HARVEST_API_KEY", pattern=ENV_PATTERN, description="Environment variable holding the key."
    )
    api_key_secret: str | None = Field(
        None, pattern=BLOCK_PATTERN, description="Prefect Secret block holding the key (wins over the env)."
    )
    timeout_seconds: float = Field(
        60.0, gt=0, le=600, description="Read timeout of one request (the official client's is 60 s)."
    )
    attempts: int = Field(
        5,
        strict=True,
        ge=1,
        le=20,
        description="Attempts per page on 429, 5xx, timeouts and dropped connections.",
    )

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else check_base_url(value)


class Budget(_Model):
    credits: int = Field(strict=True, ge=0, description="Hard cap of credits for one run.")
    min_balance: int | None = Field(
        None, strict=True, ge=0, description="Stop when the account's credits_remaining falls below this."
    )
    policy: Literal["breadth_first", "greedy"] = Field(
        "breadth_first",
        description="breadth_first: a short budget gives every query pages in turn; greedy: in spec order.",
    )


class FromQuery(_Model):
    """One dependent query per value of a parent query's record field."""

    from_: str = Field(alias="from", description="id of the parent query.")
    field: str = Field(description="Column of one of the parent endpoint's record tables.")
    kind: str | None = Field(None, description="Record table of the parent, when the field is ambiguous.")


def _for_each_tag(value: Any) -> str | None:
    if isinstance(value, dict | FromQuery):
        return "ref"
    if isinstance(value, list | tuple):
        return "values"
    return None


ForEach = Annotated[
    Annotated[list[Any], Field(min_length=1), Tag("values")] | Annotated[FromQuery, Tag("ref")],
    Discriminator(
        _for_each_tag,
        custom_error_type="for_each_value",
        custom_error_message="expected a list of values or {from: <query id>, field: <column>}",
    ),
]


class Query(_Model):
    id: str | None = Field(
        None, pattern=ID_PATTERN, description="Unique id; derived from endpoint and params when absent."
    )
    endpoint: str = Field(
        description="A documented path (`harvest endpoints`).",
        json_schema_extra={"enum": [e.path for e in catalog.ENDPOINTS]},
    )
    params: dict[str, Any] = Field(default_factory=dict, description="Query parameters of the endpoint.")
    for_each: dict[str, ForEach] = Field(
        default_factory=dict, description="Fan out: one query per value (lists) or per parent record (from)."
    )
    max_pages: int | None = Field(
        None, strict=True, ge=1, description="Default: all pages, within the budget."
    )
    max_credits: int | None = Field(None, strict=True, ge=1, description="Cap of credits for this query.")
    incremental: bool = Field(
        False,
        strict=True,
        description="Stop paging after the first page whose records were all landed before (newest-first "
        "listings only; `harvest run --full` pages fully once).",
    )

    @property
    def query_id(self) -> str:
        """The given id, or one derived from what the query asks, so that re-runs find the same id again."""
        return self.id or derive_id(self)

    @property
    def static(self) -> dict[str, list[Any]]:
        return {k: v for k, v in self.for_each.items() if isinstance(v, list)}

    @property
    def dependent(self) -> dict[str, FromQuery]:
        return {k: v for k, v in self.for_each.items() if isinstance(v, FromQuery)}


class JobSpec(_Model):
    """One collection job: which queries to run, against which service, under which credit budget."""

    name: str = Field(pattern=NAME_PATTERN, max_length=64, description="Job name; names the output dir.")
    service: Service = Field(default_factory=Service)  # type: ignore[arg-type]
    budget: Budget
    concurrency: int = Field(4, strict=True, ge=1, le=64, description="HTTP requests in flight at once.")
    output: Path = Field(
        default_factory=lambda data: Path("data", str(data.get("name", "job"))),
        description="Holds harvest.duckdb and parquet/; relative to the working dir. Default: data/<name>.",
    )
    costs: dict[str, Annotated[int, Field(strict=True, ge=0)]] = Field(
        default_factory=dict,
        description="Credits per request by endpoint path, overriding the catalog; at least the catalog's price "
        "unless allow_lower_costs.",
    )
    allow_lower_costs: bool = Field(
        False,
        strict=True,
        description="Accept `costs` below the catalog's price (a negotiated contract). The budget then holds "
        "only as long as the service charges no more than those prices.",
    )
    durability: Literal["flush", "fsync"] = Field(
        "flush", description="flush: a page survives kill -9; fsync: it also survives power loss (slower)."
    )
    schedule: Schedule | None = Field(None, description="When `harvest serve` runs the job.")
    runner: Runner = Field(default_factory=Runner, description="Where the connector tasks run.")  # type: ignore[arg-type]
    export: Export | None = Field(
        None, description="Export the landed Parquet after every run (harvest export)."
    )
    queries: list[Query] = Field(min_length=1)

    @field_validator("output", mode="before")
    @classmethod
    def _output(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("the output directory must not be empty")
        return value

    @model_validator(mode="after")
    def _semantics(self, info: ValidationInfo) -> JobSpec:
        if not (info.context or {}).get(_DEFER):
            problems = _semantic_problems(self)
            if problems:
                raise ValueError("; ".join(f"{_dotted(loc)}: {text}" for loc, text, _ in problems))
        return self

    def endpoints(self) -> dict[str, Endpoint]:
        """The catalog with this spec's cost overrides."""
        return catalog.endpoints(self.costs)

    def spec_hash(self) -> str:
        """sha256 of the validated spec as canonical JSON (defaults included): tells edited specs apart."""
        return _digest(self.model_dump(mode="json", by_alias=True))


_MODELS: dict[str, type[_Model]] = {"service": Service, "budget": Budget}
_ALLOWED_OVERRIDES: dict[tuple[type[BaseModel], str], str] = {
    (Service, "base_url"): URL_ALLOWED,
    (Query, "for_each"): "{<parameter>: [values...]} or {<parameter>: {from: <query id>, field: <column>}}",
    (Query, "endpoint"): "a documented path; `harvest endpoints` lists them",
    (FromQuery, "from"): "the id of another query of this spec",
    (FromQuery, "field"): "a column of the parent's record tables (`harvest endpoints` lists them)",
    (JobSpec, "costs"): "{<endpoint path>: <credits per request, an integer, at least the catalog's price>}",
    (JobSpec, "queries"): "a non-empty list of queries with keys: " + ", ".join(Query.model_fields),
}


def check_base_url(value: str) -> str:
    """An http(s) URL with a host, or the word `sandbox` (the embedded sandbox must be asked for by name).

    A key written into the URL (`http://KEY@host`, `?api_key=...`) would be stored wherever the URL is: the
    manifest, the `runs` table, Prefect. So credentials are refused, and the message never repeats the URL.
    A query string is refused too: the client appends paths to the base URL, which a query string would break.
    """
    value = value.strip()
    if value == SANDBOX:
        return value
    key_hint = (
        "the key belongs in the environment variable named by service.api_key_env (or a Prefect Secret)"
    )
    authority = re.split(r"[/?#]", value.partition("://")[2] if "://" in value else value, maxsplit=1)[0]
    if "@" in authority:
        raise ValueError(
            f"the URL carries a credential before the host (user@ or user:password@, not shown); {key_hint}"
        )
    query = value.partition("?")[2].partition("#")[0]
    secret = [
        name for name, _, _ in (p.partition("=") for p in query.split("&")) if _SECRET_WORDS.search(name)
    ]
    if secret:
        raise ValueError(
            f"the URL carries a credential in its query string ({', '.join(secret)}, not shown); {key_hint}"
        )
    if "?" in value or "#" in value:
        shown = value.partition("?")[0].partition("#")[0]
        raise ValueError(
            f"{shown + '?...'!r} has a query string or fragment; harvest sends its own parameters"
        )
    if not re.match(r"^https?://[^/\s:]+(:\d+)?(/\S*)?$", value):
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value.rstrip("/")


def derive_id(query: Query) -> str:
    """`<last two path segments>-<8 hex of the query's hash>`: readable, and the same on every run.

    The hash covers the endpoint, params and for_each but not max_pages or max_credits, so raising a limit
    keeps the id (and with it the incremental state keyed on it).
    """
    segments = [s.strip("{}") for s in query.endpoint.strip("/").split("/")[-2:]]
    content = {"endpoint": query.endpoint, "params": query.params, "for_each": _jsonable(query.for_each)}
    return "_".join(segments) + "-" + _digest(content)[:8]


def spec_hash(spec: JobSpec) -> str:
    return spec.spec_hash()


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _digest(value: Any) -> str:
    canonical = _jsonable(value)
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def render_value(value: Any) -> str:
    """A parameter value as it appears in a query id: strings as they are, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)


def resolve_base_url(spec: JobSpec, cli_value: str | None, env: Mapping[str, str] | None = None) -> str:
    """The service URL: `--base-url`, then the spec, then HARVEST_BASE_URL. Never the sandbox by default.

    Falling back to the sandbox silently would write synthetic rows into tables meant for real data.
    """
    env = os.environ if env is None else env
    for source, value in (
        ("--base-url", cli_value),
        ("service.base_url", spec.service.base_url),
        (BASE_URL_ENV, env.get(BASE_URL_ENV)),
    ):
        if value and value.strip():
            try:
                return check_base_url(value)
            except ValueError as exc:
                raise UsageError(f"{source}: {exc}; allowed: {URL_ALLOWED}") from None
    raise UsageError(
        "no service URL: set `service.base_url` in the spec, export HARVEST_BASE_URL, or pass --base-url. "
        "The embedded sandbox is used only when asked for by name (`sandbox`), so that synthetic rows never "
        "mix into real tables."
    )


# ------------------------------------------------------------------------------------- describing fields
@dataclass(frozen=True)
class ParamInfo:
    """One parameter of an endpoint, as `harvest endpoints` and error messages describe it."""

    name: str
    type: str
    required: bool
    allowed: tuple[str, ...] = ()
    constraint: str | None = None
    in_path: bool = False

    def describe(self) -> str:
        if self.allowed:
            return "one of: " + ", ".join(self.allowed)
        words = {"string": "text", "integer": "an integer", "boolean": "true or false"}
        text = words.get(self.type, f"a {self.type}")
        return f"{text}: {self.constraint}" if self.constraint else text


def _type_info(annotation: Any) -> tuple[str, tuple[str, ...]]:
    """(type name, allowed literal values) of an annotation, with None dropped from unions."""
    origin = get_origin(annotation)
    if origin in (Union, UnionType):
        members = [a for a in get_args(annotation) if a is not NoneType]
        if len(members) == 1:
            return _type_info(members[0])
        return " or ".join(_type_info(m)[0] for m in members), ()
    if origin is Literal:
        return "string", tuple(str(v) for v in get_args(annotation))
    if origin is list:
        inner = get_args(annotation)
        return "list of " + (_type_info(inner[0])[0] if inner else "values"), ()
    if origin is dict:
        return "mapping", ()
    names = {str: "string", int: "integer", bool: "boolean", float: "number", Path: "path"}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping with keys " + ", ".join(_keys(annotation)), ()
    return names.get(annotation, getattr(annotation, "__name__", str(annotation))), ()


def _constraint(info: FieldInfo) -> str | None:
    bounds: dict[str, Any] = {}
    for item in info.metadata:
        for attr in ("ge", "le", "min_length", "max_length", "pattern"):
            value = getattr(item, attr, None)
            if value is not None:
                bounds[attr] = value
    parts = []
    if "ge" in bounds and "le" in bounds:
        parts.append(f"from {bounds['ge']} to {bounds['le']}")
    elif "ge" in bounds:
        parts.append(f">= {bounds['ge']}")
    elif "le" in bounds:
        parts.append(f"<= {bounds['le']}")
    if "min_length" in bounds and "max_length" in bounds:
        parts.append(f"{bounds['min_length']} to {bounds['max_length']} long")
    elif "min_length" in bounds:
        parts.append(f"at least {bounds['min_length']} long")
    elif "max_length" in bounds:
        parts.append(f"at most {bounds['max_length']} long")
    if "pattern" in bounds:
        parts.append(PATTERN_WORDS.get(bounds["pattern"], f"matching {bounds['pattern']}"))
    return ", ".join(parts) or None


def field_info(name: str, info: FieldInfo, path_params: tuple[str, ...] = ()) -> ParamInfo:
    type_name, allowed = _type_info(info.annotation)
    return ParamInfo(name, type_name, info.is_required(), allowed, _constraint(info), name in path_params)


def describe_params(params: type[Params]) -> list[ParamInfo]:
    return [field_info(name, info, params.path_params) for name, info in params.model_fields.items()]


def _keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _field(model: type[BaseModel], key: str) -> tuple[str, FieldInfo] | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return name, info
    return None


def _allowed(model: type[BaseModel], key: str) -> str:
    found = _field(model, key)
    if found is None:
        return ", ".join(_keys(model))
    name, info = found
    if (model, name) in _ALLOWED_OVERRIDES:
        return _ALLOWED_OVERRIDES[(model, name)]
    return field_info(name, info).describe()


def _owner(loc: Loc) -> tuple[type[BaseModel], str] | None:
    """The model and key a (normalised) error location names, for the `allowed` part of a message."""
    match loc:
        case (str(key),):
            return JobSpec, key
        case ("service" | "budget" as group, str(key)):
            return _MODELS[group], key
        case ("costs", *_):
            return JobSpec, "costs"
        case ("queries", int()):
            return JobSpec, "queries"
        case ("queries", int(), "for_each", _, str(key), *_):
            return FromQuery, key
        case ("queries", int(), str(key), *_):
            return Query, key
    return None


# ----------------------------------------------------------------------------------------- explaining errors
def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.match(r"^[A-Za-z_][\w-]*$", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


def _normalise(loc: Loc) -> Loc:
    """Drop the union tag pydantic puts after `for_each.<param>`: it names no key of the YAML."""
    if len(loc) > 4 and loc[0] == "queries" and loc[2] == "for_each" and loc[4] in ("values", "ref"):
        return loc[:4] + loc[5:]
    return loc


def _explain(error: Mapping[str, Any], owner: tuple[type[BaseModel], str] | None) -> tuple[str, str | None]:
    """(problem, allowed) of one pydantic error."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    model, key = owner if owner else (None, None)
    allowed = _allowed(model, key) if model and key else None
    if kind == "extra_forbidden":
        return f"unknown key {key!r}", allowed
    if kind == "missing":
        return "required, but missing", allowed
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


def _params_problem(error: Mapping[str, Any], params: type[Params]) -> tuple[str, str | None]:
    """(problem, allowed) of an error from an endpoint's parameter model."""
    loc = error["loc"]
    if not loc:
        return str((error.get("ctx") or {}).get("error", error["msg"])), ", ".join(params.one_of) or None
    name = str(loc[0])
    info = params.model_fields.get(name)
    if error["type"] == "extra_forbidden":
        return f"{name!r} is not a parameter of this endpoint", ", ".join(params.model_fields)
    allowed = field_info(name, info, params.path_params).describe() if info else None
    if error["type"] == "missing":
        return f"required parameter {name!r} is missing (set it in params, or fan out over it)", allowed
    return _explain(error, None)[0], allowed


# ------------------------------------------------------------------------------------------ semantic checks
Found = tuple[Loc, str, str | None]
"""A problem before it has a file and line: (location, problem, allowed)."""

_PLACEHOLDER = "placeholder:value"
"""Stands for a dependent parameter's future value, so that the other parameters can be checked now."""


def _close(word: str, choices: list[str]) -> list[str]:
    return difflib.get_close_matches(word, choices, n=3, cutoff=0.5)


def _paths_hint(path: str) -> str:
    close = _close(path, list(catalog.DEFAULT_COSTS))
    listed = "`harvest endpoints` lists all of them"
    if not close:
        return f"a documented path ({listed})"
    return f"a documented path; the closest: {', '.join(close)} ({listed})"


def _query_problems(i: int, query: Query) -> Iterator[Found]:
    """What one query alone can get wrong: endpoint, parameters, fan-out keys, each fanned-out combination."""
    at: Loc = ("queries", i)
    paths = list(catalog.DEFAULT_COSTS)
    if query.endpoint not in paths:
        yield (*at, "endpoint"), f"unknown endpoint {query.endpoint!r}", _paths_hint(query.endpoint)
        return
    params = catalog.get(query.endpoint).params
    names = list(params.model_fields)
    bad = False
    for key, value in query.for_each.items():
        if key not in names:
            bad = True
            yield (*at, "for_each", key), f"{key!r} is not a parameter of {query.endpoint}", ", ".join(names)
        elif key in query.params:
            bad = True
            yield (*at, "for_each", key), f"{key!r} is set both in params and in for_each", "one of the two"
        if isinstance(value, list):
            seen: set[str] = set()
            for n, item in enumerate(value):
                if render_value(item) in seen:
                    yield (*at, "for_each", key, n), f"{item!r} repeats an earlier value", "distinct values"
                seen.add(render_value(item))
    dependent = query.dependent
    if dependent and len(query.for_each) > 1:
        bad = True
        yield (
            (*at, "for_each"),
            "a dependent query fans out over one parent field only",
            ("one `from` entry; put fixed values in params"),
        )
    if bad:
        return
    yield from _combination_problems(at, query, params)
    if query.incremental:
        yield from _incremental_problems(at, query)


def newest_first_listings() -> str:
    """The endpoints (and parameter values) where `incremental: true` is allowed, for error messages."""
    return ", ".join(
        f"{e.path}{e.newest_first.describe()}" for e in catalog.ENDPOINTS if e.newest_first is not None
    )


def _incremental_problems(at: Loc, query: Query) -> Iterator[Found]:
    order = catalog.get(query.endpoint).newest_first
    combos = [query.params]
    if order is not None and order.param in query.static:
        combos = [{**query.params, order.param: v} for v in query.static[order.param]]
    if order is None or not all(order.holds(c) for c in combos):
        yield (
            (*at, "incremental"),
            f"{query.endpoint} with these parameters does not list newest first, so stopping at known "
            "items could miss new ones",
            newest_first_listings(),
        )


def _combination_problems(at: Loc, query: Query, params: type[Params]) -> Iterator[Found]:
    static, dependent = query.static, query.dependent
    keys = sorted(static)
    reported: set[tuple[Loc, str]] = set()
    for combo in itertools.product(*(list(enumerate(static[k])) for k in keys)):
        values = {k: v for k, (_, v) in zip(keys, combo, strict=True)}
        index = {k: n for k, (n, _) in zip(keys, combo, strict=True)}
        try:
            params.model_validate({**query.params, **values, **dict.fromkeys(dependent, _PLACEHOLDER)})
        except ValidationError as exc:
            for error in exc.errors():
                key = error["loc"][0] if error["loc"] else None
                if key in dependent:
                    continue
                if key in static:
                    loc = (*at, "for_each", key, index[str(key)])
                elif key is None:
                    loc = (*at, "params")
                else:
                    loc = (*at, "params", *error["loc"])
                problem, allowed = _params_problem(error, params)
                if (loc, problem) not in reported:
                    reported.add((loc, problem))
                    yield loc, problem, allowed


def _cross_problems(queries: list[Query]) -> Iterator[Found]:
    """What needs all queries: unique ids, parents that exist, fields the parent has, no cycles."""
    ids: dict[str, int] = {}
    for i, query in enumerate(queries):
        qid = query.query_id
        if qid in ids:
            where = ("queries", i, "id") if query.id else ("queries", i)
            derived = "" if query.id else " (derived from endpoint and params)"
            yield where, f"duplicate id {qid!r}{derived}, also used by queries[{ids[qid]}]", "a unique `id`"
        else:
            ids[qid] = i
    parents: dict[str, str] = {}
    for i, query in enumerate(queries):
        for key, ref in query.dependent.items():
            at: Loc = ("queries", i, "for_each", key)
            if ref.from_ not in ids:
                close = _close(ref.from_, list(ids))
                yield (*at, "from"), f"no query has id {ref.from_!r}", ", ".join(close or ids)
                continue
            parents[query.query_id] = ref.from_
            yield from _field_problems(at, ref, queries[ids[ref.from_]])
    yield from _cycle_problems(queries, parents)


def _field_problems(at: Loc, ref: FromQuery, parent: Query) -> Iterator[Found]:
    if parent.endpoint not in catalog.DEFAULT_COSTS:
        return  # reported on the parent
    kinds = catalog.get(parent.endpoint).kinds
    tables = [k.table for k in kinds]
    if ref.kind is not None and ref.kind not in tables:
        yield (*at, "kind"), f"{parent.endpoint} has no record table {ref.kind!r}", ", ".join(tables)
        return
    chosen = [k for k in kinds if ref.kind in (None, k.table)]
    having = [k for k in chosen if any(f.name == ref.field for f in k.fields)]
    columns = sorted({f.name for k in chosen for f in k.fields})
    if not having:
        yield (
            (*at, "field"),
            f"{ref.field!r} is not a column of {', '.join(k.table for k in chosen)}",
            (", ".join(columns)),
        )
    elif len(having) > 1:
        yield (
            (*at, "field"),
            f"{ref.field!r} is a column of several tables; say which with `kind`",
            (", ".join(k.table for k in having)),
        )
    else:
        column = next(f for f in having[0].fields if f.name == ref.field)
        if str(column.type) not in ("string", "int64"):
            scalar = [f.name for f in having[0].fields if str(f.type) in ("string", "int64")]
            yield (
                (*at, "field"),
                f"{ref.field!r} is a {column.type} column, not one value a row",
                (", ".join(scalar)),
            )


def _cycle_problems(queries: list[Query], parents: dict[str, str]) -> Iterator[Found]:
    index = {q.query_id: i for i, q in enumerate(queries)}
    reported: set[frozenset[str]] = set()
    for start in parents:
        path, node = [start], parents.get(start)
        while node is not None and node not in path:
            path.append(node)
            node = parents.get(node)
        if node is None:
            continue
        cycle = path[path.index(node) :]
        if frozenset(cycle) in reported:
            continue
        reported.add(frozenset(cycle))
        first = min(cycle, key=lambda q: index[q])
        ring = cycle[cycle.index(first) :] + cycle[: cycle.index(first)] + [first]
        key = next(iter(queries[index[first]].dependent))
        yield (
            ("queries", index[first], "for_each", key, "from"),
            ("dependent queries form a cycle: " + " -> ".join(ring)),
            "a parent query that does not depend on this one",
        )


def _cost_problems(costs: Mapping[str, int], allow_lower: bool) -> Iterator[Found]:
    """Unknown endpoints, and prices below the catalog's: the ledger reserves the price before each request,
    so a price below what the service charges lets a run spend past its budget (`costs: {path: 0}` spent 6
    credits of a budget of 5)."""
    for path, cost in costs.items():
        if path not in catalog.DEFAULT_COSTS:
            yield ("costs", path), f"unknown endpoint {path!r}", _paths_hint(path)
        elif cost < catalog.DEFAULT_COSTS[path] and not allow_lower:
            price = catalog.DEFAULT_COSTS[path]
            yield (
                ("costs", path),
                f"{cost} is below the catalog's price of {price} credit{'s' if price > 1 else ''} a request: the "
                "budget would reserve too little and a run could spend past it",
                f"an integer >= {price}; or `allow_lower_costs: true` if a contract guarantees the lower price",
            )


MAX_FANOUT = 10_000
"""Queries after fan-out (without dependents) in one spec. Every combination of fanned-out values is checked
(and later planned) one by one, ~70 microseconds each: 10,000 take a second. Two aliased lists of 1,000 values
would otherwise be a million checks."""


def fanout_size(query: Query) -> int:
    return math.prod(len(values) for values in query.static.values())


def _fanout_problem(queries: Sequence[tuple[int, Query]]) -> Found | None:
    total = 0
    for i, query in queries:
        total += fanout_size(query)
        if total > MAX_FANOUT:
            return (
                ("queries", i, "for_each"),
                f"the spec fans out to more than {MAX_FANOUT:,} queries (this one alone to {fanout_size(query):,})",
                f"at most {MAX_FANOUT:,} queries after fan-out in one spec; fan out over a parent query's "
                "records (`from:`), or split the job into several specs",
            )
    return None


def _semantic_problems(spec: JobSpec) -> list[Found]:
    found = list(_cost_problems(spec.costs, spec.allow_lower_costs))
    too_many = _fanout_problem(list(enumerate(spec.queries)))
    if too_many:  # the other checks go through every combination
        return [*found, too_many]
    for i, query in enumerate(spec.queries):
        found.extend(_query_problems(i, query))
    found.extend(_cross_problems(spec.queries))
    return found


# ---------------------------------------------------------------------------------------------- loading
def parse_spec(text: str, file: str = "<spec>") -> JobSpec:
    """Validate the YAML text of a spec; raises SpecError naming file, line, field and what is allowed."""
    try:
        data, lines = load_yaml(text)
    except UnreadableSpec as exc:
        raise SpecError([Problem(file, f.line, "", f.problem, f.allowed) for f in exc.flaws]) from None
    if not isinstance(data, dict) or lines is None:
        shape = "a mapping with keys: " + ", ".join(_keys(JobSpec))
        raise SpecError([Problem(file, 1, "", "the spec must be a YAML mapping", shape)])
    problems = [
        Problem(file, line, _dotted(loc), f"duplicate key {loc[-1]!r} (YAML keeps the last)", "each key once")
        for loc, line in lines.duplicates
    ]
    problems += [
        Problem(file, line, _dotted(loc), f"control character {char} in the value", PRINTABLE)
        for loc, line, char in lines.controls
    ]
    found: list[Found] = []
    spec: JobSpec | None = None
    try:
        spec = JobSpec.model_validate(data, context={_DEFER: True})
    except ValidationError as exc:
        for error in exc.errors():
            if error["type"] == "default_factory_not_called":
                continue  # a consequence of another error (the default output directory needs a valid name)
            loc = _normalise(tuple(error["loc"]))
            problem, allowed = _explain(error, _owner(loc))
            found.append((loc, problem, allowed))
        found.extend(_partial_problems(data))
    if spec is not None:
        found.extend(_semantic_problems(spec))
    problems += [Problem(file, lines.line(loc), _dotted(loc), text, ok) for loc, text, ok in found]
    if problems:
        raise SpecError(problems)
    assert spec is not None
    return spec


def _partial_problems(data: dict[str, Any]) -> list[Found]:
    """The checks still possible when the spec as a whole is invalid: per query for each query of a valid
    shape, and across queries when all are valid (an invalid query would look like a missing parent).
    """
    raw = data.get("queries")
    found: list[Found] = []
    if not isinstance(raw, list):
        return found
    parsed: list[tuple[int, Query]] = []
    for i, item in enumerate(raw):
        try:
            parsed.append((i, Query.model_validate(item)))
        except ValidationError:
            continue
    too_many = _fanout_problem(parsed)
    if too_many:
        return [too_many]
    for i, query in parsed:
        found.extend(_query_problems(i, query))
    if parsed and len(parsed) == len(raw):
        found.extend(_cross_problems([q for _, q in parsed]))
    return found


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate a spec file; every problem raises SpecError, and nothing is spent."""
    file = str(path)
    try:
        text = read_spec_text(Path(path))
    except FileNotFoundError:
        raise SpecError([Problem(file, None, "", "no such file", "the path of a YAML job spec")]) from None
    except UnreadableSpec as exc:
        raise SpecError([Problem(file, f.line, "", f.problem, f.allowed) for f in exc.flaws]) from None
    except (OSError, UnicodeDecodeError) as exc:
        problem = Problem(file, None, "", f"cannot read the spec: {exc}", "a UTF-8 YAML file")
        raise SpecError([problem]) from None
    return parse_spec(text, file)
