"""One output, one kind of service: the embedded sandbox's made-up records never land beside real ones."""

from __future__ import annotations

from harvest.flows.spec import UsageError
from harvest.flows.spec.service_url import EMBEDDED_SANDBOX
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import run_heads


def refuse_mixed_services(layout: OutputLayout, service: str) -> None:
    """A run against the embedded sandbox into an output that holds runs against the service, or the other way
    round: refused before anything is paid. The sandbox's made-up records would land in the same tables as real
    ones (`harvest run nightly.yaml --base-url sandbox`, to try a job offline, wrote into the nightly's DuckDB),
    and an incremental query would then stop at keys only the sandbox had."""
    sandbox = service == EMBEDDED_SANDBOX
    other = next(
        (h for h in run_heads(layout) if h.service and (h.service == EMBEDDED_SANDBOX) != sandbox), None
    )
    if other is not None:
        raise UsageError(
            f"{layout.root} holds run {other.run_id} of job {other.job} against {other.service}, and this run "
            f"asks {service}: {'made-up' if sandbox else 'real'} records would land in the same tables. Give "
            "this run an output of its own (--output DIR, or the spec's output)"
        )
