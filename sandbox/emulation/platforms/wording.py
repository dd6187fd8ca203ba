"""Words and names every platform's records are made of, and the small text makers they share."""

from __future__ import annotations

import time

from harvest.sandbox.emulation.stablehash import Draw

WORDS = (
    "morning",
    "coffee",
    "launch",
    "review",
    "street",
    "garden",
    "travel",
    "recipe",
    "sunset",
    "update",
    "city",
    "build",
    "quick",
    "guide",
    "vintage",
    "studio",
    "market",
    "river",
    "weekend",
    "project",
    "music",
    "design",
    "honest",
    "daily",
    "budget",
    "summer",
    "winter",
    "light",
    "classic",
    "fresh",
    "local",
    "small",
    "big",
    "new",
)
NAMES = (
    "Alex",
    "Sam",
    "Jordan",
    "Taylor",
    "Morgan",
    "Casey",
    "Riley",
    "Jamie",
    "Avery",
    "Quinn",
    "Robin",
    "Kai",
)
TLDS = ("com", "io", "net", "shop", "co")


def phrase(d: Draw, lo: int, hi: int) -> str:
    return " ".join(d.pick(WORDS) for _ in range(d.num(lo, hi)))


def title(d: Draw, lo: int = 2, hi: int = 6) -> str:
    return phrase(d, lo, hi).capitalize()


def user_handle(d: Draw) -> str:
    return f"{d.pick(NAMES).lower()}_{d.pick(WORDS)}{d.num(1, 999)}"


def count_text(n: int, noun: str = "") -> str:
    """A count as a page shows it: "14,860,541 views" (with a noun), "750K" (without)."""
    if noun:
        return f"{n:,} {noun}"
    for size, suffix in ((10**9, "B"), (10**6, "M"), (10**3, "K")):
        if n >= size:
            return f"{n / size:.1f}".rstrip("0").rstrip(".") + suffix
    return str(n)


def clock(seconds: int) -> str:
    """A duration as a player shows it: "4:14", "1:02:03"."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


_AGO = (("year", 365 * 86400), ("month", 30 * 86400), ("week", 7 * 86400), ("day", 86400), ("hour", 3600),
        ("minute", 60), ("second", 1))  # fmt: skip


def ago(seconds: int) -> str:
    """An age as the video platform words it ("2 years ago", "1 hour ago"): its largest whole unit."""
    for unit, size in _AGO:
        if seconds >= size or unit == "second":
            n = max(seconds // size, 1)
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    raise AssertionError("unreachable")


def mail_date(epoch: int) -> str:
    """The e-mail style (RFC 2822) some platforms write dates in: "Tue, 07 Jan 2025 18:23:09 +0000"."""
    return time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(epoch))


def tweet_date(epoch: int) -> str:
    """The microblog-a style: "Thu Jul 03 20:46:54 +0000 2025"."""
    return time.strftime("%a %b %d %H:%M:%S +0000 %Y", time.gmtime(epoch))
