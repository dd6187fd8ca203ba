"""How a job runs, beside what it collects: its schedule and where its queries execute.

Kept apart from the query models: these change how Prefect deploys and runs a job, never which pages are paid.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

_CRON_FIELD = r"[\d*/,\-A-Za-z?LW#]+"
_CRON = re.compile(rf"^\s*{_CRON_FIELD}(\s+{_CRON_FIELD}){{4}}\s*$")


CRON_ALLOWED = (
    "minute 0-59, hour 0-23, day 1-31, month 1-12 or jan-dec, weekday 0-6 or sun-sat; "
    "each as *, a value, a range a-b, a list a,b or a step */n"
)


def cron_problem(expression: str) -> str | None:
    """Why Prefect would refuse the expression when `harvest serve` registers it, or None.

    The check is croniter's, the library Prefect's CronSchedule validates with (Prefect vendors a copy), so
    what passes `harvest validate` is what a deployment accepts; random and hashed fields (H, R) Prefect refuses
    too. Not Prefect's copy: importing it imports Prefect (1.5 s, and Prefect's telemetry would start before
    harvest switched it off), and `validate` must answer at once.
    """
    from croniter import croniter

    if any(f.casefold() in ("h", "r") for f in expression.split()):
        return "random and hashed fields (H, R) are not supported"
    if not croniter.is_valid(expression):
        return "a field is out of range or malformed"
    return None


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Schedule(_Options):
    """When `harvest serve` runs the job: a cron expression in a time zone, or an interval."""

    cron: str | None = Field(None, description='Five-field cron expression, e.g. "0 3 * * *" (03:00 daily).')
    interval: int | None = Field(None, strict=True, ge=60, description="Seconds between runs (at least 60).")
    timezone: str = Field("UTC", description="IANA time zone of the cron expression, e.g. Europe/Berlin.")

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not _CRON.match(value):
            raise ValueError(f"{value!r} is not a five-field cron expression (minute hour day month weekday)")
        problem = cron_problem(value)
        if problem:
            raise ValueError(f"{value!r} is not a valid cron expression: {problem}")
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)") from None
        return value

    @model_validator(mode="after")
    def _one(self) -> Schedule:
        if (self.cron is None) == (self.interval is None):
            raise ValueError("give exactly one of cron or interval")
        return self


class Runner(_Options):
    """Where the connector tasks run: in the flow's process (`local`), or on a Dask cluster."""

    kind: Literal["local", "dask"] = Field("local", description="local (default) or dask.")
    address: str | None = Field(
        None,
        description="Scheduler of an existing Dask cluster, e.g. tcp://10.0.0.5:8786; none: a local one.",
    )
    workers: int = Field(2, strict=True, ge=1, le=64, description="Worker processes of a local Dask cluster.")
    round_pages: int = Field(
        20, strict=True, ge=1, le=10_000, description="Pages a query may pay for per round on Dask."
    )
    staging: str | None = Field(
        None,
        description="Where Dask workers that share no disk with the flow put what they paid: "
        "s3://bucket/prefix, gs://bucket/prefix or a directory; none: the output is a path every worker reaches.",
    )

    @model_validator(mode="after")
    def _address(self) -> Runner:
        if self.kind == "dask" and importlib.util.find_spec("prefect_dask") is None:
            raise ValueError(
                "kind: dask needs the dask extra, which is not installed: pip install 'harvest[dask]'"
            )
        if self.address is not None and self.kind != "dask":
            raise ValueError("an address needs kind: dask")
        if self.address is not None and not re.match(r"^(tcp|tls|inproc|ucx)://\S+$", self.address):
            raise ValueError(f"{self.address!r} is not a Dask scheduler address (tcp://host:port)")
        if self.staging is not None and self.kind != "dask":
            raise ValueError("staging needs kind: dask")
        return self

    @field_validator("staging")
    @classmethod
    def _staging(cls, value: str | None) -> str | None:
        if value is not None:
            check_staging(value)
        return value


STAGING_SCHEMES = ("", "file", "s3", "gs", "gcs")
STAGING_ALLOWED = "s3://bucket/prefix, gs://bucket/prefix, file:// or a directory (no credentials in the URL)"


def check_staging(url: str) -> None:
    """Refuse a staging URL pyarrow cannot open as a filesystem or that carries a secret, before a credit is
    spent (a store that does not answer is found by the run's probe, still before paying)."""
    parts = urlsplit(url)
    if parts.scheme not in STAGING_SCHEMES or not url.strip():
        raise ValueError(f"{url!r} is not a staging store; allowed: {STAGING_ALLOWED}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"credentials or a query string in the staging URL; allowed: {STAGING_ALLOWED}")
    if parts.scheme not in ("", "file") and not parts.netloc:
        raise ValueError(f"{url!r} names no bucket; allowed: {STAGING_ALLOWED}")


EXPORT_SCHEMES = ("", "file", "s3", "gs", "gcs")
EXPORT_ALLOWED = (
    "a local directory, file://, s3://bucket/prefix or gs://bucket/prefix (no credentials in the URL)"
)


class BadDestination(ValueError):
    pass


def check_destination(url: str, output: Path | None = None) -> str:
    """The destination as stored and compared; refused when pyarrow could not write there or it holds a secret,
    and, given the job's `output`, when it is that directory or inside it: the copy of a landed file onto
    itself truncates it before it reads it (every landed Parquet file emptied)."""
    if not url.strip():
        raise BadDestination(f"an empty destination; allowed: {EXPORT_ALLOWED}")
    parts = urlsplit(url)
    if parts.scheme not in EXPORT_SCHEMES:
        raise BadDestination(f"{url!r} is not a destination; allowed: {EXPORT_ALLOWED}")
    if parts.username or parts.password or parts.query:
        raise BadDestination(f"credentials or a query string in the URL; allowed: {EXPORT_ALLOWED}")
    if parts.scheme in ("", "file"):
        local = Path(parts.path if parts.scheme else url).expanduser().resolve()
        if output is not None and local.is_relative_to(root := output.expanduser().resolve()):
            raise BadDestination(
                f"{url!r} is inside the job's output directory {root}; export to a place outside it"
            )
        return str(local)
    if not parts.netloc:
        raise BadDestination(f"{url!r} names no bucket; allowed: {EXPORT_ALLOWED}")
    return url.rstrip("/")


EXPORT_FORMATS = ("parquet", "iceberg", "delta")
FORMAT_LIBRARIES = {"iceberg": "pyiceberg", "delta": "deltalake"}
"""The library each table format needs, installed by the extra of the same name (`harvest[iceberg]`)."""


def format_problem(fmt: str, snapshot: bool = False) -> str | None:
    """Why an export in `fmt` cannot run here, or None: checked before a run pays, and by `harvest export`."""
    if fmt not in EXPORT_FORMATS:
        return f"{fmt!r} is not an export format; allowed: {', '.join(EXPORT_FORMATS)}"
    if snapshot and fmt != "parquet":
        return f"a snapshot needs format parquet (a {fmt} table is merged on its key already)"
    library = FORMAT_LIBRARIES.get(fmt)
    if library is not None and importlib.util.find_spec(library) is None:
        return f"format {fmt} needs the {fmt} extra, which is not installed: pip install 'harvest[{fmt}]'"
    return None


class Export(_Options):
    """An export after every run (`harvest export OUTPUT --to URL` as a step of the run)."""

    to: str = Field(description="Destination: a directory, s3://bucket/prefix or gs://bucket/prefix.")
    format: Literal["parquet", "iceberg", "delta"] = Field(
        "parquet",
        description="parquet: the new runs' files and a manifest (default); iceberg or delta: one table per "
        "record kind, merged on the primary key.",
    )
    snapshot: bool = Field(
        False, strict=True, description="Export the merged tables instead of the new runs (format parquet)."
    )

    @field_validator("to")
    @classmethod
    def _to(cls, value: str) -> str:
        check_destination(value)
        return value

    @field_validator("format")
    @classmethod
    def _format(cls, value: str) -> str:
        problem = format_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("snapshot")
    @classmethod
    def _snapshot(cls, value: bool, info: ValidationInfo) -> bool:
        fmt = info.data.get("format", "parquet")
        if value and fmt != "parquet":
            raise ValueError(format_problem(fmt, value))
        return value


class RateLimit(_Options):
    """How harvest meets the service's rate limit (undocumented; the notes say a 429 may come). It always slows
    down when the service answers 429 and climbs again when it allows more; these say what is known beforehand
    and how long to keep waiting."""

    per_second: float | None = Field(
        None,
        gt=0,
        le=10_000,
        description="A known limit, in requests a second, shared by every query of the run: never sent faster.",
    )
    max_wait_seconds: float = Field(
        900,
        gt=0,
        le=86_400,
        description="How long the run keeps asking while the service accepts nothing (every answer a 429): then "
        "the queries stop with their cursors, like a budget stop.",
    )
