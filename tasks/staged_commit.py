"""What Dask workers staged (`tasks.output.staging`), verified and committed into the job's output directory by
the flow, in the order that never loses a paid page.

Per round: its pages first (each frame's checksum, query and page number checked, page numbers the query's raw
file has already skipped) appended to the query's raw file in the output directory and synced; then its Parquet
parts, each checked against the size, sha256 and rows the worker reported and published under its name (a
hidden `.tmp` first, as the sink does); then its attempt log; only then are the round's pages and files deleted
from the store (its `started` claim stays until the run's last sweep: `commit_round`). A part that fails a check is not used: the query's Parquet is landed again from its raw pages, the
receipt, as a resume lands them (`tasks.landing.reland_query`). The run manifest, written after the rounds, names only files in the
output directory, so nothing it references is ever in the store.

A flow killed mid-run leaves stages behind: the resumed run commits every page in them (`sweep`) before it
lands the query's raw pages again and pages on, so no staged page is paid for twice.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from collections.abc import Iterable
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

import pyarrow.parquet as pq

from harvest.tasks.output.layout import OutputLayout, query_hash
from harvest.tasks.output.raw_store import RawPage, RawPageReader, RawPageWriter, decode_frame
from harvest.tasks.output.staging import FILES, FRAME_SUFFIX, PAGES, StagingStore, stage_name

log = logging.getLogger(__name__)


class StagedRun:
    """One run's stages in the store, and the commits of them into its output directory."""

    def __init__(
        self, store: StagingStore, layout: OutputLayout, job: str, run_id: str, started: datetime
    ) -> None:
        self.store, self.layout, self.job, self.run_id, self.started = store, layout, job, run_id, started
        self.prefix = store.run_prefix(job, run_id)
        self.session = secrets.token_hex(4)
        self.last_page: dict[str, int] = {}
        """Per query, the last page number its raw file in the output directory holds."""

    def stage(self, part: int, query_id: str) -> str:
        return stage_name(self.session, part, query_hash(query_id))

    def commit_round(
        self, query_id: str, stage: str, staged: dict[str, Any] | None, unstaged: list[bytes]
    ) -> list[tuple[str, str, int]] | None:
        """Commit one round; its published files, or None when the query's Parquet must be landed again (the
        round broke, shipped no files, or a file failed its check).

        The stage's pages and files go; its `started` object stays (the claim) until `sweep` at the run's end,
        when no Dask client wants the round any more. Dask runs a finished task again when the worker holding
        its result dies while a future still refers to it, committed or not: that attempt must find the claim
        and pay nothing. Deleting it with the pages let such an attempt pay the round again, outside the
        flow's ledger (a worker killed mid-run: 9 pages paid twice for 1 in flight, 93 credits billed, 86
        counted)."""
        key = f"{self.prefix}/{stage}"
        names = self.store.files(f"{key}/{PAGES}")
        self.commit_pages(query_id, [*(self.store.get(n) for n in names), *unstaged])
        files = None
        if staged is not None:
            reported = [_page_number(n) for n in names]
            if reported != sorted(staged["pages"]):
                log.warning(
                    "round %s: the store holds pages %s, the worker staged %s",
                    stage,
                    reported,
                    staged["pages"],
                )
            elif staged["files"] is not None:
                files = self._commit_files(key, query_id, staged["files"])
        self.store.delete(f"{key}/{PAGES}")  # not `started`: the claim outlives the commit (see above)
        self.store.delete(f"{key}/{FILES}")
        return files

    def commit_pages(self, query_id: str, frames: Iterable[bytes]) -> int:
        """Append the frames' pages the query's raw file does not have yet, synced; how many were new."""
        last = self._last(query_id)
        fresh: list[RawPage] = []
        for frame in frames:
            page = decode_frame(frame)
            if page is None or page.query_id != query_id:  # torn: the worker died writing it (in flight)
                log.warning("a staged page of %s is torn or not its own; skipped", query_id)
                continue
            if page.page > last:
                fresh.append(page)
                last = page.page
        if fresh:
            with RawPageWriter(self.layout.raw_file(self.run_id, query_id)) as raw:
                for i, page in enumerate(fresh):
                    raw.fsync = i == len(fresh) - 1  # one sync for the round, before its stage is deleted
                    raw.append_page(page)
        self.last_page[query_id] = last
        return len(fresh)

    def _last(self, query_id: str) -> int:
        if query_id not in self.last_page:
            pages = RawPageReader(self.layout.raw_file(self.run_id, query_id))
            self.last_page[query_id] = max((p.page for p in pages), default=-1)
        return self.last_page[query_id]

    def _commit_files(
        self, key: str, query_id: str, shipped: list[dict[str, Any]]
    ) -> list[tuple[str, str, int]] | None:
        """Every Parquet part checked before any is published; the attempt log appended after them."""
        checked = []
        for entry in shipped:
            target = self._target(entry["path"])
            data = self.store.get(f"{key}/{FILES}/{entry['path']}")
            if target is None or len(data) != entry["bytes"] or _sha256(data) != entry["sha256"]:
                log.warning(
                    "staged file %s of %s failed its check; its rows land again", entry["path"], query_id
                )
                return None
            checked.append((entry, target, data))
        published = []
        for entry, target, data in checked:
            if "table" not in entry:
                with open(target, "ab") as log_file:
                    log_file.write(data)
                continue
            if not self._publish(target, data, entry["rows"]):
                return None
            published.append((entry["table"], entry["path"], entry["rows"]))
        return published

    def _target(self, relative: str) -> Any:
        """Where a shipped file goes: under the run's Parquet or raw directory, never elsewhere."""
        path = PurePosixPath(relative)
        inside = path.parts[:1] == ("parquet",) or path.parts[:2] == ("raw", self.run_id)
        if path.is_absolute() or ".." in path.parts or not inside:
            return None
        target = self.layout.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def _publish(self, target: Any, data: bytes, rows: int) -> bool:
        tmp = OutputLayout.parquet_tmp(target)
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if pq.read_metadata(tmp).num_rows != rows:
            tmp.unlink()
            return False
        os.replace(tmp, target)
        return True

    def sweep(self) -> set[str]:
        """Commit every page left in the store by earlier sessions of this run, and of the job's other runs in
        this output directory (a flow killed mid-run, a worker killed mid-round), then delete their stages.
        Returns the queries of this run that got pages. Another output directory's runs are left alone."""
        got: set[str] = set()
        job_prefix = self.store.job_prefix(self.job)
        for run_id in self.store.children(job_prefix):
            if run_id != self.run_id and not self.layout.manifest_file(run_id).exists():
                continue
            run = (
                self
                if run_id == self.run_id
                else StagedRun(self.store, self.layout, self.job, run_id, self.started)
            )
            for stage in self.store.children(run.prefix):
                key = f"{run.prefix}/{stage}"
                by_query: dict[str, list[bytes]] = {}
                for name in self.store.files(f"{key}/{PAGES}"):
                    frame = self.store.get(name)
                    page = decode_frame(frame)
                    if page is not None:
                        by_query.setdefault(page.query_id, []).append(frame)
                for query_id, frames in by_query.items():
                    if run.commit_pages(query_id, frames) and run is self:
                        got.add(query_id)
                self.store.delete(key)
            self.store.delete(run.prefix)
        return got


def _page_number(name: str) -> int:
    return int(PurePosixPath(name).name.removesuffix(FRAME_SUFFIX))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
