"""The demo's values read as what the catalog says its columns hold: a new user's first look at harvest is the
demo's tables, with each column's comment (its description) beside its values.

Read on the session's landed demo (`tests.landed_demo`), every table at once by what the comments say, so a
column described so in any table of the catalog is held to it: currencies are ISO 4217 codes, ratings "out of 5"
lie in [0, 5], language and country codes read as codes, a time in words agrees with the time beside it, and the
documentation's "last 7 days" query finds rows.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb

from tests.landed_demo import LandedDemo

DOCS = Path(__file__).resolve().parents[1] / "docs"
UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400, "month": 30 * 86400,
         "year": 365 * 86400}  # fmt: skip


def _columns(db: duckdb.DuckDBPyConnection, where: str) -> list[tuple[str, str]]:
    """(table, column) of the current tables' text columns whose comment or name matches `where` (SQL)."""
    return db.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE NOT table_name LIKE '%\\_history' ESCAPE '\\' "
        f"AND data_type IN ('VARCHAR', 'DOUBLE', 'DECIMAL(18,4)') AND ({where}) ORDER BY ALL"
    ).fetchall()


def _values(
    db: duckdb.DuckDBPyConnection, columns: list[tuple[str, str]]
) -> dict[tuple[str, str], list[Any]]:
    return {
        (t, c): [v for (v,) in db.execute(f'SELECT "{c}" FROM "{t}" WHERE "{c}" IS NOT NULL').fetchall()]
        for t, c in columns
    }


def test_codes_and_ratings_are_what_their_comments_say(landed_demo: LandedDemo) -> None:
    assert landed_demo.returncode == 0, landed_demo.stdout + landed_demo.stderr
    with duckdb.connect(str(landed_demo.output / "harvest.duckdb"), read_only=True) as db:
        checks = {
            "column_name LIKE '%currency' AND data_type = 'VARCHAR'": r"[A-Z]{3}",
            "comment ILIKE '%language code%' AND data_type = 'VARCHAR'": r"[a-z]{2}",
            "comment ILIKE '%two-letter code%' AND data_type = 'VARCHAR'": r"[A-Z]{2}",
        }
        for where, shape in checks.items():
            found = _values(db, _columns(db, where))
            assert sum(map(len, found.values())) >= 10, (where, found)  # the demo lands such values
            wrong = {col: [v for v in vs if not re.fullmatch(shape, v)] for col, vs in found.items()}
            assert not any(wrong.values()), {col: vs[:3] for col, vs in wrong.items() if vs}
        ratings = _values(db, _columns(db, "comment ILIKE '%out of 5%' AND data_type = 'DOUBLE'"))
        assert sum(map(len, ratings.values())) >= 10, ratings
        assert all(0 <= v <= 5 for vs in ratings.values() for v in vs), ratings


def test_a_time_in_words_agrees_with_the_time_beside_it(landed_demo: LandedDemo) -> None:
    """`created_at_text` says how long before `_fetched_at` the video was published ("2 weeks ago": two to
    three weeks), and `created_at` is that time, within a day."""
    with duckdb.connect(str(landed_demo.output / "harvest.duckdb"), read_only=True) as db:
        rows = db.execute(
            "SELECT created_at_text, created_at, _fetched_at FROM video_platform_videos"
        ).fetchall()
    assert len(rows) >= 10
    day = timedelta(days=1)
    for text, created, fetched in rows:
        n, unit = re.fullmatch(r"(\d+) (\w+?)s? ago", text).groups()  # type: ignore[union-attr]
        low, size = int(n) * UNITS[unit], timedelta(seconds=UNITS[unit])
        assert timedelta(seconds=low) - day <= fetched - created < timedelta(seconds=low) + size + day, (
            text, created, fetched
        )  # fmt: skip


def test_the_documented_last_7_days_query_finds_the_demo_s_videos(landed_demo: LandedDemo) -> None:
    (query,) = re.findall(r"\(`(SELECT title, created_at FROM video_platform_videos\s+WHERE [^`]+)`\)",
                          (DOCS / "output.md").read_text(encoding="utf-8"))  # fmt: skip
    with duckdb.connect(str(landed_demo.output / "harvest.duckdb"), read_only=True) as db:
        found = db.execute(" ".join(query.split())).fetchall()
        total = db.execute("SELECT count(*) FROM video_platform_videos").fetchall()[0][0]
    assert total >= 10 and len(found) == total
