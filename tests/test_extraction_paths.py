"""The fast paths of extraction read exactly what the simple ones do: the generated column readers against
`RecordKind.reader`, and the one-call Arrow columns against value-by-value conversion, on every kind of every
endpoint, undrifted and drifted."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.records import RecordKind
from harvest.connectors.reading.column_readers import columns_reader
from harvest.connectors.reading.extraction import TableReport, converted, to_arrow
from harvest.sandbox.config import Drift, SandboxConfig
from harvest.sandbox.emulation.endpoint_table import BY_PATH
from harvest.sandbox.wire.serving import running
from tests.endpoints import (
    ADVERTISERS,
    CLIP,
    COMMENT_REPLIES,
    COMMUNITY_POST,
    CREATIVE,
    EMBED,
    FEED,
    FORUM,
    GROUP,
    PHOTOS,
    PINS,
    POST,
    PROFILE,
    REELS,
    SHOP,
    TWEETS,
    VIDEO_SEARCH,
)

KEY = "paths-key-0123456789abcdef"
DRIFTS = {
    "clean": Drift(),
    "drifted": Drift(wrapped_feed=0.5, bad_values=0.5, new_fields=True, missing_keys=0.2),
}
SUBJECTS: dict[str, dict[str, Any]] = {
    CREATIVE: {"query": "shoes", "limit": 5},
    PHOTOS: {"url": "https://network-a.example/nasa"},
    GROUP: {"group_id": "1234"},
    FORUM: {"subreddit": "running", "query": "shoes"},
    CLIP: {"url": "https://streaming.example/clip/abc"},
    COMMUNITY_POST: {"url": "https://video-platform.example/post/x"},
    POST: {"url": "https://microblog-b.example/profile/nasa/post/1"},
    FEED: {"handle": "nasa.example"},
    TWEETS: {"url": "https://microblog-a.example/i/communities/1"},
    ADVERTISERS: {"query": "acme"},
    EMBED: {"handle": "nasa"},
    REELS: {"handle": "nasa"},
    PINS: {"query": "lamps"},
    VIDEO_SEARCH: {"query": "marathon", "includeExtras": "true"},
    COMMENT_REPLIES: {"continuationToken": "Eg0SC2RRdzR3"},
    SHOP: {"url": "https://shop.example/acme"},
    PROFILE: {"handle": "nasa", "sort_by": "latest"},
}


def _answer(sb: Any, path: str, params: dict[str, Any]) -> Any:
    endpoint = catalog.get(path)
    model = endpoint.params.model_validate(params)
    with sb.client() as client:
        return client.get(endpoint.url_path(model), params=model.query_pairs()).json()


@pytest.mark.parametrize("drift", list(DRIFTS), ids=list(DRIFTS))
def test_fast_paths_read_what_the_simple_ones_read(drift: str) -> None:
    assert set(SUBJECTS) >= {path for path in BY_PATH if "{" not in path}  # the emulated ones, and more
    config = SandboxConfig(api_keys={KEY: 10**6}, pages=(1, 1), page_size=20, drift=DRIFTS[drift])
    checked = 0
    with running(config) as sb:
        for path, params in SUBJECTS.items():
            body = _answer(sb, path, params)
            for kind in catalog.get(path).kinds:
                items = kind.locate(body).items
                checked += len(items)
                _same_columns(kind, items, params)
                _same_arrow(kind, items, params)
    assert checked > 100


def _same_columns(kind: RecordKind, items: list[Any], params: dict[str, Any]) -> None:
    unknown: set[str] = set()
    fast = columns_reader(kind)(items, params, unknown)
    for fld, values in zip(kind.columns, fast, strict=True):
        read = kind.reader(fld.name, params)
        assert read is not None
        assert values == [read(item) for item in items], (kind.table, fld.name)
    slow: set[str] = set()
    for item in items:
        kind.unknown_fields(item, slow)
    assert unknown == slow, kind.table


def _same_arrow(kind: RecordKind, items: list[Any], params: dict[str, Any]) -> None:
    report = TableReport()
    table = to_arrow(kind, items, params, report)
    slow_report = TableReport()
    for fld, values in zip(kind.columns, columns_reader(kind)(items, params, None), strict=True):
        slow = converted(fld, values, slow_report)
        assert table.column(fld.name).combine_chunks().equals(slow), (kind.table, fld.name)
    assert report.misfits == slow_report.misfits, kind.table
    assert table.schema.field("raw").type == pa.string()


def test_nested_new_fields_are_found_by_both_readers() -> None:
    kind = catalog.get(PROFILE).kinds[0]
    # cover_url reads `video.cover.url_list[0]|video.cover`: the whole cover belongs to that column, so a field
    # inside it is not new; play_addr is read one path at a time, so a field inside it is
    item = {
        "aweme_id": "1", "statistics": {"play_count": 5, "new_metric": 1},
        "video": {"cover": {"url_list": ["u"], "extra": True}, "play_addr": {"url_list": ["p"], "extra": True},
                  "codec": "av1"},
        "brand_new": [],
    }  # fmt: skip
    unknown: set[str] = set()
    columns_reader(kind)([item, "not a record"], {}, unknown)
    slow: set[str] = set()
    kind.unknown_fields(item, slow)
    assert unknown == slow == {"statistics.new_metric", "video.play_addr.extra", "video.codec", "brand_new"}


def test_alternatives_and_json_columns_read_as_the_value_by_value_rules_say() -> None:
    """`a|b` read inline takes the first alternative neither absent nor null (a 0 is a value); a JSON column
    dumped in one pass falls back to the per-value rules for a value that does not dump (beyond 64 bits)."""
    kind = catalog.get(PROFILE).kinds[0]
    items = [
        {
            "aweme_id": "1",
            "statistics": {"play_count": None},
            "stats": {"playCount": 7},
            "text_extra": [{"a": 1}],
        },
        {"aweme_id": "2", "stats": {"playCount": 8}, "text_extra": [2**70]},
        {"aweme_id": "3", "statistics": {"play_count": 0}, "stats": {"playCount": 9}},
        {"aweme_id": "4", "statistics": "not an object"},
    ]
    _same_columns(kind, items, {})
    # `raw` cannot hold the 2**70 either: its table is read as a child's items are (no raw)
    _same_arrow(kind, [items[0], *items[2:]], {})
    report = TableReport()
    table = to_arrow(kind, items, {}, report, raw=False)
    assert table.column("play_count").to_pylist() == [7, 8, 0, None]
    assert table.column("text_extra").to_pylist() == ['[{"a":1}]', None, None, None]
    assert report.misfits == {"text_extra": 1}
