"""The service's own sample answers land whole: every record once, every column filled whose value the answer
carries.

`../shared/spec/published-examples/` holds the answers the service publishes for its endpoints (its command-line
client's samples and its OpenAPI examples), exactly as published, read in place; `index.json` says which request
each answers. Each is served over real HTTP by the sandbox's replay (`SandboxConfig.replay`: the file's bytes, its
own envelope) and landed by a real `harvest run` of one query. Every file is picked up: each endpoint is built in.
`tests/test_endpoint_samples.py` holds every sample of every endpoint to the same rules without a flow run.

What "whole" means is derived from the catalog applied to the example, and held against an independent rule so a
wrong path cannot hide a column: (1) each record the catalog finds has its primary key and lands once, with its
JSON in `raw`; (2) each value the catalog's path finds is non-NULL in DuckDB (no misfit); (3) each column is
filled in at least one row, and each record kind has records, except the few listed in `NOT_IN_THE_EXAMPLE`
with the reason the example does not carry them (a listed one that is filled fails: the list stays exact).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.job_catalog import builtin, builtin_declarations
from harvest.connectors.catalog.record_paths import MISSING, compile_path
from harvest.connectors.catalog.records import ENVELOPE_KEYS, RecordKind, keys_of
from harvest.connectors.paging.pager import OK_STATUSES
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, rows, write_spec
from tests.published_helpers import PUBLISHED, published_index, skip_without

skip_without(PUBLISHED)
EXAMPLES_DIR = PUBLISHED
REQUESTS = {
    "v1_video-platform_video--cli.json": {"url": "https://www.youtube.com/watch?v=Y2Ah_DFr8cw"},
    "v1_video-platform_video_comments--cli.json": {"url": "https://www.youtube.com/watch?v=dQw4w9WgXcQ"},
    "v1_search-engine_company_ads--cli.json": {"domain": "lululemon.com"},
}
"""The requests of the examples whose index entry names none (the endpoints the interface does not list)."""
INDEX = published_index()
ANY = "*"
"""In `NOT_IN_THE_EXAMPLE`: the record kind itself (the example has none of its records)."""
MICROBLOG_B_FEED_ONLY = {
    "feed_reason": "only a wrapped feed item says it",
    "reply_root_uri": "none of its posts is a reply",
    "reply_parent_uri": "none of its posts is a reply",
}
NOT_IN_THE_EXAMPLE: dict[tuple[str, str, str], str] = {
    ("v1_network-a_group_posts--cli.json", "network_a_group_posts", "text"): "null in all three posts",
    ("v1_network-a_group_posts--cli.json", "network_a_group_posts", "view_count"): "null in every post",
    ("v1_network-a_group_posts--cli.json", "network_a_group_posts", "group_id"): "asked by the group's URL",
    ("v1_forum_subreddit_search--cli.json", "forum_comments", "parent_comment_id"): "a top-level comment",
    ("v1_forum_subreddit_search--cli.json", "forum_media", "gallery_count"): "null: an image, not a gallery",
    (
        "v1_streaming_clip--cli.json",
        "streaming_broadcaster_clips",
        "broadcaster_follower_count",
    ): "only on the clip",
    ("v1_streaming_clip--cli.json", "streaming_broadcaster_clips", "video_url"): "only on the clip",
    ("v1_streaming_clip--cli.json", "streaming_broadcaster_clips", "video_qualities"): "only on the clip",
    ("v1_streaming_clip--openapi.json", "streaming_broadcaster_clips", ANY): "only the array's first element",
    (
        "v1_video-platform_community-post--cli.json",
        "video_platform_community_posts",
        "video_id",
    ): "video: null",
    (
        "v1_video-platform_community-post--cli.json",
        "video_platform_community_posts",
        "video_title",
    ): "video: null",
    (
        "v1_video-platform_community-post--cli.json",
        "video_platform_community_posts",
        "video_url",
    ): "video: null",
    **{
        ("v1_microblog-b_post--cli.json", "microblog_b_replies", column): "the reply embeds nothing"
        for column in ("embed", "embed_link_url", "embed_link_title")
    },
    ("v1_video-platform_video--cli.json", "video_platform_video_details", "description"): "description: null",
    ("v1_photo-app_user_reels--cli.json", "photo_app_reels", "caption"): "caption: null",
    (
        "v1_photo-app_user_reels--openapi.json",
        "photo_app_reels",
        "video_url",
    ): "a trimmed reel has no video URL",
    ("v1_photo-app_user_reels--openapi.json", "photo_app_reels", "video_versions"): "trimmed",
    **{
        ("v1_microblog-b_post--cli.json", "microblog_b_posts", column): why
        for column, why in MICROBLOG_B_FEED_ONLY.items()
    },
    **{
        ("v1_microblog-b_user_posts--cli.json", "microblog_b_posts", column): why
        for column, why in MICROBLOG_B_FEED_ONLY.items()
    },
    **{
        ("v1_pinboard_search--openapi.json", "pinboard_pins", column): "a trimmed pin drops it"
        for column in ("title", "link_url", "domain", "board_id", "board_name", "board_url")
    },
    **{
        ("v1_video-platform_search--cli.json", table, column): reason
        for table in ("video_platform_videos", "video_platform_shorts")
        for column, reason in (
            ("channel_url", "the channel comes with a handle, no url"),
            ("like_count", "only with includeExtras"),
            ("comment_count", "only with includeExtras"),
            ("description", "only with includeExtras"),
        )
    },
    **{
        ("v1_video-platform_search--cli.json", table, ANY): "none in the example"
        for table in ("video_platform_channels", "video_platform_playlists", "video_platform_lives")
    },
    # child tables: the lists the examples hold, read as rows
    ("v1_streaming_clip--cli.json", "streaming_broadcaster_clip_qualities", ANY): "only on the clip",
    ("v1_streaming_clip--openapi.json", "streaming_broadcaster_clip_qualities", ANY): "only on the clip",
    ("v1_microblog-b_post--cli.json", "microblog_b_post_images", ANY): "no embedded images: a link",
    ("v1_microblog-b_post--cli.json", "microblog_b_reply_images", ANY): "the replies embed nothing",
    ("v1_microblog-b_user_posts--cli.json", "microblog_b_post_images", ANY): "no embedded images: a link",
    **{
        (
            "v1_video-platform_search--cli.json",
            "video_platform_shelf_items",
            column,
        ): "a shelf's short is brief"
        for column in (
            "created_at",
            "created_at_text",
            "duration_seconds",
            "duration_text",
            "channel_id",
            "channel_title",
            "channel_handle",
            "channel_url",
            "badges",
            "like_count",
            "comment_count",
            "description",
        )
    },
}
NEWER_THAN_THE_EXAMPLE: dict[str, dict[str, list[str]]] = {
    "v1_streaming_clip--cli.json": {
        "streaming_broadcaster_clips": ["assets"],
    },
    "v1_video-platform_community-post--cli.json": {
        "video_platform_community_posts": ["url", "like_count_text", "video_view_count"],
    },
    "v1_microblog-b_post--cli.json": {
        "microblog_b_posts": ["languages"],
        "microblog_b_replies": ["author_verified_status", "author_verifications", "facets"],
    },
    "v1_microblog-b_user_posts--cli.json": {
        "microblog_b_posts": ["languages"],
    },
    "v1_photo-app_user_reels--cli.json": {
        "photo_app_reels": ["user_id"],
    },
    "v1_photo-app_user_reels--openapi.json": {
        "photo_app_reels": ["user_id"],
    },
    "v3_short-video_profile_videos--cli.json": {
        "short_video_videos": ["challenges", "anchors", "image_post", "suggest_words"],
    },
    "v3_short-video_profile_videos--openapi.json": {
        "short_video_videos": [
            "share_url",
            "content_type",
            "is_pinned",
            "music_id",
            "music_title",
            "music_author",
            "text_extra",
            "challenges",
            "anchors",
            "banners",
            "music_artists",
            "added_sound",
            "image_post",
            "original_client_text",
            "suggest_words",
        ],
    },
    "v1_pinboard_search--openapi.json": {
        "pinboard_pins": ["board_images"],
    },
    "v1_video-platform_video--cli.json": {
        "video_platform_video_details": ["most_replayed"],
    },
}
"""Columns the catalog reads from the service's current samples (`../shared/spec/service-samples/`, held by
`tests/test_endpoint_samples.py`) that these older published answers do not carry."""
NOT_IN_THE_EXAMPLE |= {
    (file, table, column): "newer than the example"
    for file, tables in NEWER_THAN_THE_EXAMPLE.items()
    for table, columns in tables.items()
    for column in columns
}
runner = CliRunner()


@dataclass(frozen=True)
class Example:
    file: str
    endpoint: Endpoint
    params: dict[str, Any]

    @property
    def body(self) -> Any:
        return orjson.loads((EXAMPLES_DIR / self.file).read_bytes())

    @property
    def query_id(self) -> str:
        return self.file.removesuffix(".json").replace("--", ".")


def _known() -> tuple[list[Example], list[Any]]:
    """The examples of endpoints the catalog knows, and a skipped param for each other one."""
    known, skipped = [], []
    endpoints = builtin().endpoints
    for entry in INDEX:
        endpoint = endpoints.get(entry["endpoint"])
        if endpoint is None:
            reason = f"{entry['endpoint']} is not built in"
            skipped.append(
                pytest.param(entry["file"], marks=pytest.mark.skip(reason=reason), id=entry["file"])
            )
        else:
            request = entry.get("example_request") or REQUESTS[entry["file"]]
            known.append(Example(entry["file"], endpoint, dict(request)))
    return known, skipped


KNOWN, SKIPPED = _known()


def _runs(examples: list[Example]) -> list[list[Example]]:
    """Examples grouped into runs where no two share an endpoint (the replay answers a path with one file) or a
    table (each example's rows stay its own): a handful of runs instead of one per example."""
    groups: list[tuple[set[str], list[Example]]] = []
    for example in examples:
        names = {example.endpoint.path} | {k.table for k in example.endpoint.kinds}
        group = next((g for g in groups if not g[0] & names), None)
        if group is None:
            groups.append((set(), []))
            group = groups[-1]
        group[0].update(names)
        group[1].append(example)
    return [members for _, members in groups]


@pytest.fixture(scope="module")
def landed(
    prefect_harness: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[Path, Any]]]:
    """Example file -> (its run's DuckDB file, its query's `query_state` row), every known example landed."""
    out: dict[str, tuple[Path, Any]] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARVEST_API_KEY", SECRET_KEY)
        for n, group in enumerate(_runs(KNOWN)):
            replay = {e.endpoint.path: (EXAMPLES_DIR / e.file).read_bytes() for e in group}
            config = SandboxConfig(
                api_keys={SECRET_KEY: BIG_BALANCE}, replay=replay, catalog=builtin_declarations()
            )
            tmp = tmp_path_factory.mktemp(f"published{n}")
            queries = [
                {"id": e.query_id, "endpoint": e.endpoint.path, "params": e.params}
                | ({} if e.endpoint.paging.single else {"max_pages": 1})
                for e in group
            ]
            spec = {
                "name": "published",
                "budget": {"credits": 100},
                "output": str(tmp / "out"),
                "queries": queries,
            }
            with running(config) as sb:
                spec["service"] = {"base_url": sb.base_url}
                result = runner.invoke(app, ["run", str(write_spec(tmp, spec))])
                assert len(data_entries(sb)) == len(group), result.output  # each answer asked for once
            db = tmp / "out" / "harvest.duckdb"
            for e in group:
                (state,) = rows(
                    db,
                    "SELECT status, records, columns_empty, error FROM query_state WHERE query_id = ?",
                    [e.query_id],
                )
                out[e.file] = (db, state)
    yield out


def _landed_rows(db: Path, kind: RecordKind, query_id: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The query's rows of a table by primary key; a key that landed twice fails."""
    names = [f.name for f in kind.columns] + ["raw"]
    if not rows(db, "SELECT 1 FROM information_schema.tables WHERE table_name = ?", [kind.table]):
        return {}  # no run landed a record of this kind
    got = rows(db, f"SELECT {', '.join(names)} FROM {kind.table} WHERE _query_id = ?", [query_id])
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in got:
        record = dict(zip(names, row, strict=True))
        key = tuple(record[k] for k in kind.primary_key)
        assert key not in by_key, f"{kind.table}: {key} landed twice"
        by_key[key] = record
    return by_key


def _listed_items(child: ChildKind, record: Any) -> list[tuple[int, Any]]:
    """(position, item) of a record's child list, as an independent reading of the declaration."""
    for where in child.at:
        found = compile_path(where)(record)
        if found is MISSING:
            continue
        if child.entries:
            return [(n, {"name": k, "value": v}) for n, (k, v) in enumerate(found.items())]
        return [(n, item) for n, item in enumerate(found or []) if isinstance(item, dict)]
    return []


def _check_child(
    example: Example, kind: RecordKind, child: ChildKind, items: list[Any], keys: list[Any], db: Path
) -> list[tuple[str, str, str]]:
    """A child table holds one row per item of each record's list, at its position, with every value the item
    has: the same rule as a record table's, over the list's items."""
    inner = kind.unwrap.inner if kind.unwrap else (lambda item: item)
    expected = {
        (*key, position): item for record, key in zip(items, keys, strict=True)
        for position, item in _listed_items(child, inner(record))
    }  # fmt: skip
    names = [f.name for f in child.columns]
    there = rows(db, "SELECT 1 FROM information_schema.tables WHERE table_name = ?", [child.table])
    got = (
        []
        if not there
        else rows(db, f"SELECT {', '.join(names)} FROM {child.table} WHERE _query_id = ?", [example.query_id])
    )
    landed = {tuple(r[: len(child.primary_key)]): dict(zip(names, r, strict=True)) for r in got}
    assert len(landed) == len(got) and sorted(landed) == sorted(expected), (
        f"{example.file}: {child.table} rows"
    )
    if not expected:
        assert (example.file, child.table, ANY) in NOT_IN_THE_EXAMPLE, (
            f"{example.file}: no {child.table} rows"
        )
        return [(example.file, child.table, ANY)]
    used = []
    for fld in child.fields:
        read = child.item.reader(fld.name, example.params)
        assert read is not None
        for at, item in expected.items():
            if read(item) is not None:
                assert landed[at][fld.name] is not None, (
                    f"{example.file}: {child.table}.{fld.name} NULL at {at}"
                )
        filled = any(row[fld.name] is not None for row in landed.values())
        excepted = (example.file, child.table, fld.name) in NOT_IN_THE_EXAMPLE
        assert filled != excepted, f"{example.file}: {child.table}.{fld.name} filled: {filled}"
        used += [(example.file, child.table, fld.name)] if excepted else []
    return used


def _check_kind(example: Example, kind: RecordKind, db: Path) -> list[tuple[str, str, str]]:
    """Asserts (1) and (2) of the module docstring for one record kind; returns the exceptions it used."""
    items = kind.extract(example.body)
    keys = keys_of(kind, items, example.params)
    assert all(None not in key for key in keys), f"{example.file}: {kind.table} records without their key"
    landed = _landed_rows(db, kind, example.query_id)
    assert sorted(landed) == sorted(set(keys)), f"{example.file}: {kind.table} keys"
    used = [u for child in kind.children for u in _check_child(example, kind, child, items, keys, db)]
    if not items:
        assert (example.file, kind.table, ANY) in NOT_IN_THE_EXAMPLE, (
            f"{example.file}: no {kind.table} records"
        )
        return [*used, (example.file, kind.table, ANY)]
    assert (example.file, kind.table, ANY) not in NOT_IN_THE_EXAMPLE, (
        f"{example.file}: {kind.table} has records"
    )
    whole_answer = kind.locate(example.body).where == ""  # its `raw` leaves out the answer's billing fields
    for item, key in zip(items, keys, strict=True):
        record = {k: v for k, v in item.items() if k not in ENVELOPE_KEYS} if whole_answer else item
        assert orjson.loads(landed[key]["raw"]) == record, f"{example.file}: {kind.table} {key} raw"
    for fld in kind.columns:
        read = kind.reader(fld.name, example.params)
        assert read is not None
        for item, key in zip(items, keys, strict=True):
            if read(item) is not None:
                assert landed[key][fld.name] is not None, (
                    f"{example.file}: {kind.table}.{fld.name} is NULL for {key}, the answer has {read(item)!r}"
                )
        filled = any(row[fld.name] is not None for row in landed.values())
        excepted = (example.file, kind.table, fld.name) in NOT_IN_THE_EXAMPLE
        assert filled != excepted, f"{example.file}: {kind.table}.{fld.name} is " + (
            "filled although listed as not in the example" if excepted else "NULL in every row"
        )
        if excepted:
            used.append((example.file, kind.table, fld.name))
    return used


@pytest.mark.parametrize("file", [e.file for e in KNOWN] + SKIPPED)
def test_each_published_answer_lands_whole(file: str, landed: dict[str, tuple[Path, Any]]) -> None:
    example = next(e for e in KNOWN if e.file == file)
    db, (status, records, columns_empty, error) = landed[file]
    assert status in OK_STATUSES, error
    expected = sum(
        len({*keys_of(k, k.extract(example.body), example.params)}) for k in example.endpoint.kinds
    )
    assert records >= expected > 0
    assert columns_empty == 0, f"{file}: columns found empty"
    for kind in example.endpoint.kinds:
        _check_kind(example, kind, db)


def test_every_listed_exception_is_one_an_example_has() -> None:
    """The exceptions name files, tables and columns that exist: a renamed column cannot leave a stale entry."""
    files = {e.file: e for e in KNOWN}
    skipped = {p.values[0] for p in SKIPPED}
    for file, table, column in NOT_IN_THE_EXAMPLE:
        if file in skipped:
            continue
        assert file in files, file
        kind = {k.table: k for k in files[file].endpoint.landed_kinds}[table]
        assert column == ANY or kind.field(column) is not None, (file, table, column)
