"""Prefect defaults harvest applies before Prefect is imported, and what Prefect prints on harvest's terminal.

harvest calls nothing but the configured service: Prefect's anonymous analytics, orchestration telemetry and
resource metrics are switched off, and the temporary server gets time to create its database on a first run.
Each is a default only: a user who sets the variable keeps their value.
"""

from __future__ import annotations

import logging
import os
import sys

PREFECT_DEFAULTS: dict[str, str] = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS": "false",
    "DO_NOT_TRACK": "1",
    # A first run creates Prefect's database (migrations): 10-30 s on a small machine with a slow disk, past
    # Prefect's default of 20 s for its temporary server, which would fail a first `make demo`.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}

SERVER_START = "prefect server start --analytics-off"
"""The Prefect server harvest tells users to start: a server of their own reads none of harvest's defaults, and
with analytics on its telemetry service logs an ERROR each time it cannot reach Prefect's collector (every
machine without internet access, every night)."""


def apply_prefect_defaults() -> None:
    """Set each default the environment does not set. Where Prefect was imported first (a team's module that
    imports `prefect` before `harvest`), it has read its settings already: they are read again
    (`refresh_global_settings_context`, what Prefect does after its plugins set variables), or the team's flow
    kept a 20 s start for its temporary server and its telemetry on."""
    added = [name for name in PREFECT_DEFAULTS if name not in os.environ]
    for name in added:
        os.environ[name] = PREFECT_DEFAULTS[name]
    context = sys.modules.get("prefect.context")
    if added and context is not None and hasattr(context, "refresh_global_settings_context"):
        context.refresh_global_settings_context()
    plugins = logging.getLogger("prefect.plugins")
    if not any(isinstance(f, _SignalInPluginStart) for f in plugins.filters):
        plugins.addFilter(_SignalInPluginStart())


class _SignalInPluginStart(logging.Filter):
    """Drops Prefect's "Failed to initialize plugins" and its 40-line traceback when what failed was a signal:
    a Ctrl-C or SIGTERM while `import prefect` builds its settings lands in a pydantic callback and comes out as
    a ValidationError, which Prefect logs and goes on from. harvest remembers the signal and stops, saying so
    itself (`flows.stop_signals`); any other plugin failure is shown."""

    def filter(self, record: logging.LogRecord) -> bool:
        from harvest.flows import stop_signals

        return stop_signals.received is None


class _PrefectEchoes(logging.Filter):
    """Drops Prefect's console lines that repeat what `harvest run` prints itself, once: the flow's `Finished in
    state ...` (logged as ERROR for any run that is not Completed: a Ctrl-C, a refused key) and a failed query's
    task-run lines ("Task run failed with state ..." with the whole query summary, then "Finished in state
    Failed(...)"), or a task run Prefect could not start ("Finished in state Pending()" and a 20-line hint about
    `.wait()`: `flows.run.fanout` says it in one line). The lines still reach the Prefect API, with the states."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("harvest."):
            return False  # said by harvest itself, as its own lines (`_HarvestWarnings`)
        if record.name == "prefect.flow_runs":
            return not str(record.msg).startswith("Finished in state")
        if record.name == "prefect.task_runs" and record.levelno >= logging.ERROR:
            return not str(record.msg).startswith(("Task run failed with state", "Finished in state"))
        return True


TOLD_AT_END = {"harvest_told_at_end": True}
"""`extra` of a warning that `harvest run`'s last lines say again (a load DuckDB refused): it goes to the
flow run's Prefect log, and the terminal gets it once, at the end."""


class _HarvestWarnings(logging.Handler):
    """harvest's own warnings (the ledger's overcharge and balance floor, a page's repairs, a dependent query a
    parent value could not start) as `warning: ...` lines, like every other line `harvest run` prints: through
    Prefect's console handler they came as `04:39:51.242 | WARNING | harvest.ledger - ...` in the middle of a
    cron log's plain sentences."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        from harvest.flows import console

        if getattr(record, "harvest_told_at_end", False):
            return
        try:
            console.warning(record.getMessage())
        except Exception:  # a closed stderr: the record is not worth the run
            self.handleError(record)


def harvest_warnings_as_lines() -> None:
    """Print harvest's own warnings as `warning: ...` lines from the CLI run's first check on (idempotent):
    before any handler, the service check's "balance could not be read" came bare, by Python's last resort."""
    harvest = logging.getLogger("harvest")
    if not any(isinstance(h, _HarvestWarnings) for h in harvest.handlers):
        harvest.addHandler(_HarvestWarnings())


def quiet_prefect_echoes() -> None:
    """Filter Prefect's console handler, once Prefect configured its logging (on import), and print harvest's
    own warnings as harvest's lines: for the CLI's runs."""
    from prefect.logging.handlers import PrefectConsoleHandler

    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrefectConsoleHandler) and not any(
            isinstance(f, _PrefectEchoes) for f in handler.filters
        ):
            handler.addFilter(_PrefectEchoes())
    harvest_warnings_as_lines()


class _RunLog(logging.Handler):
    """harvest's warnings in the Prefect log of the flow run (or task run) they were said in, which the Prefect
    UI shows beside its state: harvest says a warning once, through its `harvest.*` loggers, and this is how
    Prefect gets it (its API handler serves only Prefect's own run loggers). A warning said outside a run (a
    thread of its own, `harvest load`) has no run log to join and is only printed."""

    def __init__(self) -> None:
        from prefect.logging.handlers import APILogHandler

        super().__init__(logging.WARNING)
        self._api = APILogHandler()

    def emit(self, record: logging.LogRecord) -> None:
        from prefect.context import FlowRunContext, TaskRunContext

        if FlowRunContext.get() is not None or TaskRunContext.get() is not None:
            self._api.handle(record)


def harvest_warnings_to_run_logs() -> None:
    """Send harvest's warnings to the Prefect log of the run they are said in (idempotent): wherever the flow
    runs, `harvest run`, a served deployment or a worker."""
    harvest = logging.getLogger("harvest")
    if not any(isinstance(h, _RunLog) for h in harvest.handlers):
        harvest.addHandler(_RunLog())
