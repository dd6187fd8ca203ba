"""The OUTPUT argument of the commands that read a job's output directory (`runs`, `load`, `sql`, `rebuild`,
`export`, `raw`), given the job spec instead: the commands beside them (`run`, `plan`, `validate`) take the spec,
so the mix-up is the common one, and each command then said something untrue of it ("no runs found under
job.yaml", "job.yaml/harvest.duckdb does not exist: run a job first"). Said here once, with the command as it
should have been typed: the spec's `output` in the file's place. A directory harvest never wrote to (a typo) is
refused here too, rather than read as a job with no runs.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harvest.flows.cli_errors import Failed
from harvest.flows.console import harvest_command, harvest_line
from harvest.tasks.output.layout import OutputLayout

if TYPE_CHECKING:
    from harvest.tasks.output.run_list import RunRow

ALLOWED = (
    "allowed: a job's output directory (holds harvest.duckdb, parquet/ and raw/; a spec's `output` names it)"
)


def output_directory(output: Path, command: str) -> Path:
    """`output` when it is not a file; a file (a job spec, most often) is refused before anything is read,
    naming the spec's output directory and the corrected command when the file is a spec (exit 2)."""
    if not output.is_file():
        return output
    landed_in = _spec_output(output)
    if landed_in is None:
        raise Failed(f"{output} is a file, not an output directory; {ALLOWED}")
    raise Failed(
        f"{output} is a job spec, not its output directory; the job lands in {landed_in}: "
        f"`{_corrected(output, landed_in, command)}`"
    )


def landed_output(
    output: Path, command: str, *, database_will_do: bool = False, reads_database_itself: bool = False
) -> OutputLayout:
    """The output directory of a job that landed (it holds `raw/`; with `database_will_do`, `harvest.duckdb` is
    enough), refused otherwise (exit 2): a typo said "no runs" or "nothing to load" every night.
    `reads_database_itself`: the command says what is wrong with `harvest.duckdb` (`runs` lists the runs over it
    with a warning, `sql` exits 1), and something other than a file there is enough to be harvest's."""
    layout = OutputLayout(output_directory(output, command))
    database = layout.db.exists() if reads_database_itself else layout.db.is_file()
    if not layout.raw_root.is_dir() and not (database_will_do and database):
        raise Failed(f"{output}: not a harvest output directory (no raw/); {ALLOWED}")
    if reads_database_itself:
        return layout
    if layout.db.exists() and not layout.db.is_file():  # `rebuild`'s move onto it was a traceback
        raise Failed(not_a_database_file(layout.db))
    return layout


def missing_database(layout: OutputLayout, output: Path, rows: Sequence[RunRow]) -> str:
    """What is said where `harvest.duckdb` is missing from a job's output directory, by what its runs' manifests
    (`rows`: `run_rows`, as the caller read them) say: loaded into it before (gone: the rebuild), landed and
    never loaded (the load), or none landed yet. "run a job first" was said of all three, untrue of a job whose
    runs are there."""
    if any(row.manifest.loaded for row in rows):
        return (
            f"{layout.db} does not exist although runs were loaded into it: "
            f"`{harvest_line('rebuild', output)}` builds it again from the raw pages"
        )
    if rows:
        return (
            f"{layout.db} does not exist: the job's runs landed but none is loaded; "
            f"`{harvest_line('load', output)}` loads them"
        )
    return f"{layout.db} does not exist: no run of the job has landed here yet; run the job first"


def not_a_database_file(db: Path, also: str = "") -> str:
    """What is said of something other than a file where `harvest.duckdb` belongs (a directory), by every
    command that reads it, with `also` said before the way out."""
    return (
        f"{db} is not a file: harvest keeps its DuckDB database there; {also}move it away, then "
        f"`{harvest_line('rebuild', db.parent)}` makes the database again from the landed pages"
    )


def _spec_output(path: Path) -> Path | None:
    """The output directory of the spec at `path`, or None when it is no valid spec (then nothing it says of an
    output can be trusted)."""
    from harvest.flows.spec import SpecError, load_spec

    try:
        return load_spec(path).output
    except SpecError:
        return None


def _corrected(given: Path, output: Path, command: str) -> str:
    """The command line the user typed with the spec's output in the spec's place, shell-quoted to be pasted;
    `harvest COMMAND OUTPUT` when the line is not this process's own (a command called from code)."""
    words = sys.argv[1:]
    if command in words and str(given) in words:
        at = words.index(str(given))
        return " ".join(
            [harvest_command(), *(shlex.quote(str(output) if i == at else w) for i, w in enumerate(words))]
        )
    return harvest_line(command, output)
