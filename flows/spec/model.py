"""What a user may write in a job spec: the pydantic models, with a description on every field.

The models check shape (unknown keys, types, ranges). What needs the endpoint catalog or the other queries is
checked in `flows.spec.checks`; `JobSpec` runs those checks too when it is built directly, so that no code
path holds an unchecked spec.
"""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from harvest.connectors.catalog.declarations import DeclaredAt, EndpointDecl, declared_places
from harvest.connectors.catalog.declared_requests import MAX_PRICE
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.job_catalog import Catalog, builtin, for_job
from harvest.connectors.catalog.shape_overrides import KindShape
from harvest.connectors.credits import MAX_CREDITS
from harvest.flows.spec.identity import derive_id, digest
from harvest.flows.spec.job_options import Export, RateLimit, Runner, Schedule
from harvest.flows.spec.service_url import check_base_url

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
ENV_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
BLOCK_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
RECORD_PATH_PATTERN = r"^(?:[^.\[\]|\s](?:[^.\[\]|]*[^.\[\]|\s])?(?:\[\d*\])*|(?:\[\d*\])+)(?:\.(?:[^.\[\]|\s](?:[^.\[\]|]*[^.\[\]|\s])?(?:\[\d*\])*|(?:\[\d*\])+))*$"
"""A record path (`connectors.catalog.record_paths`), for editors (JSON Schema); specs are checked by `path_problem`, whose
messages say what a path may be."""
_PATH_SCHEMA = {"type": "string", "pattern": RECORD_PATH_PATTERN}


def _listed(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


RecordPaths = Annotated[
    list[str],
    BeforeValidator(_listed),
    WithJsonSchema({"anyOf": [_PATH_SCHEMA, {"type": "array", "items": _PATH_SCHEMA}]}),
]
"""One record path, or several tried in order."""
PATTERN_WORDS = {
    NAME_PATTERN: "lower-case letters, digits, '_' and '-', starting with a letter or digit",
    ID_PATTERN: "letters, digits, '_', '.' and '-', starting with a letter or digit",
    ENV_PATTERN: "an environment variable name (letters, digits and '_')",
    BLOCK_PATTERN: "a Prefect block name (lower-case letters, digits and '-')",
}
DEFER_CHECKS = "harvest_defer_semantic_checks"
"""Validation context flag: `parse_spec` runs the semantic checks itself, to place them on lines."""
DECLARED = "harvest_declared_endpoints"
DECLARED_AT = "harvest_declared_places"
"""Validation context: path -> where the spec's files declare it (`connectors.catalog.declared_at`)."""
"""Validation context: the spec's declared endpoints as `parse_spec` read them (`flows.spec.declared`), with
their problems placed on their files' lines; without it the spec reads its catalog files itself."""
KEY_AT = "harvest_key_places"
"""Validation context: where the spec writes the key's place (`JobSpec.key_places`), from `parse_spec`."""


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
        description="Attempts per page on 5xx, timeouts and dropped connections.",
    )
    max_answer_mb: float = Field(
        32,
        gt=0,
        le=4096,
        description="The largest answer read, in MB: a larger one is refused (counted as spent). Reading an answer "
        "takes about seven times its size in memory.",
    )

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else check_base_url(value)


class Budget(_Model):
    credits: int = Field(
        strict=True,
        ge=1,
        le=MAX_CREDITS,
        description="Hard cap of credits for one run (at least 1: a run of 0 pays nothing).",
    )
    min_balance: int | None = Field(
        None,
        strict=True,
        ge=0,
        le=MAX_CREDITS,
        description="Credits the run leaves in the account (its credits_remaining).",
    )
    policy: Literal["breadth_first", "greedy"] = Field(
        "breadth_first",
        description="breadth_first: a short budget gives every query pages in turn; greedy: in spec order.",
    )
    unstarted_exit_code: Literal[0, 3] = Field(
        0,
        description="The exit code of a run that ended with queries the budget (or a fan-out's "
        "max_credits_total) never let start: 0, a night that did what its budget allowed; 3, a shortfall "
        "cron and systemd see.",
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


def _endpoint_schema(schema: dict[str, Any]) -> None:
    """The built-in paths for an editor to offer, and any other path a job may declare."""
    paths = {"type": "string", "enum": list(builtin().endpoints)}
    schema.pop("type", None)
    schema["anyOf"] = [paths, {"type": "string", "pattern": "^/"}]


class Query(_Model):
    id: str | None = Field(
        None, pattern=ID_PATTERN, description="Unique id; derived from endpoint and params when absent."
    )
    endpoint: str = Field(
        description="A documented path (`harvest endpoints`), or one the job declares (`endpoints:`, `catalogs:`).",
        json_schema_extra=_endpoint_schema,
    )
    params: dict[str, Any] = Field(default_factory=dict, description="Query parameters of the endpoint.")
    for_each: dict[str, ForEach] = Field(
        default_factory=dict, description="Fan out: one query per value (lists) or per parent record (from)."
    )
    max_pages: int | None = Field(
        None, strict=True, ge=1, le=MAX_CREDITS, description="Default: all pages, within the budget."
    )
    max_credits: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=MAX_CREDITS,
        description="Cap of credits for this query; with for_each, for each query it makes. Held across the "
        "runs `--continue` makes, as max_pages is.",
    )
    max_credits_total: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=MAX_CREDITS,
        description="With for_each: cap of credits for all the queries it makes together, held by the ledger "
        "like the budget and shared breadth-first among them, across the runs `--continue` makes.",
    )
    incremental: bool = Field(
        False,
        strict=True,
        description="Stop paging after the first page whose records were all landed before (newest-first "
        "listings only; `harvest run --full` pages fully once).",
    )
    method: Literal["GET", "POST"] | None = Field(
        None,
        description="How its requests are sent, where the endpoint takes both (`method: [GET, POST]`): POST puts "
        "the parameters, the cursor too, in a JSON body. Default: the endpoint's first.",
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


class ShapeOverride(_Model):
    """Where one record kind's records are, and where its columns are read, before the catalog's own places:
    how a job reads a changed answer without a new release of harvest (`harvest rebuild --spec` applies it to
    pages already paid)."""

    records: RecordPaths = Field(
        default_factory=list,
        description="Where the records are: a record path (e.g. `data.items`, `[1].data.user.clips.edges[].node`), "
        "or several tried in order.",
    )
    fields: dict[str, RecordPaths] = Field(
        default_factory=dict, description="Column -> the path (or paths) inside a record to read it from."
    )

    def overrides(self) -> KindShape:
        return KindShape.of(self.model_dump())


class JobSpec(_Model):
    """One collection job: which queries to run, against which service, under which credit budget."""

    name: str = Field(pattern=NAME_PATTERN, max_length=64, description="Job name; names the output dir.")
    service: Service = Field(default_factory=Service)  # type: ignore[arg-type]
    budget: Budget
    concurrency: int = Field(
        4, strict=True, ge=1, le=64, description="HTTP requests in flight at once, at most (a ceiling)."
    )
    rate_limit: RateLimit = Field(
        default_factory=RateLimit,  # type: ignore[arg-type]
        description="The service's rate limit: a known one, and how long to wait while it refuses everything.",
    )
    output: Path = Field(
        default_factory=lambda data: Path("data", str(data.get("name", "job"))),
        description="Holds harvest.duckdb and parquet/; relative to the working dir. Default: data/<name>.",
    )
    min_free_mb: float = Field(
        512,
        ge=0,
        description="Free space (MB) the output's filesystem must have before a run pays; below it the run is "
        "refused (exit 75), naming the directory and the space left. 0: no floor.",
    )
    costs: dict[str, Annotated[int, Field(strict=True, ge=0, le=MAX_PRICE)]] = Field(
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
        None,
        description="Export after every run (harvest export): the new runs' Parquet, or Iceberg or Delta tables.",
    )
    shapes: dict[str, dict[str, ShapeOverride]] = Field(
        default_factory=dict,
        description="Per endpoint path and record table: where records and columns are read, before the "
        "catalog's places (a changed answer read without waiting for a release).",
    )
    catalogs: list[str] = Field(
        default_factory=list,
        description="Catalog files declaring endpoints this job uses (the format of `endpoints:`), relative to "
        "the spec's directory (docs/declaring-endpoints.md).",
    )
    endpoint_declarations: dict[str, EndpointDecl] = Field(
        default_factory=dict,
        alias="endpoints",
        description="Endpoints this job declares: path -> parameters, paging, price, record tables "
        "(docs/declaring-endpoints.md).",
    )
    queries: list[Query] = Field(min_length=1)
    _declared: dict[str, dict[str, Any]] = PrivateAttr(default_factory=dict)
    _declared_at: dict[str, DeclaredAt] = PrivateAttr(default_factory=dict)
    _key_at: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("output", mode="before")
    @classmethod
    def _output(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("the output directory must not be empty")
        return value

    @model_validator(mode="after")
    def _semantics(self, info: ValidationInfo) -> JobSpec:
        context = info.context or {}
        self._key_at = dict(context.get(KEY_AT, {}))
        if DECLARED in context:
            self._declared = context[DECLARED]
            self._declared_at = dict(context.get(DECLARED_AT, {}))
        elif self.catalogs or self.endpoint_declarations:
            from harvest.flows.spec.declared import read_declared

            raw = self.model_dump(mode="json", by_alias=True, include={"catalogs", "endpoint_declarations"})
            declared, flaws = read_declared(raw, "<spec>", None)
            if flaws:
                raise ValueError("; ".join(str(p) for p in flaws))
            self._declared = declared.endpoints
            self._declared_at = declared_places(declared.where, {})
        if not context.get(DEFER_CHECKS):
            from harvest.flows.spec.checks import semantic_problems
            from harvest.flows.spec.explain import dotted

            problems = semantic_problems(self)
            if problems:
                raise ValueError("; ".join(f"{dotted(loc)}: {text}" for loc, text, _ in problems))
        return self

    def key_places(self) -> dict[str, str]:
        """Where the spec writes `api_key_env` / `api_key_secret`, said instead of a name (`auth.KeyPlaces`)."""
        return self._key_at

    def catalog(self) -> Catalog:
        """This job's catalog: the built-in endpoints and the ones it declares."""
        return for_job(self._declared)

    def endpoints(self) -> dict[str, Endpoint]:
        """This job's catalog with its cost and shape overrides."""
        endpoints = self.catalog().overridden(self.costs, self.shape_overrides())
        for path, place in self._declared_at.items():
            if path in endpoints:
                endpoints[path] = replace(endpoints[path], declared_at=place)
        return endpoints

    def replaced_params(self) -> list[str]:
        """A warning for each query that sets a parameter the service has replaced (`replaced_by`): it runs as
        written; the warning names the parameter to use, in lines of 80 columns."""
        endpoints = self.catalog().endpoints
        warnings = []
        for n, query in enumerate(self.queries):
            model = endpoints[query.endpoint].params
            for old, new in model.replaced.items():
                if old in query.params or old in query.for_each:
                    annotation = model.model_fields[new].annotation
                    values = [str(v) for a in (annotation, *get_args(annotation)) if get_origin(a) is Literal
                              for v in get_args(a)]  # fmt: skip
                    allowed = f" ({', '.join(values)})" if values else ""
                    sentence = (
                        f"warning: queries[{n}] ({query.query_id}): {query.endpoint} takes `{new}`{allowed} "
                        f"where it took `{old}`; `{old}` is still sent as written"
                    )
                    warnings.append(
                        textwrap.fill(sentence, 80, break_long_words=False, break_on_hyphens=False)
                    )
        return warnings

    def shape_overrides(self) -> dict[str, dict[str, KindShape]]:
        return {path: {t: s.overrides() for t, s in tables.items()} for path, tables in self.shapes.items()}

    def declared(self) -> dict[str, dict[str, Any]]:
        """The endpoints this job declares (`catalogs:` files, then `endpoints:`): path -> plain declaration,
        validated, every default filled (`connectors.catalog.declarations.plain`)."""
        return self._declared

    def spec_hash(self) -> str:
        """sha256 of the validated spec as canonical JSON (defaults included): tells edited specs apart. The
        declared endpoints count as read (a catalog file's edit is an edited spec); a spec declaring none
        leaves them out of the hash, so its hash is the one a spec without the key has."""
        data = self.model_dump(mode="json", by_alias=True, exclude={"catalogs", "endpoint_declarations"})
        if self._declared:
            data["declared"] = self._declared
        return digest(data)
