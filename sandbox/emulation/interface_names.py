"""Answers named as the service's interface names their fields, before its published answers showed otherwise.

The sandbox answers as the service does (its published sample answers: `viewCountInt`, a tweet's author under
`user.core`, replies wrapped in thread views, `product_price_info`, ...). `harvest sandbox --drift
interface-names` serves the interface's own names instead (`views`, a flat `user`, a flat list of replies with
`parent_uri`, `price.amount`, ...), so that harvest's reading of them, kept as alternatives in its catalog, stays
exercised end to end. Records are renamed in place: `ServedPage.records` describes what was served.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from harvest.sandbox.emulation.page import ServedPage
from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.served_paths import (
    CLIP,
    COMMUNITY_POST,
    FORUM_SEARCH,
    GROUP_POSTS,
    MB_POST,
    PINS,
    PROFILE_VIDEOS,
    REELS,
    REPLIES,
    SHOP,
    TWEETS,
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


def _community_post(page: ServedPage) -> None:
    for post in page.records.get("community_posts", []):
        if isinstance(post.get("channel"), dict):
            _drop(post["channel"], "handle")


def _replies(page: ServedPage) -> None:
    for reply in page.records.get("comments", []):
        author, engagement = reply["author"], reply.pop("engagement", {})
        author["avatar"] = author.pop("avatarUrl", None)
        _drop(author, "channelUrl")
        _drop(reply, "replyLevel")
        reply["likeCount"] = engagement.get("likes")


def _tweets(page: ServedPage) -> None:
    for tweet in page.records.get("tweets", []):
        user = tweet["user"]
        tweet["user"] = {
            "name": user["core"]["name"],
            "screen_name": user["core"]["screen_name"],
            "avatar": user["avatar"]["image_url"],
            "followers_count": user["legacy"]["followers_count"],
            "is_blue_verified": user["is_blue_verified"],
        }
        tweet["view_count"] = int(tweet["view_count"])
        when = datetime.strptime(tweet["created_at"], "%a %b %d %H:%M:%S %z %Y")
        tweet["created_at"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        _drop(tweet, "lang", "user_id_str")


def _thread(page: ServedPage) -> None:
    """Replies as one flat list of posts, each naming its parent in `parent_uri`."""
    for reply in page.records.get("replies", []):
        reply["parent_uri"] = reply["record"].pop("reply")["parent"]["uri"]
    if isinstance(page.body, dict) and "replies" in page.body:
        page.body["replies"] = page.records.get("replies", [])


def _shop(page: ServedPage) -> None:
    for product in page.records.get("products", []):
        price = product["product_price_info"]
        _replace(product, {
            "id": product["product_id"], "title": product["title"], "cover": product["image"]["url_list"],
            "url": product["seo_url"]["canonical_url"],
            "price": {"currency": price["currency_name"], "amount": float(price["sale_price_decimal"])},
            "sold_count": product["sold_info"]["sold_count"],
            "review_count": int(product["rate_info"]["review_count"]), "rating": product["rate_info"]["score"],
        })  # fmt: skip
    for shop in page.records.get("shops", []):
        _replace(shop, {
            "id": shop["seller_id"], "name": shop["shop_name"], "url": shop["shop_link"],
            "followers": int(shop["followers_count"]), "region": shop["region"],
        })  # fmt: skip


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


def _forum(page: ServedPage) -> None:
    for post in page.records.get("posts", []):
        _drop(post, "permalink", "subreddit")
    for comment in page.records.get("comments", []):
        _drop(comment, "post_id", "parent_comment_id", "permalink")
    for medium in page.records.get("media", []):
        image = medium.pop("image")
        medium.update(width=image["width"], height=image["height"], url=image["src"])
        medium["gallery_count"] = medium["gallery_count"] or 1
        _drop(medium, "permalink")


def _group_posts(page: ServedPage) -> None:
    for post in page.records.get("group_posts", []):
        _drop(post, "permalink", "author", "videoViewCount")
        for comment in post.get("topComments", []):
            comment["author"] = comment["author"]["name"]
            _drop(comment, "publishTime")


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
    VIDEO_SEARCH: _video_search, COMMUNITY_POST: _community_post, REPLIES: _replies, TWEETS: _tweets,
    MB_POST: _thread, SHOP: _shop, CLIP: _clip, FORUM_SEARCH: _forum, GROUP_POSTS: _group_posts, REELS: _reels,
    PINS: _pins, PROFILE_VIDEOS: _profile_videos,
}  # fmt: skip
"""Path -> how its answer is renamed; the other paths' answers name their fields as the interface does."""


def as_interface_names(path: str, page: ServedPage) -> None:
    rename = RENAMES.get(path)
    if rename is not None and page.status == 200:
        rename(page)
