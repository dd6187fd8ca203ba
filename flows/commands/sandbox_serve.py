"""`harvest sandbox`: harvest's catalog (each endpoint the sandbox emulates no other way served from its
declaration), and the declared endpoints it serves beside them, from catalog files (`--catalog FILE`) and a job
spec's `catalogs:` and `endpoints:` (`--spec SPEC`).

The sandbox reads declarations as plain data (`sandbox.config.SandboxConfig.declared`); harvest reads and
checks them first, so that a declaration the sandbox serves is one `harvest run` accepts, with every problem
named on its file and line before anything is served.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harvest.connectors.catalog.job_catalog import builtin_declarations
from harvest.flows.spec.declared import catalog_file_endpoints, declared_endpoints
from harvest.flows.spec.problems import SpecError, UsageError
from harvest.sandbox import drift_shapes
from harvest.sandbox.config import Drift, Quirks
from harvest.sandbox.served_paths import replay_answers

MAX_PORT = 65535


def serve_sandbox(named: tuple[list[str], list[str], Sequence[Path], Path | None], **options: Any) -> None:
    """Serve until interrupted, with what `named` names (drift shapes, `--replay` entries, catalog files, a
    spec) and `options` (`sandbox.wire.serving.serve`'s; `quirks` a bool: all on or all off; `fault_kinds`
    a list or the command line's comma-separated text). UsageError
    (exit 2) names what is refused: a shape, a replay entry, a declaration harvest or the sandbox cannot take."""
    from harvest.sandbox.wire.serving import serve

    drift, replay, catalogs, spec = named
    if not 0 <= options.get("port", 0) <= MAX_PORT:  # the socket's own refusal was a traceback
        raise UsageError(
            f"harvest sandbox: --port {options['port']} is not a port; "
            f"allowed: 1 to {MAX_PORT}, or 0 for any free one"
        )
    try:
        declared = sandbox_declarations(catalogs, spec)
    except SpecError as exc:
        raise UsageError(f"{exc}\nnothing was served.") from None
    options["quirks"] = Quirks() if options.get("quirks", True) else Quirks.none()
    if isinstance(options.get("fault_kinds"), str):  # the command line's comma-separated list
        options["fault_kinds"] = [k.strip() for k in options["fault_kinds"].split(",") if k.strip()]
    catalog = builtin_declarations()
    try:
        replayed = replay_answers(replay, also=(*catalog, *declared))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    shapes = _drift(drift)
    try:
        serve(drift=shapes, replay=replayed, declared=declared, catalog=catalog, **options)
    except ValueError as exc:  # refused before serving: a declaration, a bad scale, a port in use
        raise UsageError(f"harvest sandbox: {exc}") from None


def _drift(names: list[str]) -> Drift:
    """The `--drift` shapes combined, each said on stderr; UsageError naming an unknown one."""
    unknown = [name for name in names if name not in drift_shapes.SHAPES]
    if unknown:
        raise UsageError(f"--drift: no shape {unknown[0]!r}; allowed: {', '.join(drift_shapes.SHAPES)}")
    for name in names:
        print(f"drift {name}: {drift_shapes.SHAPES[name].what}", file=sys.stderr)
    return drift_shapes.combine(names)


def sandbox_declarations(catalogs: Sequence[Path], spec: Path | None) -> dict[str, dict[str, Any]]:
    """Path -> declaration of every endpoint `harvest sandbox` is asked to serve; each said on stderr.
    SpecError names the file, the line and the field of a declaration harvest refuses."""
    declared: dict[str, dict[str, Any]] = {}
    for file in catalogs:
        declared.update(catalog_file_endpoints(file))
    if spec is not None:
        declared.update(declared_endpoints(spec))
    for path, declaration in declared.items():
        style = (declaration.get("paging") or {}).get("style", "single")
        tables = ", ".join(declaration.get("records") or {})
        print(f"declared {path}: paging {style}, records {tables}", file=sys.stderr)
    return declared
