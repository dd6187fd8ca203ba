"""A run the command line prepared before Prefect started: its spec parsed, its output checked, its job's lock
taken; handed to the flow in the same process, so the flow does none of the three again.

`harvest run` has to do them first (bad input is refused in a second, a second run of the job at once, before
Prefect's server starts); the flow then gets a token instead of doing them twice. A deployment's run, started by
a worker, has no prepared run: the flow parses, checks and locks itself. The token is a flow parameter, so a
Prefect retry of the flow in this process finds the same prepared run.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from flows.spec import JobSpec, UsageError
from tasks.output.job_lock import JobLock
from tasks.output.layout import OutputLayout


@dataclass(frozen=True)
class PreparedRun:
    spec: JobSpec
    layout: OutputLayout
    lock: JobLock


_PREPARED: dict[str, PreparedRun] = {}


def hand_over(run: PreparedRun) -> str:
    token = uuid.uuid4().hex
    _PREPARED[token] = run
    return token


def prepared_run(token: str) -> PreparedRun:
    try:
        return _PREPARED[token]
    except KeyError:
        raise UsageError(
            f"collect_job: no run prepared as {token!r} in this process (`prepared` is for `harvest run`; a "
            "deployment gives spec_text or spec_path)"
        ) from None


def withdraw(token: str) -> None:
    _PREPARED.pop(token, None)
