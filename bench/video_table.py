"""The table the plain scripts land: the columns harvest's `short_video_videos` declares, written out by hand.

The scripts are priced against harvest doing the same job, so they land the same 43 columns (text, counts,
timestamps, flags, the JSON lists kept whole, the handle asked) that the shipped endpoint declares
(`connectors/catalog/endpoints/short-video.yaml`), read from the same places in each item. What they leave out
is what harvest adds on top: `raw`, the run's columns, the unknown-field check, the primary key.
`tests/test_bench_scripts.py` checks the names against the catalog's, so the two cannot drift apart.

A path is a tuple of keys (an int: a list's index); alternatives are tried in order, the first found wins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

Path = tuple[str | int, ...]

TEXT, INT, BOOL, TIME, JSON = "text", "integer", "boolean", "timestamp", "json"
TYPES = {
    TEXT: pa.string(),
    INT: pa.int64(),
    BOOL: pa.bool_(),
    TIME: pa.timestamp("s", tz="UTC"),
    JSON: pa.string(),
}


def p(*alternatives: str) -> tuple[Path, ...]:
    """'video.cover.url_list[0]' -> (('video', 'cover', 'url_list', 0),)."""
    out = []
    for text in alternatives:
        keys: list[str | int] = []
        for part in text.split("."):
            name, _, index = part.partition("[")
            keys.append(name)
            if index:
                keys.append(int(index.rstrip("]")))
        out.append(tuple(keys))
    return tuple(out)


COLUMNS: list[tuple[str, str, tuple[Path, ...]]] = [
    ("aweme_id", TEXT, p("aweme_id")),
    ("caption", TEXT, p("desc")),
    ("created_at", TIME, p("create_time")),
    ("url", TEXT, p("url")),
    ("share_url", TEXT, p("share_url")),
    ("region", TEXT, p("region")),
    ("language", TEXT, p("desc_language")),
    ("content_type", TEXT, p("content_type")),
    ("is_ad", BOOL, p("is_ad")),
    ("is_pinned", BOOL, p("is_top")),
    ("play_count", INT, p("statistics.play_count", "stats.playCount")),
    ("like_count", INT, p("statistics.digg_count", "stats.diggCount")),
    ("comment_count", INT, p("statistics.comment_count", "stats.commentCount")),
    ("share_count", INT, p("statistics.share_count", "stats.shareCount")),
    ("save_count", INT, p("statistics.collect_count", "stats.collectCount")),
    ("download_count", INT, p("statistics.download_count")),
    ("duration_ms", INT, p("video.duration")),
    ("width", INT, p("video.width")),
    ("height", INT, p("video.height")),
    ("cover_url", TEXT, p("video.cover.url_list[0]", "video.cover")),
    ("play_url", TEXT, p("video.play_addr.url_list[0]")),
    ("author_uid", TEXT, p("author.uid", "author.id")),
    ("author_unique_id", TEXT, p("author.unique_id", "author.uniqueId")),
    ("author_nickname", TEXT, p("author.nickname")),
    ("author_sec_uid", TEXT, p("author.sec_uid")),
    ("music_id", TEXT, p("music.id_str")),
    ("music_title", TEXT, p("music.title")),
    ("music_author", TEXT, p("music.author")),
    ("shop_product_url", TEXT, p("shop_product_url")),
    ("text_extra", JSON, p("text_extra")),
    ("challenges", JSON, p("cha_list")),
    ("anchors", JSON, p("anchors")),
    ("banners", JSON, p("banners")),
    ("bit_rates", JSON, p("video.bit_rate")),
    ("big_thumbs", JSON, p("video.big_thumbs")),
    ("caption_infos", JSON, p("video.cla_info.caption_infos")),
    ("music_artists", JSON, p("music.artists")),
    ("added_sound", JSON, p("added_sound_music_info")),
    ("image_post", JSON, p("image_post_info")),
    ("original_client_text", JSON, p("original_client_text")),
    ("suggest_words", JSON, p("suggest_words")),
    ("author_avatar_meta", JSON, p("author.avatar_meta_info_list")),
]
"""Each column's name, type (as the catalog names it) and where it is read; the last column, `user_handle`, is the handle asked."""

SCHEMA = pa.schema([(name, TYPES[kind]) for name, kind, _ in COLUMNS] + [("user_handle", pa.string())])


def dig(item: Any, paths: tuple[Path, ...]) -> Any:
    for path in paths:
        value = item
        for key in path:
            if isinstance(key, int):
                value = value[key] if isinstance(value, list) and len(value) > key else None
            else:
                value = value.get(key) if isinstance(value, dict) else None
            if value is None:
                break
        if value is not None:
            return value
    return None


def row(item: dict[str, Any], handle: str, dumps: Callable[[Any], str]) -> dict[str, Any]:
    """One item as a dict of the table's columns (JSON columns as text made by `dumps`)."""
    out = {}
    for name, kind, paths in COLUMNS:
        value = dig(item, paths)
        out[name] = (
            value
            if value is None
            else dumps(value)
            if kind == JSON
            else bool(value)
            if kind == BOOL
            else value
        )
    out["user_handle"] = handle
    return out


def columns(items: list[dict[str, Any]], handle: str, dumps: Callable[[Any], str]) -> list[list[Any]]:
    """The items as one list per column, in `SCHEMA`'s order."""
    out = []
    for _, kind, paths in COLUMNS:
        values = [dig(item, paths) for item in items]
        if kind == JSON:
            values = [None if v is None else dumps(v) for v in values]
        elif kind == BOOL:  # the service sends some flags as 1 or 0
            values = [None if v is None else bool(v) for v in values]
        out.append(values)
    out.append([handle] * len(items))
    return out
