"""The staging store of a Dask cluster that shares no disk with the flow (`runner.staging`): its names, and how
a worker's paid pages reach it before they are read.

A worker cannot write the job's output directory, so what it pays goes to object storage (or any filesystem
pyarrow opens: `s3://`, `gs://`, a local path) under names no other round uses, and the flow commits it into the
output directory (`tasks.staged_commit`)::

    <staging>/<job>/<run_id>/<stage>/started               written before the round pays anything; kept to the run's end
    <staging>/<job>/<run_id>/<stage>/pages/<page>.frame    one paid answer, a raw-store frame, before it is read
    <staging>/<job>/<run_id>/<stage>/files/<path>          its Parquet parts and attempt log, at their output path
    <staging>/<job>/<run_id>/known/<session>-<query hash>.json.z   an incremental query's known keys, by the flow

`<stage>` is `<session>-<part>-<query hash>`: a random token of the flow's session (a resumed flow counts its
parts from 1 again), the flow's part counter, and the query. One object per page: object stores have no append,
and a page must be durable before the next request, so a worker killed mid-round loses only what was in flight.
Credentials come from the environment as pyarrow reads them (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ...,
GOOGLE_APPLICATION_CREDENTIALS), never from the URL (the spec refuses one that carries any).
"""

from __future__ import annotations

import contextlib
import errno
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow.fs as pafs

from harvest.connectors.retries import Backoff, retried
from harvest.tasks.output.machine_fault import MachineFault
from harvest.tasks.output.raw_store import encode_frame, paid_page

STARTED = "started"
PAGES = "pages"
FILES = "files"
FRAME_SUFFIX = ".frame"
STORE_BACKOFF = Backoff(attempts=4, initial=0.2, max_wait=3.0, exp_base=5.0)
"""Tries of one store call, 0.2, 1 and 3 s apart: a store that fails this long is down, and the run stops."""

T = TypeVar("T")


def _store_failed(exc: Exception) -> bool:
    """A store call that failed may work when tried again; a missing file will not appear."""
    return isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError)


def stage_name(session: str, part: int, query_hash: str) -> str:
    return f"{session}-{part:05d}-{query_hash}"


def frame_name(page: int) -> str:
    return f"{page:08d}{FRAME_SUFFIX}"


@dataclass(frozen=True)
class StagingStore:
    """One staging URL opened with pyarrow; every call is retried a few times, then stops the run (a
    `MachineFault`: exit 75, the Prefect state Crashed, the next run resumes) naming the URL, never a secret."""

    url: str
    fs: pafs.FileSystem = field(compare=False)
    base: str

    def run_prefix(self, job: str, run_id: str) -> str:
        return f"{self.base}/{job}/{run_id}"

    def job_prefix(self, job: str) -> str:
        return f"{self.base}/{job}"

    def url_of(self, key: str) -> str:
        """A key as a person reads it: under the staging URL as the spec wrote it."""
        return f"{self.url.rstrip('/')}/{key[len(self.base) :].lstrip('/')}"

    def _call(self, what: str, key: str, call: Callable[[], T]) -> T:
        try:
            return retried(STORE_BACKOFF, _store_failed, call)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise MachineFault(
                self.url_of(key), f"the staging store failed to {what} it ({exc})", errno.EIO
            ) from None

    def put(self, key: str, data: bytes) -> None:
        def write() -> None:
            if isinstance(self.fs, pafs.LocalFileSystem):
                self.fs.create_dir(key.rsplit("/", 1)[0], recursive=True)
            with self.fs.open_output_stream(key) as out:
                out.write(data)

        self._call("write", key, write)

    def get(self, key: str) -> bytes:
        def read() -> bytes:
            with self.fs.open_input_stream(key) as src:
                return bytes(src.read())

        return self._call("read", key, read)

    def exists(self, key: str) -> bool:
        return self._call("read", key, lambda: self.fs.get_file_info(key).type != pafs.FileType.NotFound)

    def files(self, prefix: str) -> list[str]:
        """Every object under `prefix`, sorted (frames by page number: their names are zero-padded)."""
        selector = pafs.FileSelector(prefix, allow_not_found=True, recursive=True)
        found = self._call("list", prefix, lambda: self.fs.get_file_info(selector))
        return sorted(f.path for f in found if f.type == pafs.FileType.File)

    def children(self, prefix: str) -> list[str]:
        """The names directly under `prefix` (stages of a run, runs of a job)."""
        selector = pafs.FileSelector(prefix, allow_not_found=True)
        found = self._call("list", prefix, lambda: self.fs.get_file_info(selector))
        return sorted(f.base_name for f in found if f.type == pafs.FileType.Directory)

    def upload(self, local: Path, key: str) -> None:
        self.put(key, local.read_bytes())

    def download(self, key: str, local: Path) -> None:
        local.write_bytes(self.get(key))

    def delete(self, prefix: str) -> None:
        """Remove everything under `prefix`; what is already gone is no error."""

        def remove() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_dir(prefix)

        self._call("delete", prefix, remove)

    def probe(self) -> None:
        """Write, read back and delete one object: a store that cannot take pages fails here, before a credit
        is spent, with the same error a round would meet."""
        key = f"{self.base}/.harvest-probe-{uuid.uuid4().hex}"
        self.put(key, b"harvest")
        if self.get(key) != b"harvest":
            raise MachineFault(
                self.url_of(key), "the staging store returned other bytes than written", errno.EIO
            )
        self._call("delete", key, lambda: self.fs.delete_file(key))


def open_staging(url: str) -> StagingStore:
    """The store behind a staging URL (checked by the spec: a path, file://, s3:// or gs://)."""
    if "://" not in url or url.startswith("file://"):
        local = Path(url.removeprefix("file://")).expanduser().resolve()
        return StagingStore(url, pafs.LocalFileSystem(), local.as_posix())
    # S3: one PUT per small object instead of a multipart upload (three calls); a write fails at its close,
    # which `put` waits for. 14.6 -> 9.2 ms a page on moto.
    opened = f"{url}?allow_delayed_open=true" if url.startswith("s3://") else url
    try:
        fs, base = pafs.FileSystem.from_uri(opened)
    except (OSError, ValueError) as exc:
        raise MachineFault(url, f"the staging store cannot be opened ({exc})", errno.EIO) from None
    return StagingStore(url, fs, base.rstrip("/"))


class StagedPages:
    """A round's raw store on a worker: each paid answer becomes one object before anything parses it.

    When the store keeps failing, the frame stays here (`unstaged`) and goes back to the flow with the round's
    result, so a page the service charged for is not lost with the store; the error stops the round's query."""

    def __init__(self, store: StagingStore, stage_key: str, path: Path) -> None:
        self.store, self.stage_key = store, stage_key
        self.path = path
        """Where the flow commits these pages in the output directory (summaries name it)."""
        self.unstaged: list[bytes] = []
        self.staged: list[int] = []

    def append(self, **fields: Any) -> None:
        """The same fields as `RawPageWriter.append`."""
        page = paid_page(**fields)
        frame = encode_frame(page)
        try:
            self.store.put(f"{self.stage_key}/{PAGES}/{frame_name(page.page)}", frame)
        except MachineFault:
            self.unstaged.append(frame)
            raise
        self.staged.append(page.page)


def plain_frames(frames: list[bytes]) -> list[str]:
    """Frames as text for a task's result (Prefect may serialise results as JSON)."""
    return [frame.hex() for frame in frames]


def frames_of(plain: list[str]) -> list[bytes]:
    return [bytes.fromhex(text) for text in plain]
