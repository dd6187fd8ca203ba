"""`harvest sql`: one read statement on a job's DuckDB file, printed literally, or as CSV or JSON for scripts.

Opening the file read-only is not enough: `COPY ... TO` and `EXPORT DATABASE` write anywhere (a COPY onto the
job's own `harvest.duckdb` replaced it with a CSV), and `ATTACH ... (READ_WRITE)` writes another database.
So three fences: DuckDB's parser must find exactly one SELECT (or EXPLAIN of one) before anything runs; the
connection is read-only; and it has no file system or extensions (`enable_external_access=false`, no
extension autoloading), with its configuration locked so a statement cannot switch them back on.
The job's own tables stay readable, JSON functions included, and so do its history views over its own Parquet
tree (the one allowed directory); other files are not.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import re
import sys
import warnings
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harvest.flows.cli_errors import Failed
from harvest.flows.commands.output_arg import landed_output, missing_database, not_a_database_file
from harvest.flows.console import add_row, harvest_line, literal, note, out, table, visible
from harvest.flows.spec import UsageError
from harvest.tasks.database.connection import quote_literal
from harvest.tasks.output.layout import OutputLayout

if TYPE_CHECKING:
    from collections.abc import Mapping

    import duckdb
    from rich.text import Text

    from harvest.connectors.catalog.child_kinds import TableKind

FORMATS = ("table", "csv", "json")
DEFAULT_LIMIT = 200
MAX_LIMIT = 2**63 - 1
"""The largest `--limit`: DuckDB's fetchmany takes a signed 64-bit count."""
COUNT_CAP = 1_000_000
"""Rows counted past `--limit` to say how many were cut; beyond this the note says "more than"."""

READ_ONLY_CONFIG: dict[str, str | bool] = {
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
}
"""Set when connecting; the file fence follows (`_fence`): DuckDB takes allowed directories only once open."""
ALLOWED = (
    "one read-only statement: SELECT (also WITH ..., FROM ..., VALUES, DESCRIBE, SHOW, SUMMARIZE) "
    "or EXPLAIN [ANALYZE] of a SELECT; to save a result, use --format csv or json and redirect it"
)
_WHY = {
    "COPY": "reads and writes files",
    "COPY_DATABASE": "writes a database",
    "EXPORT": "EXPORT DATABASE writes files",
    "ATTACH": "opens another database",
    "DETACH": "closes a database",
    "LOAD": "INSTALL and LOAD add extensions",
    "EXTENSION": "changes extensions",
    "SET": "SET, RESET and USE change the session",
    "VARIABLE_SET": "changes the session",
    "PRAGMA": "runs commands",
    "CALL": "runs procedures, CHECKPOINT among them",
    "MULTI": "PIVOT runs as several statements",
    "TRANSACTION": "transactions are for writing",
    "PREPARE": "prepared statements run later",
    "EXECUTE": "runs a prepared statement",
}
"""Why a statement type is refused; any other type is a write (CREATE, INSERT, UPDATE, DELETE, DROP, ...)."""
_EXPLAIN = re.compile(r"\s*explain\s+(?:analy[sz]e\s+)?(?P<inner>.*)\Z", re.IGNORECASE | re.DOTALL)


class QueryFailed(Failed):
    """DuckDB could not run the query (syntax, unknown table, busy file): exit 1, the message as DuckDB says it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 1)


def refused(what: str) -> UsageError:
    return UsageError(f"harvest sql refused {what}; allowed: {ALLOWED}")


def check_statement(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise UsageError unless `sql` is exactly one read statement, as DuckDB's own parser sees it."""
    import duckdb

    statements = con.extract_statements(sql)
    if not statements:
        raise refused("an empty query")
    if len(statements) > 1:
        raise refused(f"{len(statements)} statements")
    statement = statements[0]
    kind = statement.type
    if kind == duckdb.StatementType.SELECT:
        return
    if kind == duckdb.StatementType.EXPLAIN:
        match = _EXPLAIN.match(statement.query)
        inner = con.extract_statements(match.group("inner")) if match else []
        if len(inner) == 1 and inner[0].type == duckdb.StatementType.SELECT:
            return
        raise refused("EXPLAIN of a statement that is not a SELECT")
    name = kind.name
    raise refused(f"{name} ({_WHY.get(name, 'writes to the database')})")


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    total: int
    """Rows of the whole result, or COUNT_CAP + shown rows when `capped`."""
    capped: bool = False

    @property
    def cut(self) -> bool:
        return self.total > len(self.rows)


def open_read_only(db: Path) -> duckdb.DuckDBPyConnection:
    import duckdb

    if db.exists() and not db.is_file():
        raise QueryFailed(not_a_database_file(db))
    if not db.is_file():
        raise QueryFailed(f"{db} does not exist: run a job first")
    try:
        con = duckdb.connect(str(db), read_only=True, config=dict(READ_ONLY_CONFIG))
    except duckdb.Error as exc:
        raise QueryFailed(f"cannot open {db} read-only: {exc}") from None
    layout = OutputLayout(db.parent)
    _fence(con, layout.parquet_root)
    _follow_move(con, layout)
    return con


def _follow_move(con: duckdb.DuckDBPyConnection, layout: OutputLayout) -> None:
    """The history views read Parquet by absolute path: after a move they would read the old place (which the
    fence refuses). Read-only, the stored views cannot change, so temporary ones over this place shadow them."""
    from harvest.tasks.database.history_views import follow_moved_views

    def kinds() -> Mapping[str, TableKind]:
        from harvest.tasks.output.manifest import output_kinds

        return output_kinds(layout)

    if follow_moved_views(con, layout.parquet_root, kinds):
        note(
            f"note: the history views in {layout.db} still point at the directory's old place; answered from "
            f"the Parquet here. `{harvest_line('load', layout.root)}` points them here for other readers too"
        )


def _fence(con: duckdb.DuckDBPyConnection, parquet_root: Path) -> None:
    """No file system but the job's own Parquet tree (which the `<table>_history` views read), and a locked
    configuration, so no statement can widen it again."""
    root = str(parquet_root.resolve())
    allowed = {root, glob.escape(root)}  # the tree, and the tree as a glob names it (an `out[x]` directory)
    con.execute(f"SET allowed_directories = [{', '.join(quote_literal(d + '/') for d in sorted(allowed))}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def query(db: Path, sql: str, limit: int = DEFAULT_LIMIT) -> QueryResult:
    """At most `limit` rows of the one read statement `sql` (0: all), and how many rows it had."""
    import duckdb

    con = open_read_only(db)
    try:
        try:
            check_statement(con, sql)
            result = con.execute(sql)
            columns = [d[0] for d in result.description or []]
            if limit == 0:
                rows = result.fetchall()
                return QueryResult(columns, rows, len(rows))
            rows = result.fetchmany(limit)
            if len(rows) < limit:
                return QueryResult(columns, rows, len(rows))
            rest, capped = _count_rest(result)
            return QueryResult(columns, rows, len(rows) + rest, capped)
        except duckdb.PermissionException as exc:
            raise _outside(con, db, str(exc)) from None
        except duckdb.Error as exc:
            raise QueryFailed(str(exc)) from None
    finally:
        con.close()


def _outside(con: duckdb.DuckDBPyConnection, db: Path, error: str) -> QueryFailed | UsageError:
    """The fence refused a file, URL or database. The query's own doing: refused (exit 2), as ATTACH is, naming
    what may be read. A stored `_history` view's (it reads the Parquet at the directory's old place, and none is
    here to follow): the query could not run (exit 1), and `harvest load` points the view here."""
    found = re.search(r'Cannot access file "([^"]+)"', error)
    if found:
        views = con.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal AND contains(sql, ?) ORDER BY 1",
            [quote_literal(found.group(1))],
        ).fetchall()
        if views:
            return QueryFailed(
                f"{views[0][0]} reads the Parquet at another place ({found.group(1)}) and its table has none "
                f"here: `{harvest_line('load', db.parent)}` points it here"
            )
    parquet = str(OutputLayout(db.parent).parquet_root.resolve()) + "/"
    return UsageError(
        f"harvest sql refused a file, URL or database outside the job; allowed: the tables in {db} and the "
        f"job's own Parquet under {parquet} (read_parquet('{glob.escape(parquet)}<table>/*/*.parquet'))"
    )


def _count_rest(result: duckdb.DuckDBPyConnection) -> tuple[int, bool]:
    """Rows left after the ones fetched, counted in Arrow batches (no Python objects), up to COUNT_CAP."""
    counted = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "extra copy of the rows": only counts are kept
        reader = result.to_arrow_reader(65_536)
        for batch in reader or ():
            counted += batch.num_rows
            if counted > COUNT_CAP:
                return COUNT_CAP, True
    return counted, False


# ---------------------------------------------------------------------------------------------- printing
def _text(value: Any) -> str:
    """A value as one line of text, the way DuckDB shows it: lists and structs as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict | tuple):
        return json.dumps(_jsonable(value), ensure_ascii=False, default=_json_default)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or Infinity
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


def unique_names(columns: list[str]) -> list[str]:
    """Column names as JSON keys: a repeated name gets `_1`, `_2`, ... (as DuckDB names them in a subquery)."""
    seen: dict[str, int] = {}
    names = []
    for name in columns:
        n = seen.get(name, 0)
        seen[name] = n + 1
        names.append(name if n == 0 else f"{name}_{n}")
    return names


def _cell(value: Any) -> str | Text:
    return literal("NULL", style="dim") if value is None else _text(value)


def _too_wide(columns: list[str], cells: list[list[str | Text]], width: int) -> bool:
    """Whether a table of these cells, each column as wide as its widest first line, is wider than the terminal:
    rich would then squeeze every column to a few characters a line (`SELECT *` of a 31-column table, each row
    over ~100 lines), so each row is laid out as a block of its own, one column a line (psql's expanded mode)."""
    if len(columns) < 2:
        return False
    widths = [len(str(name)) for name in columns]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(str(cell).split("\n", 1)[0]))
    return sum(widths) + 3 * len(widths) + 1 > width


def print_answer(answer: QueryResult, fmt: str) -> None:
    if fmt == "csv":
        # To a terminal, a value's control characters are shown as escapes, as the table shows them: the
        # service's text must not clear the screen or write a link. To a file or a pipe, the data as it is.
        shown = visible if sys.stdout.isatty() else str
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([shown(c) for c in answer.columns])
        writer.writerows(["" if v is None else shown(_text(v)) for v in row] for row in answer.rows)
    elif fmt == "json":
        names = unique_names(answer.columns)
        lines = [
            json.dumps(
                dict(zip(names, _jsonable(list(row)), strict=True)), default=_json_default, ensure_ascii=False
            )
            for row in answer.rows
        ]
        sys.stdout.write("[\n" + ",\n".join(lines) + ("\n]\n" if lines else "]\n"))
    else:
        cells = [[_cell(v) for v in row] for row in answer.rows]
        if out.is_terminal and _too_wide(answer.columns, cells, out.size.width):
            for n, row in enumerate(cells, 1):
                block = table("column", "value", title=f"row {n}")
                for name, cell in zip(answer.columns, row, strict=True):
                    add_row(block, name, cell)
                out.print(block)
        else:
            result = table(*answer.columns)
            for row in cells:
                add_row(result, *row)
            out.print(result)
    if answer.cut:
        of = f"more than {answer.total:,}" if answer.capped else f"{answer.total:,}"
        note(f"showing {len(answer.rows):,} of {of} rows; --limit N shows more, --limit 0 all")


def sql_command(output: Path, sql: str, limit: int = DEFAULT_LIMIT, fmt: str = "table") -> None:
    """Raises UsageError (refused: not a read, or outside the job; exit 2) or QueryFailed (exit 1)."""
    if fmt not in FORMATS:
        raise UsageError(f"--format: {fmt!r} is not a format; allowed: {', '.join(FORMATS)}")
    if not 0 <= limit <= MAX_LIMIT:  # past it DuckDB's fetchmany takes no Python int: a traceback
        raise UsageError(
            f"--limit: {limit} is out of range; allowed: 0 (all rows) or 1 to {MAX_LIMIT:,} rows"
        )
    # a typo: exit 2, as `load` and `export`
    layout = landed_output(output, "sql", database_will_do=True, reads_database_itself=True)
    if not layout.db.exists():
        from harvest.tasks.output.run_list import run_rows

        raise QueryFailed(missing_database(layout, output, run_rows(layout)))
    print_answer(query(layout.db, sql, limit), fmt)
