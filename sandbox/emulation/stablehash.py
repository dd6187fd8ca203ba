"""Stable hashing: every synthetic value and every fault decision of the sandbox comes from here.

Python's built-in `hash()` is salted per process, so it cannot make "same request -> same answer" hold across
runs; blake2b over the parts' text does, and it is fast enough to call once per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b
from typing import TypeVar

T = TypeVar("T")

_SEP = "\x1f"
_DIGEST = 64


def _key(parts: tuple[object, ...]) -> bytes:
    return _SEP.join(str(p) for p in parts).encode()


def hnum(*parts: object) -> int:
    """A 64-bit unsigned integer that depends only on the parts' text."""
    return int.from_bytes(blake2b(_key(parts), digest_size=8).digest(), "little")


def unit(*parts: object) -> float:
    """A float in [0, 1) that depends only on the parts' text."""
    return hnum(*parts) / 2.0**64


def span(lo: int, hi: int, *parts: object) -> int:
    """An int in [lo, hi] (inclusive) that depends only on the parts' text."""
    if hi <= lo:
        return lo
    return lo + hnum(*parts) % (hi - lo + 1)


def hexid(n: int, *parts: object) -> str:
    """`n` lowercase hex characters that depend only on the parts' text (n <= 128)."""
    return blake2b(_key(parts), digest_size=(n + 1) // 2).hexdigest()[:n]


class Draw:
    """A deterministic stream of small random choices for one record.

    One blake2b digest gives sixteen 32-bit draws; longer records re-hash the buffer. Cheaper than building a
    `random.Random` per record, which matters when a benchmark pages 200,000 records through the sandbox.
    """

    __slots__ = ("_buf", "_i")

    def __init__(self, *parts: object) -> None:
        self._buf = blake2b(_key(parts), digest_size=_DIGEST).digest()
        self._i = 0

    def u32(self) -> int:
        if self._i + 4 > _DIGEST:
            self._buf = blake2b(self._buf, digest_size=_DIGEST).digest()
            self._i = 0
        value = int.from_bytes(self._buf[self._i : self._i + 4], "little")
        self._i += 4
        return value

    def num(self, lo: int, hi: int) -> int:
        """An int in [lo, hi], inclusive."""
        if hi <= lo:
            return lo
        return lo + self.u32() % (hi - lo + 1)

    def pick(self, seq: Sequence[T]) -> T:
        return seq[self.u32() % len(seq)]

    def sample(self, seq: Sequence[T], k: int) -> list[T]:
        """`k` distinct items of `seq`, in `seq`'s order (so that tag lists read stably)."""
        k = max(0, min(k, len(seq)))
        chosen: set[int] = set()
        while len(chosen) < k:
            chosen.add(self.u32() % len(seq))
        return [seq[i] for i in sorted(chosen)]

    def chance(self, p: float) -> bool:
        return self.u32() < p * 4294967296.0

    def unit(self) -> float:
        return self.u32() / 4294967296.0

    def token(self, n: int, alphabet: str) -> str:
        return "".join(alphabet[self.u32() % len(alphabet)] for _ in range(n))
