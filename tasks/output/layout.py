"""Every path harvest writes, named in one place.

Keeping the naming here means the raw store, the Parquet sink, the DuckDB loader and a later rebuild all agree
on where a run's data lives without passing paths around by hand::

    <root>/harvest.duckdb                                      the queryable database (written only by `load`)
    <root>/parquet/<table>/date=<YYYY-MM-DD>/<run_id>-run[-<k>].parquet   a run's parts, rolled by size
    <root>/parquet/<table>/date=<YYYY-MM-DD>/<run_id>-<n>-<hash>.parquet  a query's (Dask rounds, older runs)
    <root>/.harvest-<job>.lock                                 held while a run of the job is going on
    <root>/raw/<run_id>/manifest.json                          run manifest
    <root>/raw/<run_id>/journal.jsonl                          queries started/ended, credit reservations
    <root>/raw/<run_id>/session-<n>.pages                      paid answers of every query, one frame per page
    <root>/raw/<run_id>/session-<n>.requests.jsonl             attempt log of every query of that session
    <root>/raw/<run_id>/<query-stem>.pages, .requests.jsonl    a query's own (Dask rounds, runs written before)

Query ids are free text (they may hold ``/``, ``:``, spaces or non-ASCII), so a query's file stem is a
readable, sanitised prefix plus a hash of the exact id (see `query_stem`). The mapping is one-way by
design: the exact query id is stored inside every raw frame and every attempt-log line, so the files
themselves are the reverse mapping, and a hash keeps names short, unique and safe on case-insensitive file
systems.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SLUG_MAX = 60
_HASH_LEN = 16

RUN_PART = "run"
"""The part id of a run's own Parquet files (one writer per run in the flow's process; rolled parts add `-<k>`)."""
SESSION_PREFIX = "session-"
"""Query stems are `<slug>-<16 hex>`: a session's `session-0001` never is one."""
RAW_SUFFIX = ".pages"
REQUESTS_SUFFIX = ".requests.jsonl"
PARQUET_SUFFIX = ".parquet"
TMP_SUFFIX = ".tmp"
PREFECT_OWED = ".prefect-owed"


def query_hash(query_id: str) -> str:
    """Short, stable hash of a query id; 64 bits make accidental collisions within a run negligible."""
    return hashlib.sha256(query_id.encode("utf-8")).hexdigest()[:_HASH_LEN]


def query_stem(query_id: str) -> str:
    """File-name-safe stem for a query id: ``<slug>-<hash>``.

    The slug only helps a human find a file; uniqueness comes from the hash of the exact id, so two ids that
    sanitise to the same slug (or differ only by case) still get different names. Leading dots are stripped
    so no stem is hidden or equal to ``.``/``..``.
    """
    slug = _UNSAFE.sub("_", query_id)[:_SLUG_MAX].strip("._") or "q"
    return f"{slug}-{query_hash(query_id)}"


def _check_component(name: str, what: str) -> str:
    """Run ids and table names become directory names verbatim, so refuse anything that could escape root."""
    if not name or name in {".", ".."} or _UNSAFE.search(name):
        raise ValueError(f"{what} {name!r} must be non-empty and use only letters, digits, '.', '_' or '-'")
    return name


@dataclass(frozen=True)
class OutputLayout:
    """Names the files under one output root; creates nothing, so it is safe to build anywhere."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def db(self) -> Path:
        return self.root / "harvest.duckdb"

    @property
    def parquet_root(self) -> Path:
        return self.root / "parquet"

    @property
    def raw_root(self) -> Path:
        return self.root / "raw"

    def parquet_table_dir(self, table: str) -> Path:
        return self.parquet_root / _check_component(table, "table")

    def parquet_dir(self, table: str, date: dt.date) -> Path:
        """Hive partition directory; ``date`` is the run's start date in UTC (see parquet_sink)."""
        return self.parquet_table_dir(table) / f"date={date.isoformat()}"

    def parquet_file(self, table: str, date: dt.date, run_id: str, n: str) -> Path:
        """``<run_id>-<n>.parquet``; ``n`` must be unique per writer within the run (see `part_id`)."""
        _check_component(n, "part")
        return self.parquet_dir(table, date) / f"{_check_component(run_id, 'run id')}-{n}{PARQUET_SUFFIX}"

    @staticmethod
    def parquet_tmp(final: Path) -> Path:
        """In-progress name of a Parquet file.

        The leading dot hides it from ``pyarrow.dataset`` discovery (which skips ``.``/``_`` prefixes) and the
        ``.tmp`` suffix hides it from ``*.parquet`` globs, so a footer-less file is never read as data.
        """
        return final.with_name(f".{final.name}{TMP_SUFFIX}")

    @staticmethod
    def part_id(seq: int, query_id: str | None = None) -> str:
        """Writer part id ``<seq>`` or ``<seq>-<query hash>``: the counter orders parts, the hash keeps parts
        from different queries apart even when two processes of one run both start counting at 0."""
        if seq < 0:
            raise ValueError("seq must be >= 0")
        return f"{seq:04d}" if query_id is None else f"{seq:04d}-{query_hash(query_id)}"

    @staticmethod
    def part_of(path: Path | str, run_id: str) -> str | None:
        """The part id in a Parquet file's name (`<run_id>-<part>.parquet`), or None when it is not the run's."""
        name = Path(path).name
        prefix = f"{run_id}-"
        if not (name.startswith(prefix) and name.endswith(PARQUET_SUFFIX)):
            return None
        return name[len(prefix) : -len(PARQUET_SUFFIX)] or None

    def run_dir(self, run_id: str) -> Path:
        return self.raw_root / _check_component(run_id, "run id")

    def session_raw_file(self, run_id: str, session: int) -> Path:
        """The raw pages one process of a run paid for, every query's in one file (the flow's process; each
        resume is a session of its own, so a crashed session's file is only read, never appended to)."""
        return self.run_dir(run_id) / f"{SESSION_PREFIX}{session:04d}{RAW_SUFFIX}"

    def session_requests_file(self, run_id: str, session: int) -> Path:
        return self.run_dir(run_id) / f"{SESSION_PREFIX}{session:04d}{REQUESTS_SUFFIX}"

    def next_session(self, run_id: str) -> int:
        """1 for a new run, one past the last session's number for a resume."""
        used = [
            int(m[1])
            for p in self.run_dir(run_id).glob(f"{SESSION_PREFIX}*")
            if (m := _SESSION_FILE.match(p.name))
        ]
        return max(used, default=0) + 1

    def raw_file(self, run_id: str, query_id: str) -> Path:
        return self.run_dir(run_id) / f"{query_stem(query_id)}{RAW_SUFFIX}"

    def requests_file(self, run_id: str, query_id: str) -> Path:
        return self.run_dir(run_id) / f"{query_stem(query_id)}{REQUESTS_SUFFIX}"

    def round_claims(self, run_id: str) -> Path:
        """Dask rounds on a shared disk: one empty file per round, made before it pays (`tasks.round_task`)."""
        return self.run_dir(run_id) / "rounds"

    def manifest_file(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "manifest.json"

    def journal_file(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "journal.jsonl"

    def prefect_owed_file(self, run_id: str) -> Path:
        """What the run owes Prefect while its API did not answer (`flows.orchestrator.prefect_record`): in a
        directory of their own, which every run lists (one small listing, not one per run directory)."""
        return self.root / PREFECT_OWED / f"{_check_component(run_id, 'run id')}.json"

    def prefect_owed_files(self) -> list[Path]:
        owed = self.root / PREFECT_OWED
        return sorted(owed.glob("*.json")) if owed.is_dir() else []

    def lock_file(self, job: str) -> Path:
        return self.root / f".harvest-{_check_component(job, 'job')}.lock"

    def run_parts(self, run_id: str, date: dt.date) -> list[Path]:
        """Every Parquet file of one run, published or still `.tmp`, in every table (its queries' and its own)."""
        _check_component(run_id, "run id")
        found = []
        for part in self.parquet_root.glob(f"*/date={date.isoformat()}/*{PARQUET_SUFFIX}*"):
            name = part.name
            if (name.startswith(f".{run_id}-") and name.endswith(TMP_SUFFIX)) or (
                name.startswith(f"{run_id}-") and name.endswith(PARQUET_SUFFIX)
            ):
                found.append(part)
        return sorted(found)

    def query_parts(self, run_id: str, date: dt.date, query_id: str) -> list[Path]:
        """Every Parquet file of one query in one run, published or still `.tmp`, in every table."""
        tail = f"-{query_hash(query_id)}{PARQUET_SUFFIX}"
        return [p for p in self.run_parts(run_id, date) if p.name.removesuffix(TMP_SUFFIX).endswith(tail)]

    def relative(self, path: Path | str) -> str:
        """A path as the manifest stores it: relative to the output root, so the directory can move."""
        return _relative(str(self.root), str(path))

    def listed(self, files: Iterable[tuple[str, Path, int]]) -> list[tuple[str, str, int]]:
        """Published files as a manifest lists them: (table, path relative to the root, rows)."""
        return [(table, self.relative(path), rows) for table, path, rows in files]

    def resolve(self, stored: str) -> Path:
        """A path read from a manifest: relative ones are under the root (older manifests hold absolute paths)."""
        path = Path(stored)
        return path if path.is_absolute() else self.root / path

    def raw_files(self, run_id: str) -> list[Path]:
        """All raw page files of a run in the order they were written: a query's own files (Dask rounds, runs
        before sessions) first, then the sessions' in order."""
        return sorted(self.run_dir(run_id).glob(f"*{RAW_SUFFIX}"), key=_written_order)

    def requests_files(self, run_id: str) -> list[Path]:
        return sorted(self.run_dir(run_id).glob(f"*{REQUESTS_SUFFIX}"), key=_written_order)


_SESSION_FILE = re.compile(rf"{SESSION_PREFIX}(\d+)\.")


def _written_order(path: Path) -> tuple[bool, str]:
    return _SESSION_FILE.match(path.name) is not None, path.name


class KindLike(Protocol):
    """The part of `connectors.catalog.records.RecordKind` the landing tasks rely on (read-only attributes)."""

    @property
    def table(self) -> str: ...

    @property
    def primary_key(self) -> tuple[str, ...]: ...

    @property
    def schema(self) -> pa.Schema: ...


@functools.lru_cache(maxsize=4096)
def _relative(root: str, path: str) -> str:
    """`OutputLayout.relative`, remembered: every query of a session names the session's raw file and attempt
    log, and `relative_to` cost ~25 us a call (2% of a wide fan-out's paging). Keyed by text: hashing a Path
    for the cache cost about as much again (1.3% of the paging, py-spy)."""
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(Path(path))
