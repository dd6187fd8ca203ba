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
from harvest.tasks.output.journal import JournalState
from harvest.tasks.output.layout import REQUESTS_SUFFIX, OutputLayout
from harvest.tasks.output.raw_store import iso_utc, redact_params

IN_FLIGHT_STEM = "in-flight-at-stops"
"""The attempt log of the requests stopped sessions had in flight (`record_in_flight`), in the run's folder."""
RESERVATION_KEY = "rid"
"""The attempt line's key of `Attempt.reservation` (not a column of `requests`)."""
UNLOGGED_ERROR = (
    "answered, and its credits counted, but its session was stopped (kill -9, a power cut) before it logged the "
    "attempt: its status is not known"
)
IN_FLIGHT_ERROR = (
    "in flight when its session was stopped with no chance to record it (kill -9, a power cut): counted as "
    "spent, as the service may have billed it; the page was asked again"
)


class AttemptLogWriter(JsonLinesWriter):
    """Appends one JSON line per attempt, flushed per line, so failed and retried calls stay auditable."""

    def append(self, attempt: Attempt | Mapping[str, Any]) -> None:
        if isinstance(attempt, Attempt):
            row = {name: getattr(attempt, name) for name in ATTEMPT_FIELDS}
            if attempt.reservation is not None:
                row[RESERVATION_KEY] = attempt.reservation
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


def record_in_flight(layout: OutputLayout, run_id: str, journal: JournalState) -> None:
    """The requests the run's stopped sessions had in flight, as attempts (no session lived to log them), so
    `requests` holds every request that may have been billed; and a stopped session's last settled request
    when its attempt line is missing (the kill fell between the two). Written whole at each resume, every
    stopped session's, replacing the file: a second resume lists none twice. The page's params are its
    query's (the journal keeps no cursor); status NULL, no answer."""
    unlogged = [
        (query_id, page, credits)
        for number, rid, query_id, page, credits in journal.last_settled
        if not _logged(layout.session_requests_file(run_id, number), rid)
    ]
    if not journal.in_flight and not unlogged:
        return
    started = journal.started
    path = layout.run_dir(run_id) / f"{IN_FLIGHT_STEM}{REQUESTS_SUFFIX}"
    temporary = path.with_name(path.name + ".tmp")
    temporary.unlink(missing_ok=True)
    log = AttemptLogWriter(temporary)
    try:
        for error, stopped in ((IN_FLIGHT_ERROR, journal.in_flight), (UNLOGGED_ERROR, unlogged)):
            for query_id, page, credits in stopped:
                query = started.get(query_id, {})
                log.append(
                    Attempt(
                        query_id=query_id, endpoint=query.get("endpoint", ""), params=dict(query.get("params", {})),
                        page=page, attempt=0, status_code=None, credits=credits, duration_ms=0.0,
                        error=error, started_at=None,  # type: ignore[arg-type]
                    )
                )  # fmt: skip
    finally:
        log.close()
    temporary.replace(path)


def _logged(path: Path, rid: int) -> bool:
    """Whether the session's attempt log has a line of reservation `rid` (a torn line is not one)."""
    return path.exists() and any(attempt.get(RESERVATION_KEY) == rid for attempt in iter_attempts(path))
