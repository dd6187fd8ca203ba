"""A large answer is read a slice of its records at a time: the same rows, records and account as a whole reading,
without holding the whole document as Python objects (the published sample answer, its record repeated); in a
run, each slice's rows go to the Parquet writer as they are converted, every record landed once."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from harvest.connectors.catalog.endpoints import get
from harvest.connectors.reading.extraction import convert_page
from harvest.connectors.reading.json_body import NOT_UTF8, read_body
from harvest.connectors.reading.large_body import LARGE_BODY_BYTES, SLICE_BYTES, spans_in
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import RunningSandbox
from tests.endpoints import PROFILE
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, expected_keys, key_set, one_query, run_flow, scalar
from tests.published_helpers import SAMPLES, skip_without

SAMPLE = SAMPLES / "_v3_short-video_profile_videos.json"
skip_without(SAMPLE)

ENDPOINT = get(PROFILE)
PARAMS = {"handle": "maker00"}


def large_answer(before: dict[str, Any] | None = None) -> tuple[dict[str, Any], bytes]:
    """The published answer with its one record repeated (each its own id) past `LARGE_BODY_BYTES`; `before`:
    members placed ahead of the answer's own (an object the reading must not take for the records' way)."""
    answer = {**(before or {}), **json.loads(SAMPLE.read_text())}
    record = answer["aweme_list"][0]
    copies = LARGE_BODY_BYTES // len(orjson.dumps(record)) + 20
    answer["aweme_list"] = [{**record, "aweme_id": str(7_000_000 + n)} for n in range(copies)]
    return answer, orjson.dumps(answer)


@pytest.mark.parametrize(
    "before", [None, {"extra": {"now": 1, "fatal_item_ids": []}}], ids=["plain", "object-first"]
)
def test_a_large_answer_lands_the_rows_records_and_account_of_a_whole_reading(
    before: dict[str, Any] | None,
) -> None:
    answer, raw = large_answer(before)
    read = read_body(raw)
    spans = spans_in(read.value)
    assert spans is not None and len(spans) == len(answer["aweme_list"])
    assert len(raw) > 3 * SLICE_BYTES  # several slices
    assert read.value["max_cursor"] == answer["max_cursor"]  # what paging and the ledger read is there
    assert read.value["credits_charged"] == answer["credits_charged"]

    sliced = convert_page(ENDPOINT.kinds, read.value, PARAMS, read.repairs, paging=ENDPOINT.paging)
    whole = convert_page(ENDPOINT.kinds, answer, PARAMS, paging=ENDPOINT.paging)

    assert sliced.report.as_dict() == whole.report.as_dict()
    assert sliced.report.tables["short_video_videos"].kept == len(answer["aweme_list"])
    assert set(sliced.tables) == set(whole.tables)
    for table, rows in whole.tables.items():
        assert sliced.tables[table].equals(rows), table
    for table, records in whole.records.items():
        assert len(sliced.records[table]) == len(records)
        assert list(sliced.records[table]) == records, table


def test_a_large_answer_is_never_held_whole_as_python_objects() -> None:
    """Read whole, the records as objects took ~3.5x the answer's JSON and orjson's own tree more beside them
    (4.3x in all); read in slices, a few slices' worth (here ~1.1x, and no more for a larger answer)."""
    _, raw = large_answer()
    tracemalloc.start()
    try:
        read = read_body(raw)
        converted = convert_page(ENDPOINT.kinds, read.value, PARAMS, read.repairs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert converted.report.tables["short_video_videos"].kept > 0
    assert peak < 1.5 * len(raw), f"Python objects peaked at {peak / len(raw):.1f}x the answer"


def test_a_byte_not_utf8_in_a_large_answers_records_is_repaired_in_its_slice_and_counted() -> None:
    answer, raw = large_answer()
    last = answer["aweme_list"][-1]["aweme_id"].encode()
    raw = raw.replace(b'"aweme_id":"' + last + b'"', b'"aweme_id":"' + last + b'","note":"caf\xe9"')
    read = read_body(raw)
    assert spans_in(read.value) is not None  # msgspec finds the items without reading their text
    converted = convert_page(ENDPOINT.kinds, read.value, PARAMS, read.repairs)
    assert converted.report.repairs == {NOT_UTF8: 1}
    assert converted.report.tables["short_video_videos"].kept == len(answer["aweme_list"])
    assert list(converted.records["short_video_videos"])[-1]["note"] == "caf\ufffd"


@pytest.mark.parametrize(
    "body",
    [
        b'{"note": NaN, "aweme_list": [' + b",".join([b'{"aweme_id": "1"}'] * 600_000) + b"]}",
        b'{"aweme_list": [' + b",".join([b'{"aweme_id": "1"}'] * 600_000) + b', {"n": NaN}]}',
        b"\xef\xbb\xbf" + orjson.dumps({"aweme_list": [{"aweme_id": str(n)} for n in range(600_000)]}),
    ],
    ids=["a repair outside the list", "a NaN in the list", "a byte order mark"],
)
def test_a_large_answer_that_needs_a_repair_outside_its_records_is_read_whole(body: bytes) -> None:
    assert len(body) >= LARGE_BODY_BYTES
    read = read_body(body)
    assert spans_in(read.value) is None
    assert isinstance(read.value, dict) and len(read.value["aweme_list"]) >= 600_000
    assert read.repairs


def test_a_paging_that_reads_its_cursor_from_the_records_of_a_large_answer_gets_it() -> None:
    """A declaration may read the next cursor from a record (`aweme_list[0].aweme_id`): the records a large
    answer keeps unread are read whole for it, or paging would end where the service has more."""
    from harvest.connectors.catalog.paging_styles import Paging
    from harvest.connectors.reading.large_body import whole

    answer, raw = large_answer()
    skeleton = read_body(raw).value
    spans = spans_in(skeleton)
    assert spans is not None
    into = Paging(style="cursor", cursor={"max_cursor": ("aweme_list[0].aweme_id",)})
    beside = Paging(style="cursor", cursor={"max_cursor": ("max_cursor",)}, more=("has_more",))
    assert into.reads_into(spans.path) and not beside.reads_into(spans.path)
    assert into.next_cursor(skeleton) is None  # what the skeleton alone would say: why it is read whole
    assert into.next_cursor(whole(skeleton)) == {"max_cursor": answer["aweme_list"][0]["aweme_id"]}


def test_a_large_answers_slices_go_to_the_writer_as_converted_and_only_their_keys_stay() -> None:
    """With a writer (`land`), each slice's tables leave as soon as they are converted: Arrow never holds more
    than a few slices' rows (held until the page's end, they were ~1.3x the answer's JSON), the rows landed
    are the whole reading's, and the page keeps its primary keys only (what the loop guard reads)."""
    answer, raw = large_answer()
    read = read_body(raw)
    whole = convert_page(ENDPOINT.kinds, answer, PARAMS, paging=ENDPOINT.paging)
    at: dict[str, int] = dict.fromkeys(whole.tables, 0)
    held: list[int] = []

    def land(tables: Mapping[str, pa.Table]) -> None:  # as the writer takes them, compared and let go
        held.append(pa.system_memory_pool().bytes_allocated())
        for table, data in tables.items():
            assert data.equals(whole.tables[table].slice(at[table], data.num_rows)), table
            at[table] += data.num_rows

    before = pa.system_memory_pool().bytes_allocated()
    sliced = convert_page(ENDPOINT.kinds, read.value, PARAMS, read.repairs, paging=ENDPOINT.paging, land=land)

    assert sliced.landed and not whole.landed
    assert len(held) > 3, "several slices"
    assert at == {table: rows.num_rows for table, rows in whole.tables.items()}, "every row landed once"
    assert sliced.report.as_dict() == whole.report.as_dict()
    assert sliced.tables["short_video_videos"].column_names == ["aweme_id"]
    assert max(held) - before < len(raw) / 4, f"Arrow held {(max(held) - before) / len(raw):.2f}x the answer"


def test_a_large_answer_lands_every_record_once_in_a_real_run(
    prefect_harness: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    """A page past `LARGE_BODY_BYTES` (and a smaller last one), landed slice by slice into the run's writer: every record of the
    full crawl is in the table once, and the run is complete."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    path, params = PROFILE, {"handle": "maker00", "sort_by": "latest"}
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(2, 2), page_size=7_000)  # ~9.8 MB
    sb = sandbox_factory(config)
    spec = one_query(tmp_path, sb.base_url, path, params)
    assert run_flow(spec, base_url=sb.base_url).status == "complete"
    db = tmp_path / "out" / "harvest.duckdb"
    want = expected_keys([(path, params)], config)["short_video_videos"]
    assert len(want) > 7_000 and len(want) == scalar(db, "SELECT count(*) FROM short_video_videos")
    assert key_set(db, "short_video_videos") == set(want)
