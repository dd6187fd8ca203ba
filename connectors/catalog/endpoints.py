"""What harvest knows of an endpoint (`Endpoint`: path, parameters, paging, record kinds, price), and the
built-in catalog as module names older callers use (`ENDPOINTS`, `DEFAULT_COSTS`, `endpoints()`, `all_kinds()`).

Endpoints are data: the built-in ones are declared in `connectors/catalog/endpoints/<platform>.yaml`, a job's own in its
spec or a catalog file it names, in one format (docs/declaring-endpoints.md), and built by
`connectors.catalog.endpoint_build`; a job's catalog is `connectors.catalog.job_catalog`'s. Adding a built-in
endpoint is a YAML edit (docs/declaring-endpoints.md, "A built-in endpoint") and a test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

from harvest.connectors.catalog.child_kinds import TableKind
from harvest.connectors.catalog.declarations import DeclaredAt
from harvest.connectors.catalog.paging_styles import Paging
from harvest.connectors.catalog.params import Params, has_value, is_set
from harvest.connectors.catalog.records import RecordKind
from harvest.connectors.catalog.shape_overrides import Shapes
from harvest.connectors.plurals import counted


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
    """A request whose parameter `param` has `value` (any value, when `value` is None: whenever it is set)
    costs at most `credits` (None: the rule leaves the most alone) and bills at least `least` (None: its
    `credits`): the company ads with details cost 25; a cached answer (`cache_max_age`) may bill 0."""

    param: str
    value: Any = None
    credits: int | None = None
    least: int | None = None

    def matches(self, params: Mapping[str, Any]) -> bool:
        got = params.get(self.param)
        return is_set(got) if self.value is None else has_value(got, self.value)

    def describe(self) -> str:
        when = f"{self.param} set" if self.value is None else f"{self.param}={_shown(self.value)}"
        if self.credits is None:
            return f"as little as {self.least} with {when}"
        least = "" if self.least is None or self.least == self.credits else f" (at least {self.least})"
        return f"{self.credits}{least} with {when}"


@dataclass(frozen=True)
class Price:
    """Credits per request: at most `credits` (what the ledger reserves) and at least `least` (what an answer
    may bill), changed by every rule of `when` a query's parameters match: the request's most is the highest
    `credits` among them, its least the lowest `least` (docs/credits.md)."""

    credits: int = 1
    when: tuple[PriceRule, ...] = ()
    least: int | None = None
    """The least a plain request's answer may bill; None: `credits` (it always bills its price)."""

    def rule(self, params: Mapping[str, Any]) -> PriceRule | None:
        """The matching rule that sets the most a request costs (the first of the highest), if any."""
        priced = [r for r in self.when if r.credits is not None and r.matches(params)]
        return max(priced, key=lambda r: r.credits or 0) if priced else None

    def of(self, params: Mapping[str, Any]) -> int:
        """The most one request with these parameters costs: what is reserved before it is sent."""
        rule = self.rule(params)
        return self.credits if rule is None or rule.credits is None else rule.credits

    def least_of(self, params: Mapping[str, Any]) -> int:
        """The least one request with these parameters may bill (a cached answer's 0)."""
        matching = [r for r in self.when if r.matches(params)]
        floors = [r.credits if r.least is None else r.least for r in matching if r.credits is not None]
        floors = floors or [self.credits if self.least is None else self.least]
        floors += [r.least for r in matching if r.credits is None and r.least is not None]
        return min(*floors, self.of(params))

    def at_most(self, params: Mapping[str, Any], unknown: str) -> int:
        """The most a request can cost while parameter `unknown` is not known yet (a dependent query's)."""
        return max([self.of(params), *(r.credits for r in self.when if r.param == unknown and r.credits)])

    def overridden(self, credits: int) -> Price:
        """A job's `costs:` price: every request at least `credits` (a priced flag keeps its higher price)."""
        rules = tuple(
            r if r.credits is None else replace(r, credits=max(r.credits, credits)) for r in self.when
        )
        least = None if self.least is None else min(self.least, credits)
        return Price(credits, rules, least)

    def describe(self) -> str:
        """The price rule in words, a request's price first, then each `when` rule: `1 credit; 10 with
        download_media=true` (`harvest endpoints`, docs/endpoints/)."""
        least = "" if self.least is None or self.least == self.credits else f" (at least {self.least})"
        rules = "".join(f"; {r.describe()}" for r in self.when)
        return f"{counted(self.credits, 'credit')}{least}{rules}"


def _shown(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


class ParamsModel:
    """An endpoint's parameter model, made the first time it is asked for, then the same class for every copy
    of the endpoint: the built-in catalog's ~120 models take ~0.3 s to make, and a run uses those of its own
    queries only. A job's declared endpoints are made at once (`eager`), so a declaration pydantic refuses is
    said where the spec is read."""

    def __init__(self, make: Callable[[], type[Params]], *, eager: bool = False) -> None:
        self._make: Callable[[], type[Params]] | None = make
        self._model: type[Params] | None = None
        if eager:
            self()

    def __call__(self) -> type[Params]:
        if self._model is None:
            assert self._make is not None
            self._model, self._make = self._make(), None
        return self._model


@dataclass(frozen=True)
class Endpoint:
    path: str
    """The documented path, with `{name}` for path parameters: also the endpoint's name everywhere in harvest."""
    summary: str
    params_model: ParamsModel = field(compare=False, repr=False)
    paging: Paging
    kinds: tuple[RecordKind, ...]
    price: Price = Price()
    newest_first: NewestFirst | None = None
    """Set where the service lists newest first (so `incremental: true` is allowed)."""
    records_per_page: int | str | None = None
    """The most records one page holds, where the interface says so: a number, or the parameter that sets it.
    `harvest plan` prices the dependent queries of a parent with it; None: not documented (unbounded)."""
    methods: tuple[str, ...] = ("GET",)
    """How its requests may be sent, the first the default: POST puts every parameter, the cursor too, in a
    JSON body (path parameters stay in the path); a query may choose another of them (`method:`)."""
    declared_at: DeclaredAt | None = field(default=None, compare=False, repr=False)
    """Where the job declares it (its own endpoint), for the messages that name the fix in the user's file."""

    @property
    def params(self) -> type[Params]:
        """The model of the endpoint's parameters."""
        return self.params_model()

    def method_of(self, chosen: str | None) -> str:
        """The method a query's requests go by: its choice, else the endpoint's default."""
        return self.methods[0] if chosen is None else chosen

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

    def price_held(
        self, params: Mapping[str, Any], learned: Mapping[str, int], unknown: str | None = None
    ) -> int:
        """What the ledger reserves for a request like this one when it holds `learned` (price key -> what the
        service was last seen charging, `flows.run.chain.next_prices`): the higher of it and the price list's.
        `unknown`: a parameter not known yet (a dependent query's), any value of which may be asked."""
        listed = self.price_of(params) if unknown is None else self.price.at_most(params, unknown)
        key, each = self.price_key(params), f"{self.path}?{unknown}="
        seen = [c for k, c in learned.items() if k == key or (unknown is not None and k.startswith(each))]
        return max([listed, *seen])

    def listed_price(self, key: str) -> int | None:
        """The price list's price of the requests under price key `key` (`price_key`); None: not one of its keys."""
        if key == self.path:
            return self.price.credits
        rules = [r for r in self.price.when if r.credits is not None]
        return next((r.credits for r in rules if key == f"{self.path}?{r.param}={_shown(r.value)}"), None)

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
    from harvest.connectors.catalog.job_catalog import builtin

    if name == "ENDPOINTS":
        return tuple(builtin().endpoints.values())
    return {path: e.cost for path, e in builtin().endpoints.items()}


def endpoints(costs: Mapping[str, int] | None = None, shapes: Shapes | None = None) -> dict[str, Endpoint]:
    """The built-in catalog by documented path, with a job's cost and shape overrides applied."""
    from harvest.connectors.catalog.job_catalog import builtin

    return builtin().overridden(costs, shapes)


def get(path: str, costs: Mapping[str, int] | None = None) -> Endpoint:
    try:
        return endpoints(costs)[path]
    except KeyError:
        raise UnknownEndpoint(path) from None


def all_kinds() -> dict[str, TableKind]:
    """Every built-in record kind by table name (kinds shared by endpoints appear once)."""
    from harvest.connectors.catalog.job_catalog import builtin

    return builtin().kinds()


def above_the_list(learned: Mapping[str, int], endpoints: Mapping[str, Endpoint]) -> dict[str, int]:
    """The prices the service was seen charging (price key -> credits) that are still above the job's price list:
    one a job's `costs:` has since caught up with is the list's again, held and said no more. A key of an endpoint
    the job no longer knows is kept (held only if asked)."""
    out = {}
    for key, credits in learned.items():
        endpoint = endpoints.get(key.split("?", 1)[0])
        listed = endpoint.listed_price(key) if endpoint is not None else None
        if listed is None or credits > listed:
            out[key] = credits
    return out
