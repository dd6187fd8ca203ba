"""What a `<table>_history` view should hold, read from the receipts: one row per key per run that fetched it,
the keys of each run's stored raw pages (`raw/<run_id>/`), whatever stopped, killed, resumed or rebuilt it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from harvest.connectors.catalog import endpoints as catalog
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.raw_store import RawPageReader
from harvest.tasks.output.replay import replay_pages
from tests.flow_helpers import child_tables, rows

Fetches = dict[str, set[tuple[Any, ...]]]
"""Record table -> (run id, key...) of every fetch."""


def paid_fetches(output: Path, run_ids: list[str]) -> Fetches:
    """The (run, key) of every record the runs' stored pages hold, per record table (child tables left out:
    their rows are items of these records)."""
    kinds, children = catalog.all_kinds(), child_tables()
    layout = OutputLayout(output)
    out: Fetches = {}
    for run_id in run_ids:
        for path in layout.raw_files(run_id):
            for raw in RawPageReader(path):
                for page in replay_pages([raw], catalog.get(raw.endpoint)):
                    for table, landed in page.converted.tables.items():
                        if table in children:
                            continue
                        key = list(kinds[table].primary_key)
                        found = out.setdefault(table, set())
                        found |= {(run_id, *(r[c] for c in key)) for r in landed.select(key).to_pylist()}
    return out


def history(db: Path, tables: list[str]) -> dict[str, Counter[tuple[Any, ...]]]:
    """(run, key...) -> rows of it in each table's `_history` view, as an analyst's GROUP BY reads them."""
    kinds = catalog.all_kinds()
    out = {}
    for table in tables:
        key = ", ".join(f'"{c}"' for c in kinds[table].primary_key)
        got = rows(db, f'SELECT _run_id, {key}, count(*) FROM "{table}_history" GROUP BY ALL')
        out[table] = Counter({tuple(r[:-1]): int(r[-1]) for r in got})
    return out


def assert_history_once(output: Path, run_ids: list[str]) -> None:
    """Each of the runs' fetches is in its table's history view exactly once: no key twice in one run (a page
    landed again by a resume, a rebuild), none lost, none of another run."""
    db = output / "harvest.duckdb"
    want = paid_fetches(output, run_ids)
    seen = history(db, sorted(want))
    for table, fetches in want.items():
        ours = Counter({k: n for k, n in seen[table].items() if k[0] in run_ids})
        assert {k: n for k, n in ours.items() if n > 1} == {}, f"{table}: fetches twice in the history view"
        assert set(ours) == fetches, f"{table}: the history view is not the runs' fetches"
