"""What a spec can get wrong beyond its shape: what needs the endpoint catalog or the other queries.

Parameters against each endpoint's model (every fanned-out combination), fan-out keys, parents that exist and
fields they have, cycles, unique ids, cost overrides, the fan-out limit, a query's cap that no request fits in
(`flows.spec.caps`). Each check yields `Found` problems (location, problem, allowed); `flows.spec.parse` places
them on lines.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
from pydantic import ValidationError

from harvest.connectors.catalog.fields import type_name
from harvest.connectors.catalog.job_catalog import Catalog, builtin
from harvest.connectors.catalog.params import PARAM_RULE, Params
from harvest.connectors.catalog.shape_overrides import shape_problems
from harvest.connectors.plurals import counted
from harvest.flows.spec.caps import cap_below_price_problem
from harvest.flows.spec.explain import closest, params_problem
from harvest.flows.spec.identity import render_value
from harvest.flows.spec.job_options import EXPORT_ALLOWED, BadDestination, check_destination
from harvest.flows.spec.model import FromQuery, JobSpec, Query
from harvest.flows.spec.problems import Found
from harvest.flows.spec.yaml_reader import Loc

_PLACEHOLDER = "placeholder:value"
"""Stands for a dependent parameter's future value, so that the other parameters can be checked now."""


def _paths_hint(path: str, catalog: Catalog) -> str:
    close = closest(path, list(catalog.endpoints))
    listed = "`harvest endpoints` lists all of them"
    declared = "; or one the job declares (`endpoints:`, `catalogs:`)"
    if not close:
        return f"a documented path ({listed}){declared}"
    return f"a documented path; the closest: {', '.join(close)} ({listed}){declared}"


def query_problems(i: int, query: Query, catalog: Catalog) -> Iterator[Found]:
    """What one query alone can get wrong: endpoint, parameters, fan-out keys, each fanned-out combination."""
    at: Loc = ("queries", i)
    if query.max_credits_total is not None and not query.for_each:
        yield (
            (*at, "max_credits_total"),
            "max_credits_total caps all the queries a for_each makes together; this query makes one",
            "`max_credits` for one query, or a `for_each` (values or `from:` a parent query)",
        )
    if query.endpoint not in catalog.endpoints:
        yield (*at, "endpoint"), f"unknown endpoint {query.endpoint!r}", _paths_hint(query.endpoint, catalog)
        return
    endpoint = catalog.get(query.endpoint)
    if query.method is not None and query.method not in endpoint.methods:
        methods = " or ".join(endpoint.methods)
        yield (
            (*at, "method"),
            f"{query.endpoint} is not sent by {query.method}",
            f"{methods} (its declaration's)",
        )
    params = endpoint.params
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
    found = list(_combination_problems(at, query, params))
    yield from found
    if query.incremental:
        said = {loc[len(at) + 1] for loc, _, _ in found if len(loc) > len(at) + 1}
        yield from _incremental_problems(at, query, catalog, said)


def newest_first_listings(catalog: Catalog | None = None) -> str:
    """The endpoints (and parameter values) where `incremental: true` is allowed, for error messages."""
    return (catalog or builtin()).newest_first_listings()


def _incremental_problems(at: Loc, query: Query, catalog: Catalog, said: set[str | int]) -> Iterator[Found]:
    """`said`: the parameters already refused. When the one that orders the listing is among them, its value is
    wrong already: the endpoint's newest-first values are what is left to say, not every listing that has one."""
    order = catalog.get(query.endpoint).newest_first
    combos = [query.params]
    if order is not None and order.param in query.static:
        combos = [{**query.params, order.param: v} for v in query.static[order.param]]
    if order is not None and order.param in said:
        values = " or ".join(map(str, order.values))
        yield (
            (*at, "incremental"),
            f"{query.endpoint} lists newest first only with {order.param}: {values}",
            f"{order.param}: {values}; or no incremental",
        )
    elif order is None or not all(order.holds(c) for c in combos):
        yield (
            (*at, "incremental"),
            f"{query.endpoint} with these parameters does not list newest first, so stopping at known "
            "items could miss new ones",
            newest_first_listings(catalog),
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
                rule = error["type"] == PARAM_RULE  # a rule between parameters: it names the one to blame
                key = error["ctx"]["param"] if rule else key
                if key in dependent and not rule:
                    continue
                if key in static:
                    loc = (*at, "for_each", key, index[str(key)])
                elif key in dependent:
                    loc = (*at, "for_each", key)
                elif key is None or (rule and key not in query.params):
                    loc = (*at, "params")
                else:
                    loc = (*at, "params", *(error["loc"] or (key,)))
                problem, allowed = (
                    (error["ctx"]["problem"], error["ctx"]["allowed"])
                    if rule
                    else params_problem(error, params)
                )
                if (loc, problem) not in reported:
                    reported.add((loc, problem))
                    yield loc, problem, allowed


def duplicate_ids(queries: Iterable[tuple[int, str, bool]]) -> Iterator[Found]:
    """Each query id used before: (index, id, whether the spec wrote it) per query. Also run on the ids a spec
    wrote when another query is invalid, so a duplicate is said beside that query's problem, not after it."""
    ids: dict[str, int] = {}
    for i, qid, written in queries:
        if qid in ids:
            where = ("queries", i, "id") if written else ("queries", i)
            derived = "" if written else " (derived from endpoint and params)"
            yield where, f"duplicate id {qid!r}{derived}, also used by queries[{ids[qid]}]", "a unique `id`"
        else:
            ids[qid] = i


def cross_problems(queries: list[Query], catalog: Catalog) -> Iterator[Found]:
    """What needs all queries: unique ids, parents that exist, fields the parent has, no cycles."""
    yield from duplicate_ids((i, q.query_id, bool(q.id)) for i, q in enumerate(queries))
    ids: dict[str, int] = {}
    for i, query in enumerate(queries):
        ids.setdefault(query.query_id, i)
    parents: dict[str, str] = {}
    for i, query in enumerate(queries):
        for key, ref in query.dependent.items():
            at: Loc = ("queries", i, "for_each", key)
            if ref.from_ not in ids:
                close = closest(ref.from_, list(ids))
                yield (*at, "from"), f"no query has id {ref.from_!r}", ", ".join(close or ids)
                continue
            parents[query.query_id] = ref.from_
            yield from _field_problems(at, ref, queries[ids[ref.from_]], catalog)
    yield from _cycle_problems(queries, parents)


_FAN_OUT_TYPES = (pa.string(), pa.int64())
"""The columns a dependent query can take its values from: text (JSON text too) and integers, each row's value
sent as the parameter (an integer as its digits)."""


def _field_problems(at: Loc, ref: FromQuery, parent: Query, catalog: Catalog) -> Iterator[Found]:
    if parent.endpoint not in catalog.endpoints:
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
        if column.type not in _FAN_OUT_TYPES:
            sources = [f.name for f in having[0].fields if f.type in _FAN_OUT_TYPES]
            yield (
                (*at, "field"),
                f"{ref.field!r} is a {type_name(column)} column; a dependent query fans out over text or "
                "integer columns only",
                ", ".join(sources),
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


def _cost_problems(costs: Mapping[str, int], allow_lower: bool, catalog: Catalog) -> Iterator[Found]:
    """Unknown endpoints, and prices below the catalog's: the ledger reserves the price before each request,
    so a price below what the service charges lets a run spend past its budget (`costs: {path: 0}` spent 6
    credits of a budget of 5)."""
    for path, cost in costs.items():
        if path not in catalog.endpoints:
            yield ("costs", path), f"unknown endpoint {path!r}", _paths_hint(path, catalog)
        elif cost < catalog.endpoints[path].cost and not allow_lower:
            price = catalog.endpoints[path].cost
            yield (
                ("costs", path),
                f"{cost} is below the catalog's price of {counted(price, 'credit')} a request: the "
                "budget would reserve too little and a run could spend past it",
                f"an integer >= {price}; or `allow_lower_costs: true` if a contract guarantees the lower price",
            )


MAX_FANOUT = 10_000
"""Queries after fan-out (without dependents) in one spec. Every combination of fanned-out values is checked
(and later planned) one by one, ~70 microseconds each: 10,000 take a second. Two aliased lists of 1,000 values
would otherwise be a million checks."""


def fanout_size(query: Query) -> int:
    return math.prod(len(values) for values in query.static.values())


def fanout_problem(queries: Sequence[tuple[int, Query]]) -> Found | None:
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


def _shapes_problems(spec: JobSpec, catalog: Catalog) -> Iterator[Found]:
    """Overrides for endpoints that exist, of their record tables and columns, with paths that read."""
    for path, tables in spec.shapes.items():
        if path not in catalog.endpoints:
            yield ("shapes", path), f"unknown endpoint {path!r}", _paths_hint(path, catalog)
            continue
        overrides = {table: shape.overrides() for table, shape in tables.items()}
        for loc, problem, allowed in shape_problems(path, catalog.get(path).kinds, overrides):
            at: Loc = ("shapes", path, loc[0])
            if len(loc) > 1:
                at = (*at, loc[1], *(int(p) if p.isdigit() else p for p in loc[2:]))
            yield at, problem, allowed


def _export_problem(spec: JobSpec) -> Found | None:
    """An export into the job's own output, refused here (`harvest validate`, before a night is paid) and not
    only at the run's export step, once the night has landed."""
    if spec.export is None:
        return None
    try:
        check_destination(spec.export.to, spec.output)
    except BadDestination as exc:
        return ("export", "to"), str(exc), f"a place outside {spec.output}: {EXPORT_ALLOWED}"
    return None


def semantic_problems(spec: JobSpec) -> list[Found]:
    catalog = spec.catalog()
    found = list(_cost_problems(spec.costs, spec.allow_lower_costs, catalog))
    if export := _export_problem(spec):
        found.append(export)
    found.extend(_shapes_problems(spec, catalog))
    too_many = fanout_problem(list(enumerate(spec.queries)))
    if too_many:  # the other checks go through every combination
        return [*found, too_many]
    for i, query in enumerate(spec.queries):
        problems = list(query_problems(i, query, catalog))
        found.extend(problems)
        if not problems and (below := cap_below_price_problem(i, query, catalog, spec.costs)):
            found.append(below)
    found.extend(cross_problems(spec.queries, catalog))
    return found
