"""What harvest knows of an endpoint (`Endpoint`: path, parameters, paging, record kinds, price), and the
built-in catalog as module names older callers use (`ENDPOINTS`, `DEFAULT_COSTS`, `endpoints()`, `all_kinds()`).

Endpoints are data: the built-in ones are declared in `connectors/catalog/endpoints/<platform>.yaml`, a job's own in its
spec or a catalog file it names, in one format (docs/declaring-endpoints.md), and built by
`connectors.catalog.endpoint_build`; a job's catalog is `connectors.catalog.job_catalog`'s. Adding a built-in
endpoint is a YAML edit (docs/declaring-endpoints.md, "A built-in endpoint") and a test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

from connectors.catalog.child_kinds import TableKind
from connectors.catalog.paging_styles import Paging
from connectors.catalog.params import Params
from connectors.catalog.records import RecordKind
from connectors.catalog.shape_overrides import Shapes


@dataclass(frozen=True)
class NewestFirst:
    """When an endpoint lists newest items first: always, or when `param` has one of `values`.

    Incremental queries need it: their paging stops at the first page of items seen before, which is only
    right when everything after that page is older.
    """

    param: str | None = None
    values: tuple[Any, ...] = ()

    def holds(self, params: Mapping[str, Any]) -> bool:
        return self.param is None or params.get(self.param) in self.values

    def describe(self) -> str:
        return "" if self.param is None else f" with {self.param}: {' or '.join(map(str, self.values))}"


@dataclass(frozen=True)
class PriceRule:
    """A request whose parameter `param` has `value` costs `credits` (the company ads with details: 25)."""

    param: str
    value: Any
    credits: int

    def matches(self, params: Mapping[str, Any]) -> bool:
        got = params.get(self.param)
        if isinstance(got, bool) or isinstance(self.value, bool):
            return got is self.value
        return got == self.value


@dataclass(frozen=True)
class Price:
    """Credits per request: `credits`, or the first rule of `when` a query's parameters match."""

    credits: int = 1
    when: tuple[PriceRule, ...] = ()

    def rule(self, params: Mapping[str, Any]) -> PriceRule | None:
        return next((r for r in self.when if r.matches(params)), None)

    def of(self, params: Mapping[str, Any]) -> int:
        rule = self.rule(params)
        return self.credits if rule is None else rule.credits

    def at_most(self, params: Mapping[str, Any], unknown: str) -> int:
        """The most a request can cost while parameter `unknown` is not known yet (a dependent query's)."""
        return max([self.of(params), *(r.credits for r in self.when if r.param == unknown)])

    def overridden(self, credits: int) -> Price:
        """A job's `costs:` price: every request at least `credits` (a priced flag keeps its higher price)."""
        return Price(credits, tuple(replace(r, credits=max(r.credits, credits)) for r in self.when))

    def describe(self) -> str:
        rules = "".join(f", {r.credits} with {r.param}={_shown(r.value)}" for r in self.when)
        return f"{self.credits} credit{'s' if self.credits != 1 else ''}/request{rules}"


def _shown(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Endpoint:
    path: str
    """The documented path, with `{name}` for path parameters: also the endpoint's name everywhere in harvest."""
    summary: str
    params: type[Params]
    paging: Paging
    kinds: tuple[RecordKind, ...]
    price: Price = Price()
    newest_first: NewestFirst | None = None
    """Set where the service lists newest first (so `incremental: true` is allowed)."""
    records_per_page: int | str | None = None
    """The most records one page holds, where the interface says so: a number, or the parameter that sets it.
    `harvest plan` prices the dependent queries of a parent with it; None: not documented (unbounded)."""

    @property
    def cost(self) -> int:
        """Credits per request without a priced parameter (the price list's; a job may override it)."""
        return self.price.credits

    def price_of(self, params: Mapping[str, Any]) -> int:
        """What one request of a query with these parameters costs."""
        return self.price.of(params)

    def price_key(self, params: Mapping[str, Any]) -> str:
        """The ledger's key for what requests like this one cost: the endpoint, and the priced parameter value
        its price depends on (`connectors.credits.prices` learns each apart)."""
        rule = self.price.rule(params)
        return self.path if rule is None else f"{self.path}?{rule.param}={_shown(rule.value)}"

    def url_path(self, params: Params) -> str:
        return self.path.format(**{k: quote(v, safe=":") for k, v in params.path_values().items()})

    def kind(self, table: str) -> RecordKind:
        return next(k for k in self.kinds if k.table == table)

    @property
    def landed_kinds(self) -> tuple[TableKind, ...]:
        """Every table a page of this endpoint lands rows in: each record kind, then its child kinds."""
        kinds: list[TableKind] = []
        for record in self.kinds:
            kinds += [record, *record.children]
        return tuple(kinds)

    def field_reader(self, table: str, name: str, params: Mapping[str, Any]) -> Callable[[Any], Any] | None:
        """Reads column `name` of the `table` records this endpoint's pages hold (the values dependent queries
        start from); None when the endpoint has no such kind or the kind no such column."""
        kind = next((k for k in self.kinds if k.table == table), None)
        return kind.reader(name, params) if kind is not None else None


class UnknownEndpoint(KeyError):
    def __str__(self) -> str:
        return f"unknown endpoint {self.args[0]!r}; `harvest endpoints` lists the documented paths"


def __getattr__(name: str) -> Any:
    """`ENDPOINTS` (the built-in endpoints in catalog order) and `DEFAULT_COSTS` (their price per request), read
    from the catalog files at first use, not at import: `harvest --help` never pays for the catalog."""
    if name not in ("ENDPOINTS", "DEFAULT_COSTS"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from connectors.catalog.job_catalog import builtin

    if name == "ENDPOINTS":
        return tuple(builtin().endpoints.values())
    return {path: e.cost for path, e in builtin().endpoints.items()}


def endpoints(costs: Mapping[str, int] | None = None, shapes: Shapes | None = None) -> dict[str, Endpoint]:
    """The built-in catalog by documented path, with a job's cost and shape overrides applied."""
    from connectors.catalog.job_catalog import builtin

    return builtin().overridden(costs, shapes)


def get(path: str, costs: Mapping[str, int] | None = None) -> Endpoint:
    try:
        return endpoints(costs)[path]
    except KeyError:
        raise UnknownEndpoint(path) from None


def all_kinds() -> dict[str, TableKind]:
    """Every built-in record kind by table name (kinds shared by endpoints appear once)."""
    from connectors.catalog.job_catalog import builtin

    return builtin().kinds()
