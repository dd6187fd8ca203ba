"""A query's cap that no request fits in: `max_credits` below what one request costs, or a fan-out's
`max_credits_total` below what the cheapest of its requests costs. The ledger reserves a request's price before
sending it, so such a query can never send anything, on any night; a dependent one would pay for its parent
each night first. Checked against the cost table (the job's `costs:` included) before anything is sent."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

from harvest.connectors.catalog.endpoints import Endpoint, Price
from harvest.connectors.catalog.job_catalog import Catalog
from harvest.connectors.plurals import counted
from harvest.flows.spec.identity import fanned_out
from harvest.flows.spec.model import Query
from harvest.flows.spec.problems import Found

_ANY_OTHER = object()
"""A value of a parameter that no price rule names (its price is the endpoint's without those rules)."""


def _price(catalog: Catalog, costs: Mapping[str, int], path: str) -> Price:
    """What a request of `path` costs in this job: the catalog's price with the job's `costs:` override applied
    (as `JobSpec.endpoints` applies it, without the shape overrides a price does not depend on)."""
    price = catalog.get(path).price
    return price.overridden(costs[path]) if path in costs else price


def _prices(query: Query, endpoint: Endpoint, price: Price) -> dict[str, int]:
    """The most one request of each of the query's fanned-out combinations costs (`flows.run.plan` prices each
    alike: the validated parameters, defaults included)."""
    return {
        query_id: price.of(endpoint.params.model_validate(raw).model_dump(mode="json", exclude_none=True))
        for query_id, raw in fanned_out(query)
    }


def _choices(annotation: Any) -> tuple[Any, ...] | None:
    """The values a parameter of this type can take when they are few (a boolean, an enum), else None."""
    if annotation is bool:
        return (True, False)
    origin = get_origin(annotation)
    if origin is Literal:
        return get_args(annotation)
    if origin in (Union, types.UnionType):
        parts = [_choices(a) for a in get_args(annotation) if a is not type(None)]
        return None if any(p is None for p in parts) else tuple(v for p in parts if p for v in p)
    return None


def _dependent_price(query: Query, endpoint: Endpoint, price: Price) -> tuple[int, str | None]:
    """The least one request of a dependent query can cost, and the parameter its parent fills when the price
    rule reads it (None: the spec alone fixes the price). The parent's value is any the parameter allows (an
    empty one makes no request): each value a price rule names and, unless the parameter's few values are all
    named, any other one; the least of their prices is what no instance can cost less than."""
    param = next(iter(query.dependent))
    defaults = {n: f.default for n, f in endpoint.params.model_fields.items() if f.default is not None}
    fixed = {**defaults, **query.params}
    readers = [r for r in price.when if r.param == param]
    if not readers:
        return price.of(fixed), None
    choices = _choices(endpoint.params.model_fields[param].annotation)
    if choices is None:
        choices = (*(r.value for r in readers if r.value is not None), _ANY_OTHER)
    return min(price.of({**fixed, param: value}) for value in choices), param


def _problem(
    i: int, field: str, cap: int, query: Query, least: int, *, at_least: bool = False, which: str = "", why: str = ""
) -> Found:  # fmt: skip
    who = (
        "the query could never send one"
        if field == "max_credits"
        else "none of its queries could ever send one"
    )
    cost = ("at least " if at_least else "") + counted(least, "credit")
    return (
        ("queries", i, field),
        f"{cap} is below the price of one request{which}: {query.endpoint} with these parameters costs {cost} "
        f"a request{why}, so {who}",
        f"an integer >= {least}, or no {field}",
    )


def _dependent_problem(i: int, query: Query, endpoint: Endpoint, price: Price) -> Found | None:
    least, param = _dependent_price(query, endpoint, price)
    why = (
        "" if param is None else f" whatever value of {param} its parent {query.dependent[param].from_} gives"
    )
    for field, cap in (("max_credits", query.max_credits), ("max_credits_total", query.max_credits_total)):
        if cap is not None and cap < least:
            return _problem(i, field, cap, query, least, at_least=param is not None, why=why)
    return None


def cap_below_price_problem(i: int, query: Query, catalog: Catalog, costs: Mapping[str, int]) -> Found | None:
    """A cap no request of the query fits in. Its run would report the query as one the budget left unstarted,
    which `--continue` cannot start either. A dependent query is refused when its price is known from the spec
    alone, or when the price rule reads the parameter its parent fills and even the cheapest value it allows
    costs more than the cap; otherwise (some value fits) it is accepted, and a run says apart each instance
    whose value costs more. Only for a query whose parameters passed."""
    if query.max_credits is None and query.max_credits_total is None:
        return None
    endpoint = catalog.get(query.endpoint)
    price = _price(catalog, costs, query.endpoint)
    if query.dependent:
        return _dependent_problem(i, query, endpoint, price)
    prices = _prices(query, endpoint, price)
    least, highest = min(prices.values()), max(prices.values())
    if query.max_credits is not None and query.max_credits < highest:
        priciest = next(qid for qid, cost in prices.items() if cost == highest)
        which = f" ({priciest}, the priciest of its fan-out)" if least < highest else ""
        return _problem(i, "max_credits", query.max_credits, query, highest, which=which)
    if query.max_credits_total is not None and query.max_credits_total < least:
        return _problem(
            i, "max_credits_total", query.max_credits_total, query, least, at_least=least < highest
        )
    return None
