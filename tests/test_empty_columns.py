"""No silent NULL: a field the service starts sending under another name is noticed, named with the `shapes:`
override that reads it, and the pasted override fills the column from the pages already paid.

A renamed field loses no record, so the run completes (exit 0) and says so: `columns_empty` in `query_state` and
`runs`, one message per endpoint in the summary. Records that arrive wrapped lose their key, so the query stops as
`drift`; its message then names the `records:` override that reads them. Real `harvest run`s against the sandbox
over HTTP (`--drift renamed-field`, `--drift wrapped-tweets`), then `harvest rebuild --spec`, no request.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.fields import coercer
from harvest.connectors.catalog.record_paths import MISSING, compile_path
from harvest.connectors.catalog.records import RecordKind
from harvest.connectors.reading.empty_columns import key_override
from harvest.connectors.reading.extraction import convert_page
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.drift_shapes import SHAPES
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.endpoints import PINS, SHOP, TWEETS, VIDEO_SEARCH
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, one_query, rows, scalar
from tests.published_helpers import PUBLISHED, published_index, skip_without

runner = CliRunner()


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)


def pasted(spec: Path, stderr: str) -> dict[str, Any]:
    """The override the run printed, pasted into the spec as a user would; returns it."""
    hint = re.search(r"add to the job spec `shapes: (\{.*?\})`", stderr.replace("\n", " "))
    assert hint is not None, stderr
    shapes: dict[str, Any] = yaml.safe_load(hint.group(1))
    spec.write_text(yaml.safe_dump({**yaml.safe_load(spec.read_text()), "shapes": shapes}))
    assert runner.invoke(app, ["validate", str(spec)]).exit_code == 0
    return shapes


def test_a_renamed_field_is_named_with_its_override_and_the_override_fills_the_column(
    prefect_harness: None, tmp_path: Path
) -> None:
    params = {"query": "running"}
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(2, 2), page_size=5, drift=SHAPES["renamed-field"].drift
    )
    output, db = tmp_path / "out", tmp_path / "out" / "harvest.duckdb"
    crawled = full_crawl(VIDEO_SEARCH, params, config)
    with running(config) as sb:
        spec = one_query(tmp_path, sb.base_url, VIDEO_SEARCH, params, name="renamed")
        result = runner.invoke(app, ["run", str(spec)])
        assert result.exit_code == 0, result.output  # nothing was lost: the run says so, it does not fail
        assert rows(db, "SELECT status, columns_empty FROM query_state") == [("complete", 2)]
        assert scalar(db, "SELECT columns_empty FROM runs") == 2
        videos = len(crawled["videos"])
        assert rows(db, "SELECT count(*), count(view_count) FROM video_platform_videos") == [(videos, 0)]
        said = [line for line in result.stderr.splitlines() if "columns left empty" in line]
        assert len(said) == 1, result.stderr  # once per run
        assert re.search(
            r"video_platform_videos\.view_count was NULL in \d+ records that carry `viewCount`", said[0]
        )
        shapes = pasted(spec, result.stderr)
        assert shapes == {
            VIDEO_SEARCH: {
                "video_platform_shorts": {"fields": {"view_count": "viewCount"}},
                "video_platform_videos": {"fields": {"view_count": "viewCount"}},
            }
        }
        paid = len(data_entries(sb))
        rebuilt = runner.invoke(app, ["rebuild", str(output), "--spec", str(spec)])
        assert rebuilt.exit_code == 0, rebuilt.output
        assert len(data_entries(sb)) == paid, "rebuild sent a request"
    assert sorted(rows(db, "SELECT id, view_count FROM video_platform_videos")) == sorted(
        (v["id"], v["viewCount"]) for v in crawled["videos"]
    )
    assert scalar(db, "SELECT count(*) FROM video_platform_shorts WHERE view_count IS NULL") == 0


def test_records_that_arrive_wrapped_stop_with_the_records_override_that_reads_them(
    prefect_harness: None, tmp_path: Path
) -> None:
    params = {"url": "https://microblog-a.example/i/communities/77"}
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, drift=SHAPES["wrapped-tweets"].drift)
    output, db = tmp_path / "out", tmp_path / "out" / "harvest.duckdb"
    tweets = full_crawl(TWEETS, params, config)["microblog_a_tweets"]
    with running(config) as sb:
        spec = one_query(tmp_path, sb.base_url, TWEETS, params, name="renamed")
        result = runner.invoke(app, ["run", str(spec)])
        assert result.exit_code == 1, result.output
        assert "record(s) without their primary key (id)" in result.stderr
        assert pasted(spec, result.stderr) == {TWEETS: {"microblog_a_tweets": {"records": "tweets[].tweet"}}}
        rebuilt = runner.invoke(app, ["rebuild", str(output), "--spec", str(spec)])
        assert rebuilt.exit_code == 0, rebuilt.output
        assert len(data_entries(sb)) == 1, "rebuild sent a request"
    assert sorted(rows(db, "SELECT id, user_name FROM microblog_a_tweets")) == sorted(
        (t["id"], t["user"]["core"]["name"]) for t in tweets
    )


EXAMPLES = PUBLISHED
BOTH_THE_INTERFACES = {("photo_app_reels", "video_url"), ("photo_app_reels", "thumbnail_url")}
"""Columns whose every path is the interface's (a full and a trimmed answer name them differently)."""


def interface_only(kind: RecordKind) -> RecordKind:
    """The kind as harvest read it before the published answers: each column at the interface's name (the last
    of its paths), a thread's replies not unwrapped."""
    fields = tuple(replace(f, path=f.path.split("|")[-1]) for f in kind.fields)
    if kind.nested is not None:
        return replace(kind, fields=fields, unwrap=None, nested=None)
    return replace(kind, fields=fields)


def test_the_published_answers_read_by_the_interfaces_names_are_noticed_field_by_field() -> None:
    """Every column the service fills under another name than the interface's comes out NULL when read by the
    interface's name alone; each is named with the service's name first (or, for records that lost their key,
    the override that reads the key). Derived from the catalog, over every published answer: the issue's list
    (views, the tweet author, reply avatars and likes, media dimensions, clip followers, thread replies, shop
    products) and any other such column."""
    skip_without(EXAMPLES)
    index = published_index()
    endpoints, seen = catalog.endpoints(), set()
    for example in (e for e in index if e["endpoint"] in catalog.endpoints() and "example_request" in e):
        body = json.loads((EXAMPLES / example["file"]).read_text())
        kinds = [interface_only(k) for k in endpoints[example["endpoint"]].kinds]
        report = convert_page(kinds, body, example["example_request"]).report
        for kind, theirs in zip(kinds, endpoints[example["endpoint"]].kinds, strict=True):
            records = [theirs.unwrap.inner(i) if theirs.unwrap else i for i in theirs.extract(body)]
            table = report.tables[kind.table]
            for fld in theirs.fields:
                published, interface = fld.path.split("|")[0], fld.path.split("|")[-1]
                fills = [compile_path(published)(r) not in (MISSING, None) for r in records]
                if (
                    (kind.table, fld.name) in BOTH_THE_INTERFACES
                    or published == interface
                    or not any(fills)
                    or any(coercer(fld)(compile_path(interface)(r)) is not None for r in records)
                ):
                    continue  # the same name, or the answer does not fill it, or the interface's name does
                    # (a value that fits: an object where a number belongs does not)
                seen.add((kind.table, fld.name))
                if table.no_key:
                    assert table.no_key_override is not None, (example["file"], kind.table)
                else:
                    assert table.empty_hints.get(fld.name, [None])[0] == published, (kind.table, fld.name)
    assert {("video_platform_videos", "view_count"), ("microblog_a_tweets", "user_name"),
            ("video_platform_comments", "like_count"), ("forum_media", "width"),
            ("streaming_clips", "broadcaster_follower_count"), ("short_video_products", "url")} <= seen  # fmt: skip


def kind_of(path: str, table: str) -> RecordKind:
    return catalog.endpoints()[path].kind(table)


def test_a_field_the_service_leaves_out_is_no_rename() -> None:
    """Nothing resembling the column among the unread fields (a trimmed answer without `title`, a search without
    `includeExtras`): the service's choice, not named. A null the service sends is its answer, not named."""
    pins = kind_of(PINS, "pinboard_pins")
    trimmed = [
        {"id": "1", "url": "u", "images": {"orig": {"url": "i"}}, "node_id": "n", "auto_alt_text": "a"}
    ]
    assert _empty(pins, trimmed) == {}
    videos = kind_of(VIDEO_SEARCH, "video_platform_videos")
    assert _empty(videos, [{"id": "v", "viewCountInt": None, "viewCount": 5}]) == {}
    assert _empty(videos, [{"id": "v", "viewCount": 5, "plays": 3}]) == {"view_count": ["viewCount"]}


def test_where_a_missing_key_went() -> None:
    """A key under another name at the record's top is named; one only nested in another object (a tweet's
    `user.rest_id`) is not guessed."""
    products = kind_of(SHOP, "short_video_products")
    assert key_override(products, "products", {"productId": "9", "title": "t"}) == {
        "fields": {"id": "productId"}
    }
    tweets = kind_of(TWEETS, "microblog_a_tweets")
    assert key_override(tweets, "tweets", {"full_text": "x", "user": {"id": "7", "rest_id": "7"}}) is None
    wrapped = {"tweet": {"id": "1", "full_text": "x", "created_at": "2026-01-01T00:00:00Z"}, "kind": "t"}
    assert key_override(tweets, "tweets", wrapped) == {"records": "tweets[].tweet"}


def _empty(kind: RecordKind, items: list[Any]) -> dict[str, list[str]]:
    """`empty_columns` of a page of `items` as harvest reads it."""
    from harvest.connectors.reading.extraction import TableReport, to_arrow

    report = TableReport()
    to_arrow(kind, items, {"query": "oak desk"}, report)  # a search's key holds what it asked
    json.dumps(report.as_dict())  # what is stored stays JSON
    return dict(report.empty_hints)
