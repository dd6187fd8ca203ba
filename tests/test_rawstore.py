"""Raw page store and attempt log: every paid answer must survive a crash at any byte."""

from __future__ import annotations

import datetime as dt
import os
import signal
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harvest.connectors.paging.page_request import DAMAGED, SERVICES_OWN
from harvest.tasks.output.attempt_log import Attempt, AttemptLogWriter, iter_attempts
from harvest.tasks.output.layout import OutputLayout, query_stem
from harvest.tasks.output.raw_store import (
    CODEC_NONE,
    CODEC_ZLIB,
    CODEC_ZSTD,
    MAGIC,
    RawIndex,
    RawPage,
    RawPageReader,
    RawPageWriter,
    counts_as_page,
    encode_frame,
)
from tests.endpoints import PROFILE

T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)
ROOT = Path(__file__).resolve().parents[1]


def page_args(i: int, body: bytes | None = None) -> dict[str, object]:
    return {
        "query_id": "short-video:profile/videos?handle=ünï code",
        "page": i,
        "endpoint": PROFILE,
        "params": {"handle": "x", "max_cursor": i, "x-api-key": "SECRET"},
        "cursor_in": {"max_cursor": i} if i else None,
        "cursor_out": {"max_cursor": i + 1},
        "fetched_at": T0 + dt.timedelta(seconds=i),
        "status_code": 200,
        "credits": 1,
        "body": body if body is not None else b'{"aweme_list": [%d]}' % i,
    }


def write_pages(path: Path, n: int, **kw: object) -> list[RawPage]:
    with RawPageWriter(path, **kw) as w:  # type: ignore[arg-type]
        return [w.append(**page_args(i)) for i in range(n)]  # type: ignore[arg-type]


def test_round_trip_keeps_bytes_and_envelope(tmp_path: Path) -> None:
    path = tmp_path / "q.pages"
    bodies = [b'{"ok": true}', b"", b"\xff\xfe not json", b'{"truncated": [1, 2', os.urandom(5000)]
    with RawPageWriter(path) as w:
        for i, body in enumerate(bodies):
            w.append(**page_args(i, body))  # type: ignore[arg-type]
    pages = list(RawPageReader(path))
    assert [p.body for p in pages] == bodies
    first = pages[0]
    assert first.query_id == "short-video:profile/videos?handle=ünï code"
    assert first.params == {"handle": "x", "max_cursor": 0}  # the key never lands
    assert first.cursor_in is None and first.cursor_out == {"max_cursor": 1}
    assert first.fetched_at == "2026-11-01T12:00:00+00:00"
    assert (first.status_code, first.credits, first.page) == (200, 1, 0)
    assert b"SECRET" not in path.read_bytes()


def test_compression_shrinks_repetitive_bodies(tmp_path: Path) -> None:
    body = b'{"item": "aaaaaaaaaaaaaaaaaaaaaaaaaaaa"}' * 500
    with RawPageWriter(tmp_path / "q.pages") as w:
        w.append(**page_args(0, body))  # type: ignore[arg-type]
    assert (tmp_path / "q.pages").stat().st_size < len(body) / 10


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_ZSTD, CODEC_ZLIB])
def test_every_codec_reads_back(tmp_path: Path, codec: int) -> None:
    path = tmp_path / "q.pages"
    written = write_pages(path, 3, codec=codec)
    assert list(RawPageReader(path)) == written


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_ZSTD, CODEC_ZLIB])
def test_metas_are_the_pages_metas_without_their_bodies(tmp_path: Path, codec: int) -> None:
    """What `harvest runs` counts of an unfinished run (`RawPageReader.metas`) is what reading its pages says:
    a receipt (a 500) and an answer damaged on both tries are no page, a large answer's meta is read without
    its body (a zstd one as a stream), and a torn tail ends the count where it ends the pages."""
    path = tmp_path / "q.pages"
    answers = [
        {"status_code": 200},
        {"status_code": 500, "body": b'{"error": "Internal server error"}'},
        {"status_code": 200, "body": b'{"aweme_list": [', "unread": DAMAGED},
        {"status_code": 200, "body": b"{} <html>", "unread": SERVICES_OWN},
        {"status_code": 404, "body": b'{"error": "not found"}'},
        {"status_code": 200, "body": os.urandom(3 << 20)},  # incompressible: over 1 MiB stored too
    ]
    with RawPageWriter(path, codec=codec) as w:
        written = [w.append(**{**page_args(i), **answer}) for i, answer in enumerate(answers)]  # type: ignore[arg-type]
    assert list(RawPageReader(path).metas()) == [page.meta() for page in written]
    counted = [counts_as_page(m["status_code"], m.get("unread")) for m in RawPageReader(path).metas()]
    assert counted == [page.counted for page in written] == [True, False, False, True, True, True]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1])
    reader = RawPageReader(path)
    assert len(list(reader.metas())) == 5 and reader.damaged


def _sealed(codec: int, raw_len: int, stored: bytes) -> bytes:
    """A frame whose checksum matches: what a bug in a writer would leave, not the wire or a kill."""
    fields = struct.pack(">BII", codec, raw_len, len(stored))
    return MAGIC + fields + struct.pack(">I", zlib.crc32(stored, zlib.crc32(fields))) + stored


@pytest.mark.parametrize("fault", ["length", "field"])
def test_the_index_stops_where_reading_the_pages_stops(tmp_path: Path, fault: str) -> None:
    """A resume, a rebuild and `harvest runs` find pages by the index, built from the frames' metas alone; a
    frame whose page cannot be read must end the index where it ends the pages, or a resume would count a
    page it cannot replay and index the frames after it."""
    path = tmp_path / "q.pages"
    write_pages(path, 2, codec=CODEC_ZLIB)
    meta = RawPage(**page_args(2)).meta()  # type: ignore[arg-type]
    if fault == "field":
        del meta["status_code"]
    payload = struct.pack(">I", len(orjson.dumps(meta))) + orjson.dumps(meta) + b"{}"
    said = len(payload) + (1 if fault == "length" else 0)
    with open(path, "ab") as f:
        f.write(_sealed(CODEC_ZLIB, said, zlib.compress(payload)))
        f.write(encode_frame(RawPage(**page_args(3)), CODEC_ZLIB))  # type: ignore[arg-type]
    reader = RawPageReader(path)
    assert [p.page for p in reader] == [0, 1] and reader.damaged
    index = RawIndex([path])
    assert index.counted == {page_args(0)["query_id"]: 2}
    assert [p.page for p in index.pages(str(page_args(0)["query_id"]))] == [0, 1]


def test_missing_and_empty_files_have_no_pages(tmp_path: Path) -> None:
    assert list(RawPageReader(tmp_path / "none.pages")) == []
    (tmp_path / "empty.pages").write_bytes(b"")
    reader = RawPageReader(tmp_path / "empty.pages")
    assert list(reader) == [] and not reader.damaged


def test_torn_tail_at_every_offset_keeps_complete_pages(tmp_path: Path) -> None:
    path = tmp_path / "q.pages"
    pages = write_pages(path, 4)
    data = path.read_bytes()
    last = encode_frame(pages[-1])
    start = len(data) - len(last)
    assert data[start:] == last
    cut = tmp_path / "cut.pages"
    for offset in range(start, len(data)):
        cut.write_bytes(data[:offset])
        reader = RawPageReader(cut)
        got = list(reader)
        assert got == pages[:3], offset
        assert reader.valid_bytes == start
        assert reader.damaged == (offset > start)


def test_corrupt_byte_in_last_frame_stops_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "q.pages"
    pages = write_pages(path, 3)
    data = bytearray(path.read_bytes())
    start = len(data) - len(encode_frame(pages[-1]))
    for offset in range(start, len(data)):
        flipped = bytearray(data)
        flipped[offset] ^= 0x55
        path.write_bytes(flipped)
        reader = RawPageReader(path)
        assert list(reader) == pages[:2], offset
        assert reader.damaged


def test_writer_moves_torn_tail_aside_and_appends_after_it(tmp_path: Path) -> None:
    path = tmp_path / "q.pages"
    pages = write_pages(path, 3)
    data = path.read_bytes()
    torn = data[: len(data) - 7]
    path.write_bytes(torn)
    good_end = len(data) - len(encode_frame(pages[-1]))
    with RawPageWriter(path) as w:
        again = w.append(**page_args(2))  # type: ignore[arg-type]
        more = w.append(**page_args(3))  # type: ignore[arg-type]
    reader = RawPageReader(path)
    assert list(reader) == [*pages[:2], again, more]
    assert not reader.damaged
    aside = tmp_path / f"q.pages.damaged-{good_end}"
    assert aside.read_bytes() == torn[good_end:]  # the torn bytes are kept, not destroyed


def test_fsync_mode_writes_the_same_format(tmp_path: Path) -> None:
    path = tmp_path / "q.pages"
    assert list(RawPageReader(path)) == []
    written = write_pages(path, 2, fsync=True)
    assert list(RawPageReader(path)) == written


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=5),
    cursor=st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.text(max_size=10), max_size=3)),
    cut=st.integers(min_value=0),
)
def test_property_any_prefix_yields_a_prefix_of_pages(
    tmp_path: Path, bodies: list[bytes], cursor: dict[str, str] | None, cut: int
) -> None:
    path = tmp_path / "prop.pages"
    path.unlink(missing_ok=True)
    with RawPageWriter(path) as w:
        written = [w.append(**{**page_args(i, b), "cursor_out": cursor}) for i, b in enumerate(bodies)]  # type: ignore[arg-type]
    data = path.read_bytes()
    path.write_bytes(data[: cut % (len(data) + 1)])
    got = list(RawPageReader(path))
    assert got == written[: len(got)]


KILL_SCRIPT = """
import sys, datetime as dt
from harvest.tasks.output.raw_store import RawPageWriter
w = RawPageWriter(sys.argv[1])
i = 0
while True:
    w.append(query_id="q", page=i, endpoint="/e", params={}, cursor_in=None, cursor_out={"c": str(i + 1)},
             fetched_at=dt.datetime.now(dt.UTC), status_code=200, credits=1,
             body=b"x" * (i % 5000) + b"%d" % i)
    print(i, flush=True)
    i += 1
"""


def test_sigkill_mid_append_loop_leaves_a_readable_file(tmp_path: Path) -> None:
    path = tmp_path / "killed.pages"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    acknowledged = -1
    while acknowledged <= 300:  # bounded by appends, not seconds: a busy machine only makes it slower
        line = proc.stdout.readline()
        assert line, f"the writer ended after {acknowledged + 1} appends (exit {proc.wait()})"
        acknowledged = int(line)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader = RawPageReader(path)
    pages = list(reader)
    # every append that returned (was acknowledged) is on disk, in order
    assert len(pages) >= acknowledged + 1 > 300
    assert [p.page for p in pages] == list(range(len(pages)))
    assert pages[-1].body.endswith(b"%d" % pages[-1].page)
    tail = pages[-1]
    assert tail.cursor_out == {"c": str(tail.page + 1)}


def test_attempt_log_round_trip_and_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "q.requests.jsonl"
    with AttemptLogWriter(path) as log:
        log.append(
            Attempt(
                "q", "/e", {"a": 1, "api_key": "S"}, 0, 1, 500, 0, 12.5, "HTTP 500", "2026-11-01T12:00:00Z"
            )
        )
        log.append(
            {
                "query_id": "q",
                "endpoint": "/e",
                "params": {},
                "page": 0,
                "attempt": 2,
                "status_code": 200,
                "credits": 1,
                "duration_ms": 8.0,
                "error": None,
                "started_at": T0,
            }
        )
    with open(path, "ab") as f:
        f.write(b'{"query_id": "q", "endpo')  # a kill mid-line
    rows = list(iter_attempts(path))
    assert [r["attempt"] for r in rows] == [1, 2]
    assert rows[0]["params"] == {"a": 1}
    assert rows[1]["started_at"] == "2026-11-01T12:00:00+00:00"
    with AttemptLogWriter(path) as log:  # reopening ends the torn line so the next record is intact
        log.append({"query_id": "q", "endpoint": "/e", "params": {}, "attempt": 3, "credits": 0})
    assert [r["attempt"] for r in iter_attempts(path)] == [1, 2, 3]
    with pytest.raises(ValueError, match="unknown attempt fields"), AttemptLogWriter(path) as log:
        log.append({"query_id": "q", "bogus": 1})


def test_layout_names_are_safe_and_distinct(tmp_path: Path) -> None:
    layout = OutputLayout(tmp_path)
    ids = ["a/b", "a_b", "A/B", "..", "../../etc/passwd", "x" * 500, "", "日本語 query", "a:b?c=d&e"]
    stems = [query_stem(q) for q in ids]
    assert len({s.lower() for s in stems}) == len(ids)  # unique even on case-insensitive file systems
    for q, stem in zip(ids, stems, strict=True):
        assert stem == query_stem(q)
        assert len(stem) < 100 and not stem.startswith(".")
        assert "/" not in stem and "\\" not in stem
        assert layout.raw_file("r1", q).parent == tmp_path / "raw" / "r1"
        assert layout.requests_file("r1", q).name.endswith(".requests.jsonl")
    assert layout.db == tmp_path / "harvest.duckdb"
    assert layout.parquet_dir("t", dt.date(2026, 11, 1)) == tmp_path / "parquet" / "t" / "date=2026-11-01"
    assert layout.parquet_file("t", dt.date(2026, 11, 1), "r1", "0003").name == "r1-0003.parquet"
    assert layout.part_id(3) == "0003" and layout.part_id(3, "q").startswith("0003-")
    assert layout.manifest_file("r1") == tmp_path / "raw" / "r1" / "manifest.json"
    with pytest.raises(ValueError):
        layout.raw_file("../x", "q")
    with pytest.raises(ValueError):
        layout.parquet_dir("a/b", dt.date(2026, 1, 1))


DISK_FULL_SCRIPT = """
import resource, signal, sys
from harvest.connectors.paging.page_request import DAMAGED, SERVICES_OWN
from harvest.tasks.output.attempt_log import AttemptLogWriter, iter_attempts
from harvest.tasks.output.raw_store import RawPageReader, RawPageWriter
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # exceeding the limit raises EFBIG instead of killing us
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
args = dict(endpoint="/e", params={}, cursor_in=None, cursor_out=None, fetched_at="2026-11-01T00:00:00Z",
            status_code=200, credits=1)
w = RawPageWriter(sys.argv[1], codec=0)
log = AttemptLogWriter(sys.argv[2])
w.append(query_id="q", page=0, body=b"a" * 1000, **args)
log.append({"query_id": "q", "attempt": 1, "error": "x" * 1000})
resource.setrlimit(resource.RLIMIT_FSIZE, (1500, hard))
for call in (lambda: w.append(query_id="q", page=1, body=b"b" * 1000, **args),
             lambda: log.append({"query_id": "q", "attempt": 2, "error": "y" * 1000})):
    try:
        call()
        raise SystemExit("expected a write error")
    except OSError as exc:
        print("failed", exc.errno, flush=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
w.append(query_id="q", page=1, body=b"c" * 1000, **args)
log.append({"query_id": "q", "attempt": 3})
bodies = [p.body[:1].decode() for p in RawPageReader(sys.argv[1])]
print(bodies, [a["attempt"] for a in iter_attempts(sys.argv[2])])
"""


def test_a_failed_write_is_cut_back_so_later_records_stay_readable(tmp_path: Path) -> None:
    """A real partial write (file size limit, like a full disk) must not hide the records after it."""
    proc = subprocess.run(
        [sys.executable, "-c", DISK_FULL_SCRIPT, str(tmp_path / "q.pages"), str(tmp_path / "q.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["failed 27", "failed 27"]  # EFBIG after a partial write
    assert lines[2] == "['a', 'c'] [1, 3]"
