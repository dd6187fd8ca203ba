"""Cursor values as the service hands them out.

Most cursors are opaque strings: URL-safe base64 of "<tag>.<offset>.<query digest>", so a cursor replayed on a
different query is refused (400 naming the cursor parameter) instead of silently answering another query's
page. The microblog-b feed cursor is a timestamp string and the short-video `max_cursor` an integer of
milliseconds: both are the time of the page's last record, and the next page starts at the first record older
than it (any timestamp works, as on the real service).
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

from harvest.sandbox.emulation.scope import Scope, iso
from harvest.sandbox.wire.validation import InvalidRequest


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _unb64(token: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def encode(tag: str, offset: int, scope: Scope) -> str:
    return _b64(f"{tag}.{offset}.{scope.tag()}")


def decode(token: str, tag: str, scope: Scope, param: str) -> int:
    """The offset (or page index) an opaque cursor points at; `InvalidRequest` when it is not one of ours for this
    query."""
    raw = _unb64(token)
    parts = raw.split(".") if raw is not None else []
    if len(parts) != 3 or parts[0] != tag or not parts[1].isdigit() or parts[2] != scope.tag():
        raise InvalidRequest(param, f"invalid '{param}' value")
    return int(parts[1])


def read_tagged(token: str, scope: Scope) -> tuple[str, int] | None:
    """(tag, offset) of one of this query's opaque cursors, whatever its tag; None for any other token."""
    raw = _unb64(token)
    parts = raw.split(".") if raw is not None else []
    if len(parts) != 3 or not parts[1].isdigit() or parts[2] != scope.tag():
        return None
    return parts[0], int(parts[1])


def encode_replies(root: str, offset: int) -> str:
    """Comment replies carry their thread in the token itself: the root token plus the offset."""
    return _b64(f"rp.{offset}.{root}")


def decode_replies(token: str) -> tuple[str, int]:
    """(root token, offset). A token that is not one of ours is a root token (first call), at offset 0."""
    raw = _unb64(token)
    if raw is not None and raw.startswith("rp."):
        _, offset, root = raw.split(".", 2)
        if offset.isdigit() and root:
            return root, int(offset)
    return token, 0


def feed_cursor(scope: Scope, pos: int) -> str:
    """The microblog-b feed cursor after the record at `pos`: that record's `indexedAt`."""
    return iso(scope.time(pos))


def parse_feed_cursor(scope: Scope, value: str, param: str, floor: int = 0) -> int:
    """The position of the first record strictly older than the timestamp `value` (at least `floor`: newer
    items published since sit at negative positions)."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(param, f"'{param}' must be a timestamp") from None
    if moment.tzinfo is None:
        raise InvalidRequest(param, f"'{param}' must be a timestamp with a time zone")
    return _first_older(scope, moment.timestamp(), floor)


def ms_cursor(scope: Scope, pos: int) -> int:
    """The short-video `max_cursor` after the record at `pos`: its `create_time` in milliseconds."""
    return scope.time(pos) * 1000


def parse_ms_cursor(scope: Scope, value: str, floor: int = 0) -> int:
    """The position of the first record older than `value` ms; 0 means the first page."""
    ms = int(value)
    if ms == 0:
        return floor
    return _first_older(scope, ms / 1000.0, floor)


def _first_older(scope: Scope, moment: float, floor: int = 0) -> int:
    """Smallest pos >= floor with time(pos) < moment, where time(pos) = anchor - pos * step."""
    ahead = scope.anchor - moment
    return max(floor, int(ahead // scope.step) + 1)
