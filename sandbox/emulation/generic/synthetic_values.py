"""Records made from declared columns: a value of each column's type, set at the column's path.

A record is a pure function of (query scope, table, position), like every record of the sandbox: the key comes
from the scope's numbered ids (unique within a result set, the same on every night and every run with the same
seed), the other values from one `Draw` of the same inputs. The first timestamp column is the record's time on
the scope's clock (newest first, as a newest-first listing and a `max_cursor` page need). The record a detail
answer is about has the key its request names (the key a listed record's URL ends in, the id of the account a
handle names: `joined_values.Asked.subject_key`), so a chain's tables join on their ids as the service's do.

Text is made after the column's name, so that values read as what they are and travel where a chain sends them:
a column that `joins` another table's agrees with what the request names (`joined_values`), or where it names
nothing is an id of the joined table's shape (`Asked.unnamed`: a comment author's `UC...`), a `template` is
filled from the record's values, a column named like a request parameter (`url`, `advertiser_id`) echoes the
request's value, except a listed record's `url` (or a URL a detail endpoint is asked with: an ad's `ad_url`),
which is its own and carries its key and what its listing was asked for (`joined_values.own_url`),
`...url`/`...link` is a URL, `...token`/`...cursor` an opaque URL-safe token (a comment's
`repliesContinuationToken`, which the comment replies endpoint takes as a thread of its own), `id`/`..._id`/
`...Id`/`...uid` an id, `..._at_text` the record's time as the platforms word it ("5 days ago"); anything else
a phrase. Before all these, a value reading as what the column's name and description say it holds
(`meant_values`: a currency code, a rating within its scale, one of the values listed, a reply's depth). A `json`
column is an object, or a list of image objects where its name says images, as the platforms send them.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from harvest.connectors.catalog.record_paths import Step, steps
from harvest.sandbox.emulation.generic.declared_form import DeclaredChild, DeclaredColumn, DeclaredKind
from harvest.sandbox.emulation.generic.joined_values import ID_NAME, Asked, filled, own_url, read
from harvest.sandbox.emulation.generic.meant_values import listed_key, meant
from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import WORDS, ago, phrase
from harvest.sandbox.emulation.scope import Scope, b64int, iso
from harvest.sandbox.emulation.stablehash import Draw
from harvest.sandbox.emulation.subjects import platform_host, subject_id


def put(doc: Any, path: str | tuple[Step, ...], value: Any) -> Any:
    """`doc` with `value` set at `path`, creating the objects and lists along it (the document itself for ""):
    a `[]` step spreads a list value over the list's items, one item each (a single value makes one item)."""
    walk = steps(path) if isinstance(path, str) else path
    if not walk:
        return value
    (kind, arg), rest = walk[0], walk[1:]
    if kind == "key":
        obj = doc if isinstance(doc, dict) else {}
        obj[arg] = put(obj.get(arg), rest, value)
        return obj
    items = doc if isinstance(doc, list) else []
    if kind == "index":
        items.extend([None] * (arg + 1 - len(items)))
        items[arg] = put(items[arg], rest, value)
        return items
    spread = value if isinstance(value, list) else [value]
    return [put(items[n] if n < len(items) else None, rest, v) for n, v in enumerate(spread)]


def has(doc: Any, path: str) -> bool:
    """Whether `doc` holds something at a plain record path (keys and `[n]` only)."""
    for kind, arg in steps(path):
        keyed = kind == "key" and isinstance(doc, dict) and arg in doc
        if not (keyed or (kind == "index" and isinstance(doc, list) and len(doc) > arg)):
            return False
        doc = doc[arg]
    return True


@lru_cache(maxsize=1024)
def _flavor(name: str) -> str:
    """What a text column's name says it holds: url, token, id, ago (a time in words) or words."""
    lowered = name.lower()
    if lowered.endswith("_at_text"):
        return "ago"
    if lowered.endswith(("url", "link", "href")):
        return "url"
    if "token" in lowered or "cursor" in lowered:
        return "token"
    return "id" if ID_NAME.search(name) else "words"


def _token(d: Draw, n: int) -> str:
    """`n` URL-safe characters, 64 bits of the draw for each 11."""
    chunks = [b64int(d.u32() << 32 | d.u32(), 11) for _ in range(-(-n // 11))]
    return "".join(chunks)[:n]


def _text(column: DeclaredColumn, d: Draw, s: Scope, table: str, pos: int) -> str:
    flavor = _flavor(column.name)
    if flavor == "ago":  # the record's time, an hour before the newest is "1 hour ago"
        return ago(s.age(s.time(pos)))
    if flavor == "url":
        return f"https://{platform_host(s.path)}/{table}/{_token(d, 11)}"
    if flavor == "token":
        return "Eg" + _token(d, 30)
    if flavor == "id":
        return _token(d, 16)
    return phrase(d, 1, 8)


def value(
    column: DeclaredColumn, d: Draw, s: Scope, table: str, pos: int, first_time: bool, level: int = 0
) -> Any:
    """A value reading as what the column holds (`meant_values`; `level`: the items of its kind holding the
    record), else one of its type (an unknown type is made as text)."""
    known, made = meant(column, d, s, s.time(pos), level)
    if known:
        return made
    kind = column.type
    if kind == "integer":
        return d.num(0, 100_000)
    if kind == "number":
        return d.num(0, 10**6) / 100
    if kind == "decimal":
        return f"{d.num(0, 10**6) / 100:.2f}"
    if kind == "boolean":
        return d.chance(0.5)
    if kind == "timestamp":
        return iso(s.time(pos) if first_time else s.time(pos) - d.num(0, 30 * 86400))
    if kind == "json":
        return (
            _images(d, s, table)
            if column.name.endswith("images")
            else {"name": d.pick(WORDS), "count": d.num(0, 1000)}
        )
    if kind == "text_list":
        return d.sample(WORDS, d.num(0, 3))
    return _text(column, d, s, table, pos)


def _images(d: Draw, s: Scope, table: str) -> list[Record]:
    """One to three images as the platforms send them: sizes and the URLs of the image and its thumbnail."""
    images = []
    for _ in range(d.num(1, 3)):
        uri = _token(d, 24)
        side = d.pick((640, 800, 1080))
        base = f"https://img.{platform_host(s.path).removeprefix('www.')}/{table}/{uri}"
        images.append(
            {"uri": uri, "width": side, "height": side, "url_list": [f"{base}.jpeg"],
             "thumb_url_list": [f"{base}~200x200.jpeg"]}
        )  # fmt: skip
    return images


_SPREAD = 0x9E3779B97F4A7C15
"""Odd: n -> n * _SPREAD mod 2**66 is a bijection on 11 base-64 digits, so distinct numbers make distinct ids
that do not look consecutive."""


def _key_text(number: int) -> str:
    return b64int(number * _SPREAD % 2**66, 11)


def key_value(column: DeclaredColumn, s: Scope, table: str, pos: int) -> Any:
    """A key column's value: unique per (scope, table, column, position), of the column's type (`table` with a
    nested item's lineage: unique among the replies of the replies too); one of the values a column lists
    while they last (`listed_key`)."""
    number = int(s.numid(f"{table}.{column.name}", pos, 15))
    kind = column.type
    if (listed := listed_key(column, pos, number)) is not None:
        return listed
    if kind == "integer":
        return number
    if kind == "number":
        return float(number)
    if kind == "timestamp":
        return iso(s.time(pos))
    if kind == "boolean":
        return pos % 2 == 0  # two values at most: a boolean key is unique only on the declarer's word
    if kind == "text_list":
        return [_key_text(number)]
    if kind == "json":
        return {"id": _key_text(number)}
    return _key_text(number)


def make_record(
    kind: DeclaredKind, s: Scope, pos: int, asked: Asked, lineage: str = "", holder: Record | None = None
) -> Record:
    """The record of `kind` at `pos`: every column at its path; wrapped as `{wrap_key: record, <extras>}` when
    the declaration unwraps it; holding 0 to `NESTED_ITEMS` more items of its kind at its `nested` path, down to
    `NESTED_DEPTH` levels (`lineage`: the positions of the items holding it, which keep its key unique;
    `holder`: the item holding it, whose values its columns joining its own table take)."""
    space = kind.table + lineage
    d = Draw(s.key, space, pos)
    record = _fill({}, kind.columns, kind, d, s, pos, asked, space, holder)
    for path in kind.ignore:
        if not has(record, path):  # an object some column reads into is known whole: it stays
            record = put(record, path, None)
    for path, values in kind.where:
        kept = next((v for v in values if v is not None), None)
        if kept is not None:
            record = put(record, path, kept)
    for child in kind.children:
        record = put(record, child.at, _child_items(child, d, s, pos, asked, kind.one))
    item = (
        record
        if kind.wrap_key is None
        else _fill({kind.wrap_key: record}, kind.extras, kind, d, s, pos, asked)
    )
    if kind.nested:
        inner = f"{lineage}/{pos}"
        many = d.num(0, NESTED_ITEMS) if lineage.count("/") < NESTED_DEPTH else 0
        item = put(item, kind.nested, [make_record(kind, s, n, asked, inner, record) for n in range(many)])
    return item


NESTED_ITEMS = 2
"""The most items nested in one item (0 to this many, drawn per item)."""
NESTED_DEPTH = 2
"""Levels of nested items below the place's own (a reply to a reply to a reply is the deepest)."""


def with_nested(kind: DeclaredKind, items: list[Record]) -> list[Record]:
    """The items and, after each, the items nested in it, depth first (as a client reads `nested`)."""
    if not kind.nested:
        return items
    out: list[Record] = []
    for item in items:
        out.append(item)
        out.extend(with_nested(kind, _nested_list(item, steps(kind.nested))))
    return out


def _nested_list(doc: Any, walk: tuple[Step, ...]) -> list[Record]:
    """The items at a nested path as `put` writes them (a `[]` step gathers every item's)."""
    if not walk:
        return doc if isinstance(doc, list) else []
    (kind, arg), rest = walk[0], walk[1:]
    if kind == "key":
        return _nested_list(doc.get(arg), rest) if isinstance(doc, dict) else []
    if not isinstance(doc, list):
        return []
    if kind == "index":
        return _nested_list(doc[arg], rest) if arg < len(doc) else []
    return [got for item in doc for got in _nested_list(item, rest)] if rest else doc


def foreign_item(kind: DeclaredKind, s: Scope, page: int) -> Record | None:
    """An item of another kind in the list of a kind with `where` (a board's "Related Interests" module among
    its pins): another value at each `where` path, a title object, an id of its own; None without `where`."""
    if not kind.where:
        return None
    item: Record = {
        "title": {"format": "Related Interests", "args": []},
        "id": s.numid(f"{kind.table}!", page),
    }
    for path, values in kind.where:
        item = put(item, path, _another(values))
    return item


def _another(values: tuple[Any, ...]) -> Any:
    """A value none of `values` is."""
    if any(isinstance(v, bool) for v in values):
        return "neither"
    numbers = [v for v in values if isinstance(v, int | float)]
    if numbers:
        return max(numbers) + 1
    return "story" if "story" not in values else "module"


def _fill(
    doc: Record,
    columns: tuple[DeclaredColumn, ...],
    kind: DeclaredKind,
    d: Draw,
    s: Scope,
    pos: int,
    asked: Asked,
    space: str | None = None,
    holder: Record | None = None,
) -> Record:
    """`doc` with each column's value at its path; keys unique within `space` (the kind's table by default).

    The record a detail answer is about keeps the key its request names (`Asked.subject_key`); a listed
    record's `url` is its own (`own_url`), not the request's; a column that `joins` another table's agrees with
    what the request names (`joined_values`); a `template` is filled last, from the record's values."""
    timed = False
    subject = kind.one or kind.first_page_only
    key_of = _keys(columns, kind, s, pos, asked, space, holder)
    made: dict[str, Any] = {}
    # A json column first: a column read from inside the object it holds is then set within it, not lost.
    for column in sorted(columns, key=lambda c: (c.template is not None, c.type != "json")):
        if column.from_request:
            continue
        if column.name in key_of:
            value_made = key_of[column.name]
        elif column.template is not None and (text := filled(column.template, made, asked.echo)):
            value_made = text
        elif column.type == "text" and column.joins and (joined := _joined(column, kind, s, asked, holder)):
            value_made = joined
        elif column.type == "text" and (other := asked.unnamed(column)) is not None:
            value_made = subject_id(s, _token(d, 16), did=other == "did")
        elif (
            (column.name == "url" or (kind.table, column.name) in asked.relations.own_urls)
            and column.type == "text"
            and not subject
            and isinstance(own := _one(key_of), str | int)
        ):
            value_made = own_url(s, kind.table, own, asked.listing)
        elif column.type == "text" and column.name in asked.echo:
            value_made = asked.echo[column.name]
        elif subject and column.type == "text" and (secure := asked.secure_id(s, column)):
            value_made = secure
        else:
            value_made = value(column, d, s, kind.table, pos, not timed, (space or "").count("/"))
            timed = timed or column.type == "timestamp"
        made[column.name] = value_made
        doc = put(doc, column.path, value_made)
    return doc


def _keys(
    columns: tuple[DeclaredColumn, ...],
    kind: DeclaredKind,
    s: Scope,
    pos: int,
    asked: Asked,
    space: str | None,
    holder: Record | None,
) -> dict[str, Any]:
    """The record's key columns: drawn unique within `space`; the one key of the record a detail answer is
    about what its request names (a template of the request's values first); a part of a key of several that
    joins another table what the request names (a comment's video), the last part staying drawn and the key
    unique."""
    key_of = {c.name: key_value(c, s, space or kind.table, pos) for c in columns if c.name in kind.key}
    if (kind.one or kind.first_page_only) and len(kind.key) == 1:
        (name,) = kind.key
        column = next(c for c in columns if c.name == name)
        if column.type == "text" and not column.from_request:
            made_key = (
                filled(column.template, {}, asked.echo)
                if column.template is not None
                else asked.subject_key(s, column)
            )
            key_of[name] = made_key if made_key is not None else key_of[name]
    parts = [c for c in columns if c.name in kind.key and c.joins and c.type == "text"]
    for column in parts[: len(kind.key) - 1]:
        key_of[column.name] = _joined(column, kind, s, asked, holder) or key_of[column.name]
    return key_of


def _joined(
    column: DeclaredColumn, kind: DeclaredKind, s: Scope, asked: Asked, holder: Record | None
) -> str | None:
    """A `joins` column's value: the holder's value of the column it joins in its own table, else what the
    request names (`Asked.joined`)."""
    if holder is not None:
        by_name = {c.name: c for c in kind.columns}
        for table, other in column.joins:
            if table == kind.table and other in by_name:
                got = read(holder, by_name[other].path)
                if got is not None:
                    return str(got)
    return asked.joined(s, column, kind.one or kind.first_page_only)


def _one(key_of: Mapping[str, Any]) -> Any:
    """The value of a key of one column (None for a kind keyed on none or several)."""
    return next(iter(key_of.values())) if len(key_of) == 1 else None


CHILD_ITEMS = 3
"""The most items of a record's child list (0 to this many, drawn per record)."""


def _child_items(child: DeclaredChild, d: Draw, s: Scope, pos: int, asked: Asked, one: bool) -> Any:
    """A record's child list: 0 to `CHILD_ITEMS` items made from the child's columns, at least one in a detail
    answer's record (`one`: the published details fill their lists); for `entries`, an object whose fields are
    the items' names and values."""
    items_kind = DeclaredKind(child.table, child.at, False, (), child.columns)  # no key: nothing echoes one
    items = [
        _fill({}, child.columns, items_kind, Draw(s.key, child.table, pos, n), s, pos, asked)
        for n in range(d.num(1 if one else 0, CHILD_ITEMS))
    ]
    if child.entries:
        return {
            str(item.get("name", f"field{n}")) + f"_{n}": item.get("value") for n, item in enumerate(items)
        }
    return items


def inner(kind: DeclaredKind, item: Record) -> Record:
    """The record inside an item as the page holds it (the item itself unless wrapped)."""
    if kind.wrap_key is None:
        return item
    got = item.get(kind.wrap_key)
    return got if isinstance(got, dict) else item


def empty_record(kind: DeclaredKind) -> Record:
    """A "not found" object of a one-object kind: every column at its path, null."""
    doc: Record = {}
    for column in kind.columns:
        if not column.from_request:
            doc = put(doc, column.path, None)
    return doc
