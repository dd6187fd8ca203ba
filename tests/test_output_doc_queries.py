"""docs/output.md's SQL runs: every query it shows (a ```sql block, or inline code that starts with `SELECT`)
runs on the session's landed demo (`tests.landed_demo`), so a table or column it names exists in the catalog. A
column renamed since (`published_time` became `created_at`) fails here instead of in an analyst's hands."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from tests.landed_demo import LandedDemo

PAGE = Path(__file__).resolve().parents[1] / "docs" / "output.md"
SQL_BLOCK = re.compile(r"```sql\n(.*?)```", re.DOTALL)
INLINE_SELECT = re.compile(r"`(SELECT [^`]+)`")
JOB_DATA = re.compile(r"'data/[^/']+/")
"""A Parquet path the page names (`data/brand-watch/...`, `data/demo/...`), read from the demo's output instead."""


def page_queries() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    queries = SQL_BLOCK.findall(text) + INLINE_SELECT.findall(text)
    return [" ".join(query.split()) for query in queries]


def test_every_query_docs_output_shows_runs_on_the_demo(landed_demo: LandedDemo) -> None:
    assert landed_demo.returncode == 0, landed_demo.stdout + landed_demo.stderr
    queries = page_queries()
    assert len(queries) >= 4, queries  # the two Parquet windows, the typed times, the column comments
    output = str(landed_demo.output).replace("'", "''")  # inside an SQL string: "demo's out"
    con = duckdb.connect(str(landed_demo.output / "harvest.duckdb"), read_only=True)
    try:
        failed = {}
        for query in queries:
            try:
                con.execute(JOB_DATA.sub(f"'{output}/", query)).fetchall()
            except duckdb.Error as e:
                failed[query] = str(e).splitlines()[0]
    finally:
        con.close()
    assert failed == {}, failed
