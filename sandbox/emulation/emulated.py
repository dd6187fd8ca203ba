"""The shape of one emulated endpoint: what `sandbox.emulation.endpoint_table` declares for each path.

An entry holds everything that differs between endpoints (parameters, record kinds, the builder of its pages,
its "not found" answer and its few special cases), so the code that serves requests never asks which path it is
serving. The entry types live apart from the table because the builders' own modules need them while the
table needs the builders.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from harvest.sandbox.config import SandboxConfig
    from harvest.sandbox.emulation.page import Ctx, ServedPage
    from harvest.sandbox.wire.validation import RequestParams

Check = Literal[
    "text", "limit", "bool", "subreddit", "region2", "nonneg_int", "multi", "flag", "integer", "number"
]

_PATH_PARAM_RE = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class QueryParam:
    """One query parameter an endpoint accepts.

    `identity`: the value is part of what the query is about, so it decides which records exist (a handle, a
    sort order); cursors and output switches such as `trim` are not. `subject`: the value names the thing
    looked up, so the trigger words of `sandbox.emulation.triggers` apply to it."""

    name: str
    required: bool = False
    enum: tuple[str, ...] = ()
    check: Check = "text"
    identity: bool = False
    subject: bool = False
    default: str | None = None
    minimum: float | None = None
    """Bounds of an `integer` or `number` value (a declared endpoint's `min` and `max`)."""
    maximum: float | None = None
    min_length: int | None = None
    """Bounds of a text value's length."""
    max_length: int | None = None
    pattern: str | None = None
    """A regular expression the text value must contain a match of (JSON Schema's `pattern`)."""


@dataclass(frozen=True)
class NotFoundAnswer:
    """The real service's "not found" answer of one endpoint (the `missing` trigger word, while the
    `real_not_found` quirk is on): mostly 200 with `success: true`, empty lists, null cursors and, for
    account lookups, `account_deactivated: true`."""

    body: Any
    trimmed: Any = None
    """The body when `trim` is on, for endpoints whose trimmed answers are shaped differently."""
    status: int = 200
    envelope: bool = True
    """False for a bare body without `success` and credits (the streaming clip's JSON array)."""

    def body_for(self, params: RequestParams) -> Any:
        """A fresh copy of the body answering these parameters."""
        body = self.trimmed if self.trimmed is not None and params.flag("trim") else self.body
        return copy.deepcopy(body)


@dataclass(frozen=True)
class NewItems:
    """A newest-first listing that shows `SandboxConfig.new_items` newer items at its front: always, or when
    `param` has one of `values`."""

    param: str | None = None
    values: tuple[str, ...] = ()

    def apply(self, params: RequestParams) -> bool:
        return self.param is None or params.get(self.param) in self.values


@dataclass(frozen=True)
class EmulatedEndpoint:
    """One endpoint of the service as the sandbox answers it."""

    path: str
    """The documented path; `{name}` marks a path parameter (the creative detail's material id)."""
    params: tuple[QueryParam, ...]
    kinds: dict[str, str]
    """Record kind -> primary key field (see docs/service-shapes.md; `a+b` for a composite key; `a|b` for a key
    the service sends as `a` and the interface names `b`, served under `b` by the `interface-names` drift)."""
    builder: Callable[[Ctx], ServedPage]
    """Builds the page answering a validated request (the endpoint's records, cursors and paging shape)."""
    not_found: NotFoundAnswer | None = None
    """How "not found" is answered; required when the endpoint has something to look up (a subject)."""
    one_of: tuple[str, ...] = ()
    """At least one of these must be given (the "one of two identifiers" endpoints). When both are, the
    first one of `one_of` that is given names the account and the other is ignored (ids before handles and
    URLs: the interface says ids answer faster, so the service goes by them)."""
    search: bool = False
    """A search endpoint: the repeat-items quirk applies."""
    paged: bool = True
    """False for the endpoints that answer one page per request, without a cursor."""
    new_items: NewItems | None = None
    """Set on the newest-first listings that show `SandboxConfig.new_items` (creative search by `latest` and
    forum search by `new` are newest-first on the service too; the sandbox does not add items to them)."""
    effective: Callable[[RequestParams], RequestParams] | None = None
    """Rewrites validated parameters into the ones that take effect, where the service ignores some
    combinations."""
    subjects_of: Callable[[RequestParams], list[tuple[str, str]]] | None = None
    """(parameter, value) pairs the trigger words look at, when these are not the `subject` parameters'
    values."""
    feed_list: str | None = None
    """The body list whose items the `wrapped_feed` drift wraps the native upstream way."""
    also_one_of: tuple[tuple[str, ...], ...] = ()
    """More groups of which at least one parameter must be given (a declared endpoint's `one_of` past its
    first group, which is `one_of`)."""
    price: Callable[[Sequence[tuple[str, str]]], int] | None = None
    """Credits a request costs, from its query parameters (a declared endpoint's price, per parameter value);
    None: `SandboxConfig.cost_for`."""
    methods: tuple[str, ...] = ("GET",)
    """How it may be asked: POST takes the parameters in a JSON body (a declared endpoint's `method`)."""
    param_check: Callable[[RequestParams], None] | None = None
    """The service's rules between parameters (exactly one of, needs, excludes): raises `InvalidRequest`."""
    cache_param: str | None = None
    """The parameter asking for a cached answer (`cache_max_age`): one young enough costs 0 credits."""
    path_names: tuple[str, ...] = field(init=False, default=())
    """The names of the path's parameters (`{name}`), in order."""
    path_pattern: re.Pattern[str] | None = field(init=False, default=None, repr=False, compare=False)
    """What a request path to this endpoint looks like, when its path has a parameter."""

    def __post_init__(self) -> None:
        names = tuple(_PATH_PARAM_RE.findall(self.path))
        if names:
            literal = [re.escape(part) for part in _PATH_PARAM_RE.split(self.path)[::2]]
            pattern = re.compile("^" + "([^/]+)".join(literal) + "$")
            object.__setattr__(self, "path_names", names)
            object.__setattr__(self, "path_pattern", pattern)
        has_subject = self.subjects_of is not None or any(p.subject for p in self.params)
        if has_subject and self.not_found is None:
            raise ValueError(f"{self.path}: an endpoint that looks something up needs its `not_found` answer")

    @property
    def names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.params)

    def cost(self, items: Sequence[tuple[str, str]], config: SandboxConfig) -> int:
        """Credits one answer costs: the config's price for the path when it names one (tests), else the
        endpoint's own price for these parameters, else the config's default."""
        if self.price is None or self.path in config.costs:
            return config.cost_for(self.path)
        return self.price(items)

    @property
    def path_param(self) -> str | None:
        """The name of the path's first parameter, if it has one."""
        return self.path_names[0] if self.path_names else None

    def path_values(self, request_path: str) -> dict[str, str]:
        """The path parameters' values in a request path to this endpoint (none when it has none)."""
        found = self.path_pattern.match(request_path) if self.path_pattern is not None else None
        return dict(zip(self.path_names, found.groups(), strict=True)) if found is not None else {}

    def subjects(self, params: RequestParams) -> list[tuple[str, str]]:
        """(parameter, value) pairs the trigger words apply to."""
        if self.subjects_of is not None:
            return self.subjects_of(params)
        out = []
        for p in self.params:
            value = params.get(p.name)
            if p.subject and value is not None:
                out.append((p.name, value))
        return out


class EndpointTable:
    """The endpoints one sandbox serves, found by request path."""

    def __init__(self, endpoints: Sequence[EmulatedEndpoint]) -> None:
        self.endpoints = tuple(endpoints)
        self.by_path = {e.path: e for e in self.endpoints}
        self._patterns = tuple((e.path_pattern, e) for e in self.endpoints if e.path_pattern is not None)

    def match(self, path: str) -> EmulatedEndpoint | None:
        """The endpoint a request path addresses (a path parameter filled in, or its documented `{name}`), or
        None."""
        found = self.by_path.get(path)
        if found is not None:
            return found
        return next((endpoint for pattern, endpoint in self._patterns if pattern.match(path)), None)


def key_part(record: Any, part: str) -> Any:
    """One part of a record's key (`product_id|id`: the first of these names the record has; `a.b`: inside an
    object), None if none."""
    for name in part.split("|"):
        value = record
        for step in name.split("."):
            if not isinstance(value, dict) or step not in value:
                break
            value = value[step]
        else:
            return value
    return None
