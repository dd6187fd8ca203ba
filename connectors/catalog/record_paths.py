"""Reading values out of decoded JSON by a small path language.

Endpoint descriptions say where records and cursors live as strings (`paging_info.max_id`, `[0].data.clip`,
`items[].media`), so adding an endpoint is data, not code. Paths are compiled once; reading them is on the hot
path (every field of every record), so compiled getters avoid re-parsing.

Syntax: dot-separated keys; `[n]` indexes a list; `name[]` maps the rest of the path over a list; `a|b` tries
alternatives in order, past an absent or null one. The empty path is the document itself. Where records are read
(`items_at`), `[]` means every item of every list: the lists inside lists are joined into one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final

MISSING: Final = object()
"""Returned when a path does not resolve; distinct from a JSON null."""

PARAM_PREFIX: Final = "$params."
"""A column path starting with this reads the request's parameter instead of the record (the embed's handle)."""
HOLDER_PREFIX: Final = "$parent."
"""A column path starting with this reads a column of the item that holds the record (a reply's comment, with
`nested`): `$parent.id` is the id of the comment a reply answers; null for an item of the place itself."""

_TOKEN = re.compile(r"([^.\[\]]+)?((?:\[\d*\])*)")

Getter = Callable[[Any], Any]
Step = tuple[str, Any]
"""One step of a path: ("key", name), ("index", n) or ("map", None) for `[]`."""


def alternatives(path: str) -> list[str]:
    """The paths `a|b` tries in order (one for a path without alternatives)."""
    return path.split("|")


@lru_cache(maxsize=4096)
def steps(path: str) -> tuple[Step, ...]:
    """A path without alternatives as its steps; `ValueError` naming the part that is not one. The one parser of
    the path language: the sandbox writes records at the paths harvest reads them from with it."""
    out: list[Step] = []
    if not path:
        return ()
    for part in path.split("."):
        m = _TOKEN.fullmatch(part)
        if m is None or (m.group(1) is None and not m.group(2)):
            raise ValueError(f"bad path {path!r} at {part!r}")
        if m.group(1) is not None:
            out.append(("key", m.group(1)))
        for idx in re.findall(r"\[(\d*)\]", m.group(2) or ""):
            out.append(("map", None) if idx == "" else ("index", int(idx)))
    return tuple(out)


def last_key(path: str) -> str:
    """The last key a path without alternatives names (`views` of `stats.views`, `name` of `tags[].name`), or ""
    for one that names none."""
    return next((arg for kind, arg in reversed(steps(path)) if kind == "key"), "")


def read_steps(doc: Any, path: tuple[Step, ...]) -> Any:
    """The value at a path's steps (a part of a path: `steps(p)[:n]`), MISSING when it does not resolve."""
    return _walk(doc, path, 0)


def _walk(value: Any, steps: tuple[Step, ...], start: int) -> Any:
    for i in range(start, len(steps)):
        kind, arg = steps[i]
        if kind == "key":
            if not isinstance(value, dict) or arg not in value:
                return MISSING
            value = value[arg]
        elif kind == "index":
            if not isinstance(value, list) or arg >= len(value):
                return MISSING
            value = value[arg]
        else:  # map: every element must resolve, or the whole path is missing
            if not isinstance(value, list):
                return MISSING
            out = []
            for item in value:
                got = _walk(item, steps, i + 1)
                if got is MISSING:
                    return MISSING
                out.append(got)
            return out
    return value


@lru_cache(maxsize=1024)
def compile_path(path: str) -> Getter:
    """A function reading `path` from a document, returning MISSING when it does not resolve.

    `a|b` reads `a`, or `b` when `a` does not resolve or is null (full and trimmed answers name a field
    differently; the pinboard pin sends `altText: null` beside the `autoAltText` a column falls back to). Null
    when no alternative has a value but one is null: the service sent it empty, which is not absent.
    """
    if "|" in path:
        getters = [compile_path(alt) for alt in alternatives(path)]

        def first_of(doc: Any) -> Any:
            found = MISSING
            for get in getters:
                value = get(doc)
                if value is None:
                    found = None
                elif value is not MISSING:
                    return value
            return found

        return first_of
    walk = steps(path)
    if len(walk) == 1 and walk[0][0] == "key":
        key = walk[0][1]
        return lambda doc: doc.get(key, MISSING) if isinstance(doc, dict) else MISSING
    if len(walk) == 2 and walk[0][0] == "key" and walk[1][0] == "key":
        k1, k2 = walk[0][1], walk[1][1]

        def two(doc: Any) -> Any:
            inner = doc.get(k1, MISSING) if isinstance(doc, dict) else MISSING
            return inner.get(k2, MISSING) if isinstance(inner, dict) else MISSING

        return two
    return lambda doc: _walk(doc, walk, 0)


@lru_cache(maxsize=1024)
def items_at(path: str) -> Getter:
    """A function reading the items at a place where records are (a kind's `at`, its `nested`): as
    `compile_path`, but each `[]` joins the items of every list into one flat list (`comments[].replies.items[]`
    is every reply of every comment), MISSING when the place is not there.

    An item without the rest of the path after a `[]` holds no items there and is passed over (a comment
    without replies), except after the last `[]`: there every item must resolve, or the place is not there
    (`items[].media` of a trimmed answer whose items are the records themselves: the next place is tried)."""
    walk = steps(path)
    maps = [n for n, (kind, _) in enumerate(walk) if kind == "map"]
    if not maps:
        return compile_path(path)
    last = maps[-1]

    def gather(value: Any, start: int) -> Any:
        for i in range(start, len(walk)):
            kind, arg = walk[i]
            if kind == "key":
                if not isinstance(value, dict) or arg not in value:
                    return MISSING
                value = value[arg]
                continue
            if kind == "index":
                if not isinstance(value, list) or arg >= len(value):
                    return MISSING
                value = value[arg]
                continue
            if not isinstance(value, list):
                return MISSING
            out: list[Any] = []
            for item in value:
                got = gather(item, i + 1)
                if got is MISSING:
                    if i == last:
                        return MISSING
                    continue
                out.extend(got)
            return out
        return [value]

    return lambda doc: gather(doc, 0)


PATH_WORDS = (
    "a record path: keys joined by dots, `[n]` for the n-th item of a list, `name[]` for every item "
    "(e.g. `data.user.clips`, `[1].data.user.clips.edges[].node`)"
)
"""What a path a user writes (a spec's `shapes`) may be, in words for an error message."""


def path_problem(path: str) -> str | None:
    """What is wrong with a path a user wrote, or None. Alternatives (`a|b`) are a list in a spec, not `|`."""
    if not path.strip() or "|" in path or any(part != part.strip() for part in path.split(".")):
        return f"{path!r} is not a record path"
    try:
        walk = steps(path)
    except ValueError:
        return f"{path!r} is not a record path"
    # `a []`: a key that ends in a space before its brackets
    if any(kind == "key" and value != value.strip() for kind, value in walk):
        return f"{path!r} is not a record path"
    return None


def dig(doc: Any, path: str) -> Any:
    return compile_path(path)(doc)


def first(doc: Any, paths: tuple[str, ...]) -> Any:
    """The value at the first of `paths` that resolves, else MISSING."""
    for path in paths:
        value = compile_path(path)(doc)
        if value is not MISSING:
            return value
    return MISSING
