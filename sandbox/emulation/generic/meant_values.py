"""Values that read as what a declared column says it holds: rules over the column's name, type and description,
none per endpoint, so a declaration of any platform gets them.

A first look at the demo takes the catalog at its word: a `price_currency` described as an ISO 4217 code holds
"USD", a rating "out of 5" lies in [0, 5], a share of votes "(0.93)" in [0, 1], a language or a country code reads
as one, a value the description lists in backticks (`` (`video`, `image`) ``) is one of those, as is a number it
explains ("(2: live)", "1 when ..., else 0"), a depth in a thread "(0: a comment on the post itself)" counts the
items holding the record (a reply is one deeper than its comment), a count as the platform shows it reads "1.2M views", a time in words counts back from the sandbox's clock as the record's own
time does. A column no rule matches keeps its value of its type (`synthetic_values`).
"""

from __future__ import annotations

import re
import time
from functools import lru_cache
from typing import Any

from harvest.sandbox.emulation.generic.declared_form import DeclaredColumn
from harvest.sandbox.emulation.platforms.wording import NAMES, WORDS, ago, clock, count_text, user_handle
from harvest.sandbox.emulation.scope import Scope
from harvest.sandbox.emulation.stablehash import Draw

CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CAD", "AUD", "BRL", "INR")
LANGUAGES = ("en", "es", "de", "fr", "pt", "ja", "it", "ko")
COUNTRIES = (("US", "United States"), ("GB", "United Kingdom"), ("DE", "Germany"), ("FR", "France"),
             ("BR", "Brazil"), ("JP", "Japan"), ("IN", "India"), ("CA", "Canada"))  # fmt: skip

_LISTED = re.compile(r"\(`[^`]+`(?:,\s*`[^`]+`)*(?:,\s*\.\.\.)?\)|`[^`]+` or `[^`]+`")
"""A description listing the values: (`video`, `multi_photo`, ...) or `video` or `short`."""
_WORDED = re.compile(r"([a-z_]+(?:, [a-z_]+)* or [a-z_]+)\.")
"""A description that is the values alone: "photo, video or animated_gif."."""
_VALUE = re.compile(r"`([A-Za-z][A-Za-z0-9_ &-]*)`")
_EXAMPLE = re.compile(r"\(\"([^\"]+)\"\)")
"""The example value a description gives, in parentheses and quotes: ("15.96%")."""
_NUMBER_EXAMPLE = re.compile(r"\((-?\d+(?:\.\d+)?)\)")
_OUT_OF = re.compile(r"out of (\d+)")
_FROM_TO = re.compile(r"\((\d+) to (\d+)\)")
"""A range the description gives: (1 to 5)."""
_CODED = re.compile(r"(?:^|\()(\d+):")
"""A number the description explains, so one the column holds: (0: a comment on the post itself), (2: live)."""
_EITHER = re.compile(r"^(\d+) when [^,]*, else (\d+)\b")
"""A flag the description words: "1 when the votes on the comment are split, else 0"."""
_NUMBERED = re.compile(r"(?:^|\(|, )(\d+) (?:an? )?[a-z]+(?=[,.)])")
"""One of the numbers a description lists with their meanings: "1 a photo, 2 a video, 8 a carousel"."""
_DEPTH = re.compile(r"\b(?:deep|depth)\b")
_MONTH = re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2}, \d{4}")


class _Rule:
    """What a column means, read once per column: a kind and its arguments."""

    __slots__ = ("arg", "kind")

    def __init__(self, kind: str, arg: Any = None) -> None:
        self.kind, self.arg = kind, arg


@lru_cache(maxsize=4096)
def _rule(name: str, kind: str, description: str) -> _Rule | None:
    lowered, said = name.lower(), description.lower()
    example = m[1] if (m := _EXAMPLE.search(description)) else ""
    if kind in ("number", "integer", "decimal"):
        return _number_rule(lowered, kind, said, description)
    if kind == "text_list":
        return _Rule("urls") if said.startswith("urls ") else None
    if kind != "text":
        return None
    if "currency" in lowered or "iso 4217" in said:
        return _Rule("pick", CURRENCIES)
    if lowered in ("language", "lang", "locale") or lowered.endswith("_language") or "language code" in said:
        return _Rule("pick", LANGUAGES)
    if "two-letter code" in said or "country code" in said or lowered.endswith(("country_code", "region")):
        return _Rule("pick", tuple(code for code, _ in COUNTRIES))
    if lowered == "country" or lowered.endswith("_country"):
        return _Rule("pick", tuple(country for _, country in COUNTRIES))
    if "email" in lowered:
        return _Rule("email")
    if "phone" in lowered:
        return _Rule("phone")
    if lowered == "domain" or lowered.endswith("_domain"):
        return _Rule("domain")
    listed = _LISTED.search(description)
    values = tuple(dict.fromkeys(_VALUE.findall(listed[0]))) if listed is not None else ()
    if values:
        return _Rule("pick", values)
    worded = _WORDED.fullmatch(description)
    if worded is not None:
        return _Rule("pick", tuple(re.split(r", | or ", worded[1])))
    return _text_rule(lowered, said, example)


def _text_rule(lowered: str, said: str, example: str) -> _Rule | None:
    if lowered.endswith("_at_text") or example.endswith(" ago"):
        dated = _MONTH.search(example)
        if (
            dated is not None
        ):  # "Joined Aug 23, 2017": the record's time so written, after the example's words
            return _Rule("date", (example[: dated.start()], len(dated[1]) < len(dated[0].split()[0])))
        words = re.match(r"\D*", example)  # "Streamed 2 days ago": the words before the number
        return _Rule("ago", words[0] if words and example.endswith(" ago") else "")
    if lowered.endswith("count_text"):
        return _Rule("count_text", lowered.removesuffix("count_text").rstrip("_").split("_")[-1] + "s")
    if "duration" in lowered and lowered.endswith("_text"):
        return _Rule("hours" if " hr" in example else "clock")
    if "price" in lowered and lowered.endswith("_text"):
        return _Rule("price")
    if example.endswith("%"):
        return _Rule("percent_text")
    if (
        lowered.endswith(("handle", "username", "user_name", "screen_name", "unique_id"))
        or "user name" in said
    ):
        return _Rule("handle")
    if lowered.endswith(("full_name", "nickname", "display_name")) or "display name" in said:
        return _Rule("person")
    return None


def _number_rule(lowered: str, kind: str, said: str, description: str) -> _Rule | None:
    coded = [int(n) for n in _CODED.findall(description)]
    if coded and _DEPTH.search(said):  # the first level's number, one more each level down
        return _Rule("depth", coded[0])
    numbered = [int(n) for n in _NUMBERED.findall(description)]
    either = _EITHER.match(description)
    listed = (
        coded
        or (numbered if len(numbered) > 1 else [])
        or ([int(n) for n in either.groups()] if either else [])
    )
    if listed:
        return _Rule("pick", tuple(dict.fromkeys(listed)))
    if (between := _FROM_TO.search(said)) is not None:
        return _Rule("range", (int(between[1]), int(between[2])))
    scale = _OUT_OF.search(said)
    if scale is not None:
        return _Rule("scale", int(scale[1]))
    if lowered in ("rating", "stars") or lowered.endswith(("_rating", "_stars")):
        return _Rule("scale", 5)
    if "percent" in said or lowered.endswith(("_percent", "_pct", "percentage")):
        return _Rule("scale", 100)
    shown = _NUMBER_EXAMPLE.search(description)
    if kind != "integer" and shown is not None and 0 <= float(shown[1]) <= 1:
        return _Rule("scale", 1)
    if lowered == "latitude" or lowered.endswith("_latitude"):
        return _Rule("span", 90)
    if lowered == "longitude" or lowered.endswith("_longitude"):
        return _Rule("span", 180)
    if "in years" in said:
        return _Rule("range", (35, 65) if lowered.endswith("_high") else (18, 34))
    if "in pixels" in said:
        return _Rule("pick", (360, 480, 720, 1080, 1920))
    if "duration" in lowered or "length" in said:
        if "millisecond" in said or lowered.endswith("_ms"):
            return _Rule("range", (5_000, 600_000))
        if "second" in said or lowered.endswith(("_seconds", "_secs")):
            return _Rule("range", (5, 3_600))
    return None


def meant(column: DeclaredColumn, d: Draw, s: Scope, at: int, level: int = 0) -> tuple[bool, Any]:
    """(True, a value reading as what the column holds), or (False, None) when no rule knows the column.
    `at`: the record's own time (a time in words says it); `level`: how many items of its kind hold the record
    (a reply's depth in its thread says it)."""
    rule = _rule(column.name, column.type, column.description)
    if rule is None:
        return False, None
    if rule.kind == "depth":
        return True, rule.arg + level
    made = _make(rule, d, s, at)
    if column.type == "integer" and isinstance(made, float):
        made = round(made)
    elif column.type == "decimal" and isinstance(made, int | float):
        made = f"{made:.2f}"
    return True, made


def listed_key(column: DeclaredColumn, pos: int, number: int = 0) -> str | None:
    """A key column's value when the column holds one of a list of values (a country code beside the account
    it counts): the list's `pos`-th, unique within the first records (None past them, or for any other); a
    domain's (a website an advertiser search found) reads as one, unique by `number`, the key's draw."""
    rule = _rule(column.name, column.type, column.description)
    if rule is not None and rule.kind == "domain" and column.type == "text":
        return f"{WORDS[number % len(WORDS)]}-{number // len(WORDS) % 10**6}.example"
    if rule is None or rule.kind != "pick" or column.type != "text" or pos >= len(rule.arg):
        return None
    return str(rule.arg[pos])


def _make(rule: _Rule, d: Draw, s: Scope, at: int) -> Any:
    kind, arg = rule.kind, rule.arg
    if kind == "pick":
        return d.pick(arg)
    if kind == "scale":
        return round(arg * (0.3 + 0.7 * d.unit()), 2 if arg == 1 else 1)
    if kind == "span":
        return round(arg * (2 * d.unit() - 1), 6)
    if kind == "range":
        return d.num(*arg)
    if kind == "urls":
        return [f"https://img.{d.pick(WORDS)}.example/{d.num(10**6, 10**7)}.jpg" for _ in range(d.num(1, 3))]
    if kind == "email":
        return f"{d.pick(NAMES).lower()}@{d.pick(WORDS)}.example"
    if kind == "phone":
        return f"+1 555 01{d.num(0, 99):02d} {d.num(0, 9999):04d}"
    if kind == "domain":
        return f"{d.pick(WORDS)}{d.pick(WORDS)}.example"
    if kind == "ago":
        return arg + ago(s.age(at))
    if kind == "date":
        prefix, full = arg
        shown = time.strftime("%B" if full else "%b", time.gmtime(at)) + f" {time.gmtime(at).tm_mday}, "
        return f"{prefix}{shown}{time.gmtime(at).tm_year}"
    if kind == "count_text":
        return count_text(d.num(0, 5_000_000)) + f" {arg}"
    if kind == "clock":
        return clock(d.num(30, 7200))
    if kind == "hours":
        return f"{d.num(1, 6)} hr"
    if kind == "price":
        return f"${d.num(1, 500)}"
    if kind == "percent_text":
        return f"{d.num(0, 10_000) / 100:.2f}%"
    if kind == "handle":
        return user_handle(d)
    return f"{d.pick(NAMES)} {d.pick(NAMES)}"  # person
