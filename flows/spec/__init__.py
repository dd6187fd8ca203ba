"""The job spec: what a user writes in YAML, checked completely before a single credit is spent.

Every problem is reported at once, each as `<file>:<line>: <field>: <problem>; allowed: <...>`, because a spec
that fails one problem at a time costs a round trip per typo. Where each part lives:

- `model`: the pydantic models (shape, types, ranges, descriptions for `harvest schema`)
- `job_options`: schedule, runner and export, which change how a job runs, never what it pays for
- `yaml_reader`: reading YAML within limits, with a line for every key
- `checks`: what needs the endpoint catalog or the other queries
- `explain`, `describe`: errors and fields in a user's words
- `identity`: stable query ids and the spec's hash
- `service_url`: the service URL, never with a key in it
- `load`: file -> checked `JobSpec`
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harvest.flows.spec.checks import MAX_FANOUT, fanout_size, newest_first_listings
    from harvest.flows.spec.describe import ParamInfo, describe_params
    from harvest.flows.spec.identity import derive_id, fanned_out, render_value
    from harvest.flows.spec.model import Budget, FromQuery, JobSpec, Query, Service
    from harvest.flows.spec.parse import load_spec, parse_spec
    from harvest.flows.spec.problems import Problem, SpecError, UsageError
    from harvest.flows.spec.service_url import (
        BASE_URL_ENV,
        SANDBOX,
        URL_ALLOWED,
        check_base_url,
        resolve_base_url,
    )

__all__ = [
    "BASE_URL_ENV",
    "MAX_FANOUT",
    "SANDBOX",
    "URL_ALLOWED",
    "Budget",
    "FromQuery",
    "JobSpec",
    "ParamInfo",
    "Problem",
    "Query",
    "Service",
    "SpecError",
    "UsageError",
    "check_base_url",
    "derive_id",
    "describe_params",
    "fanned_out",
    "fanout_size",
    "load_spec",
    "newest_first_listings",
    "parse_spec",
    "render_value",
    "resolve_base_url",
]

_HOME = {
    "BASE_URL_ENV": "service_url",
    "Budget": "model",
    "FromQuery": "model",
    "JobSpec": "model",
    "MAX_FANOUT": "checks",
    "ParamInfo": "describe",
    "Problem": "problems",
    "Query": "model",
    "SANDBOX": "service_url",
    "Service": "model",
    "SpecError": "problems",
    "URL_ALLOWED": "service_url",
    "UsageError": "problems",
    "check_base_url": "service_url",
    "derive_id": "identity",
    "describe_params": "describe",
    "fanned_out": "identity",
    "fanout_size": "checks",
    "load_spec": "parse",
    "newest_first_listings": "checks",
    "parse_spec": "parse",
    "render_value": "identity",
    "resolve_base_url": "service_url",
}
"""Each name and the module it lives in: a command that needs one part (`harvest sql` needs `UsageError`)
imports that part, not the endpoint catalog the checks read (~1 s on a busy machine)."""


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
