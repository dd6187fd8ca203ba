"""A large answer read a slice of its records at a time: never the whole document as Python objects at once.

A page's records as Python objects take ~3.5x their JSON, and a parser that builds its own tree first (orjson's)
holds that beside them: read whole, a 100 MB answer peaked at ~7x its size. An answer of at least
`LARGE_BODY_BYTES` that is a JSON object whose largest value, at a path of object keys, is a list holding most
of its bytes (the records) is read as its *skeleton*: every other value decoded as usual, that list kept as
`Spans`, the JSON text of each item as a view into the answer's bytes (msgspec's `Raw`: no copy). The records
are then decoded `SLICE_BYTES` of JSON at a time by the reading every answer gets (`connectors.reading.json_body`:
orjson, and the tolerant reading for a slice orjson refuses, its repairs counted), converted and let go.

msgspec (a maintained, C-implemented JSON library) finds the items' boundaries without building objects; a
hand-written scanner would have to get strings, escapes and nesting right itself. An answer msgspec refuses
(one that needs a repair outside the list) is read whole, as any other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import msgspec
import orjson
import pyarrow as pa

from harvest.connectors.reading.arrow_memory import system_allocator

if TYPE_CHECKING:
    from harvest.connectors.catalog.records import Located, RecordKind
    from harvest.connectors.reading.extraction_report import ExtractionReport

LARGE_BODY_BYTES = 8 * 2**20
"""From this size on an answer's records are read a slice at a time; smaller ones are read whole (faster)."""
SLICE_BYTES = 512 * 2**10
"""The JSON decoded at a time (whole items, at least one), whatever the records' size: its objects are ~2 MB, and
orjson's own tree while it reads them up to ~15x the JSON for records of many small values (4 MB here)."""

_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_LIST = msgspec.json.Decoder(list[msgspec.Raw])


@dataclass(eq=False)
class Spans:
    """The one large list of an answer, each item still its JSON text in the answer's bytes."""

    path: tuple[str, ...]
    """The object keys that lead to the list from the top of the answer."""
    items: list[msgspec.Raw]

    def __len__(self) -> int:
        return len(self.items)

    def slices(self, repairs: dict[str, int]) -> Iterator[list[Any]]:
        """The items decoded `SLICE_BYTES` of JSON at a time (a null item stays None, as in a whole reading);
        what reading them repaired is added to `repairs`. Raises ValueError for a slice no reading takes."""
        start, size = 0, 0
        for end, item in enumerate(self.items, 1):
            size += len(item)
            if size >= SLICE_BYTES or end == len(self.items):
                yield self._decoded(self.items[start:end], repairs)
                start, size = end, 0

    @staticmethod
    def _decoded(items: list[msgspec.Raw], repairs: dict[str, int]) -> list[Any]:
        from harvest.connectors.reading.json_body import read_body

        read = read_body(b"[" + b",".join(items) + b"]")
        if not isinstance(read.value, list):
            raise ValueError(read.problem or "a slice of the answer's records could not be read")
        for kind, count in read.repairs.items():
            repairs[kind] = repairs.get(kind, 0) + count
        return read.value

    def whole(self, repairs: dict[str, int]) -> list[Any]:
        """Every item decoded (for a page whose records cannot be read a slice at a time)."""
        return [item for part in self.slices(repairs) for item in part]


def split(raw: bytes) -> dict[str, Any] | None:
    """The answer's skeleton, its one large list as `Spans`; None when it has no such list or when the strict
    readers refuse it (it is then read whole, with its repairs)."""
    try:
        level = _OBJECT.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    path: list[str] = []
    levels: list[dict[str, msgspec.Raw]] = []
    while True:
        key, value = max(level.items(), key=lambda kv: len(kv[1]), default=("", msgspec.Raw(b"")))
        if len(value) * 2 < len(raw):
            return None
        opening = bytes(memoryview(value)[:1])
        if opening not in (b"[", b"{"):
            return None
        levels.append(level)
        path.append(key)
        if opening == b"[":
            spans = Spans(tuple(path), _LIST.decode(value))
            break
        level = _OBJECT.decode(value)
    try:
        return _skeleton(levels, path, spans)
    except orjson.JSONDecodeError:  # a value outside the list needs a repair: read the answer whole
        return None


def _skeleton(levels: list[dict[str, msgspec.Raw]], path: list[str], spans: Spans) -> dict[str, Any]:
    inner: Any = spans
    for level, key in zip(reversed(levels), reversed(path), strict=True):
        inner = {k: inner if k == key else orjson.loads(bytes(v)) for k, v in level.items()}
    assert isinstance(inner, dict)
    return inner


def spans_in(body: Any) -> Spans | None:
    """The `Spans` an answer's skeleton holds, if it is one (at any depth, beside other objects)."""
    if isinstance(body, Spans):
        return body
    if isinstance(body, dict):
        for value in body.values():
            if (found := spans_in(value)) is not None:
                return found
    return None


def with_items(body: Mapping[str, Any], path: Sequence[str], items: list[Any]) -> dict[str, Any]:
    """The skeleton with `items` in place of its `Spans` (copied along the path: the skeleton is shared)."""
    out = dict(body)
    if len(path) == 1:
        out[path[0]] = items
    else:
        out[path[0]] = with_items(body[path[0]], path[1:], items)
    return out


def whole(body: Any) -> Any:
    """An answer with its `Spans` decoded in place: what a whole reading gives (repairs aside)."""
    spans = spans_in(body)
    return body if spans is None else with_items(body, spans.path, spans.whole({}))


class SpanRecords(Sequence[Any]):
    """A kind's records on a page read in slices, decoded again a slice at a time whenever they are read
    (dependent queries, follow-ups, incremental checks): the page never holds them all as objects."""

    def __init__(self, kind: RecordKind, body: Mapping[str, Any], spans: Spans, count: int) -> None:
        self.kind, self.body, self.spans, self.size = kind, body, spans, count

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Any]:
        for part in self.spans.slices({}):
            yield from self.kind.locate(with_items(self.body, self.spans.path, part)).items

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self.size
        for n, item in enumerate(self):
            if n == index:
                return item
        raise IndexError(index)


Sliced = tuple[Any, dict[str, "Located"], dict[str, Sequence[Any]], dict[str, pa.Table]]
"""(the first slice's page, where each kind was found in it, records, tables)"""
Convert = Callable[
    [tuple["RecordKind", ...], Any, Mapping[str, Any], "ExtractionReport"],
    tuple[dict[str, "Located"], dict[str, list[Any]], dict[str, pa.Table]],
]
"""`connectors.reading.extraction`'s conversion of the kinds' items in one page (or slice)."""


Land = Callable[[Mapping[str, pa.Table]], None]
"""The writer a page's tables go to (a large answer's, a slice at a time as they are converted)."""


def convert_slices(
    kinds: tuple[RecordKind, ...],
    body: dict[str, Any],
    spans: Spans,
    params: Mapping[str, Any],
    report: ExtractionReport,
    convert: Convert,
    land: Land | None = None,
) -> Sliced | None:
    """A large answer's kinds converted a slice of its records at a time: (the first slice's page, where each
    kind was found in it, records, tables). Kinds found elsewhere than in the list are read once, with the first
    slice. None when a kind's records hold the list itself (the answer as one record): it is read whole, and
    nothing was landed. Arrow's memory comes from the system allocator meanwhile (`arrow_memory`).

    With `land`, each slice's tables go to it as soon as they are converted, and only their primary key columns
    stay (the tables returned: what the loop guard reads): the converted records, ~1.3x the answer's JSON
    with their `raw` column, are never all held at once."""
    keys = {kind.table: list(kind.primary_key) for kind in kinds}
    with system_allocator():
        list_at = ".".join(spans.path)
        sliced: tuple[RecordKind, ...] = ()
        first: tuple[Any, dict[str, Located]] | None = None
        parts: dict[str, list[pa.Table]] = {}
        records: dict[str, Sequence[Any]] = {}
        counts: dict[str, int] = {}
        for items in spans.slices(report.repairs):
            part = with_items(body, spans.path, items)
            if first is None:
                wheres = {kind.table: kind.locate(part) for kind in kinds}
                if any(
                    p.found and (p.where == "" or list_at.startswith(p.where + ".")) for p in wheres.values()
                ):
                    return None
                sliced = tuple(k for k in kinds if _in_list(wheres[k.table].where, list_at))
            located, got, tables = convert(kinds if first is None else sliced, part, params, report)
            first = first or (part, located)
            if land is not None:
                land(tables)
                tables = {t: data.select(keys[t]) for t, data in tables.items() if keys.get(t)}
            for table, data in tables.items():
                parts.setdefault(table, []).append(data)
            for table, items_of in got.items():
                counts[table] = counts.get(table, 0) + len(items_of)
                records.setdefault(table, items_of)
            del located, got, tables, items, part  # this slice's objects go before the next is read
        if first is None:
            return None
        for kind in sliced:
            records[kind.table] = SpanRecords(kind, body, spans, counts[kind.table])
        tables = {table: pa.concat_tables(data) for table, data in parts.items()}
        return first[0], first[1], records, tables


def _in_list(where: str, list_at: str) -> bool:
    """Whether a kind's items were found in the large list (or in its items), so each slice holds some."""
    return where == list_at or where.startswith((list_at + "[]", list_at + "."))
