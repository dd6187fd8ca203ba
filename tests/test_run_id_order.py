"""Run ids sort in the order their runs started, the way an analyst reads them (`ORDER BY run_id` in
`harvest.duckdb`, `ls` of `raw/`): a cron night and a `--continue` right after it, or two jobs of one team started
together, can begin in the same second."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from harvest.flows.run.begin import new_run_id


def test_runs_started_in_one_second_have_ids_in_the_order_they_started() -> None:
    second = datetime(2026, 12, 4, 3, 0, 0, tzinfo=UTC)
    steps = sorted(random.Random(7).sample(range(0, 1_000_000, 16), 200))  # no two in one 16 us
    times = [second + timedelta(microseconds=us) for us in steps]
    ids = [new_run_id(t) for t in times]
    assert sorted(ids) == ids, "ids out of the order their runs started"
    assert all(len(i) == len("20261204T030000Z-") + 6 for i in ids), ids[:3]


def test_ids_of_runs_in_later_seconds_sort_after() -> None:
    late_in_one = datetime(2026, 12, 4, 3, 0, 0, 999_999, tzinfo=UTC)
    early_in_next = late_in_one + timedelta(microseconds=1)
    assert new_run_id(late_in_one) < new_run_id(early_in_next)


def test_two_runs_in_the_same_moment_rarely_share_an_id() -> None:
    now = datetime(2026, 12, 4, 3, 0, 0, 123_456, tzinfo=UTC)
    assert len({new_run_id(now) for _ in range(64)}) > 32
