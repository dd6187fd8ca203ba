"""The summaries of a run's ended queries, held as compact JSON until the run's end reads them.

A fan-out keeps every ended query's summary for the night's account (the manifest, `query_state`, the printed
summary), and a dependent query is one per parent record: 20,000 of them are one night's comments on 20,000
videos. As dicts a summary is ~3.7 KB of Python objects (its extraction report nests a dict per table, each with
its own empty dicts); as the JSON the manifest holds anyway, ~1 KB. Each read parses it again (~7 us): the end of
a run walks the summaries a dozen times, ~0.1 s at 10,000 queries.

What a reader gets is a fresh dict: a change to it is not kept; `summaries[i] = changed` keeps one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableSequence
from typing import Any, overload

import orjson


class PackedSummaries(MutableSequence[dict[str, Any]]):
    """Query summaries as JSON bytes, read back as dicts (the values JSON has: a tuple comes back a list)."""

    __slots__ = ("_packed",)

    def __init__(self, summaries: Iterable[dict[str, Any]] = ()) -> None:
        self._packed = [_pack(s) for s in summaries]

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [orjson.loads(b) for b in self._packed[index]]
        loaded: dict[str, Any] = orjson.loads(self._packed[index])
        return loaded

    @overload
    def __setitem__(self, index: int, value: dict[str, Any]) -> None: ...
    @overload
    def __setitem__(self, index: slice, value: Iterable[dict[str, Any]]) -> None: ...
    def __setitem__(self, index: int | slice, value: Any) -> None:
        if isinstance(index, slice):
            self._packed[index] = [_pack(s) for s in value]
        else:
            self._packed[index] = _pack(value)

    def __delitem__(self, index: int | slice) -> None:
        del self._packed[index]

    def __len__(self) -> int:
        return len(self._packed)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for b in self._packed:
            yield orjson.loads(b)

    def insert(self, index: int, value: dict[str, Any]) -> None:
        self._packed.insert(index, _pack(value))

    def append(self, value: dict[str, Any]) -> None:
        self._packed.append(_pack(value))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedSummaries):
            return self._packed == other._packed
        return list(self) == other if isinstance(other, list) else NotImplemented

    def __repr__(self) -> str:
        return f"PackedSummaries({len(self)} summaries)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickle, (list(self._packed),))  # a copy's own list: `copy.copy` shared it

    def each_json(self) -> Iterator[bytes]:
        """Each summary's JSON as it is held: the manifest writes the bytes as they are."""
        return iter(self._packed)


def _pack(summary: dict[str, Any]) -> bytes:
    """Its JSON, in a bytes object of its own size: the one `orjson.dumps` returns keeps the 4 KB buffer it was
    written into (`tracemalloc`: 4,097 bytes for a 147-byte answer), more than the dict it replaces."""
    return memoryview(orjson.dumps(summary)).tobytes()


def _unpickle(packed: list[bytes]) -> PackedSummaries:
    out = PackedSummaries()
    out._packed = packed
    return out


def each_summary_json(summaries: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """Each summary as one line of JSON: held packed, as it is; read from disk (dicts), written now."""
    if isinstance(summaries, PackedSummaries):
        return summaries.each_json()
    return (orjson.dumps(s) for s in summaries)
