"""`harvest export --format iceberg|delta`: the runs a destination lacks, merged into its tables, then recorded.

Which runs are due is the increment export's rule (`flows/handoff/export_ledger.py`): runs not merged into this
destination yet, or rebuilt since. Their rows go table by table, record tables first, then `runs` and
`query_state`, each one atomic commit of its format; the `exports` table says so only after every table
committed. An export cut off between tables left some tables merged and recorded nothing: the next export
merges the same runs again, and newest-wins makes the tables that had them already come out as they were, so
nothing is lost and no row is there twice. A destination holds one kind of export: Parquet increments and a
format's tables in one place would read each other's files.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import duckdb

from harvest.flows.handoff.export import checked_destination
from harvest.flows.handoff.export_ledger import ExportRow, record, recorded, run_content, runs_due
from harvest.flows.handoff.lakehouse.table_format import MergeResult, TableFormat, TableLoad
from harvest.flows.handoff.lakehouse.table_rows import bookkeeping_loads, one_database, record_loads
from harvest.flows.spec import UsageError
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest

FORMATS: dict[str, tuple[str, str, str]] = {
    "delta": ("harvest.flows.handoff.lakehouse.delta_tables", "DeltaFormat", "deltalake"),
    "iceberg": ("harvest.flows.handoff.lakehouse.iceberg_tables", "IcebergFormat", "pyiceberg"),
}
"""Format name: (module, class, the library its extra installs). Imported only when asked for: neither library
is needed by a harvest that exports Parquet."""


class ExportFailed(RuntimeError):
    """A table's merge failed: the tables named committed, the rest did not; nothing was recorded."""


@dataclass
class TablesReport:
    destination: str
    export_id: str
    kind: str
    """The format's name (`delta`, `iceberg`), as the `exports` table records it."""
    runs: list[str] = field(default_factory=list)
    tables: dict[str, MergeResult] = field(default_factory=dict)
    gone: int = 0
    """Runs the `exports` table says were merged here, at a destination whose `runs` table is gone: merged again."""

    @property
    def rows(self) -> int:
        return sum(r.rows_in for r in self.tables.values())


def open_format(name: str, destination: str, layout: OutputLayout) -> TableFormat:
    """The format's writer at `destination`; a missing library is a usage error naming the extra to install."""
    if name not in FORMATS:
        raise UsageError(f"--format {name!r}: allowed: parquet, {', '.join(FORMATS)}")
    module_name, class_name, library = FORMATS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != library:
            raise
        raise UsageError(
            f"--format {name} needs {library}, which is not installed: pip install 'harvest[{name}]'"
        ) from None
    fmt: TableFormat = getattr(module, class_name)(destination, layout)
    return fmt


def _parquet_there(destination: str) -> bool:
    """An increment export's `_exports/` at the destination (made elsewhere, or its record lost)."""
    import pyarrow.fs as pafs

    if "://" not in destination:
        fs: pafs.FileSystem = pafs.LocalFileSystem()
        base = destination
    else:
        fs, base = pafs.FileSystem.from_uri(destination)
    return fs.get_file_info(f"{base}/_exports").type != pafs.FileType.NotFound


def _loads(layout: OutputLayout, runs: list[RunManifest], db: duckdb.DuckDBPyConnection) -> list[TableLoad]:
    """Record tables first, then the bookkeeping that describes them: a reader of `runs` never sees a run whose
    rows are not in the record tables yet. The record tables are read in `db` (`table_rows.one_database`)."""
    return [*record_loads(layout, runs, db), *bookkeeping_loads(layout, runs)]


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""A terminal's colour and cursor sequences, which Rust libraries (deltalake's) put into their messages."""


def said_by(exc: BaseException) -> str:
    """A library's error in one line: SQLAlchemy's driver error without the statement and parameters it
    appends, a Rust error's lines joined, colour codes dropped (the message is one line of harvest's)."""
    orig = getattr(exc, "orig", None)  # SQLAlchemy's DBAPIError: the driver's own error
    shown = orig if isinstance(orig, BaseException) else exc
    lines = (line.strip() for line in _ESCAPES.sub("", str(shown)).splitlines())
    return f"{type(shown).__name__}: {'; '.join(line for line in lines if line)}"


def _opened(opener: Callable[[str, str, OutputLayout], TableFormat], name: str, destination: str,
            layout: OutputLayout) -> TableFormat:  # fmt: skip
    """The format's writer; a catalog or store that cannot be opened is a failed export, said in one line (a
    write this machine refused stays an OSError, which the command tells as one)."""
    try:
        return opener(name, destination, layout)
    except (UsageError, OSError):
        raise
    except Exception as exc:
        raise ExportFailed(
            f"the {name} tables could not be opened ({said_by(exc)}); nothing was merged or recorded"
        ) from exc


def _merge_all(fmt: TableFormat, loads: list[TableLoad], report: TablesReport) -> None:
    for load in loads:
        try:
            report.tables[load.name] = fmt.merge(load)
        except Exception as exc:  # the format's own errors (deltalake, pyiceberg, the store's) become one
            done = ", ".join(report.tables) or "none"
            raise ExportFailed(
                f"table {load.name} was not merged ({said_by(exc)}); committed before it: {done}; "
                "nothing is recorded, and running the export again merges the same runs (no row twice)"
            ) from exc


def export_tables(
    layout: OutputLayout,
    url: str,
    format_name: str,
    opener: Callable[[str, str, OutputLayout], TableFormat] = open_format,
) -> TablesReport:
    """Merge the loaded runs `url` lacks into one table per record kind, `runs` and `query_state`; record them."""
    destination = checked_destination(url, layout)
    report = TablesReport(destination, datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ"), format_name)
    sent = recorded(layout, destination, format_name)
    problem = sent.mixed(destination)
    if problem is None and _parquet_there(destination):
        problem = (
            f"{destination} holds Parquet exports (_exports/); a {format_name} export needs its own --to"
        )
    if problem:
        raise UsageError(problem)
    fmt = _opened(opener, format_name, destination, layout) if sent.latest else None
    if fmt is not None and not fmt.holds_runs():  # the destination is the truth: its tables are gone
        sent.keep_committed(set())
        report.gone = len({r.run_id for r in sent.gone})
    runs = runs_due(layout, sent)
    if not runs:
        if fmt is not None:
            fmt.close()
        return report
    fmt = fmt or _opened(opener, format_name, destination, layout)
    try:
        with one_database() as db:
            _merge_all(fmt, _loads(layout, runs, db), report)
    finally:
        fmt.close()
    report.runs = [r.run_id for r in runs]
    at = datetime.now(UTC)
    rows = []
    for run in runs:
        files = run.all_files()
        sent_rows = sum(n for *_, n in files)
        held = run_content(layout, run)  # what a rebuild since must change to send it again
        rows.append(ExportRow(run.run_id, report.export_id, format_name, at, len(files), sent_rows, held))
    record(layout, destination, rows, sent.gone)
    return report
