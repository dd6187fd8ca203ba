"""Prefect defaults harvest applies before Prefect is imported, and what Prefect prints on harvest's terminal.

harvest calls nothing but the configured service: Prefect's anonymous analytics, orchestration telemetry and
resource metrics are switched off, and the temporary server gets time to create its database on a first run.
Each is a default only: a user who sets the variable keeps their value.
"""

from __future__ import annotations

import logging
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


class _NoFinalStateLine(logging.Filter):
    """Drops Prefect's `Finished in state Failed(...)` console line: `harvest run` prints the run's outcome
    itself, once, and Prefect logs that line as ERROR for any run that is not Completed (a Ctrl-C, a refused
    key), which repeated harvest's message on stderr. The line still reaches the Prefect API, with the state."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "prefect.flow_runs" and str(record.msg).startswith("Finished in state"))


def quiet_final_state_line() -> None:
    """Filter Prefect's console handler (Prefect configured its logging on import): for the CLI's runs only."""
    from prefect.logging.handlers import PrefectConsoleHandler

    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrefectConsoleHandler) and not any(
            isinstance(f, _NoFinalStateLine) for f in handler.filters
        ):
            handler.addFilter(_NoFinalStateLine())
