"""The runs of an output directory as a user needs to see them, unfinished ones included.

A killed run's manifest still says `running`; whether it really runs is asked of its job's lock. Its pages and
credits so far come from the raw store and the run journal, since it never wrote its totals: its pages are the
raw pages its queries count (`RawPage.counted`), as its resume and its finished manifest count them, not every
frame (a failure's receipt, an answer damaged on the wire on both tries are none).

Each run's manifest is read whole one at a time and kept without its queries: a manifest lists every query of its
run (~14 MB for a night of 10,000), and `harvest runs` over a year of such nights held them all at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harvest.tasks.output.job_lock import is_locked
from harvest.tasks.output.journal import read_journal
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest, each_manifest
from harvest.tasks.output.raw_store import RawIndex


@dataclass(frozen=True)
class RunRow:
    manifest: RunManifest
    """The run's manifest without its queries (`queries` is empty): what the row says is counted below."""
    state: str
    """The manifest's status, except `running` (its lock is held) or `killed` (nobody holds it)."""
    pages: int
    credits: int
    records: int
    """Records its queries landed (a finished run's; an unfinished one has not counted them)."""

    @property
    def unfinished(self) -> bool:
        return self.state in ("running", "killed", "interrupted")


def killed(layout: OutputLayout, m: RunManifest) -> bool:
    """A run whose manifest still says `running` while nobody holds its job's lock: its process is gone."""
    return m.status == "running" and not is_locked(layout.lock_file(m.job))


def _row(layout: OutputLayout, m: RunManifest) -> RunRow:
    head, records = replace(m, queries=[]), m.records
    if not m.unfinished:
        return RunRow(head, m.status, sum(int(q["pages"]) for q in m.queries), m.credits_spent, records)
    state = "killed" if killed(layout, m) else m.status
    pages = sum(RawIndex(layout.raw_files(m.run_id)).counted.values())  # frames' metas, as a resume counts
    credits = read_journal(layout.journal_file(m.run_id)).total_spent
    return RunRow(head, state, pages, max(credits, m.credits_spent), records)


def run_rows(layout: OutputLayout) -> list[RunRow]:
    """Every run, oldest first."""
    return [_row(layout, m) for m in each_manifest(layout)]
