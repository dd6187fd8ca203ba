"""Columns that came empty while the records carry fields harvest does not read: the silent NULL, noticed.

When the service renames a field (`viewCountInt` where the interface says `views`, `user.core.name` where it said
`user.name`), every record still lands and the query completes, but a column is NULL in every row while the
value sits in `raw` under another name. A column NULL in every record of a page (Arrow counts a column's nulls
for free, so the hot path pays nothing more) whose field no record sends as null is looked at once: if the
records carry unread fields that may hold it, the column is counted as empty (`columns_empty`) and named with
them, the likeliest first, and with the spec's `shapes` override that reads the first
(`connectors.reading.drift_message`).

An unread field may hold a column when its own name shares a word with the column's name or with the last step
of the column's paths (`viewCount` for `views`, `image.width` for `width`, `engagement.likes` for `like_count`),
more than a generic word (`count`, `id`, `url`) unless the column has no other (`product_id` for `id`), and its
value fits the column's type. Inside a value that did not fit (an object `{"totalCount": N}` where a number
belongs) any leaf that fits may hold it. A column whose field is simply not sent, with nothing resembling it
(a trimmed answer without `title`, a search without `includeExtras`), is the service's choice, not a rename: not
named. The same search names the place of a primary key that went missing (`key_override`): records that
arrive wrapped (`{"post": {...}}`) or with their key under another name.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from functools import lru_cache
from typing import Any

import pyarrow as pa

from harvest.connectors.catalog.fields import Field, coercer
from harvest.connectors.catalog.record_paths import (
    MISSING,
    alternatives,
    compile_path,
    last_key,
    read_steps,
    steps,
)
from harvest.connectors.catalog.records import RecordKind

GENERIC = frozenset(
    {"count", "id", "url", "at", "text", "int", "is", "has", "info", "num", "number", "total"}
)
"""Words too common in field names to say, alone, that two fields are the same."""
MAX_HINTS = 3
MAX_LEAVES = 300
"""Unread leaves looked at on one page: records with hundreds of fields (reels) stay cheap."""
MAX_DEPTH = 3
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_PLAIN_KEY = re.compile(r"[^.\[\]|\s]+")


@lru_cache(maxsize=4096)
def words(name: str) -> frozenset[str]:
    """The words of a field or column name, lower case, a plural's `s` dropped: `viewCountInt` -> view, count,
    int; `likes` -> like."""
    out = set()
    for word in _WORD.findall(name):
        word = word.lower()
        out.add(word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word)
    return frozenset(out)


@lru_cache(maxsize=1024)
def column_words(fld: Field) -> frozenset[str]:
    """What a column is called: its name's words and those of the last step of each of its paths."""
    out = set(words(fld.name))
    for alternative in alternatives(fld.path):
        out |= words(last_key(alternative))
    return frozenset(out)


def _fits(fld: Field, value: Any) -> bool:
    if fld.json:
        return isinstance(value, dict | list)
    if fld.type == pa.string():
        return isinstance(value, str) and bool(value.strip())
    if isinstance(value, bool) and fld.type != pa.bool_():
        return False
    return coercer(fld)(value) is not None


def _may_hold(fld: Field, path: str) -> bool:
    """Whether the field at `path` is named like column `fld`: its last step shares a word with one of the
    column's names (its own, the last step of each of its paths), and its path has every word of that name but
    the generic ones (`user.core.name` for `user_name`, not `user_id_str`)."""
    every, last = words(path), words(last_key(path))
    for n, name in enumerate((fld.name, *(last_key(alternative) for alternative in alternatives(fld.path)))):
        named = words(name)
        specific = named - GENERIC
        if specific and specific <= every and specific & last:
            return True
        if (
            not specific and n == 0 and named & last
        ):  # a column called `id` or `url`, not a path's last `.url`
            return True
    return False


def ranked(fld: Field, leaves: Mapping[str, Any]) -> list[str]:
    """The paths of `leaves` (path -> a value seen there) that may hold column `fld`, the likeliest first."""
    name = column_words(fld)
    scored = []
    for path, value in leaves.items():
        if not _may_hold(fld, path) or not _fits(fld, value):
            continue
        shared, every = name & words(last_key(path)), words(path)
        scored.append(((-len(shared), -len(name & every), len(every - name), path.count(".")), path))
    return [path for _, path in sorted(scored)]


def _walk(path: str, value: Any, leaves: dict[str, Any], depth: int) -> None:
    if len(leaves) >= MAX_LEAVES:
        return
    if isinstance(value, dict) and depth < MAX_DEPTH:
        for key, inner in value.items():
            if _PLAIN_KEY.fullmatch(key):
                _walk(f"{path}.{key}" if path else key, inner, leaves, depth + 1)
    elif value is not None and not isinstance(value, dict):
        leaves.setdefault(path, value)


def unread_leaves(kind: RecordKind, records: list[Any], unknown: Iterable[str]) -> dict[str, Any]:
    """Path (in the record, inside a wrapper) -> a value seen there, of the fields no column reads and of the
    objects under them, to a few levels."""
    wrapper = f"{kind.unwrap.key}." if kind.unwrap is not None else ""
    leaves: dict[str, Any] = {}
    for path in sorted(unknown):
        relative = path.removeprefix(wrapper) if wrapper else path
        if not all(_PLAIN_KEY.fullmatch(step) for step in relative.split(".")):
            continue
        get = compile_path(relative)
        value = next((v for r in records if (v := get(r)) is not MISSING and v is not None), None)
        if value is not None:
            _walk(relative, value, leaves, relative.count("."))
        if len(leaves) >= MAX_LEAVES:
            break
    return leaves


def _records(kind: RecordKind, items: list[Any]) -> list[Any]:
    """The records themselves: wrapped items unwrapped."""
    return items if kind.unwrap is None else [kind.unwrap.inner(item) for item in items]


def _sent(fld: Field, record: Any) -> tuple[str, Any]:
    """(the path of the column's first alternative the record has, its value), or ("", MISSING). A path
    through a null (`caption.text` where `caption` is null) has the value null: the service sent nothing."""
    for path in alternatives(fld.path):
        value = compile_path(path)(record)
        if value is not MISSING:
            return path, value
        walk = steps(path)
        if any(read_steps(record, walk[:n]) is None for n in range(1, len(walk)) if walk[n][0] == "key"):
            return path, None
    return "", MISSING


def empty_columns(
    kind: RecordKind,
    items: list[Any],
    columns: list[pa.Array],
    unknown: set[str],
    misfits: Collection[str] = (),
) -> dict[str, list[str]]:
    """Column -> the unread fields that may hold it, for each column NULL in every one of a page's `items`
    (`columns` in `kind.columns` order) although no record sent its field as null. `misfits`: the columns some
    value of the page did not fit. Cheap when nothing is found: the records are looked at again only for a
    column something may hold (a page without unread fields or misfits costs nothing)."""
    if not unknown and not misfits:
        return {}
    records = _records(kind, items)
    out: dict[str, list[str]] = {}
    leaves: dict[str, Any] | None = None
    for fld, column in zip(kind.fields, columns, strict=False):  # not a wrapper's: null when unwrapped
        if column.null_count != len(items) or fld.name in kind.primary_key or not fld.from_record:
            continue
        if fld.name in misfits:
            sent = next((v for r in records if isinstance((v := _sent(fld, r))[1], dict)), None)
            inside: dict[str, Any] = {}
            if sent is not None:
                _walk(sent[0], sent[1], inside, 0)
            hints = ranked_inside(fld, inside)
        else:
            if leaves is None:
                leaves = unread_leaves(kind, records, unknown)
            hints = ranked(fld, leaves)
        if hints and not any(_sent(fld, record)[1] is None for record in records):
            out[fld.name] = hints[:MAX_HINTS]  # a null the service sent is its answer, not a rename
    return out


def ranked_inside(fld: Field, leaves: Mapping[str, Any]) -> list[str]:
    """The leaves of a value that did not fit its column that would: any, named or not like the column."""
    return [path for path, value in leaves.items() if _fits(fld, value)]


def _objects(item: dict[str, Any], depth: int = 2, at: str = "") -> Iterable[tuple[str, dict[str, Any]]]:
    for key, value in item.items():
        if isinstance(value, dict) and _PLAIN_KEY.fullmatch(key):
            path = f"{at}.{key}" if at else key
            yield path, value
            if depth > 1:
                yield from _objects(value, depth - 1, path)


def _hits(kind: RecordKind, doc: Any) -> int:
    """How many of the kind's fields `doc` has: a record has many, its wrapper few, an object inside it (the
    tweet's `user`) fewer."""
    return sum(_sent(fld, doc)[1] is not MISSING for fld in kind.fields)


def key_override(kind: RecordKind, where: str, item: Any) -> dict[str, Any] | None:
    """The `shapes` entry of `kind` that would read a record that came without its primary key: where it came
    wrapped (an object in it has the key and more of the kind's fields than the item itself), `{"records":
    ...}`; where its key came under another name at the record's top level (`product_id` for `id`),
    `{"fields": {...}}`. None: no such place (a key simply left out is not guessed from a nested `user.id`)."""
    if not isinstance(item, dict):
        return None
    fields = [kind.field(name) for name in kind.primary_key]
    keys = [fld for fld in fields if fld is not None and fld.from_record]
    if not keys or len(keys) != len(kind.primary_key):
        return None
    own = _hits(kind, item)
    for path, inner in _objects(item):
        if all(_fits(fld, _sent(fld, inner)[1]) for fld in keys) and _hits(kind, inner) > own:
            if where == "" or where in kind.objects:
                return {"records": f"{where}.{path}" if where else path}
            return {"records": f"{where}[].{path}"} if "[]" not in where else None
    record = _records(kind, [item])[0]
    unknown: set[str] = set()
    kind.unknown_fields(item, unknown)
    leaves = {path: v for path, v in unread_leaves(kind, [record], unknown).items() if "." not in path}
    renamed = {}
    for fld in keys:
        if not _fits(fld, _sent(fld, record)[1]):
            hints = ranked(fld, leaves)
            if not hints:
                return None
            renamed[fld.name] = hints[0]
    return {"fields": renamed} if renamed else None
