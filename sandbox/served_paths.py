"""The documented paths the sandbox serves: names for them, importable without the sandbox's builders (the
`harvest sandbox --drift` shapes name paths and load with the command line), and the answers `--replay` serves
on them."""

from pathlib import Path

CREATIVE_SEARCH = "/v1/creative/materials"
CREATIVE_DETAIL = "/v1/creative/materials/{material_id}"
CLIP = "/v1/streaming/clip"
MB_POST = "/v1/microblog-b/post"
MB_FEED = "/v1/microblog-b/user/posts"
REELS = "/v1/photo-app/user/reels"
PINS = "/v1/pinboard/search"
VIDEO_SEARCH = "/v1/video-platform/search"
REPLIES = "/v1/video-platform/video/comment/replies"
PROFILE_VIDEOS = "/v3/short-video/profile/videos"

TWEETS = "/v1/microblog-a/community/tweets"
FORUM_SEARCH = "/v1/forum/subreddit/search"
"""Served from their declarations; named here for the drift shapes that change their answers."""

CREDIT_BALANCE = "/v1/account/credit-balance"
"""The account's balance, free: `{"creditCount": N}`."""
OLD_CREDIT_BALANCE = "/v1/credit-balance"
"""Where the service answered the balance before it moved it; answered the same."""

ALL_PATHS: tuple[str, ...] = (
    CREATIVE_SEARCH, CREATIVE_DETAIL, CLIP, MB_POST, MB_FEED, REELS, PINS, VIDEO_SEARCH, REPLIES, PROFILE_VIDEOS,
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
