"""SIGTERM and SIGHUP as Ctrl-C in the `harvest` process, from its first line of harvest code to its exit.

Service managers stop a job with SIGTERM (systemd, Kubernetes, ECS, `docker stop`, a Prefect worker's cancel), a
closed terminal or SSH session sends SIGHUP. Python's defaults end the process at once on both, silently and
with nothing finished (exit 143 or 129), and a Ctrl-C while modules load prints a traceback. In the `harvest`
command-line process, installed by `flows/__init__.py` before anything else is imported, the three signals
mean the same thing in each phase:

- **Starting** (imports, reading the command line): nothing is started, locked or sent yet; the process leaves
  at once with one line and exit 130.
- **The command**: SIGTERM and SIGHUP do whatever Ctrl-C does at that moment, through SIGINT's handler of the
  moment: Python's KeyboardInterrupt, asyncio's cancel of the main task, a run's clean stop
  (`flows.run.interrupt`), uvicorn's shutdown. A KeyboardInterrupt no command answered becomes one line and exit
  130 (`as_ctrl_c`). While a compiled module initialises, the three signals wait until its init returns
  (`flows.compiled_imports`).
- **After the command** (its outcome printed, its files closed, its lock released; Prefect's exit handlers still
  sending logs): the process leaves at once with the command's own exit code.

Exit 130 for all three signals: one code for "interrupted cleanly, run it again" whoever sent the signal; the
line names the signal (docs/decisions.md, "Recurring runs"). A SIGTERM or SIGHUP the parent ignored (`nohup`)
stays ignored. Only the command-line process does any of this: a test runner, a notebook or a Prefect worker's
flow run importing harvest keep their own handlers.

The interpreter's own start before `flows/__init__.py` (~60-80 ms on a busy 2-core machine: `site`, the
console script) cannot be covered from Python: a signal there still ends the process with the default action.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

# Only modules the interpreter's start has already loaded, and `signal`: `typing` alone would cost ~10 ms more
# in which a signal still ends the process silently.

INTERRUPTED = 130
"""The exit code of every signal-caused stop (128 + SIGINT, as a shell reports Ctrl-C)."""

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_taken: set[int] = set()
"""The signals harvest answers in this process (those not ignored when it started); empty outside the CLI."""
received: str | None = None
"""The name of the last of these signals the process got, for the line that says what stopped it."""


def in_the_cli() -> bool:
    """The `harvest` console script or `python -m flows.cli` (while the package is being found, `argv[0]` is
    `-m`): only that process takes these signals over."""
    return Path(sys.argv[0]).name == "harvest" or sys.argv[0] == "-m"


def _note(line: str) -> None:
    """A line on stderr from a signal handler: straight to the descriptor (a buffered stream may be mid-write)."""
    with contextlib.suppress(OSError):
        os.write(2, f"{line}\n".encode())


def _install(handler: Callable[[int, FrameType | None], object]) -> None:
    for sig in _taken:
        signal.signal(sig, handler)


def _leave_at_start(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    _note(f"harvest: {name}: interrupted while starting; nothing was started or sent")
    os._exit(INTERRUPTED)


def at_start() -> None:
    """From the first line of harvest code in the CLI process: a signal leaves at once (nothing began)."""
    if _taken or not in_the_cli():
        return
    _taken.update(sig for sig in SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN)
    _install(_leave_at_start)


def _ctrl_c(signum: int, frame: FrameType | None) -> None:
    """Python's KeyboardInterrupt, remembered (`received`) for when a library swallows it or makes it an
    error of its own, as a SIGTERM is."""
    global received
    received = signal.Signals(signum).name
    if _stopping is not None:
        _stopping.set()
    raise KeyboardInterrupt


def like_ctrl_c(signum: int, frame: FrameType | None) -> None:
    """SIGTERM or SIGHUP handled as SIGINT is handled right now; Python's KeyboardInterrupt, remembered
    (`_ctrl_c`), when SIGINT has no handler of its own (ignored or default)."""
    global received
    received = signal.Signals(signum).name
    current = signal.getsignal(signal.SIGINT)
    if callable(current) and current is not like_ctrl_c:
        current(signum, frame)
        return
    _ctrl_c(signum, frame)


def interrupt(signum: int, frame: FrameType | None) -> None:
    """Python's KeyboardInterrupt for `signum`, remembered: for a handler that stands in for SIGINT's own."""
    _ctrl_c(signum, frame)


SERVE_STOP = signal.SIGUSR1
"""What `harvest serve` sends each flow-run process it started when it is stopped
(`flows.orchestrator.serve_stop`): stop as on a first signal, and only once; a SIGTERM or SIGINT that reached
the process too is that same stop, not a second signal."""
SERVED_BY = "HARVEST_SERVED_BY"
"""The environment variable holding the pid of the `harvest serve` that started a flow-run process."""
SERVE_STOPPING = "HARVEST_SERVE_STOPPING"
"""Set (to its pid) by a `harvest serve` that is stopping: a flow-run process it starts after that (a run its
poller had picked up already) inherits it and stops before paying, as if asked with SERVE_STOP."""
asked_to_stop = False
"""`SERVE_STOP` came before the flow body listened for it (`flows.run.interrupt` acts on it then)."""


def served() -> bool:
    """This process is a flow run `harvest serve` started (its direct child): one that listens for SERVE_STOP."""
    return os.environ.get(SERVED_BY) == str(os.getppid())


def serve_stopping() -> bool:
    """The `harvest serve` that started this flow run was stopping when it started it (`SERVE_STOPPING`)."""
    return served() and os.environ.get(SERVE_STOPPING) == os.environ.get(SERVED_BY)


def _asked(signum: int, frame: FrameType | None) -> None:
    global asked_to_stop
    asked_to_stop = True


def served_listens() -> None:
    """From harvest's first line in a flow run `harvest serve` started: SERVE_STOP is remembered (its default
    would end the process) until the flow body answers it."""
    if served():
        with contextlib.suppress(ValueError):  # not the main thread: no handler, and serve waits then kills
            signal.signal(SERVE_STOP, _asked)


def lost_on_its_way() -> None:
    """KeyboardInterrupt when a signal came earlier in this command: called where every interrupt
    that came out would have ended the command already, so that one was lost (raised inside a library's callback
    from compiled code, pydantic's, it became an error the library swallowed: Prefect's plugin start)."""
    if received is not None:
        raise KeyboardInterrupt


TYPE_CHECKING = False  # `typing` is not imported at start (above); mypy reads this name as typing's
if TYPE_CHECKING:
    import threading

_stopping: threading.Event | None = None
"""A `threading.Event` set by the signal, while a command that must stop promptly runs (`_leave_if_stuck`)."""


def _leave_if_stuck(seconds: float) -> None:
    """Leave `seconds` after a signal if the command is still running: DuckDB answers the interrupt by stopping
    its query, but at times its main thread then waits for ever in C, where no later signal reaches Python, and
    only a kill ended it (an aggregate over `range`: 3 of 9 stops of `harvest sql`, 1 in 20 in a plain script
    with Python's own SIGINT handler).
    Leaving is what that kill does, sooner: DuckDB's file stays as a kill leaves it (its write-ahead log
    keeps a transaction whole or out; a cut load runs again)."""
    import threading
    import time

    global _stopping
    came = _stopping = threading.Event()

    def watch() -> None:
        came.wait()
        time.sleep(seconds)
        if _stopping is came:
            _note(
                f"harvest: {signal_name()}: interrupted; DuckDB had not stopped {seconds:g} s later: left it"
            )
            os._exit(INTERRUPTED)

    threading.Thread(target=watch, name="harvest-stuck-stop", daemon=True).start()


def _command_starts() -> None:
    from harvest.flows import compiled_imports

    compiled_imports.hold_signals(_taken)
    if signal.SIGINT in _taken:
        # Python's handler that remembers, as `signal.default_int_handler` too: asyncio.run installs its own
        # over the handler it finds there only (an identity check), and restores that one when it ends
        signal.default_int_handler = _ctrl_c  # type: ignore[assignment]
        signal.signal(signal.SIGINT, _ctrl_c)
    for sig in _taken - {signal.SIGINT}:
        signal.signal(sig, like_ctrl_c)


def _command_ended(code: int) -> None:
    global _stopping
    _stopping = None

    def leave(signum: int, frame: FrameType | None) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                stream.flush()
        _note(
            f"harvest: {signal.Signals(signum).name}: the command had ended; leaving with its exit code {code}"
        )
        os._exit(code)

    _install(leave)


def interrupts() -> tuple[type[BaseException], ...]:
    """What a signal becomes on its way out of a command: KeyboardInterrupt, and Prefect's TerminationSignal
    (its flow engine turns a SIGTERM into one around the flow body) once Prefect is imported."""
    exceptions = sys.modules.get("prefect.exceptions")
    return (KeyboardInterrupt,) + ((exceptions.TerminationSignal,) if exceptions is not None else ())


def came_as_another_error(exc: BaseException) -> bool:
    """Whether `exc` is a signal's interrupt that came out of a library as an error of its own: a signal came
    during the command (`received`), or a KeyboardInterrupt is in the error's chain (pydantic chains it as the
    cause of the PydanticSerializationError it raises when the interrupt lands in one of its callbacks; an
    interrupt raised by a handler other than harvest's, asyncio's second Ctrl-C, is not in `received`)."""
    from harvest.connectors.error_chain import error_chain

    return received is not None or any(isinstance(link, KeyboardInterrupt) for link in error_chain(exc))


def signal_name() -> str:
    """The signal that stopped the command, as the user's line names it."""
    return received or "SIGINT"


DUCKDB_STOPS_WITHIN = 10.0
"""Seconds after a signal that a command doing DuckDB's work alone leaves if DuckDB has not stopped; DuckDB
stops within a second when it stops at all."""
DUCKDB_ALONE = frozenset({"sql", "load", "rebuild"})
"""The commands (by their functions' names) whose stop has nothing of their own to finish: they leave
DUCKDB_STOPS_WITHIN after a signal DuckDB is still stuck on (`_leave_if_stuck`)."""


def as_ctrl_c(command: Callable[..., object]) -> Callable[..., object]:
    """A command whose body runs with SIGTERM and SIGHUP as Ctrl-C; an interrupt it did not answer itself
    becomes one line and exit 130 instead of a traceback or a silent exit."""
    stuck_leaves = command.__name__ in DUCKDB_ALONE  # kept by functools.wraps

    @functools.wraps(command)
    def run(*args: object, **kwargs: object) -> object:
        import typer

        code = 1
        if _taken:
            _command_starts()
            if stuck_leaves:
                _leave_if_stuck(DUCKDB_STOPS_WITHIN)
        try:
            result = command(*args, **kwargs)
            code = 0
            return result
        except interrupts():
            code = INTERRUPTED
            _note(f"harvest: {signal_name()}: interrupted")
            raise typer.Exit(INTERRUPTED) from None
        except Exception as exc:
            if hasattr(exc, "exit_code") or not came_as_another_error(exc):
                code = getattr(exc, "exit_code", 1)  # typer.Exit, click's usage errors: their own code
                raise
            # the interrupt, made an error of its own by a library it reached (DuckDB's "Query interrupted"
            # in `load`, `sql`, `rebuild`): stopped as asked, not broken
            code = INTERRUPTED
            _note(f"harvest: {signal_name()}: interrupted ({type(exc).__name__} on its way out)")
            raise typer.Exit(INTERRUPTED) from None
        finally:
            if _taken:
                _command_ended(code)

    return run
