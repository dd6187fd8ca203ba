"""One name for one thing across tables: the catalog's naming rules hold for every built-in column, and a database
an older harvest landed under the earlier names keeps every row under today's names after the next load.

The rules read each column's description (what it holds) against its name: a length is `duration_ms`,
`duration_seconds` or `duration_text`, an account's picture `..._avatar_url`, a time `..._at` (a start or end:
`starts_at`/`ends_at` scheduled, `started_at`/`ended_at` past). A column declared under another name fails here.
The renaming itself (`renamed_from`, `tasks.database.column_types`) is tested on a table of its own in
tests/test_column_types.py; here the catalog's renames are held to it, table by table.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.fields import DESCRIPTION
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.parquet_sink import MultiTableSink
from tests.landing_helpers import Kind, load_tables

RULES = [
    (r"^Length of .*, in milliseconds", "duration_ms"),
    (r"^Length of .*, in seconds", "duration_seconds"),
    (r"^Length of .* (as hh:mm:ss|as the platform shows it)|^How long the .* lasts", "duration_text"),
    (r"language code", "language"),
    (r"^The \w+'s shortcode", "shortcode"),  # holds one: a join hint in an id's description does not
    (r"for screen readers|alt text", "alt_text"),
    (r"^URL of .*thumbnail", r".*thumbnail_url"),
    (r"^URL of .*(avatar|profile picture|profile image|'s picture)", r".*avatar_url"),
    (r"^URL of .*banner", "banner_url"),
    (r"^The website", "website_url"),
    (r"^Views of", r".*view_count"),
    (r"^Likes of|^Likes on", r".*like_count"),
    (r"^Posts of the account|^Posts with the hashtag", "post_count"),
    (r"^The (post|comment|reply|tweet)'s (whole |own )?text", "text"),
    (r"^Whether .* cancell?ed", "is_cancelled"),
]
"""(what a description says, the name such a column has): one name for one thing, whatever the platform calls it."""
SPAN_BOUNDS = ("_since", "_until")
"""A time that bounds a span keeps its preposition (`verified_since`, `cancelled_until`): `_at` would lose which end."""
STARTS_AND_ENDS = {"starts_at", "ends_at", "started_at", "ended_at"}
"""Scheduled (`starts_at`, `ends_at`: an event, a stream on a schedule) or past (`started_at`, `ended_at`: an ad
that ran, a live that began)."""


def described_columns() -> Iterator[tuple[str, pa.Field, str]]:
    """(table, column, description) of every built-in table's own columns (not harvest's `_...` columns, nor a
    child's copy of its parent's key)."""
    for table, kind in sorted(catalog.all_kinds().items()):
        for fld in kind.schema:
            if not fld.name.startswith(("_", "parent_")) and fld.name not in ("raw", "position"):
                yield table, fld, (fld.metadata or {}).get(DESCRIPTION, b"").decode()


def test_a_column_is_named_for_what_its_description_says_it_holds() -> None:
    misnamed = [
        f"{table}.{fld.name} should be {name}: {text}"
        for table, fld, text in described_columns()
        for pattern, name in RULES
        if re.search(pattern, text) and not re.fullmatch(name, fld.name)
    ]
    assert misnamed == []


def test_a_time_is_named_at_and_a_start_or_end_says_whether_it_is_scheduled_or_past() -> None:
    times = [(t, f.name) for t, f, _ in described_columns() if pa.types.is_timestamp(f.type)]
    assert len(times) > 100
    assert [c for c in times if not c[1].endswith(("_at", *SPAN_BOUNDS))] == []
    assert [c for c in times if re.search(r"start|end", c[1]) and c[1] not in STARTS_AND_ENDS] == []
    assert {"starts_at", "ends_at", "started_at", "ended_at"} <= {c for _, c in times}


# ----------------------------------------------------------------- a database landed under the earlier names
RENAMED: dict[tuple[str, str], tuple[str, ...]] = {
    ("accessibility_caption", "alt_text"): ("network_a_marketplace_item_photos", "network_a_photos", "photo_app_profile_posts"),
    ("alt", "alt_text"): ("microblog_b_post_images", "microblog_b_reply_images"),
    ("author_avatar", "author_avatar_url"): ("microblog_b_posts", "microblog_b_replies", "video_platform_comments", "video_platform_video_comments"),
    ("author_image_url", "author_avatar_url"): ("network_a_post_details", "network_a_reels"),
    ("author_picture_url", "author_avatar_url"): ("network_a_comment_replies", "network_a_post_comments"),
    ("image_url", "avatar_url"): ("network_a_ad_library_companies",),
    ("profile_image_url", "avatar_url"): ("streaming_profiles",),
    ("profile_pic_url", "avatar_url"): ("photo_app_basic_profiles", "photo_app_profile_search_results", "photo_app_profiles", "photo_app_search_users"),
    ("profile_picture_url", "avatar_url"): ("network_a_profiles",),
    ("banner_image_url", "banner_url"): ("streaming_profiles",),
    ("channel_thumbnail_url", "channel_avatar_url"): ("video_platform_search_suggestions",),
    ("cover_image_url", "cover_url"): ("pinboard_boards", "short_video_product_videos"),
    ("cover_photo_url", "cover_url"): ("network_a_city_events", "network_a_event_details", "network_a_event_search_results", "network_a_profiles"),
    ("play_time_ms", "duration_ms"): ("network_a_reels",),
    ("length_seconds", "duration_seconds"): ("streaming_recent_broadcasts", "streaming_schedule_videos", "streaming_videos", "video_platform_channel_lives", "video_platform_channel_videos", "video_platform_hashtag_videos", "video_platform_playlist_videos", "video_platform_shelf_items", "video_platform_shorts", "video_platform_video_watch_next", "video_platform_videos"),
    ("video_duration", "duration_seconds"): ("photo_app_audio_reels", "photo_app_hashtag_posts", "photo_app_highlight_items", "photo_app_post_details", "photo_app_reel_search_results", "photo_app_user_posts", "short_video_ad_library_ad_details"),
    ("video_length_seconds", "duration_seconds"): ("network_a_post_details",),
    ("length_text", "duration_text"): ("video_platform_channel_lives", "video_platform_channel_videos", "video_platform_hashtag_videos", "video_platform_playlist_videos", "video_platform_shelf_items", "video_platform_shorts", "video_platform_videos"),
    ("end_at", "ends_at"): ("streaming_schedule_segments",),
    ("end_time", "ends_at"): ("network_a_event_details",),
    ("is_canceled", "is_cancelled"): ("network_a_event_details", "network_a_profile_events"),
    ("lang", "language"): ("microblog_a_tweet_details", "microblog_a_tweets", "microblog_a_user_tweets"),
    ("langs", "languages"): ("microblog_b_posts", "microblog_b_replies"),
    ("latest_ad_first_seen", "latest_ad_first_seen_at"): ("creative_material_details",),
    ("latest_ad_last_seen", "latest_ad_last_seen_at"): ("creative_material_details",),
    ("link", "link_url"): ("pinboard_board_pins", "pinboard_pin_details", "pinboard_pins"),
    ("music_song", "music_title"): ("photo_app_hashtag_posts", "photo_app_post_details", "photo_app_profile_posts"),
    ("media_count", "post_count"): ("photo_app_basic_profiles", "photo_app_profile_search_results", "photo_app_search_hashtags"),
    ("code", "shortcode"): ("photo_app_audio_reels", "photo_app_highlight_items", "photo_app_reels", "photo_app_tagged_posts", "photo_app_user_posts"),
    ("start_at", "starts_at"): ("streaming_schedule_segments",),
    ("body", "text"): ("forum_comments", "forum_post_comments"),
    ("content", "text"): ("video_platform_comments", "video_platform_community_posts", "video_platform_video_comments"),
    ("description", "text"): ("network_a_post_details",),
    ("full_text", "text"): ("microblog_a_tweet_details", "microblog_a_tweets", "microblog_a_user_tweets"),
    ("thumb", "thumbnail_url"): ("microblog_b_post_images", "microblog_b_reply_images"),
    ("thumbnail", "thumbnail_url"): ("forum_post_details", "forum_search_posts", "forum_subreddit_posts", "network_a_photos", "network_a_reels", "video_platform_channel_lives", "video_platform_channel_playlists", "video_platform_channel_shorts", "video_platform_channel_videos", "video_platform_hashtag_videos", "video_platform_playlist_videos", "video_platform_shelf_items", "video_platform_shorts", "video_platform_trending_shorts", "video_platform_video_details", "video_platform_videos"),
    ("user_avatar", "user_avatar_url"): ("microblog_a_tweets",),
    ("user_profile_pic_url", "user_avatar_url"): ("photo_app_post_comments",),
    ("video_view_count", "view_count"): ("network_a_group_posts", "network_a_profile_posts"),
    ("external_url", "website_url"): ("photo_app_basic_profiles", "photo_app_profile_search_results", "photo_app_profiles"),
    ("url", "website_url"): ("microblog_a_profiles",),
    ("website", "website_url"): ("network_a_profiles", "video_platform_video_sponsors"),
}  # fmt: skip
"""(earlier name, today's) -> the tables whose column was renamed: the names a database landed before keeps."""
DROPPED = {"network_a_event_details": pa.field("start_time", pa.timestamp("us", tz="UTC"))}
"""Columns the catalog no longer declares (folded into another): an older table keeps them and their values."""
T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


def earlier_names() -> dict[str, dict[str, str]]:
    """Table -> {today's name: the earlier one}."""
    tables: dict[str, dict[str, str]] = {}
    for (old, new), names in RENAMED.items():
        for table in names:
            tables.setdefault(table, {})[new] = old
    return tables


def sample(typ: pa.DataType, tag: str) -> Any:
    """A value of the type, telling the row it was landed in (`tag`) apart from the other."""
    n = 1 if tag == "old" else 2
    if pa.types.is_timestamp(typ):
        return T0 + dt.timedelta(days=n)
    if pa.types.is_decimal(typ):
        return Decimal(n) / 4
    if pa.types.is_boolean(typ):
        return tag == "old"
    if pa.types.is_integer(typ):
        return n
    if pa.types.is_floating(typ):
        return n / 4
    if pa.types.is_list(typ):
        return [tag]
    return f"{tag}-value"


def row(kind: Any, names: dict[str, str], tag: str, at: dt.datetime) -> dict[str, Any]:
    """One row of the kind: its key and the renamed columns (today's name -> the name landed) filled, the rest NULL."""
    fields = {f.name: f for f in kind.schema}
    meta = {"raw": "{}", "_endpoint": "/e", "_query_id": "q", "_run_id": f"r-{tag}", "_fetched_at": at}
    values = {k: v for k, v in meta.items() if k in fields}
    for column in (*kind.primary_key, *names):
        values[names.get(column, column)] = sample(fields[column].type, tag)
    return values


def land(
    root: Path, run_id: str, at: dt.datetime, rows: list[tuple[Any, dict[str, Any]]]
) -> list[tuple[Any, list[Path]]]:
    """One page of a run holding each kind's row, landed as Parquet: (kind, its files) to load."""
    with MultiTableSink(OutputLayout(root), run_id, at, "0000") as sink:
        sink.write_page([(kind, pa.Table.from_pylist([values], schema=kind.schema)) for kind, values in rows])
    files = {table: path for table, path, _ in sink.close()}
    return [(kind, [files[kind.table]]) for kind, _ in rows]


def as_landed_before(kind: Any, renamed: dict[str, str]) -> Kind:
    """The kind as the catalog declared it before the renames: each renamed column under its earlier name (no
    `renamed_from` then), and a column it has folded since."""
    fields = [pa.field(renamed[f.name], f.type) if f.name in renamed else f for f in kind.schema]
    if kind.table in DROPPED:
        fields.insert(1, DROPPED[kind.table])
    return Kind(kind.table, kind.primary_key, pa.schema(fields))


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[tuple[Any, ...]], set[str]]]:
    """Every renamed table landed under the earlier names (one row each), then a run under today's (another
    row); table -> (its rows: key, today's renamed columns and a column folded since; all its columns)."""
    root = tmp_path_factory.mktemp("upgraded")
    db, kinds, renamed = OutputLayout(root).db, catalog.all_kinds(), earlier_names()
    assert set(renamed) <= set(kinds), set(renamed) - set(kinds)
    children = [kinds[t] for t in renamed if isinstance(kinds[t], ChildKind)]
    tables = sorted(set(renamed) | {c.parent for c in children})  # a child's item lands with its parent's row
    old = [
        (as_landed_before(kinds[t], renamed.get(t, {})), row(kinds[t], renamed.get(t, {}), "old", T0))
        for t in tables
    ]
    for kind, values in old:
        if kind.table in DROPPED:
            values[DROPPED[kind.table].name] = T0
    load_tables(db, land(root, "r-old", T0, old))
    later = T0 + dt.timedelta(hours=1)
    new = [(kinds[t], row(kinds[t], {n: n for n in renamed.get(t, {})}, "new", later)) for t in tables]
    load_tables(db, land(root, "r-new", later, new))
    con = duckdb.connect(str(db), read_only=True)
    try:
        out: dict[str, tuple[list[tuple[Any, ...]], set[str]]] = {}
        for table, names in renamed.items():
            kept = [DROPPED[table].name] if table in DROPPED else []
            columns = ", ".join([*kinds[table].primary_key, *sorted(names), *kept])
            rows = con.execute(f"SELECT {columns} FROM {table} ORDER BY _fetched_at").fetchall()
            out[table] = (rows, {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()})
        return out
    finally:
        con.close()


@pytest.mark.parametrize("table", sorted(earlier_names()))
def test_a_table_landed_under_the_earlier_names_keeps_its_rows_under_todays(
    upgraded: dict[str, tuple[list[tuple[Any, ...]], set[str]]], table: str
) -> None:
    kind, names = catalog.all_kinds()[table], earlier_names()[table]
    fields = {f.name: f for f in kind.schema}
    rows, columns = upgraded[table]
    assert not set(names.values()) & columns  # no column left under an earlier name beside today's
    order = [*kind.primary_key, *sorted(names)]
    expected = [tuple(sample(fields[c].type, tag) for c in order) for tag in ("old", "new")]
    if table in DROPPED:  # the folded column stays whole for the rows landed before; today's leave it NULL
        expected = [(*expected[0], T0), (*expected[1], None)]
    assert rows == expected
