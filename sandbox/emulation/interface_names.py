"""Answers named as the service's interface names their fields, before its published answers showed otherwise.

The sandbox answers as the service does (its published sample answers: `viewCountInt`, replies wrapped in
thread views, a clip's other clips a GraphQL connection, ...). `harvest sandbox --drift interface-names` serves
the interface's own names instead on the endpoints emulated with code (`views`, a flat list of replies with
`parent_uri`, the other clips a plain list, ...), so that harvest's reading of them, kept as alternatives in its catalog, stays
exercised end to end. Records are renamed in place: `ServedPage.records` describes what was served.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harvest.sandbox.emulation.page import ServedPage
from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.served_paths import (
    CLIP,
    MB_POST,
    PINS,
    PROFILE_VIDEOS,
    REELS,
    REPLIES,
    VIDEO_SEARCH,
)


def _replace(record: Record, new: Record) -> None:
    """`record` becomes `new`, keeping its identity (the page's body and its records share it)."""
    record.clear()
    record.update(new)


def _drop(record: Record, *names: str) -> None:
    for name in names:
        record.pop(name, None)


def _video(video: Record) -> None:
    video["views"] = video.pop("viewCountInt", None)
    for name in ("likeCount", "commentCount"):
        if name + "Int" in video:
            video[name] = video.pop(name + "Int")
    _drop(video, "viewCountText", "lengthText")
    channel = video.get("channel")
    if isinstance(channel, dict):
        channel["url"] = f"https://www.video-platform.example/channel/{channel.get('id')}"
        _drop(channel, "handle")


def _video_search(page: ServedPage) -> None:
    for kind in ("videos", "shorts"):
        for video in page.records.get(kind, []):
            _video(video)
    for shelf in page.records.get("shelves", []):
        for video in shelf.get("items", []):
            _video(video)


def _replies(page: ServedPage) -> None:
    for reply in page.records.get("comments", []):
        author, engagement = reply["author"], reply.pop("engagement", {})
        author["avatar"] = author.pop("avatarUrl", None)
        _drop(author, "channelUrl")
        _drop(reply, "replyLevel")
        reply["likeCount"] = engagement.get("likes")


def _thread(page: ServedPage) -> None:
    """Replies as one flat list of posts, each naming its parent in `parent_uri`."""
    for reply in page.records.get("replies", []):
        reply["parent_uri"] = reply["record"].pop("reply")["parent"]["uri"]
    if isinstance(page.body, dict) and "replies" in page.body:
        page.body["replies"] = page.records.get("replies", [])


def _flat_broadcaster(owner: Any) -> None:
    if isinstance(owner, dict) and isinstance(owner.get("followers"), dict):
        owner["followers"] = owner["followers"]["totalCount"]


def _clip(page: ServedPage) -> None:
    """Followers a number, each quality's signed URL, the other clips a plain list."""
    for clip in page.records.get("clips", []):
        _flat_broadcaster(clip["broadcaster"])
        signed = clip.pop("videoURL", "")
        for quality in clip.get("videoQualities", []):
            quality["videoURL"] = quality.pop("sourceURL") + signed[signed.find("?") :]
    body = page.body
    if isinstance(body, list) and len(body) == 3:
        user = body[1]["data"]["user"]
        if isinstance(user, dict) and isinstance(user.get("clips"), dict):
            user["clips"] = [edge["node"] for edge in user["clips"]["edges"]]
        _flat_broadcaster(body[2]["data"]["user"])


def _reels(page: ServedPage) -> None:
    """A trimmed reel with `video_url` and `thumbnail_url` instead of `image_versions2`."""
    for reel in page.records.get("reels", []):
        _drop(reel, "url", "caption")
        if "video_versions" not in reel:
            thumb = reel.pop("image_versions2")["candidates"][0]["url"]
            reel.update(
                video_url=thumb.replace("/t51/", "/t50/").replace(".jpg", ".mp4"), thumbnail_url=thumb
            )


def _pins(page: ServedPage) -> None:
    for pin in page.records.get("pins", []):
        _drop(pin, "created_at")


def _profile_videos(page: ServedPage) -> None:
    for video in page.records.get("videos", []):
        _drop(video, "url", "shop_product_url")


RENAMES: dict[str, Callable[[ServedPage], None]] = {
    VIDEO_SEARCH: _video_search, REPLIES: _replies, MB_POST: _thread, CLIP: _clip, REELS: _reels, PINS: _pins,
    PROFILE_VIDEOS: _profile_videos,
}  # fmt: skip
"""Path -> how its answer is renamed: the endpoints emulated with code. The others are served from their
declarations, which say where each value is and write it at the first name the declaration gives it."""


def as_interface_names(path: str, page: ServedPage) -> None:
    rename = RENAMES.get(path)
    if rename is not None and page.status == 200:
        rename(page)
