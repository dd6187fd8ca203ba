"""From a validated spec to the queries a run executes, and the most credits they could cost.

Static `for_each` lists are expanded here, once, into plain `QuerySpec`s whose ids name the fanned-out values
(`videos[handle=nasa]`): incremental runs and resumes key on these ids, so they depend only on what the spec
asks, never on order or time. Dependent queries cannot be expanded before their parent has run; they stay
templates (`DependentQuery`) and the flow calls `instantiate` once per distinct parent value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.params import Params
from harvest.connectors.paging.pager import QuerySpec, asks_digest, base_id
from harvest.connectors.plurals import counted
from harvest.flows.spec import JobSpec, Query, fanned_out, render_value


@dataclass(frozen=True)
class DependentQuery:
    """A query that runs once per distinct value of `field` in the parent's `kind` records."""

    template_id: str
    endpoint: str
    params: dict[str, Any]
    """The fixed parameters; `param` is added per parent value."""
    param: str
    parent: str
    """The parent's query id as written in the spec (no fan-out suffix): all its expansions feed this one."""
    field: str
    kind: str
    """The parent's record table holding `field` (resolved even when the spec did not name it)."""
    max_pages: int | None = None
    max_credits: int | None = None
    """Caps for each instantiated query; `Plan.caps` holds the cap of all of them together."""
    incremental: bool = False
    params_model: type[Params] = Params
    """The endpoint's parameter model (the job's catalog's: the endpoint may be one the job declares)."""
    method: str | None = None


def _asks(endpoint: str, params: Params, method: str | None) -> str:
    """`QuerySpec.asks` of a query: the parameters as set, a default left out."""
    return asks_digest(
        endpoint, params.model_dump(mode="json", exclude_none=True, exclude_defaults=True), method
    )


def instantiate(dep: DependentQuery, value: Any) -> QuerySpec:
    """The query for one parent value; ValueError when the value cannot be that parameter (e.g. empty)."""
    if value is None or value == "":
        raise ValueError(f"{dep.template_id}: the parent {dep.parent} gave an empty {dep.field}")
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    try:
        params = dep.params_model.model_validate({**dep.params, dep.param: value})
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"]
        source = f"{dep.parent}.{dep.field}"
        raise ValueError(
            f"{dep.template_id}: {dep.param}={value!r} from {source} is not allowed: {reason}"
        ) from None
    return QuerySpec(
        query_id=f"{dep.template_id}[{dep.param}={render_value(value)}]",
        endpoint=dep.endpoint,
        asks=_asks(dep.endpoint, params, dep.method),
        params=params.model_dump(mode="json", exclude_none=True),
        max_pages=dep.max_pages,
        max_credits=dep.max_credits,
        incremental=dep.incremental,
        method=dep.method,
    )


@dataclass(frozen=True)
class CostLine:
    """The worst case of one query (or of all instances of a dependent one): None means unbounded."""

    query_id: str
    endpoint: str
    cost: int
    """Credits per request of this query (its parameters may price it: `Endpoint.price_of`)."""
    pages: int | None
    """The most pages one query (one instance, for a dependent line) can take; None: unbounded."""
    worst_case: int | None
    basis: str
    dependent: bool = False
    instances: int | None = 1
    """Queries the line stands for: 1, or a dependent line's most instances (None: unbounded)."""
    records: int | None = None
    """The most records one of its pages holds (`records_per_page`), when known: what starts its dependents."""
    each: int | None = None
    """A dependent line's worst case for one of its queries (None: unbounded)."""
    least: int | None = None
    """The least a request may bill where its answer decides (a cached answer at 0); None: `cost`."""
    listed: int | None = None
    """The price list's price, when `cost` is above it: what the service was last seen charging, held."""
    asks: str | None = None
    """A query's `QuerySpec.asks` (None for a dependent line): the nights it learns from asked the same."""

    @property
    def group(self) -> str:
        """The spec query the line comes from: a fan-out's lines share it (and its `max_credits_total`)."""
        return base_id(self.query_id)


def _worst(line: CostLine) -> int | None:
    return line.worst_case


@dataclass(frozen=True)
class Plan:
    name: str
    budget: int
    policy: str
    queries: tuple[QuerySpec, ...]
    """Queries known before the run: every static fan-out expanded, in spec order."""
    dependents: tuple[DependentQuery, ...]
    """Templates in topological order: a template's parent comes before it (in `queries` or here)."""
    lines: tuple[CostLine, ...]
    caps: Mapping[str, int] = field(default_factory=dict)
    """Spec query id -> `max_credits_total`: the credits all the queries its fan-out makes may spend together."""
    incremental: frozenset[str] = frozenset()
    """Spec query ids with `incremental: true`."""

    def group_total(self, group: str, figure: Callable[[CostLine], int | None] = _worst) -> int | None:
        """A figure of all the lines of one spec query together (the worst case, or another: the expected
        case), within its `max_credits_total`; None: unbounded or unknown."""
        costs = [figure(line) for line in self.lines if line.group == group]
        total = None if None in costs else sum(c for c in costs if c is not None)
        cap = self.caps.get(group)
        if cap is None:
            return total
        return cap if total is None else min(total, cap)

    def total(self, figure: Callable[[CostLine], int | None] = _worst) -> int | None:
        """A figure of the whole plan, each fan-out within its `max_credits_total`."""
        costs = [self.group_total(group, figure) for group in self.groups]
        return None if None in costs else sum(c for c in costs if c is not None)

    @property
    def groups(self) -> tuple[str, ...]:
        """The spec queries of the lines, in the lines' order."""
        return tuple(dict.fromkeys(line.group for line in self.lines))

    @property
    def worst_case(self) -> int | None:
        return self.total()

    @property
    def covered(self) -> bool:
        return self.worst_case is not None and self.worst_case <= self.budget

    def template_of(self, query_id: str) -> str:
        """The spec query an expanded or instantiated query comes from."""
        return base_id(query_id)

    def children(self, parent: str) -> tuple[DependentQuery, ...]:
        """Templates fed by a parent, given its spec id or any of its expanded ids."""
        return tuple(d for d in self.dependents if d.parent == base_id(parent))


def pages_at_most(
    endpoint: Endpoint, max_pages: int | None, max_credits: int | None, price: int | None = None
) -> int | None:
    """The most pages one query can take, None when unbounded (the plan's worst case; the time left a run shows).
    `price`: credits per request of the query (default: the endpoint's price without a priced parameter)."""
    price = endpoint.cost if price is None else price
    if endpoint.paging.single and endpoint.paging.follow is None:
        return 1
    bounds = [max_pages] if max_pages is not None else []
    if max_credits is not None and price > 0:
        bounds.append(max_credits // price)
    numbers = endpoint.paging.page
    if numbers is not None and numbers.last is not None and endpoint.paging.follow is None:
        bounds.append((numbers.last - numbers.first) // numbers.step + 1)  # never past the last page number
    return min(bounds) if bounds else None


def dependent_price(dep: DependentQuery, endpoint: Endpoint, learned: Mapping[str, int] | None = None) -> int:
    """The most a request of any instance of a dependent query can cost: its fixed parameters (and the
    endpoint's defaults) priced, and any price the parent's value could bring; `learned`: prices held."""
    defaults = {n: f.default for n, f in endpoint.params.model_fields.items() if f.default is not None}
    return endpoint.price_held({**defaults, **dep.params}, learned or {}, unknown=dep.param)


def _credits(price: int, pages: int | None, max_credits: int | None) -> int | None:
    if price == 0:
        return 0
    if pages is None:
        return max_credits
    worst = pages * price
    return worst if max_credits is None else min(worst, max_credits)


def _records(endpoint: Endpoint, params: Mapping[str, Any], pages: int | None) -> int | None:
    size = endpoint.records_per_page
    if isinstance(size, str):
        size = params.get(size)
    return pages * size if isinstance(size, int) and pages is not None else None


def _basis(
    endpoint: Endpoint, pages: int | None, max_pages: int | None, price: int = 1, least: int | None = None,
    listed: int | None = None,
) -> str:  # fmt: skip
    """Why the worst case is what it is; a price other than 1 credit a request is named (a priced parameter, or
    what the service was last seen charging above the price list's `listed`), and a range where the answer
    decides (`least`); follow-up requests count as pages."""
    each = "" if price == 1 else f", {price} credits a request"
    if least is not None and least != (price if listed is None else listed):
        each = f", {least}-{price} credits a request"
    if listed is not None:
        each += f" as last charged (the cost table: {listed})"
    if endpoint.paging.follow is not None:
        each += " (follow-ups count as pages)"
    if endpoint.paging.single and endpoint.paging.follow is None:
        return "single page" + each
    if pages is None:
        return "all pages: unbounded (max_pages or max_credits bounds it)" + each
    numbers = endpoint.paging.page
    last = (
        numbers is not None
        and numbers.last is not None
        and pages == (numbers.last - numbers.first) // numbers.step + 1
    )
    why = "" if pages == max_pages else " (the last page number)" if last else " (max_credits)"
    return counted(pages, "page") + why + each


def _template(query: Query, endpoint: Endpoint, parent: Endpoint) -> DependentQuery:
    param, ref = next(iter(query.dependent.items()))
    return DependentQuery(
        template_id=query.query_id,
        endpoint=query.endpoint,
        params=dict(query.params),
        param=param,
        parent=ref.from_,
        field=ref.field,
        kind=ref.kind or _table_of(parent, ref.field),
        max_pages=query.max_pages,
        max_credits=query.max_credits,
        incremental=query.incremental,
        params_model=endpoint.params,
        method=query.method,
    )


def _table_of(endpoint: Endpoint, field: str) -> str:
    """The one table of the endpoint with this column (the spec check made sure there is exactly one)."""
    return next(k.table for k in endpoint.kinds if any(f.name == field for f in k.fields))


def _topological(queries: list[Query]) -> list[Query]:
    """Dependent queries after their parents, otherwise in spec order (the spec check rules out cycles)."""
    done = {q.query_id for q in queries if not q.dependent}
    pending = [q for q in queries if q.dependent]
    ordered: list[Query] = []
    while pending:
        ready = [q for q in pending if next(iter(q.dependent.values())).from_ in done]
        if not ready:
            raise ValueError("dependent queries form a cycle")  # unreachable for a validated spec
        ordered.extend(ready)
        done.update(q.query_id for q in ready)
        pending = [q for q in pending if q not in ready]
    return ordered


def _planned(
    spec: JobSpec, endpoints: dict[str, Endpoint], records: dict[str, int | None], learned: Mapping[str, int]
) -> tuple[list[QuerySpec], list[CostLine]]:
    """The queries known before the run, priced (at `learned` where the service was last seen charging more);
    `records` learns how many records each can give."""
    queries: list[QuerySpec] = []
    lines: list[CostLine] = []
    for query in spec.queries:
        if query.dependent:
            continue
        endpoint = endpoints[query.endpoint]
        total: int | None = 0
        for query_id, raw in fanned_out(query):
            model = endpoint.params.model_validate(raw)
            params = model.model_dump(mode="json", exclude_none=True)
            asks = _asks(query.endpoint, model, query.method)
            queries.append(
                QuerySpec(
                    query_id, query.endpoint, params, query.max_pages, query.max_credits,
                    incremental=query.incremental, method=query.method, asks=asks,
                )
            )  # fmt: skip
            price, listed = endpoint.price_held(params, learned), endpoint.price_of(params)
            pages = pages_at_most(endpoint, query.max_pages, query.max_credits, price)
            worst = _credits(price, pages, query.max_credits)
            least = endpoint.price.least_of(params)
            held = listed if price > listed else None
            basis = _basis(endpoint, pages, query.max_pages, price, least, held)
            size = _records(endpoint, params, 1)
            line = CostLine(
                query_id, query.endpoint, price, pages, worst, basis, least=least, records=size, listed=held,
                asks=asks,
            )  # fmt: skip
            lines.append(line)
            count = _records(endpoint, params, pages)
            total = None if total is None or count is None else total + count
        records[query.query_id] = total
    return queries, lines


def _dependent_line(
    dep: DependentQuery, query: Query, endpoint: Endpoint, children: int | None, unbounded_by: str,
    learned: Mapping[str, int],
) -> CostLine:  # fmt: skip
    """The worst case of all instances of a dependent query: one per parent record, each capped alike, all of
    them within `max_credits_total`. `unbounded_by`: why the parent's records have no bound (when they have
    none), naming what would bound them."""
    price, listed = dependent_price(dep, endpoint, learned), dependent_price(dep, endpoint)
    held = listed if price > listed else None
    pages = pages_at_most(endpoint, query.max_pages, query.max_credits, price)
    each = _credits(price, pages, query.max_credits)
    total_worst: int | None = 0
    if each != 0:
        total_worst = None if children is None or each is None else children * each
    cap = query.max_credits_total
    hint = "" if cap is not None else "; or cap them all with max_credits_total"
    per = f"one per {dep.parent} record" + (
        f" (at most {children})" if children is not None else f" (unbounded: {unbounded_by}{hint})"
    )
    each_text = "unbounded" if each is None else f"{each} each"
    basis = f"{per}; {_basis(endpoint, pages, query.max_pages, price, listed=held)}, {each_text}"
    if cap is not None and (total_worst is None or cap < total_worst):
        total_worst, basis = cap, f"{basis}; max_credits_total {cap} for all"
    return CostLine(
        f"{dep.template_id}[{dep.param}=*]", dep.endpoint, price, pages, total_worst, basis, dependent=True,
        instances=children, records=_records(endpoint, dep.params, 1), each=each, listed=held,
    )  # fmt: skip


def _unbounded_by(parent: Query, endpoint: Endpoint, pages: int | None) -> str:
    """What would bound a parent query's records: its pages (`max_pages`), or its endpoint's page size
    (`records_per_page` in the declaration, or the parameter that sets it)."""
    size = endpoint.records_per_page
    missing = [f"{parent.query_id} has no max_pages"] if pages is None else []
    if size is None:
        missing.append(f"{parent.endpoint} declares no records_per_page")
    elif isinstance(size, str) and _records(endpoint, parent.params, 1) is None:
        missing.append(f"{parent.query_id} sets no `{size}` (its records_per_page)")
    return " and ".join(missing)


def plan(spec: JobSpec, budget: int | None = None, learned: Mapping[str, int] | None = None) -> Plan:
    """Expand the spec and price its worst case; `budget` overrides the spec's (`harvest plan --budget`);
    `learned`: price key -> what the service was last seen charging above the price list (the next run holds
    it from its first request, `flows.run.chain.next_prices`)."""
    endpoints = spec.endpoints()
    learned = learned or {}
    records: dict[str, int | None] = {}
    """Most records each spec query can produce in all its expansions (None: unknown)."""
    queries, lines = _planned(spec, endpoints, records, learned)
    dependents: list[DependentQuery] = []
    by_id = {q.query_id: q for q in spec.queries}
    unbounded_by: dict[str, str] = {}
    """Why a spec query's records have no bound, for its dependents' lines."""
    for query in spec.queries:
        if not query.dependent:
            endpoint = endpoints[query.endpoint]
            price = endpoint.price_held(query.params, learned)
            pages = pages_at_most(endpoint, query.max_pages, query.max_credits, price)
            unbounded_by[query.query_id] = _unbounded_by(query, endpoint, pages)
    for query in _topological(spec.queries):
        endpoint = endpoints[query.endpoint]
        parent = by_id[next(iter(query.dependent.values())).from_]
        dep = _template(query, endpoint, endpoints[parent.endpoint])
        dependents.append(dep)
        children = records.get(dep.parent)
        price = dependent_price(dep, endpoint, learned)
        pages = pages_at_most(endpoint, query.max_pages, query.max_credits, price)
        count = _records(endpoint, dep.params, pages)
        records[dep.template_id] = None if children is None or count is None else children * count
        if records[dep.template_id] is None:
            unbounded_by[dep.template_id] = (
                unbounded_by[dep.parent] if children is None else _unbounded_by(query, endpoint, pages)
            )
        unbounded = unbounded_by.get(dep.parent, "")
        lines.append(_dependent_line(dep, query, endpoint, children, unbounded, learned))
    return Plan(
        name=spec.name,
        budget=spec.budget.credits if budget is None else budget,
        policy=spec.budget.policy,
        queries=tuple(queries),
        dependents=tuple(dependents),
        lines=tuple(lines),
        caps={q.query_id: q.max_credits_total for q in spec.queries if q.max_credits_total is not None},
        incremental=frozenset(q.query_id for q in spec.queries if q.incremental),
    )
