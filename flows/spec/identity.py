"""Stable names for what a spec asks: query ids and the spec's hash survive reruns, so state keyed on them
(resume, continue, incremental) finds itself again."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from harvest.flows.spec.model import JobSpec, Query


def derive_id(query: Query) -> str:
    """`<last two path segments>-<8 hex of the query's hash>`: readable, and the same on every run.

    The hash covers the endpoint, params and for_each but not max_pages or max_credits, so raising a limit
    keeps the id (and with it the incremental state keyed on it).
    """
    segments = [s.strip("{}") for s in query.endpoint.strip("/").split("/")[-2:]]
    content = {"endpoint": query.endpoint, "params": query.params, "for_each": _jsonable(query.for_each)}
    return "_".join(segments) + "-" + digest(content)[:8]


def plan_key(spec: JobSpec) -> str:
    """What identifies a spec's queries (ids, endpoints, parameters, fan-out): a resume needs the same.

    Budget, concurrency, limits and costs may change between a crash and its resume; the queries may not.
    """
    queries = [
        {"id": q.query_id, "endpoint": q.endpoint, "params": q.params, "for_each": _jsonable(q.for_each)}
        for q in spec.queries
    ]
    text = json.dumps({"name": spec.name, "queries": queries}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def digest(value: Any) -> str:
    """sha256 of a value as canonical JSON."""
    canonical = _jsonable(value)
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def fanned_out(query: Query) -> list[tuple[str, dict[str, Any]]]:
    """(id, params) of each combination of the query's static fan-out values (`q[k=v,...]`); keys sorted, for
    stable ids. The run plans these queries and the spec's checks price them: one list of what a query becomes."""
    keys = sorted(query.static)
    if not keys:
        return [(query.query_id, dict(query.params))]
    out = []
    for values in itertools.product(*(query.static[k] for k in keys)):
        suffix = ",".join(f"{k}={render_value(v)}" for k, v in zip(keys, values, strict=True))
        out.append((f"{query.query_id}[{suffix}]", {**query.params, **dict(zip(keys, values, strict=True))}))
    return out


def render_value(value: Any) -> str:
    """A parameter value as it appears in a query id: strings as they are, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
