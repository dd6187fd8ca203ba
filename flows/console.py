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

import io
import os
import re
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console, ConsoleDimensions, ConsoleOptions, RenderResult
from rich.measure import Measurement
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
    """One message on stdout, printed literally and never wrapped (lines stay greppable, and a command in it
    stays one line, which copying from a terminal gives back whole)."""
    out.print(literal(message, style), soft_wrap=True)


def prose(message: object, style: str = "") -> None:
    """A sentence on stdout that holds no command: on a terminal, wrapped to its width at separators (never
    inside a word, as the terminal's own wrapping would); elsewhere one line, so that logs stay greppable."""
    text = literal(message, style)
    if out.is_terminal:
        out.print(AtSeparators(text))
    else:
        out.print(text, soft_wrap=True)


def error(message: object) -> None:
    """`error: <message>` on stderr; the message is printed literally, whatever brackets it holds."""
    err.print(Text("error: ", style="red") + literal(message), soft_wrap=True)


def warning(message: object) -> None:
    err.print(Text("warning: ", style="yellow") + literal(message), soft_wrap=True)


def note(message: object) -> None:
    """A line on stderr that is not an error (hints, notes about what was cut)."""
    err.print(literal(message), soft_wrap=True)


_BREAKS = re.compile(r"(?<=[ /\]=,:;&?)])(?! )|(?=[\[(])")
"""Where a line may break: after a space (the spaces stay on the line they end), a slash, `]`, `=`, `,`, `:`,
`;`, `&`, `?` or `)`, and before `[` or `(`: a path breaks between its parts, `videos[handle=nasa]` between
`videos`, `[handle=` and `nasa]`, never inside a word."""
_WORD_BREAKS = re.compile(r"(?<=[_.\-])")
"""Inside a piece too wide for a whole line: after `_`, `.` or `-` (`creative_material_` / `details`)."""


def pieces(text: Text, breaks: re.Pattern[str] = _BREAKS) -> list[Text]:
    """`text` cut at every place a line may break (`_BREAKS`), styles kept."""
    offsets = [m.start() for m in breaks.finditer(text.plain) if 0 < m.start() < len(text.plain)]
    return list(text.divide(offsets)) if offsets else [text]


def wrap_at_separators(text: Text, width: int, console: Console | None = None) -> list[Text]:
    """`text` in lines of at most `width` cells, broken only where `_BREAKS` allows. A piece wider than a whole
    line breaks at `_WORD_BREAKS`, and what is still too wide (a 100-character hash at 80 columns) is folded:
    it cannot fit otherwise."""
    lines: list[Text] = []
    for paragraph in text.split("\n", allow_blank=True):
        lines.extend(_wrap(paragraph, max(1, width), console or _MEASURING, (_BREAKS, _WORD_BREAKS)))
    return lines


def _wrap(text: Text, width: int, console: Console, breaks: tuple[re.Pattern[str], ...]) -> list[Text]:
    if not breaks:
        return list(text.wrap(console, width, overflow="fold", no_wrap=False))
    lines: list[Text] = []
    current = Text(end="")
    for piece in pieces(text, breaks[0]):
        if current.plain and _rstripped(current + piece).cell_len > width:
            lines.append(_rstripped(current))
            current, piece = Text(end=""), _lstripped(piece)
        current.append_text(piece)
        if _rstripped(current).cell_len > width:  # a piece wider than a whole line
            *full, current = _wrap(_rstripped(current), width, console, breaks[1:])
            lines.extend(full)
    lines.append(_rstripped(current))
    return lines


def _rstripped(text: Text) -> Text:
    copy = text.copy()
    copy.rstrip()
    return copy


def _lstripped(text: Text) -> Text:
    plain = text.plain
    return text[len(plain) - len(plain.lstrip(" ")) :]


_MEASURING = Console(width=80, markup=False, emoji=False, highlight=False, file=io.StringIO())
"""Folds a piece too wide for any line when no console is at hand (tabs and wide characters measured alike)."""


class AtSeparators:
    """A text that wraps only at separators (`wrap_at_separators`), as a rich renderable: table titles and
    cells holding query ids, paths and URLs, which rich would otherwise fold inside a word."""

    def __init__(self, text: Text) -> None:
        self.text = text

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        parts = [_rstripped(p).cell_len for line in self.text.split("\n") for p in pieces(line)]
        widest = max((line.cell_len for line in self.text.split("\n")), default=0)
        return Measurement(min(max(parts, default=0), options.max_width), min(widest, options.max_width))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in wrap_at_separators(self.text, options.max_width, console):
            if options.justify in ("right", "center"):
                line.align(options.justify, options.max_width)
            line.end = "\n"
            yield line


class LiteralTable(Table):
    """A table whose title is a line of its own above it, as wide as the terminal and broken only at separators
    (rich wraps a title at the table's width: `rows per table in /data/out/ha` / `rvest.duckdb`)."""

    heading: Text | None = None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.heading is not None:
            yield AtSeparators(self.heading)
        yield from super().__rich_console__(console, options)


def table(*columns: str, title: object | None = None, right: Iterable[str] = ()) -> Table:
    """A rich Table whose title and headers are literal; columns named in `right` are right-aligned. Cells wrap
    only at separators (`AtSeparators`)."""
    aligned = set(right)
    result = LiteralTable()
    result.heading = None if title is None else literal(title, "italic")
    for name in columns:
        result.add_column(literal(name), justify="right" if name in aligned else "left", overflow="fold")
    return result


def add_row(target: Table, *cells: object) -> None:
    """Add a row whose cells print literally: a `Text` is kept (its style too), None is empty."""
    target.add_row(
        *(AtSeparators(c if isinstance(c, Text) else literal("" if c is None else c)) for c in cells)
    )


def harvest_command() -> str:
    """How the user can call harvest again: `harvest` when it is on PATH, else the path they just used."""
    if shutil.which("harvest"):
        return "harvest"
    exe = Path(sys.argv[0])
    try:
        return str(exe.resolve().relative_to(Path.cwd())) if exe.name == "harvest" else "harvest"
    except ValueError:
        return str(exe)
