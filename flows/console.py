"""Where harvest prints, and the one way it prints text it did not write itself.

Query ids, parameter values, error messages and landed rows come from users or from the service. Printed
through rich's defaults, `[quote]nice[/quote]` loses its brackets, `[/i]` raises MarkupError, `:smile:` turns
into an emoji and an ESC byte moves the cursor of the terminal. So the consoles here have markup, emoji and
highlighting off, and `literal()` shows control characters as escapes (`\\x1b`). Style is given as a rich
`Style` or style name on a `Text`, never inside the text.

Adopting it: print with `out`/`err` (or `error()`, `warning()`), build tables with `table()` and `add_row()`,
and wrap any text that is not a fixed string of harvest's in `literal()`.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console, ConsoleDimensions
from rich.table import Table
from rich.text import Text

PIPE_WIDTH = 200
"""Width of output to a pipe or file when COLUMNS is unset: rich would squeeze tables into 80 columns."""

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 controls but tab and newline, DEL, and C1 controls (0x9b starts an escape sequence on some terminals)."""


def visible(text: str) -> str:
    """`text` with each control character (tab and newline kept) written as a Python escape, `\\x1b`."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def literal(value: object, style: str = "") -> Text:
    """A rich Text that prints exactly `str(value)`: never markup, never a terminal control sequence."""
    return Text(visible(value if isinstance(value, str) else str(value)), style=style)


class LiteralConsole(Console):
    """A rich Console that never reads markup, emoji codes or highlights, and keeps tables wide in pipes."""

    def __init__(self, stderr: bool = False) -> None:
        super().__init__(stderr=stderr, markup=False, emoji=False, highlight=False)

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._width is None and "COLUMNS" not in os.environ and not self.is_terminal:
            return ConsoleDimensions(PIPE_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


out = LiteralConsole()
err = LiteralConsole(stderr=True)


def say(message: object, style: str = "") -> None:
    """One message on stdout, printed literally and never wrapped (lines stay greppable)."""
    out.print(literal(message, style), soft_wrap=True)


def error(message: object) -> None:
    """`error: <message>` on stderr; the message is printed literally, whatever brackets it holds."""
    err.print(Text("error: ", style="red") + literal(message), soft_wrap=True)


def warning(message: object) -> None:
    err.print(Text("warning: ", style="yellow") + literal(message), soft_wrap=True)


def note(message: object) -> None:
    """A line on stderr that is not an error (hints, notes about what was cut)."""
    err.print(literal(message), soft_wrap=True)


def table(*columns: str, title: object | None = None, right: Iterable[str] = ()) -> Table:
    """A rich Table whose title and headers are literal; columns named in `right` are right-aligned."""
    aligned = set(right)
    result = Table(title=None if title is None else literal(title), title_justify="left")
    for name in columns:
        result.add_column(literal(name), justify="right" if name in aligned else "left", overflow="fold")
    return result


def add_row(target: Table, *cells: object) -> None:
    """Add a row whose cells print literally: a `Text` is kept (its style too), None is empty."""
    target.add_row(*(c if isinstance(c, Text) else literal("" if c is None else c) for c in cells))


def harvest_command() -> str:
    """How the user can call harvest again: `harvest` when it is on PATH, else the path they just used."""
    if shutil.which("harvest"):
        return "harvest"
    exe = Path(sys.argv[0])
    try:
        return str(exe.resolve().relative_to(Path.cwd())) if exe.name == "harvest" else "harvest"
    except ValueError:
        return str(exe)
