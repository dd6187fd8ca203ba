"""Typed columns of a record kind, and how a wire value becomes a column value.

A value that does not fit its column becomes null and is counted (see `connectors.reading.extraction`); the record's own
JSON is always kept in `raw`. Numbers sent as text convert where the text is unambiguous, computed exactly:
"42", "-7", "1,234" (thousands in groups of three), "1.2K"/"3.4m"/"1B" (K = 10^3, M = 10^6, B = 10^9, any case;
an integer column takes them only when the result is whole and within 64 bits). "1.000" (a decimal point or a
European thousands separator?), "1,23", "1e3", "nan", "twelve" and "yesterday" do not fit, and neither does a
number written in more than 100 characters (Python refuses to convert over 4300 digits; no count needs 100), nor
a timestamp in more than 64.

Money is `decimal`, DECIMAL(18, 4) (`DECIMAL`): an amount sent as text ("12.99", "1,234.50") or as a number is
kept exactly, never rounded; one with more than 4 decimal places or 14 whole digits does not fit.

A conversion never raises: whatever a value makes a converter do, the value is a misfit (`coercer`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from email.utils import parsedate_to_datetime
from typing import Any

import orjson
import pyarrow as pa

from harvest.connectors.catalog.record_paths import (
    HOLDER_PREFIX,
    MISSING,
    PARAM_PREFIX,
    alternatives,
    compile_path,
)


def request_params(path: str) -> tuple[str, ...]:
    """The request parameters a `$params.NAME` path reads, in order: `$params.handle|$params.user_id` holds the
    one the request gave (an endpoint asked by either). Empty for a path that reads the record."""
    names = alternatives(path)
    if not all(name.startswith(PARAM_PREFIX) for name in names):
        return ()
    return tuple(name[len(PARAM_PREFIX) :] for name in names)


def first_given(params: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    """The value of the first of `names` the request gave (None when it gave none)."""
    for name in names:
        if (value := params.get(name)) is not None:
            return value
    return None


TIMESTAMP = pa.timestamp("us", tz="UTC")
DECIMAL = pa.decimal128(18, 4)
"""Money: 14 whole digits and 4 decimal places (every currency's minor unit has at most 4), stored in 64 bits."""
STRINGS = pa.list_(pa.string())
JSON_TEXT = pa.string()
"""Nested values kept as JSON text: DuckDB's json functions read them, and Parquet stays portable."""


@dataclass(frozen=True)
class Field:
    name: str
    path: str
    type: pa.DataType
    json: bool = False
    description: str = field(default="", compare=False)
    """What the column holds, as its declaration says (`described` makes one up when it says nothing)."""
    renamed_from: tuple[str, ...] = field(default=(), compare=False)
    """The column's earlier names: an existing table's column of such a name is renamed to this one."""
    joins: tuple[str, ...] = field(default=(), compare=False)
    """`table.column` of other tables holding the same values: what an analyst joins it on."""
    template: str | None = field(default=None, compare=False)
    """How the service makes the value of the record's other values (`t3_{id}`)."""

    @property
    def request_params(self) -> tuple[str, ...]:
        """The request parameters the column holds (`$params.NAME`): the value each row was fetched for."""
        return request_params(self.path)

    @property
    def from_record(self) -> bool:
        """Whether the value is read from the record (not the request's parameter, nor the item holding it)."""
        return not self.path.startswith((PARAM_PREFIX, HOLDER_PREFIX))

    @property
    def described(self) -> str:
        """The declaration's description, or its type in words (the comment adds where it is read); a request
        value says so, since that is what it is for: joining a row to the record whose value fetched it."""
        if not self.description and (names := self.request_params):
            said = " or ".join(f"`{name}`" for name in names)
            return f"The request's {said}: the value this row was fetched for."
        return (
            self.description
            or f"{TYPE_WORDS.get(type_name(self), 'A value')}; declared without a description."
        )

    def arrow_field(self) -> pa.Field:
        """The column in an Arrow schema, its description and source path in the field's metadata: Parquet
        files carry them, and the load writes them as DuckDB column comments."""
        meta = {DESCRIPTION: self.described, SOURCE: self.path}
        if self.renamed_from:
            meta[RENAMED_FROM] = ",".join(self.renamed_from)
        if self.joins:
            meta[JOINS] = ",".join(self.joins)
        if self.template is not None:
            meta[TEMPLATE] = self.template
        return pa.field(self.name, self.type, metadata=meta)

    def reader(self, params: Mapping[str, Any]) -> Callable[[Any], Any]:
        """Reads this field from a record (None when absent), or from the request's parameters."""
        if names := self.request_params:
            value = first_given(params, names)
            return lambda record: value
        if self.path.startswith(HOLDER_PREFIX):
            return lambda record: (
                None
            )  # the holder is not in the record: `connectors.reading.extraction` reads it
        get = compile_path(self.path)

        def read(record: Any) -> Any:
            got = get(record)
            return None if got is MISSING else got

        return read


def text(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, pa.string())


def integer(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, pa.int64())


def number(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, pa.float64())


def boolean(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, pa.bool_())


def decimal(name: str, path: str | None = None) -> Field:
    """An exact amount (money), sent as text or as a number."""
    return Field(name, path or name, DECIMAL)


def timestamp(name: str, path: str | None = None) -> Field:
    """A timestamp sent as ISO-8601 text, epoch seconds or epoch milliseconds."""
    return Field(name, path or name, TIMESTAMP)


def json_text(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, JSON_TEXT, json=True)


def text_list(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, STRINGS)


COLUMN_TYPES: dict[str, Callable[[str, str | None], Field]] = {
    "text": text, "integer": integer, "number": number, "boolean": boolean, "timestamp": timestamp,
    "json": json_text, "text_list": text_list, "decimal": decimal,
}  # fmt: skip
"""A declaration's column types (`connectors.catalog.declarations`), each a column of its Arrow type."""
TYPE_WORDS = {
    "text": "Text", "integer": "A whole number", "number": "A number", "boolean": "True or false",
    "timestamp": "A point in time (UTC)", "json": "JSON text", "text_list": "A list of texts",
    "decimal": "An exact amount",
}  # fmt: skip
"""How a generated description names a column's type."""
DESCRIPTION, SOURCE, RENAMED_FROM = b"description", b"source", b"renamed_from"
JOINS, TEMPLATE = b"joins", b"template"
"""The columns of other tables it joins (`table.column`, comma-separated), and how its value is made."""
"""Keys of an Arrow field's metadata: what the column holds, where in a record it is read, and its earlier names
(comma-separated; only for a renamed column)."""


def type_name(fld: Field) -> str:
    """The declared type of a column: the name `COLUMN_TYPES` makes it from."""
    if fld.json:
        return "json"
    return next(
        name for name, make in COLUMN_TYPES.items() if name != "json" and make("x", None).type == fld.type
    )


# ---------------------------------------------------------------------------------------------- coercion
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_SUFFIXES = {"k": 10**3, "m": 10**6, "b": 10**9}
MAX_NUMBER_CHARS = 100
MAX_TIMESTAMP_CHARS = 64
_COUNT = re.compile(r"([+-]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?\s*([kmb])?", re.IGNORECASE | re.ASCII)


def _exact(text: str, allow_fraction: bool) -> tuple[int, int] | None:
    """(numerator, denominator) of a number written as text, computed exactly (4.1M is 4100000, not
    4099999.9999999995); None when the text is not one of the accepted forms."""
    if len(text) > MAX_NUMBER_CHARS:
        return None
    m = _COUNT.fullmatch(text.strip())
    if m is None:
        return None
    sign, whole, fraction, suffix = m.groups()
    fraction = fraction or ""
    if fraction and suffix is None and not allow_fraction:
        return None  # "1.000": a decimal point, or a European thousands separator? Refused, not guessed.
    numerator = int(whole.replace(",", "") + fraction) * (_SUFFIXES[suffix.lower()] if suffix else 1)
    return (-numerator if sign == "-" else numerator), 10 ** len(fraction)


def parse_count(text: str) -> int | None:
    """A whole count written as text (see the module docstring), within 64 bits; None otherwise."""
    exact = _exact(text, allow_fraction=False)
    if exact is None or exact[0] % exact[1]:
        return None
    value = exact[0] // exact[1]
    return value if INT64_MIN <= value <= INT64_MAX else None


def parse_number(text: str) -> float | None:
    """A finite number written as text: a plain decimal, or a count form that may have a decimal part."""
    exact = _exact(text, allow_fraction=True)
    if exact is None:
        return None
    value = exact[0] / exact[1]
    return value if math.isfinite(value) else None


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if INT64_MIN <= v <= INT64_MAX else None
    if isinstance(v, float):
        return _as_int(int(v)) if math.isfinite(v) and v.is_integer() else None
    if isinstance(v, str):
        return parse_count(v)
    return None


def _as_float(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        value = float(v)
        return value if math.isfinite(value) else None
    if isinstance(v, str):
        return parse_number(v)
    return None


def _as_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return bool(v)
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return None


_AMOUNT = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?", re.ASCII)
DECIMAL_PLACES = Decimal(1).scaleb(-DECIMAL.scale)
DECIMAL_LIMIT = Decimal(10) ** (DECIMAL.precision - DECIMAL.scale)


def _as_decimal(v: Any) -> Decimal | None:
    """An amount, exactly: text ("12.99", "-0.5", "1,234.50") or a number (a float by its shortest text, 14.96 as
    14.96). More decimal places than DECIMAL keeps, or too many whole digits: None, never rounded."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        text = str(v)
    elif isinstance(v, float):
        text = repr(v) if math.isfinite(v) else ""
    elif isinstance(v, str) and len(v) <= MAX_NUMBER_CHARS and _AMOUNT.fullmatch(v.strip()):
        text = v.strip().replace(",", "")
    else:
        return None
    try:
        amount = Decimal(text)
        exact = amount.quantize(DECIMAL_PLACES)
    except (InvalidOperation, ValueError):
        return None
    return exact if exact == amount and abs(exact) < DECIMAL_LIMIT else None


def _as_str(v: Any) -> str | None:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    if isinstance(v, dict | list):
        return orjson.dumps(v).decode()
    return None


def _as_timestamp(v: Any) -> datetime | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        seconds = v / 1000 if v > 10**11 else v  # milliseconds are sent by some sources
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(v, str):
        if len(v) > MAX_TIMESTAMP_CHARS:
            return None  # Python's ISO parser reads odd things ("1" * 5000 is a date in 1111)
        try:
            parsed = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            if v.isascii() and v.isdigit() and len(v) <= MAX_NUMBER_CHARS:  # not "²": a digit to isdigit()
                return _as_timestamp(int(v))
            try:  # the microblog-a style: "Wed Oct 10 20:19:24 +0000 2018"
                return datetime.strptime(v, "%a %b %d %H:%M:%S %z %Y")
            except ValueError:
                return _as_mail_date(v)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def _as_mail_date(v: str) -> datetime | None:
    """The e-mail style (RFC 2822) pin search sends: "Tue, 07 Jan 2025 18:23:09 +0000"; a zone of -0000 (unknown)
    is taken as UTC."""
    try:
        parsed = parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _as_strings(v: Any) -> list[str] | None:
    if isinstance(v, list):
        return [x if isinstance(x, str) else orjson.dumps(x).decode() for x in v]
    return None


def _as_json(v: Any) -> str | None:
    return None if v is None else orjson.dumps(v).decode()


def json_texts(values: list[Any], typ: pa.DataType) -> pa.Array | None:
    """A JSON column in one pass, as `_as_json` value by value would give it (two calls a value cost more than
    the dumping), or None when a value does not dump (an integer beyond 64 bits): the per-value conversion then
    counts it as a misfit."""
    dumps = orjson.dumps
    try:
        return pa.array([None if v is None else dumps(v).decode() for v in values], typ)
    except Exception:  # whichever value it was, the per-value path finds it and counts it
        return None


COERCE: dict[pa.DataType, Callable[[Any], Any]] = {
    pa.int64(): _as_int,
    pa.float64(): _as_float,
    pa.bool_(): _as_bool,
    pa.string(): _as_str,
    TIMESTAMP: _as_timestamp,
    STRINGS: _as_strings,
    DECIMAL: _as_decimal,
}


def coercer(fld: Field) -> Callable[[Any], Any]:
    """The field's converter: a value, or None when the value does not fit. A value that makes a converter
    raise (an input nobody foresaw) does not fit either: the service's data must never fail a query."""
    convert = _as_json if fld.json else COERCE[fld.type]

    def safe(value: Any) -> Any:
        try:
            return convert(value)
        except Exception:  # any failure to convert is a misfit, counted by the caller
            return None

    return safe
