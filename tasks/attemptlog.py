"""The attempt log: one JSON line per HTTP attempt of a query, paid or not; it loads into `requests`."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.appendfile import JsonLinesWriter, iter_json_lines
from tasks.rawstore import iso_utc, redact_params


@dataclass(frozen=True)
class Attempt:
    """One HTTP attempt (paid or not); loads into the `requests` table."""

    query_id: str
    endpoint: str
    params: dict[str, Any]
    page: int | None
    attempt: int
    status_code: int | None
    credits: int
    duration_ms: float | None
    error: str | None
    started_at: str


ATTEMPT_FIELDS = tuple(f.name for f in dataclasses.fields(Attempt))


class AttemptLogWriter(JsonLinesWriter):
    """Appends one JSON line per attempt, flushed per line, so failed and retried calls stay auditable."""

    def append(self, attempt: Attempt | Mapping[str, Any]) -> None:
        data = dataclasses.asdict(attempt) if isinstance(attempt, Attempt) else dict(attempt)
        unknown = set(data) - set(ATTEMPT_FIELDS)
        if unknown:
            raise ValueError(f"unknown attempt fields: {sorted(unknown)}")
        row = {name: data.get(name) for name in ATTEMPT_FIELDS}
        row["params"] = redact_params(row["params"])
        if isinstance(row["started_at"], dt.datetime):
            row["started_at"] = iso_utc(row["started_at"])
        self.append_json(row)


def iter_attempts(path: Path | str) -> Iterator[dict[str, Any]]:
    """Attempt records in order, skipping lines that a crash left incomplete."""
    return iter_json_lines(path)
