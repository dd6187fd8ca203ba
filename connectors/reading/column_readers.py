"""A record kind's columns read from a page's items in one pass, by a function compiled for the kind.

Reading columns is the hot path of a collection (every field of every record). One closure call per field and
record, plus a recursive walk for fields no column reads, cost more than parsing the page; a function generated
once per kind reads the field paths (`a`, `a.b`, `a.b[0].c`) with inline dict and list lookups and checks each
record's keys against the catalog's, all in a single loop, alternatives (`a|b`) too. Paths with maps (`a[]`) go
through the compiled getter of `connectors.catalog.record_paths`. What it returns is exactly what `RecordKind.reader` and
`RecordKind.unknown_fields` give (a test holds them equal).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from itertools import count
from typing import Any

from harvest.connectors.catalog.fields import Field, first_given
from harvest.connectors.catalog.record_paths import MISSING, Step, alternatives, compile_path, steps
from harvest.connectors.catalog.records import KnownFields, RecordKind

ColumnsReader = Callable[[list[Any], Mapping[str, Any], set[str] | None], list[list[Any]]]
"""(items, request parameters, a set to add unknown field paths to, or None) -> one value list per column."""


def _getter(path: str) -> Callable[[Any], Any]:
    get = compile_path(path)

    def read(doc: Any) -> Any:
        got = get(doc)
        return None if got is MISSING else got

    return read


def _plain_steps(path: str) -> tuple[Step, ...] | None:
    """The steps of a plain path (keys and indexes, by the catalog's one parser), or None for one with
    alternatives (each is tried on its own) or maps (read by the general getter)."""
    if "|" in path:
        return None
    walked = steps(path)
    return None if any(kind == "map" for kind, _ in walked) else walked


class _Source:
    """Builds the Python source of the generated function."""

    def __init__(self) -> None:
        self.env: dict[str, Any] = {"_EMPTY": {}}
        self.names = count()

    def constant(self, value: Any) -> str:
        name = f"_k{next(self.names)}"
        self.env[name] = value
        return name

    def read(self, fld: Field, source: str) -> str:
        """An expression reading `fld` from the dict named `source` (None when absent)."""
        if names := fld.request_params:
            if len(names) == 1:
                return f"params.get({self.constant(names[0])})"
            return f"{self.constant(first_given)}(params, {self.constant(names)})"
        if not fld.from_record:
            return "None"  # the item holding the record: read by `connectors.reading.extraction`
        plain = _plain_steps(fld.path)
        if plain is not None:
            return self.plain(plain, source)
        alts = alternatives(fld.path)
        tried = [walk for walk in map(_plain_steps, alts) if walk is not None]
        if len(alts) == 1 or len(tried) < len(alts):  # a map (`a[]`) in it: the compiled getter reads it
            return f"{self.constant(_getter(fld.path))}({source})"
        # `a|b` inline: the first alternative that is neither absent nor null, else None, as the compiled getter
        # reads it (its MISSING is None here); a call per alternative per record cost as much as the reading.
        expr = self.plain(tried[-1], source)
        for walk in reversed(tried[:-1]):
            a = f"_a{next(self.names)}"
            expr = f"({a} if ({a} := {self.plain(walk, source)}) is not None else {expr})"
        return expr

    def plain(self, plain: tuple[Step, ...], source: str) -> str:
        """An expression reading a path of keys and indexes from the dict named `source` (None when absent)."""
        expr = source
        for n, (kind, arg) in enumerate(plain):
            t = f"_t{next(self.names)}"
            if kind == "key":
                step = f"{t}.get({arg!r})" if n else f"{source}.get({arg!r})"
                expr = step if n == 0 else f"({step} if type({t} := {expr}) is dict else None)"
            else:
                expr = f"({t}[{arg}] if type({t} := {expr}) is list and len({t}) > {arg} else None)"
        return expr

    def unknown_check(self, known: KnownFields, source: str, indent: str) -> list[str]:
        """Statements adding to `unknown` the keys of `source` (a dict) that `known` does not know."""
        keys = self.constant(known.keys)
        lines = [f"{indent}if not {keys}.issuperset({source}):"]
        prefix = self.constant(known.prefix)
        lines.append(f"{indent}    unknown.update({prefix} + k for k in {source}.keys() - {keys})")
        for key, sub in known.partial:
            child = f"_u{next(self.names)}"
            lines.append(f"{indent}if type({child} := {source}.get({key!r})) is dict:")
            lines += self.unknown_check(sub, child, indent + "    ")
        return lines


def _unknown_lines(kind: RecordKind, src: _Source) -> list[str]:
    if kind.unwrap is None or kind.wrapped_known is None:
        return src.unknown_check(kind.known, "r", "            ")
    outer, inner = kind.wrapped_known
    lines = ["            if wrapped:"]
    lines += src.unknown_check(outer, "r", "                ")
    lines += src.unknown_check(inner, "i", "                ")
    lines.append("            else:")
    lines += src.unknown_check(kind.known, "r", "                ")
    return lines


@lru_cache(maxsize=256)
def columns_reader(kind: RecordKind) -> ColumnsReader:
    """The function reading every column of `kind` (in `kind.columns` order) from a page's items."""
    src = _Source()
    own = [src.read(f, "i") for f in kind.fields]
    extras = [src.read(f, "r") for f in (kind.unwrap.extras if kind.unwrap else ())]
    names = [f"c{n}" for n in range(len(own) + len(extras))]
    lines = ["def read(items, params, unknown):", *(f"    {name} = []" for name in names)]
    lines += ["    for r in items:", "        if type(r) is not dict:", "            r = _EMPTY"]
    if kind.unwrap is not None:
        lines.append(f"        i = r.get({kind.unwrap.key!r})")
        lines += ["        wrapped = type(i) is dict", "        if not wrapped:", "            i = r"]
    else:
        lines.append("        i = r")
    lines += [f"        {name}.append({expr})" for name, expr in zip(names, own, strict=False)]
    lines += [f"        {name}.append({e})" for name, e in zip(names[len(own) :], extras, strict=True)]
    lines.append("        if unknown is not None and r is not _EMPTY:")
    lines += _unknown_lines(kind, src)
    lines.append(f"    return [{', '.join(names)}]")
    exec("\n".join(lines), src.env)
    reader: ColumnsReader = src.env["read"]
    return reader
