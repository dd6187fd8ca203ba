"""The attempt log: one JSON line per HTTP attempt of a query, paid or not; it loads into `requests`.

A line holds `connectors.paging.page_request.Attempt`'s fields, by name: that dataclass is the one description of the
row. Lines are written per attempt (a crash loses at most a torn last line) without building a dict of the
whole dataclass (`dataclasses.asdict` was 9% of a large run's CPU).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harvest.connectors.paging.page_request import ATTEMPT_FIELDS, Attempt
from harvest.tasks.output.append_file import JsonLinesWriter, iter_json_lines
from harvest.tasks.output.raw_store import iso_utc, redact_params


class AttemptLogWriter(JsonLinesWriter):
    """Appends one JSON line per attempt, flushed per line, so failed and retried calls stay auditable."""

    def append(self, attempt: Attempt | Mapping[str, Any]) -> None:
        if isinstance(attempt, Attempt):
            row = {name: getattr(attempt, name) for name in ATTEMPT_FIELDS}
        else:
            unknown = set(attempt) - set(ATTEMPT_FIELDS)
            if unknown:
                raise ValueError(f"unknown attempt fields: {sorted(unknown)}")
            row = {name: attempt.get(name) for name in ATTEMPT_FIELDS}
        row["params"] = redact_params(row["params"])
        if isinstance(row["started_at"], dt.datetime):
            row["started_at"] = iso_utc(row["started_at"])
        self.append_json(row)


def iter_attempts(path: Path | str) -> Iterator[dict[str, Any]]:
    """Attempt records in order, skipping lines that a crash left incomplete."""
    return iter_json_lines(path)
