"""How a command's failure reaches the user: its message on stderr and its exit code, decided here only.

A command raises harvest's own errors (a refused spec or call, a missing key, a busy database, a query DuckDB
could not run) or `Failed` with words of its own (what an export had committed when it failed), and never
prints an error or picks an exit code itself: every command of `harvest` runs inside `handled` (the Typer
subclass in `flows/cli.py` wraps each one), as Prefect's CLI handles its errors once in its Typer subclass
(`PrefectTyper`, `with_cli_exception_handling`). Anything else is a bug, and keeps its traceback.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import typer


class Failed(Exception):
    """A command's failure in its own words: `error: <message>` on stderr (`plain`: the message alone, as a
    spec's problems are, each starting with its file and line), then exit `exit_code`."""

    def __init__(self, message: str, exit_code: int = 2, plain: bool = False) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.plain = plain


EXIT_CODES = {
    "harvest.flows.cli_errors.Failed": 1,
    "harvest.flows.spec.problems.UsageError": 2,
    "harvest.connectors.errors.MissingApiKey": 2,
    "harvest.tasks.database.load_settings.LoadSettingError": 2,
    "harvest.tasks.database.connection.DatabaseBusy": 1,
    "harvest.tasks.database.connection.DamagedDatabase": 1,
    "harvest.tasks.output.parquet_sink.UnreadableParquet": 1,
}
"""harvest's errors a command may end with (their classes and subclasses), and the exit code of those that
carry none of their own (`exit_code`: a refused spec or call 2, a full disk 75): the README's table of exit
codes. Named, not imported: `harvest --help` and `validate` would otherwise import DuckDB and pydantic."""


def exit_code(exc: BaseException) -> int | None:
    """The code a command ending with `exc` exits with; None when it is not one of harvest's errors."""
    for kind in type(exc).__mro__:
        code = EXIT_CODES.get(f"{kind.__module__}.{kind.__qualname__}")
        if code is not None:
            return int(getattr(exc, "exit_code", code))
    return None


def refused_write(exc: BaseException, before: str = "") -> Failed | None:
    """The line and exit 75 (try again later) for a write this machine refused (no space, a quota, a read-only
    filesystem) that `exc` is or came from, naming the path; None for any other error."""
    from harvest.tasks.output.machine_fault import EXIT_CODE, as_machine_fault

    fault = as_machine_fault(exc)
    if fault is None:
        return None
    return Failed(f"{before}{fault}; {fault.advice()}, then run the same command again", EXIT_CODE)


def or_try_later(exc: BaseException, code: int) -> int:
    """`code`, or 75 (try again later) when `exc` is a write this machine refused."""
    said = refused_write(exc)
    return code if said is None else said.exit_code


def with_mend(exc: BaseException) -> str | None:
    """`exc`'s words and, to paste, the command that mends it (its `then`: the command's words, then what it
    does); None for an error that names none."""
    then = getattr(exc, "then", None)
    if then is None:
        return None
    from harvest.flows import console

    return f"{exc}; `{console.harvest_line(*then[0])}` {then[1]}"


def handled(command: Callable[..., object]) -> Callable[..., object]:
    """`command`, whose failure with one of harvest's errors is said on stderr and becomes its exit code."""

    @functools.wraps(command)
    def run(*args: object, **kwargs: object) -> object:
        try:
            return command(*args, **kwargs)
        except Exception as exc:
            code = exit_code(exc)
            if code is None and (said := refused_write(exc)) is not None:  # a write no step of it said
                exc, code = said, said.exit_code
            if code is None:
                raise
            from harvest.flows import console

            if isinstance(exc, Failed) and exc.plain:
                console.note(str(exc))
            elif (mended := with_mend(exc)) is not None:
                console.error(mended)
            else:
                console.error(str(exc))
            raise typer.Exit(code) from None

    return run
