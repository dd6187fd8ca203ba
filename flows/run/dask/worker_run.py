"""What a Dask worker needs to know of the run, as plain data: task parameters are stored by Prefect, so the
key is not among them (workers read it from their environment or the Secret block the spec names)."""

from __future__ import annotations

import os
from dataclasses import asdict

from harvest.connectors.catalog.shape_overrides import shapes_data
from harvest.flows.run.service_access import ServiceAccess, client_settings
from harvest.flows.spec import JobSpec
from harvest.flows.spec.service_url import EMBEDDED_SANDBOX
from harvest.tasks.output.layout import OutputLayout

SANDBOX_KEY_ENV = "HARVEST_EMBEDDED_SANDBOX_KEY"
"""How local Dask workers get the embedded sandbox's throw-away key (they inherit the flow's environment)."""


def run_info(
    spec: JobSpec, service: ServiceAccess, layout: OutputLayout, run_id: str, started: str, full: bool
) -> dict:
    """What a worker needs to know of the run, as plain data (no key: workers read it themselves)."""
    key_env, secret, places = spec.service.api_key_env, spec.service.api_key_secret, spec.key_places()
    if service.label == EMBEDDED_SANDBOX:
        os.environ[SANDBOX_KEY_ENV] = service.api_key.reveal()  # local workers inherit it
        key_env, secret, places = SANDBOX_KEY_ENV, None, {}
    return {
        "run_id": run_id, "started": started, "output": str(layout.root.resolve()), "base_url": service.url,
        "api_key_env": key_env, "api_key_secret": secret, "key_places": places,
        "client": asdict(client_settings(spec)),
        "fsync": spec.durability == "fsync",
        "costs": dict(spec.costs), "shapes": shapes_data(spec.shape_overrides()), "incremental": not full,
        "declared": spec.declared(),
        "min_balance": spec.budget.min_balance, "staging": spec.runner.staging, "job": spec.name,
    }  # fmt: skip
