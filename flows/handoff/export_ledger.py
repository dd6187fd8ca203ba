"""Which runs went to which destination: DuckDB's `exports` table, kept true to what the destinations hold.

The destination is the truth: an export counts once its `_exports/<id>/_SUCCESS` exists there. The table is a
local record of it, written after the commit; when writing it fails (the database is busy, or was lost and
rebuilt), the next export finds the committed folders the table does not know, reads their manifests and
records them, instead of sending those runs again. So a committed `_SUCCESS` never stays unrecorded, and a
lost `exports` table costs a listing of `_exports/`, not a second copy of every run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol, TypeVar

import duckdb
import pyarrow.fs as pafs

from harvest.tasks.database.bookkeeping import EXPORTS_ADDED, EXPORTS_DDL
from harvest.tasks.database.bookkeeping_comments import EXPORTS
from harvest.tasks.database.column_comments import describe_table
from harvest.tasks.database.connection import DatabaseBusy, has_table, transaction, write_connection
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest, run_heads


class Sendable(Protocol):
    """What tells whether a run is due: its head does (`RunHead`), and so does its whole manifest."""

    @property
    def run_id(self) -> str: ...

    @property
    def rebuilt(self) -> str | None: ...


R = TypeVar("R", bound=Sendable)


class NotRecorded(RuntimeError):
    """The export is committed at the destination, but the `exports` table could not say so (yet)."""


@dataclass(frozen=True)
class ExportRow:
    run_id: str
    export_id: str
    kind: str
    exported_at: datetime
    files: int = 0
    rows: int = 0
    content: str | None = None
    """What the run's Parquet held when it was sent (`run_content`); None where that is not known (an export of
    an older harvest, one found only at the destination, a snapshot)."""


def fingerprints(layout: OutputLayout, run: RunManifest) -> dict[str, str]:
    """What each of the run's Parquet files holds, by relative path (a missing file: empty), to tell whether a
    rebuild changed what an export sent: its schema, row count and the sum of its rows' hashes. Not its bytes:
    a live run lands concurrent queries' pages as they arrive and a rebuild lands them query by query, so the
    same rows come back in another order; sending such a run again changes nothing a loader reads."""
    out = {}
    con = duckdb.connect()
    try:
        for _, path, _ in run.all_files():
            file = layout.resolve(path)
            out[layout.relative(file)] = _content(con, file) if file.exists() else ""
    finally:
        con.close()
    return out


def _content(con: duckdb.DuckDBPyConnection, file: Path) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        ((rows, hashes),) = con.execute(
            "SELECT count(*), sum(hash(t)) FROM read_parquet(?, hive_partitioning = false) t", [str(file)]
        ).fetchall()  # not fetchone: DuckDB leaves such a result unfinished (`count_rows`)
        return f"{pq.read_schema(file)}|{rows}|{hashes}"
    except (duckdb.Error, pa.ArrowException) as exc:  # cut short, damaged: differs from what a rebuild lands
        return f"unreadable: {exc}"


def run_content(layout: OutputLayout, run: RunManifest) -> str:
    """One digest of what the run's Parquet files hold (`fingerprints`), recorded with each export of it: a
    rebuild since then resends the run only where this differs. A rebuild cannot tell by itself: a file deleted
    before it (by hand, a lost disk) has nothing to compare the new one with."""
    found = sorted(fingerprints(layout, run).items())
    return hashlib.sha256(json.dumps(found).encode()).hexdigest()


PARQUET_KINDS = ("increment", "snapshot")
"""The `kind`s of a Parquet export; a table format records its own name (`delta`, `iceberg`)."""


def family(kind: str) -> str:
    """What a destination holds after an export of `kind`: `parquet` files, or tables of a format."""
    return "parquet" if kind in PARQUET_KINDS else kind


@dataclass
class Sent:
    """What a destination has: the latest export of each run in `kind` (an increment, or a table format's merge),
    the export ids already recorded, and which other kinds of export went there."""

    kind: str = "increment"
    latest: dict[str, datetime] = field(default_factory=dict)
    content: dict[str, str | None] = field(default_factory=dict)
    """What each run's Parquet held when its latest export in `kind` sent it (`ExportRow.content`)."""
    recorded: set[str] = field(default_factory=set)
    found: list[ExportRow] = field(default_factory=list)
    """Committed exports of this output's runs found at the destination but not in the table: to record."""
    rows: list[ExportRow] = field(default_factory=list)
    """Every row that went into it (`add`)."""
    gone: list[ExportRow] = field(default_factory=list)
    """Rows of the table whose export is no longer committed at the destination (`keep_committed`)."""
    families: set[str] = field(default_factory=set)
    """`parquet`, `delta`, `iceberg`: what the destination was given; one destination holds one of them."""

    def add(self, row: ExportRow) -> None:
        self.rows.append(row)
        self.families.add(family(row.kind))
        if row.kind == self.kind and (
            row.run_id not in self.latest or self.latest[row.run_id] < row.exported_at
        ):
            self.latest[row.run_id] = row.exported_at
            self.content[row.run_id] = row.content

    def keep_committed(self, committed: set[str]) -> None:
        """Forget the recorded exports of `kind` whose `_SUCCESS` the destination no longer holds (deleted,
        a bucket made anew): the destination is the truth, so their runs are due again, not "there" for ever."""
        self.gone = [r for r in self.rows if r.kind == self.kind and r.export_id not in committed]
        if not self.gone:
            return
        kept, self.rows, self.latest, self.content = self.rows, [], {}, {}
        for row in kept:
            if row not in self.gone:
                self.add(row)

    def mixed(self, destination: str) -> str | None:
        """Why an export of `kind` must not go to this destination (another format's files are there), or None:
        a Delta table's directory holding Parquet it does not list would lose them to `vacuum`, and a Parquet
        loader would read a table's files as loose rows."""
        others = sorted(self.families - {family(self.kind)})
        if not others:
            return None
        return (
            f"{destination} holds this output's {' and '.join(others)} export; its {family(self.kind)} export "
            "needs a destination of its own (another --to)"
        )

    def due(self, run: R, content: Callable[[R], str] | None = None) -> bool:
        """Not at the destination yet, or rebuilt (its Parquet changed) after it was sent and, where what it held
        then is known, holding something else now (`content`: `run_content` of the output's layout)."""
        sent = self.latest.get(run.run_id)
        if sent is None:
            return True
        if run.rebuilt is None or sent >= datetime.fromisoformat(run.rebuilt):
            return False
        then = self.content.get(run.run_id)
        return then is None or content is None or content(run) != then


def runs_due(layout: OutputLayout, sent: Sent) -> list[RunManifest]:
    """The loaded runs `sent` says are due, oldest first, told from their heads: a nightly export reads the
    manifest of the night it sends, not of every night sent before (~14 MB each for a 10,000-query fan-out)."""
    due = [
        h for h in run_heads(layout)
        if h.loaded and sent.due(h, lambda head: run_content(layout, head.manifest()))
    ]  # fmt: skip
    return [h.manifest() for h in due]


def recorded(layout: OutputLayout, destination: str, kind: str = "increment") -> Sent:
    """What the `exports` table says the destination has of `kind` (nothing when there is no database or table)."""
    sent = Sent(kind)
    if not layout.db.exists():
        return sent
    con = duckdb.connect(str(layout.db), read_only=True)
    try:
        if not has_table(con, "exports"):
            return sent
        columns = {c.lower() for c in con.sql("FROM exports LIMIT 0").columns}
        content = "content" if "content" in columns else "NULL"  # an older harvest's table lacks it
        found = con.execute(
            f"SELECT run_id, export_id, kind, exported_at, {content} FROM exports WHERE destination = ?",
            [destination],
        ).fetchall()
    finally:
        con.close()
    for run_id, export_id, kind, exported_at, held in found:
        sent.recorded.add(export_id)
        sent.add(ExportRow(run_id, export_id, kind, exported_at, content=held))
    return sent


def find_committed(fs: pafs.FileSystem, base: str, sent: Sent, runs: Iterable[str]) -> None:
    """Add the committed exports at the destination that the table does not know (for runs of this output), and
    forget those it records that the destination no longer holds (`Sent.keep_committed`). One listing."""
    ours = set(runs)
    listing = fs.get_file_info(pafs.FileSelector(f"{base}/_exports", allow_not_found=True, recursive=True))
    marked = {f.path.rstrip("/").rsplit("/", 2)[-2] for f in listing if f.path.endswith("/_SUCCESS")}
    sent.keep_committed(marked)
    for export_id in sorted(marked - sent.recorded):
        folder = f"{base}/_exports/{export_id}"
        with fs.open_input_stream(f"{folder}/_manifest.json") as f:
            manifest = json.loads(f.read())
        at = datetime.fromisoformat(manifest["created_at"])
        files: dict[str, list[int]] = {}
        for entry in manifest.get("tables", {}).values():
            for file in entry.get("files", []):
                counts = files.setdefault(file.get("run_id", ""), [0, 0])
                counts[0], counts[1] = counts[0] + 1, counts[1] + int(file.get("rows", 0))
        for run_id in manifest.get("runs", []):
            if run_id in ours:
                n, rows = files.get(run_id, [0, 0])
                held = (manifest.get("content") or {}).get(run_id)  # an older harvest's manifest lacks it
                row = ExportRow(run_id, export_id, manifest.get("kind", "increment"), at, n, rows, held)
                sent.found.append(row)
                sent.add(row)


def record(
    layout: OutputLayout, destination: str, rows: list[ExportRow], gone: Iterable[ExportRow] = ()
) -> None:
    """Write export rows (idempotent: a row already there is replaced) and delete the `gone` ones (exports the
    destination no longer holds, `Sent.keep_committed`); NotRecorded when that fails."""
    gone = list(gone)
    if not rows and not gone:
        return
    rerun = "harvest export ... (it records what the destination has, and sends nothing twice)"
    try:
        with write_connection(layout.db, data_dir=layout.parquet_root, rerun=rerun) as con, transaction(con):
            con.execute(EXPORTS_DDL)
            for name, sql_type in EXPORTS_ADDED:  # a table an older harvest made
                con.execute(f"ALTER TABLE exports ADD COLUMN IF NOT EXISTS {name} {sql_type}")
            describe_table(con, "exports", *EXPORTS)
            # a row to write is deleted first too: right even in a table that lost its key (an older rebuild)
            for r in [*gone, *rows]:
                con.execute(
                    "DELETE FROM exports WHERE destination = ? AND run_id = ? AND export_id = ?",
                    [destination, r.run_id, r.export_id],
                )
            for r in rows:
                con.execute(
                    "INSERT INTO exports (destination, run_id, export_id, kind, exported_at, files, rows, content) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [destination, r.run_id, r.export_id, r.kind, r.exported_at, r.files, r.rows, r.content],
                )
    except (DatabaseBusy, duckdb.Error) as exc:
        raise NotRecorded(
            f"not recorded in {layout.db} ({exc}); the next `harvest export` finds it at the destination "
            "and records it, sending nothing twice"
        ) from exc
