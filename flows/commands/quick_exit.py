"""`harvest run` and `demo` leave without tearing the interpreter down.

Once a run is over (its files written and closed, its lock released, the summary printed) and every exit
handler ran (Prefect's flush of logs and events, DuckDB's cleanup, the kill of the temporary server), Python
would still finalize the interpreter: tear down every module and free every object of Prefect, pydantic,
DuckDB and Arrow, ~0.6 s (~0.9 s on a busy machine) in which nothing is written. The harvest process leaves
there with `os._exit(code)` instead, after flushing logging's handlers, stdout and stderr.

Only the harvest command-line process does this (never a test runner or a notebook calling the commands),
only with the exit code the command itself chose (`typer.Exit`: any other ending, a traceback included, exits
the usual way), and only when stdout and stderr flush (else Python's own exit reports the failure). The handler
is registered before anything of the run registers one, so every other handler runs before it; only logging's
(registered on import) would run after it, so it is called here.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import typer

_code: int | None = None
_armed = False


def _in_the_cli() -> bool:
    """The `harvest` console script, or `python -m flows.cli`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return Path(sys.argv[0]).name == "harvest" or (spec is not None and spec.name == "harvest.flows.cli")


@contextlib.contextmanager
def on_exit() -> Iterator[None]:
    """Around a command: arm the quick exit, and note the exit code the command leaves with."""
    global _armed, _code
    if not _armed and _in_the_cli():
        atexit.register(_leave)
        _armed = True
    try:
        yield
    except typer.Exit as exc:
        _code = exc.exit_code
        raise
    except Exception as exc:  # one of harvest's errors, said and made an exit code by `flows.cli_errors`
        from harvest.flows.cli_errors import exit_code

        _code = exit_code(exc)
        raise


def leave_now(code: int) -> None:
    """Leave at once with `code`, skipping every exit handler: only when Prefect's API is away at the end of a
    run, whose record already holds what Prefect is owed (`flows.orchestrator.prefect_record`). Prefect's
    workers would otherwise drain their queues at exit without a time limit (~8 s an event, ~62 s a log batch)
    for an API that does not answer. Outside the `harvest` process, nothing happens."""
    if not _in_the_cli():
        return
    for handler in logging.getLogger().handlers:  # stream handlers only: the API log handler would wait
        if isinstance(handler, logging.StreamHandler):
            with contextlib.suppress(Exception):
                handler.flush()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def _leave() -> None:
    if _code is None:
        return
    logging.shutdown()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(_code)
