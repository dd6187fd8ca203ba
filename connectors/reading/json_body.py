"""Reading an answer's bytes as JSON: orjson first, and what it refuses read the way services really send it.

orjson reads strict JSON (RFC 8259) in microseconds and reads nearly every answer. Real services also send what a
strict parser refuses although every record is fine: text cut in the middle of an emoji (a lone `\\ud83d` escape,
as platforms truncate), `NaN` or `-nan` for a number, bytes that are not UTF-8, a byte order mark, raw control
characters inside strings, a trailing comma, NUL padding after the document. Refusing such a page would lose its
records and, retried, pay for it again. So a body orjson refuses is read again by Python's own parser, which is
told how to take each of these, and every repair is counted by kind: the run reports them (`values_repaired`),
and the raw store keeps the bytes exactly as they came.

What a repaired value becomes (docs/decisions.md, "Reading answers"):
- a lone UTF-16 surrogate, and each byte that is not UTF-8: U+FFFD, the replacement character, as browsers do;
- `NaN`, `Infinity`, `-nan`, `inf` (any case) and numbers beyond a double's range: null (JSON has no such number);
- raw control characters inside strings: kept, as the characters they are;
- a byte order mark, an XSSI guard (`)]}'`), a trailing comma, NUL bytes after the document: dropped.
Integers beyond 64 bits become floats, as orjson reads them (not a repair: both parsers agree).

What is not repaired: a body that ends early (`Body.ends_early`: maybe cut on the wire, worth one more try), and
anything else a parser cannot read (`Body.problem`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from harvest.connectors.reading.large_body import LARGE_BODY_BYTES, split

JSON = dict[str, Any] | list[Any]

LONE_SURROGATE = "lone_surrogate"
NOT_UTF8 = "not_utf8"
NON_FINITE = "non_finite"
CONTROL = "control_character"
BOM = "byte_order_mark"
XSSI = "xssi_prefix"
TRAILING_COMMA = "trailing_comma"
TRAILING_NUL = "trailing_nul"
REPAIRS: dict[str, tuple[str, str]] = {
    LONE_SURROGATE: ("lone surrogate as U+FFFD", "lone surrogates as U+FFFD"),
    NOT_UTF8: ("byte not UTF-8 as U+FFFD", "bytes not UTF-8 as U+FFFD"),
    NON_FINITE: ("NaN or infinite number as null", "NaN or infinite numbers as null"),
    CONTROL: ("raw control character in a string", "raw control characters in strings"),
    BOM: ("byte order mark dropped", "byte order marks dropped"),
    XSSI: ("XSSI prefix dropped", "XSSI prefixes dropped"),
    TRAILING_COMMA: ("trailing comma dropped", "trailing commas dropped"),
    TRAILING_NUL: ("NUL padding after the document dropped", "NUL paddings after the document dropped"),
}
"""Each kind of repair, as a report names it (singular, plural)."""

MAX_POSITIONAL_REPAIRS = 200
"""Repairs found one parse error at a time (`-nan`, trailing commas) re-read the text from the start each; past
this many the body counts as unreadable instead of costing minutes."""

_BOM = b"\xef\xbb\xbf"
_XSSI = re.compile(rb"\s*\)\]\}'[^\n]*\n")
_NON_FINITE_TOKEN = re.compile(r"[-+]?(?:nan|inf(?:inity)?)(?![\w.])", re.IGNORECASE)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_CONTROL = re.compile(r"[\x00-\x1f]")
_LONE_TOKEN = re.compile(r"[-+.\w]*")
_INT64 = (-(2**63), 2**64 - 1)
"""What orjson reads as an integer; beyond it, a float."""


@dataclass(frozen=True)
class Body:
    """An answer's body as read: the JSON object or array, or why there is none."""

    value: JSON | None
    repairs: dict[str, int] = field(default_factory=dict)
    """Kind of repair -> how many: what the tolerant reading changed to read the body."""
    problem: str | None = None
    """Why `value` is None: what no reading could take."""
    ends_early: bool = False
    """The body stops in the middle of the document: it may have been cut on the wire."""


def read_body(raw: bytes) -> Body:
    """The body of an answer as JSON, repaired where services are known to break it (see the module). A large
    answer's records stay JSON text until they are read (`connectors.reading.large_body`)."""
    if len(raw) >= LARGE_BODY_BYTES and (skeleton := split(raw)) is not None:
        return Body(skeleton)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _tolerant(raw)
    if isinstance(value, dict | list):
        return Body(value)
    return Body(None, problem=f"a JSON {type(value).__name__}, not an object or array")


class _Reader:
    """One tolerant reading: Python's parser with hooks that repair values and count each repair.

    `found` counts what the hooks repaired in the last pass only (a positional repair reads the text again);
    `fixed` what was repaired in the text itself, once."""

    def __init__(self) -> None:
        self.fixed: Counter[str] = Counter()
        self.found: Counter[str] = Counter()
        self.strict = True

    @property
    def repairs(self) -> dict[str, int]:
        return dict(self.fixed + self.found)

    def decode(self, text: str) -> Any:
        """One document, and nothing after it but whitespace."""
        self.found = Counter()
        decoder = json.JSONDecoder(
            strict=self.strict,
            parse_constant=self._constant,
            parse_float=self._float,
            parse_int=self._int,
        )
        start = len(text) - len(text.lstrip())
        value, end = decoder.raw_decode(text, start)
        if text[end:].strip():
            raise json.JSONDecodeError("more than one JSON document, or text after the document", text, end)
        return value

    def _constant(self, _name: str) -> None:
        self.found[NON_FINITE] += 1

    def _float(self, text: str) -> float | None:
        value = float(text)
        if value in (float("inf"), float("-inf")):
            self.found[NON_FINITE] += 1
            return None
        return value

    def _int(self, text: str) -> int | float | None:
        try:
            value = int(text)
        except ValueError:  # more digits than Python converts: far beyond a double too
            return self._float(text)
        if _INT64[0] <= value <= _INT64[1]:
            return value
        return self._float(text)


def _tolerant(raw: bytes) -> Body:
    reader = _Reader()
    text = _text(raw, reader.fixed)
    for _ in range(MAX_POSITIONAL_REPAIRS + 1):
        try:
            value = reader.decode(text)
        except json.JSONDecodeError as exc:
            if exc.msg.startswith("Invalid control character") and reader.strict:
                reader.strict = False
                reader.fixed[CONTROL] += _controls_in_strings(text)
                continue
            repaired = _positional_repair(text, exc)
            if repaired is None:
                return _unreadable(text, exc, reader.repairs)
            text, kind = repaired
            reader.fixed[kind] += 1
            continue
        except RecursionError:
            return Body(None, reader.repairs, "nested deeper than a parser can follow")
        if not isinstance(value, dict | list):
            return Body(None, reader.repairs, f"a JSON {type(value).__name__}, not an object or array")
        if _SURROGATE_ESCAPE.search(text):
            value = _without_lone_surrogates(value, reader.fixed)
        return Body(value, reader.repairs)
    return Body(None, reader.repairs, f"more than {MAX_POSITIONAL_REPAIRS} repairs needed")


def _text(raw: bytes, repairs: Counter[str]) -> str:
    """The body as text: without a byte order mark or an XSSI guard, bytes that are not UTF-8 as U+FFFD."""
    if raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
        repairs[BOM] += 1
    guard = _XSSI.match(raw)
    if guard is not None:
        raw = raw[guard.end() :]
        repairs[XSSI] += 1
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
        repairs[NOT_UTF8] += text.count("\ufffd") - raw.count("\ufffd".encode())
    stripped = text.rstrip(" \t\r\n\x00")
    if "\x00" in text[len(stripped) :]:
        repairs[TRAILING_NUL] += 1
        return stripped
    return text


def _controls_in_strings(text: str) -> int:
    """Raw control characters inside strings (a strict parser refuses them; they are kept as they are)."""
    return sum(len(_CONTROL.findall(match.group())) for match in _STRING.finditer(text))


def _positional_repair(text: str, exc: json.JSONDecodeError) -> tuple[str, str] | None:
    """The text with the one flaw at the error's position repaired, and its kind; None when it is no known flaw."""
    pos = exc.pos
    token = _NON_FINITE_TOKEN.match(text, pos)
    if token is not None and exc.msg == "Expecting value" and text[token.end() :].strip():
        return text[:pos] + "null" + text[token.end() :], NON_FINITE
    if pos < len(text) and text[pos] in "]}":
        before = text[:pos].rstrip()
        if before.endswith(","):
            return before[:-1] + text[pos:], TRAILING_COMMA
    return None


def _unreadable(text: str, exc: json.JSONDecodeError, repairs: dict[str, int]) -> Body:
    rest = text[exc.pos :].strip()
    ends_early = exc.msg.startswith("Unterminated string") or bool(_LONE_TOKEN.fullmatch(rest))
    msg = exc.msg[:1].lower() + exc.msg[1:]
    where = f"{msg}{'' if msg.endswith(' at') else ' at'} character {exc.pos:,} of {len(text):,}"
    problem = f"the body ends early ({where})" if ends_early else f"not JSON ({where})"
    return Body(None, repairs, problem, ends_early)


def _without_lone_surrogates(value: Any, repairs: Counter[str]) -> Any:
    """`value` with every lone surrogate (in keys and strings) replaced by U+FFFD; paired ones were joined by the
    parser already. Iterative: the body may nest as deep as the parser allowed."""

    def fixed(text: str) -> str:
        found = len(_SURROGATE.findall(text))
        if not found:
            return text
        repairs[LONE_SURROGATE] += found
        return _SURROGATE.sub("\ufffd", text)

    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        holder, key = stack.pop()
        item = holder[key]
        if isinstance(item, str):
            holder[key] = fixed(item)
        elif isinstance(item, list):
            stack.extend((item, i) for i in range(len(item)))
        elif isinstance(item, dict):
            if any(_SURROGATE.search(k) for k in item):
                item = {fixed(k): v for k, v in item.items()}
                holder[key] = item
            stack.extend((item, k) for k in item)
    return root[0]


def describe_repairs(repairs: dict[str, int]) -> str:
    """`1 lone surrogate as U+FFFD, 2 NaN or infinite numbers as null` for a message."""
    parts = []
    for kind, count in sorted(repairs.items()):
        one, many = REPAIRS.get(kind, (kind, kind))
        parts.append(f"{count:,} {one if count == 1 else many}")
    return ", ".join(parts)
