"""Record kinds: where a page's records live, how they are keyed, and their typed columns.

A page is decoded once and turned straight into one Arrow table per record kind with an explicit schema, so no
long-lived Python objects pile up (CPython's cyclic GC dominates decode time when they do) and every Parquet
file of a table has the same schema. Values that do not fit their column's type become null; the record's own
JSON stays in `raw`, so nothing the service sent is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa

from connectors.dig import MISSING, compile_path, first

PARAM_PREFIX = "$params."
"""A field path starting with this reads the request's parameter instead of the record (e.g. the embed's handle)."""

META_COLUMNS: tuple[pa.Field, ...] = (
    pa.field("raw", pa.string()),
    pa.field("_endpoint", pa.string()),
    pa.field("_query_id", pa.string()),
    pa.field("_run_id", pa.string()),
    pa.field("_fetched_at", pa.timestamp("us", tz="UTC")),
)

JSON = pa.string()
"""Nested values kept as JSON text: DuckDB's json functions read them, and Parquet stays portable."""
TIMESTAMP = pa.timestamp("us", tz="UTC")
STRINGS = pa.list_(pa.string())


@dataclass(frozen=True)
class Field:
    name: str
    path: str
    type: pa.DataType
    json: bool = False

    def reader(self, params: Mapping[str, Any]) -> Callable[[Any], Any]:
        """Reads this field from a record (None when absent), or from the request's parameters."""
        if self.path.startswith(PARAM_PREFIX):
            value = params.get(self.path[len(PARAM_PREFIX) :])
            return lambda record: value
        get = compile_path(self.path)

        def read(record: Any) -> Any:
            got = get(record)
            return None if got is MISSING else got

        return read


def s(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, pa.string())


def i(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, pa.int64())


def f(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, pa.float64())


def b(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, pa.bool_())


def ts(name: str, path: str | None = None) -> Field:
    """A timestamp sent as ISO-8601 text or as epoch seconds."""
    return Field(name, path or name, TIMESTAMP)


def j(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, JSON, json=True)


def ls(name: str, path: str | None = None) -> Field:
    return Field(name, path or name, STRINGS)


@dataclass(frozen=True)
class RecordKind:
    """One kind of record, landing in one table.

    `locations` are tried in order; the first that resolves holds the records (a list, or one object). Several
    endpoints may share a kind (the microblog-b single post and the user feed both yield posts): one table.
    """

    table: str
    locations: tuple[str, ...]
    primary_key: tuple[str, ...]
    fields: tuple[Field, ...]
    schema: pa.Schema = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        names = [fld.name for fld in self.fields]
        missing = [k for k in self.primary_key if k not in names]
        if missing or len(set(names)) != len(names):
            raise ValueError(
                f"{self.table}: primary key {missing} not among fields, or duplicate field names"
            )
        schema = pa.schema([pa.field(fld.name, fld.type) for fld in self.fields] + list(META_COLUMNS))
        object.__setattr__(self, "schema", schema)

    def field(self, name: str) -> Field | None:
        return next((fld for fld in self.fields if fld.name == name), None)

    def extract(self, body: Any) -> list[Any]:
        """The records of this kind in one page body (empty when the page has none)."""
        found = first(body, self.locations)
        if found is MISSING or found is None:
            return []
        if isinstance(found, list):
            return [r for r in found if r is not None]
        return [found]


@dataclass(frozen=True)
class PageMeta:
    endpoint: str
    query_id: str
    run_id: str
    fetched_at: datetime


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip().replace(",", ""))
        except ValueError:
            return None
    return None


def _as_float(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _as_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return bool(v)
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return None


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
        return datetime.fromtimestamp(seconds, UTC)
    if isinstance(v, str):
        try:
            parsed = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            if v.isdigit():
                return _as_timestamp(int(v))
            try:  # the microblog-a style: "Wed Oct 10 20:19:24 +0000 2018"
                return datetime.strptime(v, "%a %b %d %H:%M:%S %z %Y")
            except ValueError:
                return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def _as_strings(v: Any) -> list[str] | None:
    if isinstance(v, list):
        return [x if isinstance(x, str) else orjson.dumps(x).decode() for x in v]
    return None


def _as_json(v: Any) -> str | None:
    return None if v is None else orjson.dumps(v).decode()


_COERCE = {
    pa.int64(): _as_int,
    pa.float64(): _as_float,
    pa.bool_(): _as_bool,
    pa.string(): _as_str,
    TIMESTAMP: _as_timestamp,
    STRINGS: _as_strings,
}


def to_arrow(kind: RecordKind, records: Iterable[Any], params: Mapping[str, Any], meta: PageMeta) -> pa.Table:
    """One page's records of one kind as an Arrow table with the kind's exact schema."""
    rows = list(records)
    columns: list[pa.Array] = []
    for fld in kind.fields:
        coerce = _as_json if fld.json else _COERCE[fld.type]
        read = fld.reader(params)
        values = [None if (got := read(row)) is None else coerce(got) for row in rows]
        columns.append(pa.array(values, type=fld.type))
    n = len(rows)
    columns.append(pa.array([orjson.dumps(r).decode() for r in rows], type=pa.string()))
    columns.append(pa.array([meta.endpoint] * n, type=pa.string()))
    columns.append(pa.array([meta.query_id] * n, type=pa.string()))
    columns.append(pa.array([meta.run_id] * n, type=pa.string()))
    columns.append(pa.array([meta.fetched_at] * n, type=TIMESTAMP))
    return pa.Table.from_arrays(columns, schema=kind.schema)


def keys_of(kind: RecordKind, records: Iterable[Any], params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Primary-key tuples of records."""
    readers = [fld.reader(params) for name in kind.primary_key if (fld := kind.field(name)) is not None]
    return [tuple(read(row) for read in readers) for row in records]
