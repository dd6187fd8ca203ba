"""harvest: batch collection from a credit-billed retrieval service into Parquet and DuckDB, under a hard budget.

One import name, so harvest sits beside a project with its own `flows/`, `tasks/` or `configs/` packages: the
repository keeps its folders at the top (`flows/`, `tasks/`, `connectors/`, `configs/`, `sandbox/`), and this
package reaches them as `harvest.flows`, `harvest.tasks`, ... (symbolic links here, real folders in a wheel).

The Python API: `collect_job`, the Prefect flow `harvest run` runs (call it from a flow of your own, or deploy it
as `harvest.flows.collect:collect_job`); `RunFailed`, what awaiting it raises for a run that did not complete (its
`summary` says why); and `spec_path` for the job specs harvest ships. Imported lazily, so `import harvest` costs
nothing until one is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harvest.configs import spec_path
    from harvest.flows.collect import collect_job
    from harvest.flows.orchestrator.final_state import RunFailed

__all__ = ["RunFailed", "collect_job", "spec_path"]


def __getattr__(name: str) -> Any:
    if name == "collect_job":
        from harvest.flows.collect import collect_job

        return collect_job
    if name == "RunFailed":
        from harvest.flows.orchestrator.final_state import RunFailed

        return RunFailed
    if name == "spec_path":
        from harvest.configs import spec_path

        return spec_path
    raise AttributeError(f"module 'harvest' has no attribute {name!r}")
