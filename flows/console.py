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

import itertools
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from rich.cells import cell_len
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
    """A sentence on stdout (`tell`)."""
    tell(out, literal(message, style))


def error(message: object) -> None:
    """`error: <message>` on stderr; the message is printed literally, whatever brackets it holds."""
    tell(err, Text("error: ", style="red") + literal(message), HANG)


def warning(message: object) -> None:
    tell(err, Text("warning: ", style="yellow") + literal(message), HANG)


def note(message: object) -> None:
    """A line on stderr that is not an error (hints, notes about what was cut)."""
    tell(err, literal(message), HANG)


HANG = 2
"""Columns a sentence's continued lines are indented by on stderr, under its first: an error, a spec's problem
or a progress line still starts where a reader looks for the next."""


def tell(target: Console, text: Text, hang: int = 0) -> None:
    """Sentences (one a line of `text`) on `target`. On a terminal, wrapped to its width between words (a
    value wider than a line breaks at its separators, a `quoted command` never: copied from the screen, it runs
    whole), each continued line indented by `hang`; elsewhere each one line, so that logs stay greppable."""
    if not target.is_terminal:
        target.print(text, soft_wrap=True)
        return
    width = max(1, target.size.width - hang)
    lines: list[Text] = []
    for paragraph in text.split("\n", allow_blank=True):
        first, *rest = wrap_at_separators(paragraph, width, words=True)
        lines += [first, *(Text(" " * hang) + line for line in rest)]
    target.print(Text("\n").join(lines), soft_wrap=True)


_BREAKS = re.compile(r"(?<=[ /\]=,:;&?)])(?! )|(?=[\[(])")
"""Where a line may break: after a space (the spaces stay on the line they end), a slash, `]`, `=`, `,`, `:`,
`;`, `&`, `?` or `)`, and before `[` or `(`: a path breaks between its parts, `videos[handle=nasa]` between
`videos`, `[handle=` and `nasa]`, never inside a word."""
_QUOTED = re.compile(r"`[^`\n]*`")
"""A command quoted in a sentence, to be copied whole."""
_SPACES = re.compile(r"(?<= )(?! )")
"""After a space only: between the words of a sentence (`wrap_at_separators(words=True)`)."""
_WORD_BREAKS = re.compile(r"(?<=[_.\-])")
"""Inside a piece too wide for a whole line: after `_`, `.` or `-` (`creative_material_` / `details`)."""


def widest_piece(plain: str) -> int:
    """The cells of the widest part of `plain` no line break may split (`_BREAKS`)."""
    cuts = [0, *(m.start() for m in _BREAKS.finditer(plain)), len(plain)]
    return max((cell_len(plain[a:b].rstrip(" ")) for a, b in itertools.pairwise(cuts)), default=0)


def wrap_at_separators(
    text: Text, width: int, console: Console | None = None, words: bool = False
) -> list[Text]:
    """`text` in lines of at most `width` cells, broken only where `_BREAKS` allows. A piece wider than a whole
    line breaks at `_WORD_BREAKS`, and what is still too wide (a 100-character hash at 80 columns) is folded:
    it cannot fit otherwise. `words`: a sentence naming ids breaks at its spaces first, so that an id that fits
    a line stays whole on one, and a `quoted command` never breaks (wider than a line, it runs past). The breaks are found on the plain string and the text divided once (a table of
    200 rows of JSON wraps thousands of pieces). `console` is not needed: kept for callers that have one."""
    lines: list[Text] = []
    tiers = (_SPACES, _BREAKS, _WORD_BREAKS) if words else (_BREAKS, _WORD_BREAKS)
    for paragraph in text.split("\n", allow_blank=True):
        plain = paragraph.plain
        keep = (
            frozenset(i for m in _QUOTED.finditer(plain) for i in range(m.start() + 1, m.end()))
            if words
            else None
        )
        for start, end in _spans(plain, 0, len(plain), max(1, width), tiers, keep or frozenset()):
            line = paragraph[start:end]
            line.rstrip()
            line.end = ""
            lines.append(line)
    return lines


def _spans(
    plain: str, start: int, end: int, width: int, tiers: tuple[re.Pattern[str], ...], keep: frozenset[int]
) -> list[tuple[int, int]]:
    """(start, end) of each line of `plain[start:end]`: as many pieces a line as fit (trailing spaces not
    counted, a new line's leading spaces skipped), a piece too wide alone split by the next tier; never cut
    at a place in `keep`."""
    if not tiers:
        return _folded(plain, start, end, width, keep)
    spans: list[tuple[int, int]] = []
    line, fit = start, start
    found = (m.start() for m in tiers[0].finditer(plain, start, end))
    cuts = [cut for cut in found if start < cut < end and cut not in keep]
    for cut in [*cuts, end]:
        if cell_len(plain[line:cut].rstrip(" ")) <= width:
            fit = cut
            continue
        if fit > line:
            spans.append((line, fit))
            line = fit + len(plain[fit:cut]) - len(plain[fit:cut].lstrip(" "))
            if cell_len(plain[line:cut].rstrip(" ")) <= width:
                fit = cut
                continue
        *full, (line, fit) = _spans(plain, line, cut, width, tiers[1:], keep)  # the piece alone is too wide
        spans.extend(full)
    spans.append((line, end))
    return spans


def _folded(plain: str, start: int, end: int, width: int, keep: frozenset[int]) -> list[tuple[int, int]]:
    """Lines of at most `width` cells, cut anywhere but in `keep`: the last resort."""
    spans, line, cells = [], start, 0
    for i in range(start, end):
        size = cell_len(plain[i])
        if cells + size > width and i > line and i not in keep:
            spans.append((line, i))
            line, cells = i, 0
        cells += size
    spans.append((line, end))
    return spans


class AtSeparators:
    """A text that wraps only at separators (`wrap_at_separators`), as a rich renderable: table titles and
    cells holding query ids, paths and URLs, which rich would otherwise fold inside a word. `words`: a sentence
    naming ids, broken between its words first (`wrap_at_separators`)."""

    def __init__(self, text: Text, words: bool = False) -> None:
        self.text = text
        self.words = words

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        lines = self.text.plain.split("\n")
        narrowest = max(widest_piece(line) for line in lines)
        widest = max(cell_len(line) for line in lines)
        return Measurement(min(narrowest, options.max_width), min(widest, options.max_width))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        plain = self.text.plain
        if "\n" not in plain and cell_len(plain) <= options.max_width:  # most cells: nothing to wrap
            line = self.text.copy()
            if options.justify in ("right", "center"):
                line.align(options.justify, options.max_width)
            yield line
            return
        lines = wrap_at_separators(self.text, options.max_width, console, self.words)
        if options.justify in ("right", "center"):
            for line in lines:
                line.align(options.justify, options.max_width)
        whole = Text("\n").join(
            lines
        )  # one text for rich to render, not a text a line: a cell of JSON is 100s
        whole.no_wrap, whole.overflow = True, "ignore"  # every line fits already
        yield whole


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


BLOB = 200
"""A cell longer than this is a blob (a record's JSON in `harvest sql`), folded as rich folds it: breaking
hundreds of such cells at separators doubled the time `harvest sql` took to print 200 rows."""


def _cell(value: object) -> Text | AtSeparators:
    text = value if isinstance(value, Text) else literal("" if value is None else value)
    return text if len(text) > BLOB else AtSeparators(text)


def add_row(target: Table, *cells: object) -> None:
    """Add a row whose cells print literally: a `Text` is kept (its style too), None is empty. Names, ids and
    paths break only at separators (`AtSeparators`)."""
    target.add_row(*map(_cell, cells))


def harvest_command() -> str:
    """How the user calls harvest again, as one shell word: `harvest` when that name on PATH is this very
    harvest, else the path they just used (relative to the working directory when under it), quoted. A bare
    `harvest` that finds another installation (or none, in a shell without this one's virtual environment) would
    run something else than the command promised."""
    exe = Path(sys.argv[0])
    if exe.name != "harvest":  # `python -m flows.cli`, a test runner: the installed name
        return "harvest"
    on_path = shutil.which("harvest")
    if on_path is not None and Path(on_path).resolve() == exe.resolve():
        return "harvest"
    return runnable(exe)


def runnable(program: Path) -> str:
    """A program's path as a shell word that runs it from here: relative to the working directory when under
    it, else absolute; never resolved (a virtual environment's `python` is a link out of it), never bare (a bare
    name is looked up on PATH), quoted."""
    absolute = Path(os.path.abspath(program))
    try:
        shown = str(absolute.relative_to(Path(os.getcwd())))
    except ValueError:
        shown = str(absolute)
    return shlex.quote(shown if "/" in shown else f"./{shown}")


def harvest_line(*words: object) -> str:
    """A harvest command line to print for the user to paste: each word shell-quoted (`shlex.quote`), so a path
    with a space, a quote or a `$` in it reaches harvest as it is."""
    return " ".join([harvest_command(), *(shlex.quote(str(word)) for word in words)])
