"""How harvest words a count for a person, in every layer: the ledger's warnings, a query's notes, the run's
lines and the command line's answers read `1 page`, `3 pages`, `2 queries` alike."""

from __future__ import annotations

__all__ = ["a", "counted"]


def counted(number: int, noun: str) -> str:
    """`1 page`, `3 pages`, `2 queries`: a line a person reads says one page, not one pages."""
    if number == 1:
        return f"{number} {noun}"
    consonant_y = noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u")
    return f"{number} {noun[:-1]}ies" if consonant_y else f"{number} {noun}s"


def a(noun: str) -> str:
    """`a string`, `an integer`: the article a person reads before a type's name (by its first letter, which holds
    for the names harvest words so)."""
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"
