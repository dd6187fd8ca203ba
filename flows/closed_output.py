"""stdout and stderr of the `harvest` process: output is not the work.

A pipe whose reader left (`harvest run SPEC | head -n 1`), a terminal or SSH session that went away, a log file
on a vanished mount: a write to stdout or stderr fails (EPIPE, EIO, a closed file). That failure is answered
here, once, wherever the write came from (a progress line while a page lands, the live view's thread, a log
record, the report at the end): the write never raises, so no page is recorded unreadable and no query fails
for it; the stream's descriptor is pointed at /dev/null, so every later write (buffered or raw, from any thread,
the interpreter's last flush) goes nowhere without an error; and whoever listens is told (`listen`): a run being
paid stops as on SIGTERM (`flows.run.interrupt`), lands and loads what it paid, and the next run resumes it.

Text the stream's encoding cannot carry is written with escapes rather than failing the write.
Only the command-line process wraps its streams (`at_start`, from `flows/__init__.py`).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

_lock = threading.Lock()
_gone: str | None = None
"""What closed first (`a closed stdout`), once one did."""
_listeners: list[Callable[[str], None]] = []


class GuardedStream:
    """A text stream whose writes never raise for the stream's own failure (`closed`)."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream = stream
        self._name = name

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except UnicodeEncodeError:
            encoding = self._stream.encoding or "utf-8"
            return self.write(text.encode(encoding, "backslashreplace").decode(encoding))
        except (OSError, ValueError):
            closed(self._stream, self._name)
            return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError):
            closed(self._stream, self._name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def closed(stream: TextIO, name: str) -> None:
    """`stream` failed a write: it writes to /dev/null from now on, and the listeners hear of the first stream
    that closed (stdout and stderr are often one pipe: both close, the run stops once)."""
    global _gone
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # no descriptor to point elsewhere: the guard drops what comes
    with _lock:
        if _gone is not None:
            return
        _gone = f"a closed {name}"
        listeners = list(_listeners)
    for listener in listeners:
        listener(_gone)


def gone() -> str | None:
    """What closed (`a closed stdout`), if stdout or stderr did."""
    return _gone


def listen(listener: Callable[[str], None]) -> Callable[[], None]:
    """Call `listener` with what closed when stdout or stderr first closes (from any thread); returns the call
    that stops listening."""
    with _lock:
        _listeners.append(listener)

    def stop() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return stop


def at_start() -> None:
    """Wrap the process's stdout and stderr, before anything keeps a reference to them (logging handlers,
    rich's consoles, Prefect's console handler)."""
    if not isinstance(sys.stdout, GuardedStream) and sys.stdout is not None:
        sys.stdout = GuardedStream(sys.stdout, "stdout")
    if not isinstance(sys.stderr, GuardedStream) and sys.stderr is not None:
        sys.stderr = GuardedStream(sys.stderr, "stderr")
