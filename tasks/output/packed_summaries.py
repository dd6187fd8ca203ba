"""The summaries of a run's ended queries, held as compressed JSON until the run's end reads them.

A fan-out keeps every ended query's summary for the night's account (the manifest, `query_state`, the printed
summary), and a dependent query is one per parent record: 20,000 of them are one night's comments on 20,000
videos. As dicts a summary is ~3.7 KB of Python objects (its extraction report nests a dict per table, each with
its own empty dicts); as JSON ~1 KB; sixteen of them compressed together (zstd, as the raw store's pages) ~60 bytes each, as summaries of
one night repeat each other's keys and most of their values. The last few are held as JSON until they make a
block. Each read parses again (~7 us a summary, and a block's decompression shared by its sixteen): the end of a
run walks the summaries a dozen times, ~0.1 s each at 40,000 queries.

What a reader gets is a fresh dict: a change to it is not kept; `summaries[i] = changed` keeps one.
Used by one thread at a time (the run's event loop), as a list would be.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableSequence
from typing import Any, overload

import orjson

from harvest.tasks.output.raw_store import compress, decompress, default_codec

BLOCK = 16
"""Summaries compressed together: 58 bytes a summary at 16, 32 at 64 (40,000 summaries of a night of comments),
but a read of one decompresses its whole block."""


class PackedSummaries(MutableSequence[dict[str, Any]]):
    """Query summaries as compressed JSON, read back as dicts (the values JSON has: a tuple comes back a list)."""

    __slots__ = ("_blocks", "_opened", "_tail")

    def __init__(self, summaries: Iterable[dict[str, Any]] = ()) -> None:
        self._blocks: list[bytes] = []
        self._tail: list[bytes] = []
        self._opened: tuple[int, list[bytes]] = (-1, [])
        """The block last read, as lines: reads in order (or backwards) decompress each block once."""
        for s in summaries:
            self.append(s)

    def _lines(self, block: int) -> list[bytes]:
        if block == len(self._blocks):
            return self._tail
        if self._opened[0] != block:
            self._opened = (block, _unpack(self._blocks[block]))
        return self._opened[1]

    def _index(self, index: int) -> int:
        size = len(self)
        if not -size <= index < size:
            raise IndexError("summary index out of range")
        return index % size

    def each_json(self) -> Iterator[bytes]:
        """Each summary's JSON, one line each: the manifest writes the bytes as they are."""
        for block in range(len(self._blocks) + 1):
            yield from list(self._lines(block))

    def _replace_all(self, lines: list[bytes]) -> None:
        """A change other than at the end (a deletion, an insertion, a slice): rare, so the blocks are made again."""
        self._blocks, self._tail, self._opened = [], [], (-1, [])
        for line in lines:
            self._append_json(line)

    def _append_json(self, line: bytes) -> None:
        self._tail.append(line)
        if len(self._tail) == BLOCK:
            self._blocks.append(_compress(self._tail))
            self._tail = []

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = self._index(index)
        loaded: dict[str, Any] = orjson.loads(self._lines(i // BLOCK)[i % BLOCK])
        return loaded

    @overload
    def __setitem__(self, index: int, value: dict[str, Any]) -> None: ...
    @overload
    def __setitem__(self, index: slice, value: Iterable[dict[str, Any]]) -> None: ...
    def __setitem__(self, index: int | slice, value: Any) -> None:
        if isinstance(index, slice):
            lines = list(self.each_json())
            lines[index] = [_pack(s) for s in value]
            self._replace_all(lines)
            return
        i = self._index(index)
        block = i // BLOCK
        lines = list(self._lines(block))
        lines[i % BLOCK] = _pack(value)
        if block == len(self._blocks):
            self._tail = lines
        else:
            self._blocks[block] = _compress(lines)
            self._opened = (block, lines)

    def __delitem__(self, index: int | slice) -> None:
        lines = list(self.each_json())
        del lines[index]
        self._replace_all(lines)

    def __len__(self) -> int:
        return len(self._blocks) * BLOCK + len(self._tail)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for line in self.each_json():
            yield orjson.loads(line)

    def insert(self, index: int, value: dict[str, Any]) -> None:
        if index >= len(self):
            self.append(value)
            return
        lines = list(self.each_json())
        lines.insert(index, _pack(value))
        self._replace_all(lines)

    def append(self, value: dict[str, Any]) -> None:
        self._append_json(_pack(value))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedSummaries):
            return list(self.each_json()) == list(other.each_json())
        return list(self) == other if isinstance(other, list) else NotImplemented

    def __repr__(self) -> str:
        return f"PackedSummaries({len(self)} summaries)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickle, (list(self.each_json()),))  # a copy of its own: `copy.copy` shared the lists


def _pack(summary: dict[str, Any]) -> bytes:
    """Its JSON on one line (orjson escapes a newline in a string), in a bytes object of its own size: the one
    `orjson.dumps` returns keeps the 4 KB buffer it was written into (`tracemalloc`: 4,097 bytes for a 147-byte
    answer) until the block is compressed."""
    return memoryview(orjson.dumps(summary)).tobytes()


def _compress(lines: list[bytes]) -> bytes:
    """A block: its codec (1 byte), its JSON's length (4 bytes), then the lines compressed together, as the raw
    store compresses its pages (zstd, or zlib where this Arrow has no zstd)."""
    raw = b"\n".join(lines)
    codec = default_codec()
    return bytes([codec]) + len(raw).to_bytes(4, "little") + compress(codec, raw)


def _unpack(block: bytes) -> list[bytes]:
    return decompress(block[0], block[5:], int.from_bytes(block[1:5], "little")).split(b"\n")


def _unpickle(lines: list[bytes]) -> PackedSummaries:
    out = PackedSummaries()
    out._replace_all(lines)
    return out


def each_summary_json(summaries: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """Each summary as one line of JSON: held packed, as it is; read from disk (dicts), written now."""
    if isinstance(summaries, PackedSummaries):
        return summaries.each_json()
    return (orjson.dumps(s) for s in summaries)
