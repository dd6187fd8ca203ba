"""Words and names every platform's records are made of, and the small text makers they share."""

from __future__ import annotations

from sandbox.emulation.stablehash import Draw

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
