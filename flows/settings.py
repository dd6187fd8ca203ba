"""Prefect defaults harvest applies before Prefect is imported.

harvest calls nothing but the configured service: Prefect's anonymous analytics, orchestration telemetry and
resource metrics are switched off, and the temporary server gets time to create its database on a first run.
Each is a default only: a user who sets the variable keeps their value.
"""

from __future__ import annotations

import os

PREFECT_DEFAULTS: dict[str, str] = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS": "false",
    "DO_NOT_TRACK": "1",
    # A first run creates Prefect's database (migrations): 10-30 s on a small machine with a slow disk, past
    # Prefect's default of 20 s for its temporary server, which would fail a first `make demo`.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}


def apply_prefect_defaults() -> None:
    for name, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(name, value)
