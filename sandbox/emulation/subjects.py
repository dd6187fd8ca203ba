"""What a request names (an account by its handle, a subreddit by its name, a page by its URL), and the one id it
has on every endpoint of its platform.

The service gives a thing one id: the profile asked for by a handle and every video that handle's listing holds
name the same account. The sandbox derives that id from the seed, the platform and the value the request named
it by, never from the query, so endpoints agree on it without knowing each other: a declared profile's key,
the coded profile videos' `author.uid`, the microblog-b feed's author `did`, and a declared column that `joins`
the profile (`generic.joined_values`) all hold it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from harvest.sandbox.emulation.scope import Scope, b64int
from harvest.sandbox.emulation.stablehash import hexid, hnum

_DIGITS = 19
"""Ids of accounts, channels and rooms are numbers of 19 digits, as most platforms' are."""
_CHANNEL_IDS = {"www.video-platform.example": "UC"}
"""Platforms whose accounts' ids are a prefix and 22 URL-safe characters (a channel's `UCxcTeAKWJca6XyJ37_ZoKIQ`,
as the published samples' `channelId` is), not digits."""


@lru_cache(maxsize=256)
def platform_host(path: str) -> str:
    """The platform of a documented path (`/v1/video-platform/video` -> www.video-platform.example)."""
    parts = [p for p in path.split("/") if p and not re.fullmatch(r"v\d+", p)]
    return f"www.{parts[0] if parts else 'service'}.example"


def subject_id(s: Scope, value: str, *, did: bool = False) -> str:
    """The id of what `value` names on the platform of `s`'s path: 19 digits (a video-platform channel's `UC` and
    22 characters), or a DID where the id is one."""
    if did:
        return subject_did(s, value)
    host = platform_host(s.path)
    if (prefix := _CHANNEL_IDS.get(host)) is not None:
        return prefix + b64int(int(hexid(33, s.seed, host, "subject", value), 16), 22)
    low = 10 ** (_DIGITS - 1)
    return str(low + hnum(s.seed, host, "subject", value) % (9 * low))


_B32 = "abcdefghijklmnopqrstuvwxyz234567"
_DID = "did:plc:"
_DID_BYTES = 15
"""A DID's 24 base-32 characters hold 15 bytes."""
_HANDLE = re.compile(r"[a-z0-9][a-z0-9.-]*")


def _did_mask(s: Scope) -> int:
    return hnum(s.seed, platform_host(s.path), "did") << 56 | hnum(s.seed, "did mask") >> 8


def subject_did(s: Scope, handle: str) -> str:
    """A microblog-b account's DID (`did:plc:` and 24 base-32 characters): for a handle of at most 14 bytes it
    holds the handle, masked, so that a post's AT URI (`at://<did>/...`) says whose it is, as the service's
    directory does (`did_handle`); a longer one's is a digest of it."""
    raw = handle.encode()
    if len(raw) < _DID_BYTES and _HANDLE.fullmatch(handle):
        pad = bytes.fromhex(hexid(2 * _DID_BYTES, s.seed, "did pad", handle))
        n = int.from_bytes((bytes([len(raw)]) + raw + pad)[:_DID_BYTES], "big") ^ _did_mask(s)
    else:
        n = int(hexid(30, s.seed, platform_host(s.path), "did", handle), 16) | 1 << 119
    return _DID + "".join(_B32[n >> (5 * k) & 31] for k in reversed(range(24)))


def did_handle(s: Scope, did: str) -> str | None:
    """The handle a DID of `subject_did` holds (None: a digest's, or a DID it did not make)."""
    body = did.removeprefix(_DID)
    if not did.startswith(_DID) or len(body) != 24 or any(c not in _B32 for c in body):
        return None
    n = 0
    for c in body:
        n = n << 5 | _B32.index(c)
    raw = (n ^ _did_mask(s)).to_bytes(_DID_BYTES, "big")
    try:
        handle = raw[1 : 1 + raw[0]].decode() if raw[0] < _DID_BYTES else ""
    except UnicodeDecodeError:
        return None
    return handle if _HANDLE.fullmatch(handle) and subject_did(s, handle) == did else None


def subject_secret(s: Scope, value: str, n: int) -> str:
    """`n` hex digits bound to what `value` names (a secure id's body): the same on every endpoint."""
    return hexid(n, s.seed, platform_host(s.path), "secret", value)
