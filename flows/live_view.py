"""The live view of a run on a terminal: what a person watching it reads.

A header (the run, and what a resumed run starts from; credits spent of the budget as a gauge; elapsed time,
pages a second and, where the plan knows the pages, the time left; the queries' counts), then a row per query
as far as the terminal's height allows: all of them in start order while they fit, else the running ones first,
then the latest to end (those that did not end well before those that did), and a count of the rest. Every
line fits the terminal's width and breaks only at separators (`flows.console.wrap_at_separators`), never
inside a word. rich redraws it a few times a second from its own thread, so paging never waits on drawing.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.text import Text

from harvest.connectors.plurals import counted
from harvest.flows.console import LiteralConsole, literal, wrap_at_separators
from harvest.flows.run.progress import Counting, Row, ended_well

REFRESH_PER_SECOND = 4
"""Redraws a second: lively enough to read, cheap enough not to slow paging (10,000 one-page queries drew
30,000 tables when the view was redrawn per page)."""
MAX_ROWS = 40
"""Query rows at most, however tall the terminal."""
GAUGE_MIN = 10
"""Narrower than this, the credits gauge is left out and the figures stay."""
_GAP = "  "


class LiveView(Counting):
    def __init__(self, console: Console | None = None) -> None:
        super().__init__()
        self.latest_well: deque[str] = deque(maxlen=MAX_ROWS)
        self.latest_badly: deque[str] = deque(maxlen=MAX_ROWS)
        self.live = Live(
            _Frame(self),
            console=console or LiteralConsole(stderr=True),
            refresh_per_second=REFRESH_PER_SECOND,
        )
        self.live.start()

    def ended(self, query_id: str, row: Row) -> None:
        (self.latest_well if ended_well(row.status) else self.latest_badly).append(query_id)

    def close(self) -> None:
        self.live.stop()  # draws the last frame, which stays above what the run prints next

    def lines(self, width: int, height: int, now: float | None = None) -> list[Text]:
        """The frame at this size (at `now`, by the monotonic clock): header, column names, rows, the count of
        the rest."""
        spent = self.spent_of_budget()  # the ledger's own lock, never taken inside this view's
        with self.lock:
            head = self._head(width, time.monotonic() if now is None else now, spent)
            budget = max(0, height - 1 - len(head) - 2)  # a line for the cursor, the column names, the count
            shown = list(itertools.islice(self._candidates(budget), min(budget, MAX_ROWS)))
            table, fitted = _table(shown, width, budget)
            return [*head, *table, *self._hidden(shown[:fitted], width)]

    def _head(self, width: int, now: float, spent: tuple[int, int] | None) -> list[Text]:
        facts = self.facts
        title = Text("harvest ", "bold") + literal(
            facts.title() if facts else "starting: checks, Prefect, the plan"
        )
        head = wrap_at_separators(title, width)
        if facts and facts.carried():
            head += wrap_at_separators(literal(facts.carried(), "cyan"), width)
        if spent is not None:
            head += _gauge(*spent, width)
        head += wrap_at_separators(Text(" · ".join(self.speed(now))), width)
        if self.rows:
            totals = f"{self.queries()} · {counted(self.pages, 'page')}, {counted(self.records, 'record')}"
            head += wrap_at_separators(Text(totals), width)
        return head

    def _candidates(self, budget: int) -> Iterable[tuple[str, Row]]:
        """All queries in start order while they fit; else the running ones first, then the latest to end."""
        if len(self.rows) <= min(budget, MAX_ROWS):
            return list(self.rows.items())
        latest = itertools.chain(reversed(self.latest_badly), reversed(self.latest_well))
        ended = ((q, self.rows[q]) for q in latest)
        return itertools.chain(list(itertools.islice(self.running.items(), MAX_ROWS)), ended)

    def _hidden(self, shown: list[tuple[str, Row]], width: int) -> list[Text]:
        """`and 190 more: 10 running, 178 ended well, 2 not well` for the queries without a row."""
        if len(shown) >= len(self.rows):
            return []
        running = sum(row.status == "running" for _, row in shown)
        badly = sum(row.status != "running" and not ended_well(row.status) for _, row in shown)
        well = len(shown) - running - badly
        counts = [
            (len(self.running) - running, "running"),
            (self.finished_well - well, "ended well"),
            (self.finished_badly - badly, "not well"),
        ]
        said = ", ".join(f"{n} {what}" for n, what in counts if n > 0)
        return wrap_at_separators(Text(f"and {len(self.rows) - len(shown)} more: {said}", "dim"), width)


class _Frame:
    """The view as rich draws it: computed at the terminal's size each time it is drawn."""

    def __init__(self, view: LiveView) -> None:
        self.view = view

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.view.lines(options.max_width, options.height or console.size.height):
            line.end = "\n"
            yield line


def _gauge(spent: int, budget: int, width: int) -> list[Text]:
    """`credits 541 of 1000 ━━━━━━━━━━━──────── 54%`: green, yellow past 80%, red when it is all spent."""
    share = spent / budget if budget > 0 else (1.0 if spent else 0.0)
    label, percent = f"credits {spent} of {budget} ", f" {min(999, int(share * 100))}%"
    style = "red" if share >= 1 else "yellow" if share >= 0.8 else "green"
    bar = width - len(label) - len(percent)
    if bar < GAUGE_MIN:
        return wrap_at_separators(Text(label.rstrip() + f" ({percent.strip()})"), width)
    filled = min(bar, round(bar * share))
    return [Text(label) + Text("━" * filled, style) + Text("─" * (bar - filled), "dim") + Text(percent)]


QUERY_MIN = 16
"""The query column's narrowest: below it (a terminal narrower than ~60 columns) records and credits give way."""


def _table(shown: list[tuple[str, Row]], width: int, budget: int) -> tuple[list[Text], int]:
    """Column names and a row per query (a long query id wraps at separators) within `budget` lines; and how
    many of the queries got their row."""
    if not shown or budget < 1:
        return [], 0
    numbers = {"pages": [r.pages for _, r in shown], "records": [r.records for _, r in shown],
               "credits": [r.credits for _, r in shown]}  # fmt: skip
    widths = {name: max(len(name), *(len(str(v)) for v in values)) for name, values in numbers.items()}
    status_width = max(len("status"), *(len(r.status) for _, r in shown))
    while (
        len(widths) > 1
        and width - sum(widths.values()) - status_width - len(_GAP) * (len(widths) + 1) < QUERY_MIN
    ):
        widths.popitem()  # credits, then records
    query_width = max(1, width - sum(widths.values()) - status_width - len(_GAP) * (len(widths) + 1))
    header = Text("query".ljust(query_width), "bold")
    for name, w in widths.items():
        header += Text(_GAP + name.rjust(w), "bold")
    lines, fitted = [header + Text(_GAP + "status", "bold")], 0
    for i, (query_id, row) in enumerate(shown):
        ids = wrap_at_separators(literal(query_id), query_width)
        if len(lines) - 1 + len(ids) > budget:
            break
        fitted += 1
        line = ids[0].copy()
        line.pad_right(query_width - line.cell_len)
        for name, w in widths.items():
            line += Text(_GAP + str(numbers[name][i]).rjust(w))
        style = "" if row.status == "running" or ended_well(row.status) else "red"
        lines += [line + Text(_GAP) + literal(row.status, style), *ids[1:]]
    return (lines, fitted) if fitted else ([], 0)
