"""The documented paths the sandbox serves: names for them, importable without the sandbox's builders (the
`harvest sandbox --drift` shapes name paths and load with the command line), and the answers `--replay` serves
on them."""

from pathlib import Path

CREATIVE_SEARCH = "/v1/creative/materials"
CREATIVE_DETAIL = "/v1/creative/materials/{material_id}"
PHOTOS = "/v1/network-a/profile/photos"
GROUP_POSTS = "/v1/network-a/group/posts"
FORUM_SEARCH = "/v1/forum/subreddit/search"
CLIP = "/v1/streaming/clip"
COMMUNITY_POST = "/v1/video-platform/community-post"
MB_POST = "/v1/microblog-b/post"
MB_FEED = "/v1/microblog-b/user/posts"
TWEETS = "/v1/microblog-a/community/tweets"
EMBED = "/v1/photo-app/user/embed"
REELS = "/v1/photo-app/user/reels"
PINS = "/v1/pinboard/search"
VIDEO_SEARCH = "/v1/video-platform/search"
REPLIES = "/v1/video-platform/video/comment/replies"
SHOP = "/v1/short-video/shop/products"
PROFILE_VIDEOS = "/v3/short-video/profile/videos"

CREDIT_BALANCE = "/v1/account/credit-balance"
"""The account's balance, free: `{"creditCount": N}`."""
OLD_CREDIT_BALANCE = "/v1/credit-balance"
"""Where the service answered the balance before it moved it; answered the same."""

ALL_PATHS: tuple[str, ...] = (
    CREATIVE_SEARCH, CREATIVE_DETAIL, PHOTOS, GROUP_POSTS, FORUM_SEARCH, CLIP, COMMUNITY_POST, MB_POST, MB_FEED,
    TWEETS, EMBED, REELS, PINS, VIDEO_SEARCH, REPLIES, SHOP, PROFILE_VIDEOS,
)  # fmt: skip
"""The data paths the sandbox serves with code of its own, in the interface's order (the others: from their
declarations)."""


def replay_answers(entries: list[str], also: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Path -> answer bytes of `harvest sandbox --replay PATH=FILE` entries (`also`: declared paths the sandbox
    serves too); ValueError naming a bad entry."""
    replayed: dict[str, bytes] = {}
    for entry in entries:
        path, _, file = entry.partition("=")
        if path not in (*ALL_PATHS, *also) or not file:
            raise ValueError(
                f"--replay {entry!r}: PATH=FILE with one of the served paths: {', '.join((*ALL_PATHS, *also))}"
            )
        try:
            replayed[path] = Path(file).read_bytes()
        except OSError as exc:
            raise ValueError(f"--replay {entry!r}: cannot read {file}: {exc.strerror}") from None
    return replayed
