"""A real `harvest run` in a pseudo-terminal of 80 columns and 24 lines, and the screen a person sees there.

rich draws its live view with cursor moves (up, erase line) and redraws it in place; what a person reads is
what is left on the screen after those moves, so a VT emulator (pyte) applies them to the bytes the run wrote.
`display()` is the screen now, `everything()` the screen and every line that scrolled off it.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pyte

from tests.process_helpers import FINISH_TIMEOUT

COLUMNS, LINES = 80, 24
SEPARATORS = " /]=,:;&?)"
"""Where harvest may break a line (`flows.console._BREAKS`): after these, or before `[` and `(`."""


class Terminal:
    """`command` run in a new pseudo-terminal of `columns` x `lines`, its output read into a VT emulator."""

    def __init__(
        self, command: Sequence[str], env: dict[str, str], columns: int = COLUMNS, lines: int = LINES
    ):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        self.screen = pyte.HistoryScreen(columns, lines, history=100_000)
        self.stream = pyte.ByteStream(self.screen)
        self.lock = threading.Lock()
        env = {**env, "COLUMNS": str(columns), "LINES": str(lines), "TERM": "xterm-256color"}
        self.proc = subprocess.Popen(
            list(command), env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        self.master = master
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65_536)
            except OSError:  # EIO: every process holding the terminal is gone
                return
            if not data:
                return
            with self.lock:
                self.stream.feed(data)

    def display(self) -> list[str]:
        """The screen as it is now, one string per line, trailing blanks cut."""
        with self.lock:
            return [line.rstrip() for line in self.screen.display]

    def everything(self) -> list[str]:
        """Every line that scrolled off the screen, then the screen."""
        with self.lock:
            columns = self.screen.columns
            top = ["".join(line[x].data for x in range(columns)).rstrip() for line in self.screen.history.top]
            return top + [line.rstrip() for line in self.screen.display]

    def wait_for(
        self, ready: Callable[[list[str]], bool], what: str, timeout: float = FINISH_TIMEOUT
    ) -> list[str]:
        """Until the screen is `ready`; the screen then. Fails when the run ends first. A screen is taken only
        when a second read 20 ms later is the same: one read mid-redraw is half of two frames."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.display()
            if ready(shown):
                time.sleep(0.02)
                if self.display() == shown:
                    return shown
            assert self.proc.poll() is None, f"the run ended before {what}:\n" + "\n".join(self.everything())
            assert time.monotonic() < deadline, f"never {what}:\n" + "\n".join(shown)
            time.sleep(0.05)

    def finish(self, timeout: float = FINISH_TIMEOUT) -> int:
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=timeout)
        os.close(self.master)
        return self.proc.returncode


def unwrapped(lines: Sequence[str]) -> str:
    """The lines as one text, each line break a space: for reading sentences that wrapped at spaces."""
    return " ".join(line.strip() for line in lines if line.strip())


def whole(text: str, lines: Sequence[str]) -> bool:
    """`text` on these lines, unbroken or broken only where harvest may break a line: after a separator (a
    space there dropped or kept), or before `[` or `(`. A word broken anywhere else (`harvest.d` / `uckdb`) is
    not found."""
    pattern = ""
    for i, char in enumerate(text):
        if char == " ":
            pattern += "(?: |\n)"
            continue
        if char in "[(" and i:
            pattern += "\n?"
        pattern += re.escape(char)
        if char in SEPARATORS:
            pattern += "\n?"
    return re.search(pattern, "\n".join(line.strip() for line in lines)) is not None


def printed_command(lines: list[str], after: str) -> str:
    """The command printed under the sentence starting with `after`, as a person copies it: its indented lines
    up to the one that closes its quoted query."""
    said = next(i for i, line in enumerate(lines) if line.startswith(after))
    start = next(i for i in range(said + 1, len(lines)) if lines[i].startswith("  "))  # the sentence may wrap
    taken: list[str] = []
    for line in lines[start:]:
        taken.append(line)
        if "\n".join(taken).count('"') >= 2:
            return "\n".join(taken)
    raise AssertionError(f"no command after {after!r}: {lines[start:]}")


def pasted_as_csv(command: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """A printed `harvest sql` command pasted into bash as printed, with harvest's venv on PATH, its answer as CSV
    and every row (`--format csv --limit 0`), run in `tmp_path`."""
    from tests.flow_helpers import ROOT, subprocess_env

    env = subprocess_env(tmp_path, PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        ["bash", "-c", command + " --format csv --limit 0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
