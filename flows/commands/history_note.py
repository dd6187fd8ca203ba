"""What the end of a run says about its outputs: `parquet/` is history, the DuckDB tables are current.

A person who points a warehouse at `parquet/` after three nightly runs finds every key three times: each run
writes the rows it fetched, and only the load into DuckDB merges them on the primary key. So the end of every
loaded run says which is which, in a few plain lines, with a query that gives the current rows from the Parquet
(the newest fetch per key, as the DuckDB tables hold them) ready to paste, and names `harvest export --snapshot`
for the current tables as files.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from harvest.flows import console
from harvest.flows.console import harvest_command

_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def _name(column: str) -> str:
    from harvest.tasks.database.connection import quote_ident

    return column if _PLAIN_NAME.fullmatch(column) else quote_ident(column)


def current_rows_sql(parquet_table_dir: Path, primary_key: tuple[str, ...], width: int | None) -> list[str]:
    """The lines of a DuckDB query giving one row per key, the newest fetch (of a page that holds a key twice,
    the later row: `NEWEST_ORDER`), from every run's Parquet of a record table: the rows the DuckDB table holds,
    so rows without a whole key (which the load skips) are left out.
    The path is absolute (`harvest sql` reads only the job's own Parquet tree, named by its real place); where
    it is wider than `width` it is written as adjacent string literals, one a line, split after a `/` (SQL
    joins literals that only a line break separates), so no line is wider than the terminal."""
    from harvest.tasks.database.connection import (
        NEWEST_ORDER,
        ROW_NUMBER,
        parquet_glob,
        quote_literal,
        whole_key,
    )

    files = parquet_glob(parquet_table_dir.resolve())
    names = [_name(c) for c in primary_key]
    keys = ", ".join(names)
    where = "WHERE " + whole_key(names, joiner="\n    AND ")  # a line per key column
    room = None if width is None else width - len(SQL_INDENT) - 4 - 3  # indent, quotes and comma
    *parts, last = [quote_literal(part) for part in split_after_slashes(files, room)]
    return [
        f"SELECT * EXCLUDE ({ROW_NUMBER}) FROM read_parquet(",
        *(f"    {part}" for part in parts),
        f"    {last},",
        "    hive_partitioning = true, union_by_name = true,",
        f"    {ROW_NUMBER} = true)",
        *where.splitlines(),
        "QUALIFY row_number() OVER (",
        f"    PARTITION BY {keys}",
        f"    ORDER BY {NEWEST_ORDER}) = 1",
    ]


def split_after_slashes(path: str, width: int | None) -> list[str]:
    """`path` in pieces of at most `width` characters, each ending after a `/` (a piece between two slashes
    wider than that stays whole); all of it in one piece when `width` is None."""
    if width is None:
        return [path]
    pieces: list[str] = []
    for part in path.split("/"):
        part = part + "/" if len(pieces) or part else "/"
        if pieces and len(pieces[-1]) + len(part) <= width:
            pieces[-1] += part
        else:
            pieces.append(part)
    pieces[-1] = pieces[-1][:-1]  # the last part took a slash the path does not end with
    return [piece for piece in pieces if piece]


def shell_lines(words: list[str], width: int | None, tail: str = "") -> list[str]:
    """A command's words, shell-quoted, in lines of at most `width` (words never split: a break between two
    words ends the line with ` \\`, which the shell reads as going on); `tail` closes the last line."""
    lines = [shlex.quote(words[0])]
    for word in [*map(shlex.quote, words[1:]), *([tail] if tail else [])]:
        if width is None or len(lines[-1]) + 1 + len(word) + 2 <= width:
            lines[-1] += " " + word
        else:
            lines[-1] += " \\"
            lines.append("    " + word)
    return lines


SQL_INDENT = "    "
"""The query's lines under its command."""


def sql_command(output: Path, sql_lines: list[str], width: int | None) -> list[str]:
    """`harvest sql OUTPUT "..."` over several lines, as a shell reads it pasted: the query in double quotes,
    or in single quotes when it holds a character the shell would expand in double ones."""
    sql = "\n".join(SQL_INDENT + line for line in sql_lines)
    if set(sql) & set('"$`\\!'):
        quoted = shlex.quote("\n" + sql).split("\n")
        return [*shell_lines([harvest_command(), "sql", str(output)], width, quoted[0]), *quoted[1:]]
    return [*shell_lines([harvest_command(), "sql", str(output)], width, '"'), *sql.split("\n")[:-1],
            sql.split("\n")[-1] + '"']  # fmt: skip


def example_table(tables: dict[str, int], parquet_root: Path) -> str | None:
    """The table the ready query is written for: the one with the most rows that has Parquet files."""
    for name, _ in sorted(tables.items(), key=lambda item: (-item[1], item[0])):
        if any((parquet_root / name).glob("*/*.parquet")):
            return name
    return None


def say_history(tables: dict[str, int], output: Path) -> None:
    """The few lines at the end of a loaded run into these tables: sentences (wrapped at separators on a
    terminal) and two commands, laid out to the terminal's width as a shell reads them pasted."""
    from harvest.connectors.catalog.child_kinds import ChildKind
    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.manifest import output_kinds

    kinds = output_kinds(OutputLayout(output))
    parquet_root = output / "parquet"
    records = {t: n for t, n in tables.items() if t in kinds and not isinstance(kinds[t], ChildKind)}
    table = example_table(records, parquet_root)  # a child table's current rows are its parents' newest fetch
    if table is None:
        return
    width = console.out.size.width - len(INDENT) if console.out.is_terminal else None
    console.prose(
        f"History and current rows: {parquet_root}/ is history, every run adds the rows it fetched (a key is "
        f"there once each time a run fetched it); the tables in {output / 'harvest.duckdb'} are current, one row "
        "per key, its newest fetch. The current tables as Parquet files:"
    )
    for line in shell_lines([harvest_command(), "export", str(output), "--to", "DIR", "--snapshot"], width):
        console.say(INDENT + line)
    console.prose(
        f"Current rows of {table} from the Parquet (DuckDB SQL; the same for any record table and its key, a "
        "child table's is in docs/output.md):"
    )
    sql = current_rows_sql(parquet_root / table, kinds[table].primary_key, width)
    for line in sql_command(output, sql, width):
        console.say(INDENT + line)


INDENT = "  "
"""The commands' lines under the sentences."""
