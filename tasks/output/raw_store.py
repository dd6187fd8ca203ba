"""Append-only store of every paid answer, exactly as received.

The raw page files are harvest's source of truth: credits are spent once, so each answer is written here
before anything parses it, and Parquet/DuckDB can always be rebuilt from these files.

File format (one file per query, see `OutputLayout.raw_file`), a sequence of self-delimiting frames::

    magic  b"HVR1"   4 bytes
    codec  u8        0 = none, 1 = zstd, 2 = zlib
    rawlen u32       length of the uncompressed payload
    length u32       length of the stored payload
    crc32  u32       CRC-32 of codec, rawlen, length and the stored payload
    payload          compressed( u32 meta_len | meta JSON | body bytes )

All integers are big-endian. A frame is built in memory and written with one unbuffered write, so a process
killed mid-append leaves at most one torn frame at the end of the file; readers stop there without raising.
`RawPageWriter` repairs such a tail before appending again (the torn bytes are moved aside, never discarded).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import logging
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import orjson
import pyarrow as pa

from harvest.connectors.paging.page_request import DAMAGED
from harvest.tasks.output.append_file import AppendOnlyFile, append_record, fsync_dir

log = logging.getLogger(__name__)
T = TypeVar("T")

MAGIC = b"HVR1"
_HEADER = struct.Struct(">4sBIII")
_META_LEN = struct.Struct(">I")
CODEC_NONE, CODEC_ZSTD, CODEC_ZLIB = 0, 1, 2
_MAX_FRAME = 0xFFFF_FFFF
_COPY_CHUNK = 1 << 20
_WHOLE = 1 << 20  # payloads up to this size are decompressed whole to read their meta

# Parameter names that would carry a credential; they are never written, even if a caller passes them.
SECRET_PARAMS = frozenset(
    {"x-api-key", "api_key", "apikey", "api-key", "authorization", "password", "secret"}
)


def redact_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Drop credential-like parameters so a raw file or the requests table can be shared safely."""
    return {k: v for k, v in (params or {}).items() if k.lower() not in SECRET_PARAMS}


def iso_utc(value: dt.datetime | str) -> str:
    """Timestamps are stored as ISO text in UTC; naive datetimes are refused because their zone is a guess."""
    if isinstance(value, str):
        return value
    if value.tzinfo is None:
        raise ValueError("fetched_at must be timezone-aware")
    return value.astimezone(dt.UTC).isoformat()


@dataclass(frozen=True)
class RawPage:
    """One paid answer and what is needed to interpret or resume from it."""

    query_id: str
    page: int
    endpoint: str
    params: dict[str, Any]
    cursor_in: dict[str, Any] | None
    cursor_out: dict[str, Any] | None
    fetched_at: str
    status_code: int
    credits: int
    body: bytes
    unread: str | None = None
    """A 2xx no reading took, as the live run judged it (`Page.unread`): written in the same frame as the answer,
    so a resume after a kill ends its query or asks for it again as that run did. None: read, or kept before
    harvest wrote it (a frame of an older run; left out of the frame when None)."""

    def meta(self) -> dict[str, Any]:
        meta = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "body"}
        if self.unread is None:
            del meta["unread"]  # a read answer's frame is as it always was
        return meta

    @property
    def counted(self) -> bool:
        """Whether its query's `pages` (its summary's, `max_pages`') counts it: a 2xx or a billed "not found",
        not a failure's receipt (a 5xx, a 400) nor an answer damaged on the wire on both tries. A frame from
        before `unread` was written counts a damaged answer: only reading it could tell."""
        return counts_as_page(self.status_code, self.unread)


def counts_as_page(status_code: int, unread: str | None) -> bool:
    """`RawPage.counted`, told by a frame's meta alone (`RawPageReader.metas`)."""
    return status_code == 404 or (200 <= status_code < 300 and unread != DAMAGED)


_PAGE_FIELDS = frozenset(f.name for f in dataclasses.fields(RawPage)) - {"body"}
_REQUIRED = frozenset(f.name for f in dataclasses.fields(RawPage) if f.default is dataclasses.MISSING) - {
    "body"
}


def default_codec() -> int:
    return CODEC_ZSTD if pa.Codec.is_available("zstd") else CODEC_ZLIB


def compress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_ZSTD:
        return bytes(pa.compress(data, codec="zstd", asbytes=True))
    if codec == CODEC_ZLIB:
        return zlib.compress(data, 6)
    return data


def decompress(codec: int, data: bytes, raw_len: int) -> bytes:
    if codec == CODEC_ZSTD:
        return bytes(pa.decompress(data, decompressed_size=raw_len, codec="zstd", asbytes=True))
    if codec == CODEC_ZLIB:
        return zlib.decompress(data)
    return data


def encode_frame(page: RawPage, codec: int | None = None) -> bytes:
    """Serialise one page to a complete frame (exposed so tests and tools can build files byte by byte)."""
    codec = default_codec() if codec is None else codec
    meta = orjson.dumps(page.meta())
    head = _META_LEN.pack(len(meta)) + meta
    raw_len = len(head) + len(page.body)
    stored = _zstd(head, page.body) if codec == CODEC_ZSTD else compress(codec, head + page.body)
    if raw_len > _MAX_FRAME or len(stored) > _MAX_FRAME:
        raise ValueError("page too large for one frame (4 GiB)")
    fields = _HEADER.pack(MAGIC, codec, raw_len, len(stored), 0)[4:-4]
    crc = zlib.crc32(stored, zlib.crc32(fields))
    return _HEADER.pack(MAGIC, codec, raw_len, len(stored), crc) + stored


def _zstd(head: bytes, body: bytes) -> pa.Buffer:
    """One zstd frame of `head` and `body`, compressed as a stream: a large answer is not copied whole first."""
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(head)
        out.write(body)
    return sink.getvalue()


def _decode_payload(codec: int, stored: bytes, raw_len: int) -> RawPage:
    raw = decompress(codec, stored, raw_len)
    if len(raw) != raw_len:
        raise ValueError("payload length mismatch")
    (meta_len,) = _META_LEN.unpack_from(raw)
    meta = orjson.loads(raw[_META_LEN.size : _META_LEN.size + meta_len])
    known = {k: v for k, v in meta.items() if k in _PAGE_FIELDS}  # newer writers may add fields
    return RawPage(**known, body=raw[_META_LEN.size + meta_len :])


def _decode_meta(codec: int, stored: bytes, raw_len: int) -> dict[str, Any]:
    """The meta at the head of a payload, refused where `_decode_payload` would refuse the page (a missing
    field; a wrong length, checked where the payload is decompressed whole). A large answer's body is not
    decompressed (zstd read as a stream up to the meta); a small one's is, whole: quicker than a stream's setup."""
    streamed = codec == CODEC_ZSTD and raw_len > _WHOLE
    head = (
        pa.CompressedInputStream(pa.BufferReader(stored), "zstd").read(_WHOLE >> 4)
        if streamed
        else decompress(codec, stored, raw_len)
    )
    if not streamed and len(head) != raw_len:
        raise ValueError("payload length mismatch")
    end = _META_LEN.size + _META_LEN.unpack_from(head)[0]
    if end > len(head):  # a meta longer than the head read
        head = decompress(codec, stored, raw_len)
    meta = dict(orjson.loads(head[_META_LEN.size : end]))
    if missing := _REQUIRED - meta.keys():
        raise ValueError(f"meta without {sorted(missing)}")
    return meta


class RawPageReader:
    """Iterates the complete pages of a raw file and records where (and why) reading stopped early.

    Reading streams frame by frame, so memory is bounded by the largest page, not the file. After iteration,
    `valid_bytes` is the offset just past the last good frame and `damage` says why reading stopped before
    end of file (None when the whole file was read).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.valid_bytes = 0
        self.pages = 0
        self.damage: str | None = None

    @property
    def damaged(self) -> bool:
        return self.damage is not None

    def __iter__(self) -> Iterator[RawPage]:
        return self._frames(_decode_payload)

    def metas(self) -> Iterator[dict[str, Any]]:
        """Each complete page's meta, as iterating reads its page: all a listing counts (`harvest runs`)."""
        return self._frames(_decode_meta)

    def _frames(self, decode: Callable[[int, bytes, int], T]) -> Iterator[T]:
        self.valid_bytes, self.pages, self.damage = 0, 0, None
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            while True:
                header = f.read(_HEADER.size)
                if not header:
                    return
                page = self._read_frame(f, header, decode)
                if page is None:
                    said = (self.path, self.damage, self.valid_bytes, self.pages)
                    log.warning("raw file %s: %s at byte %d; kept %d complete pages", *said)
                    return
                self.valid_bytes = f.tell()
                self.pages += 1
                yield page

    def _read_frame(self, f: BinaryIO, header: bytes, decode: Callable[[int, bytes, int], T]) -> T | None:
        if len(header) < _HEADER.size:
            self.damage = "torn frame header"
            return None
        magic, codec, raw_len, length, crc = _HEADER.unpack(header)
        if magic != MAGIC or codec not in (CODEC_NONE, CODEC_ZSTD, CODEC_ZLIB):
            self.damage = "bad frame header"
            return None
        stored = f.read(length)
        if len(stored) < length:
            self.damage = "torn frame payload"
            return None
        if zlib.crc32(stored, zlib.crc32(header[4:-4])) != crc:
            self.damage = "frame checksum mismatch"
            return None
        try:
            return decode(codec, stored, raw_len)
        except Exception as exc:  # a frame whose CRC matches but cannot be decoded was written by a bug
            self.damage = f"undecodable frame ({exc})"
            return None


def decode_frame(data: bytes) -> RawPage | None:
    """The page in one whole frame held in memory (a staged page), or None when it is torn or corrupt."""
    reader = RawPageReader("<frame>")
    stream = io.BytesIO(data)
    page = reader._read_frame(stream, stream.read(_HEADER.size), _decode_payload)
    return page if page is not None and stream.tell() == len(data) else None


class RawIndex:
    """Where each query's pages are among a run's raw files (its sessions' and older per-query files), found
    in one pass that decodes each frame's meta, not its body (a rebuild then decompresses each answer once):
    a resume, an abandon or a rebuild then reads a query's pages without reading the run again for each of its
    thousands of queries."""

    def __init__(self, files: Iterable[Path]) -> None:
        self.at: dict[str, list[tuple[Path, int]]] = {}
        self.counted: dict[str, int] = {}
        """Query id -> its frames its `pages` counts (`RawPage.counted`): what a power cut check and `harvest
        runs` compare."""
        for path in files:
            reader, start = RawPageReader(path), 0
            for meta in reader.metas():
                query = meta["query_id"]
                self.at.setdefault(query, []).append((path, start))
                counted = counts_as_page(meta["status_code"], meta.get("unread"))
                self.counted[query] = self.counted.get(query, 0) + counted
                start = reader.valid_bytes

    def has(self, query_id: str) -> bool:
        return query_id in self.at

    def pages(self, query_id: str) -> Iterator[RawPage]:
        """The query's complete pages in the order they were paid."""
        by_file: dict[Path, list[int]] = {}
        for path, offset in self.at.get(query_id, []):  # a query's pages are in file order, sessions in turn
            by_file.setdefault(path, []).append(offset)
        for path, offsets in by_file.items():
            reader = RawPageReader(path)
            with open(path, "rb") as f:
                for offset in offsets:
                    f.seek(offset)
                    page = reader._read_frame(f, f.read(_HEADER.size), _decode_payload)
                    if page is not None:  # it was read whole when indexed
                        yield page


def _set_aside_tail(path: Path, valid: int, size: int) -> Path:
    """Copy bytes past the last good frame to a side file before the tail is cut, so nothing is destroyed."""
    aside = path.with_name(f"{path.name}.damaged-{valid}")
    with open(path, "rb") as src, open(aside, "wb") as dst:
        src.seek(valid)
        while chunk := src.read(_COPY_CHUNK):
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    log.warning("raw file %s: moved %d damaged tail bytes to %s before appending", path, size - valid, aside)
    return aside


def paid_page(
    *,
    query_id: str,
    page: int,
    endpoint: str,
    params: Mapping[str, Any] | None,
    cursor_in: Mapping[str, Any] | None,
    cursor_out: Mapping[str, Any] | None,
    fetched_at: dt.datetime | str,
    status_code: int,
    credits: int,
    body: bytes,
    unread: str | None = None,
) -> RawPage:
    """A paid answer as the raw store keeps it (credential-like params removed), whichever store keeps it."""
    return RawPage(
        query_id=query_id,
        page=page,
        endpoint=endpoint,
        params=redact_params(params),
        cursor_in=dict(cursor_in) if cursor_in is not None else None,
        cursor_out=dict(cursor_out) if cursor_out is not None else None,
        fetched_at=iso_utc(fetched_at),
        status_code=status_code,
        credits=credits,
        body=bytes(body),
        unread=unread,
    )


class RawPageWriter(AppendOnlyFile):
    """Appends one frame per paid answer; a page is safe from a killed process as soon as `append` returns.

    ``fsync=True`` additionally forces each frame to the disk so it survives power loss, at the cost of one
    disk flush per page (a user setting; off by default because pages already cost seconds over the network
    and the OS writes dirty pages out within seconds anyway).

    Opening an existing file first validates it; a torn tail left by a crash is copied to a ``.damaged-<n>``
    side file and cut off so that new frames are not hidden behind it.
    """

    def __init__(self, path: Path | str, fsync: bool = False, codec: int | None = None) -> None:
        super().__init__(path, fsync)
        self.codec = default_codec() if codec is None else codec
        self._repair()
        self._open()
        if fsync:
            fsync_dir(self.path.parent)

    def _repair(self) -> None:
        if not self.path.exists():
            return
        size = self.path.stat().st_size
        reader = RawPageReader(self.path)
        for _ in reader:
            pass
        if reader.valid_bytes < size:
            _set_aside_tail(self.path, reader.valid_bytes, size)
            os.truncate(self.path, reader.valid_bytes)

    def append(
        self,
        *,
        query_id: str,
        page: int,
        endpoint: str,
        params: Mapping[str, Any] | None,
        cursor_in: Mapping[str, Any] | None,
        cursor_out: Mapping[str, Any] | None,
        fetched_at: dt.datetime | str,
        status_code: int,
        credits: int,
        body: bytes,
        unread: str | None = None,
    ) -> RawPage:
        """Write one paid answer; returns the envelope as stored (credential-like params removed)."""
        record = paid_page(
            query_id=query_id, page=page, endpoint=endpoint, params=params, cursor_in=cursor_in,
            cursor_out=cursor_out, fetched_at=fetched_at, status_code=status_code, credits=credits, body=body,
            unread=unread,
        )  # fmt: skip
        self.append_page(record)
        return record

    def append_page(self, page: RawPage) -> None:
        if self._fd is None:
            raise ValueError(f"raw page writer for {self.path} is closed")
        append_record(self._fd, encode_frame(page, self.codec), self.fsync)
