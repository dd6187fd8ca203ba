"""Values that name another table's record, so that offline the tables join as the service's do.

A declared column's `joins` names the columns of other tables holding the same values (`table.column`), and its
`template` how its value is made of its record's (`t3_{id}`). A column that joins takes, in this order:
- in an item nested in another of its kind, the holder's value of the column it joins in its own table (a
  reply's `parent_id` is its comment's `name`);
- when the request's URL names a record (one the sandbox listed, `https://www.<platform>.example/<table>/<key>`,
  or a coded endpoint's pin or video URL), that record's key, where the joined table holds records of the same
  ids (the tables' keys join: a listed post and a post's details): a comment's `video_id`, a board's pins'
  `board_id`;
- when the request names a thing by a parameter a detail endpoint of the joined table is asked by (a handle, a
  subreddit, a page's URL), the key that detail answer has (`subject_key`): the videos of a handle name the
  account its profile is.
A column none of these decides keeps its drawn value: a search's records are by many authors. A listed record's
`url` carries what its listing was asked for (`?handle=nasa`), as a real tweet's URL holds its author's handle,
so a detail asked for with it resolves its columns as the listing did (a tweet's details name its author).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

from harvest.connectors.catalog.record_paths import steps
from harvest.sandbox.emulation.generic.declared_form import DeclaredColumn, DeclaredEndpoint, read_declaration
from harvest.sandbox.emulation.platforms.pinboard import PIN_URL
from harvest.sandbox.emulation.platforms.short_video import VIDEO_URL
from harvest.sandbox.emulation.platforms.video_platform import VIDEO_URL as WATCH_URL
from harvest.sandbox.emulation.scope import Scope
from harvest.sandbox.emulation.subjects import platform_host, subject_id, subject_secret

if TYPE_CHECKING:
    from harvest.sandbox.config import SandboxConfig

ID_NAME = re.compile(r"(?:^|_)u?id$|[a-z]Id$")
"""A name that says it holds an id (`id`, `channel_id`, `uid`, `channelId`)."""
_MADE_URL = re.compile(
    r"https://www\.[a-z0-9-]+\.example/(?P<table>[a-z0-9_]+)/(?P<key>[A-Za-z0-9_-]+)(?:\?(?P<query>.*))?"
)
_CODED_URLS = (
    (PIN_URL, "pinboard_pins"),
    (VIDEO_URL, "short_video_videos"),
    (WATCH_URL, "video_platform_videos"),
)
"""The URLs coded endpoints give their records, and the tables harvest lands those records in."""
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
SECURE_PREFIX = "MS4wLjABAAAA"
"""How a short-video account's secure id begins."""


@dataclass(frozen=True)
class Named:
    """The record a URL names: its table (None: not known), its key, what its listing was asked for."""

    table: str | None
    key: str
    context: Mapping[str, str] = field(default_factory=dict)


def named(url: str) -> Named | None:
    """The record a URL the sandbox made names (None for any other text)."""
    made = _MADE_URL.fullmatch(url)
    if made is not None:
        return Named(made["table"], made["key"], dict(parse_qsl(made["query"] or "")))
    for pattern, table in _CODED_URLS:
        if (coded := pattern.fullmatch(url)) is not None:
            return Named(table, coded["key"], {k: v for k, v in coded.groupdict().items() if k != "key"})
    return None


def own_url(s: Scope, table: str, key: Any, listing: Mapping[str, str]) -> str:
    """A listed record's URL: its table and key, then what its listing was asked for."""
    query = f"?{urlencode(sorted(listing.items()))}" if listing else ""
    return f"https://{platform_host(s.path)}/{table}/{key}{query}"


@dataclass(frozen=True)
class Relations:
    """What the declarations say of their tables' ids, all of them together."""

    keys: Mapping[str, str]
    """Table -> its key column, for tables keyed on one column."""
    spaces: Mapping[str, str]
    """Table -> a name shared by the tables of the same ids (their keys join)."""
    asked_by: Mapping[str, tuple[str, ...]]
    """Table -> the parameters naming the one record a detail answer of it is about (a handle, a URL)."""
    templates: Mapping[tuple[str, str], str]
    own_urls: frozenset[tuple[str, str]] = frozenset()
    """(table, column) of the URLs naming their own record besides `url`: the columns a request's URL joins
    (an ad's `ad_url`, which the ad details endpoint takes)."""

    def same_ids(self, one: str | None, other: str) -> bool:
        return one is not None and self.spaces.get(one, one) == self.spaces.get(other, other)

    def value_of(
        self, table: str, column: str, key: str, params: Mapping[str, str] | None = None
    ) -> str | None:
        """The value of `column` in the record of `table` keyed `key`, asked for with `params`: the key, a
        parameter of its name (a profile's `handle`), or a template made of them (None: another value)."""
        own, params = self.keys.get(table), params or {}
        if column == own:
            return key
        template = self.templates.get((table, column))
        if template is None:
            return params.get(column)
        return filled(template, {} if own is None else {own: key}, params)


def relations_of(decls: Iterable[DeclaredEndpoint]) -> Relations:
    keys: dict[str, str] = {}
    links: list[tuple[str, str, str]] = []
    asked_by: dict[str, tuple[str, ...]] = {}
    templates: dict[tuple[str, str], str] = {}
    own_urls: set[tuple[str, str]] = set()
    for decl in decls:
        for kind in decl.kinds:
            if len(kind.key) == 1:
                keys[kind.table] = kind.key[0]
                if kind.one or kind.first_page_only:
                    known = asked_by.get(kind.table, ())
                    asked_by[kind.table] = (*known, *(p for p in decl.subject_params if p not in known))
            for column in kind.columns:
                if column.template is not None:
                    templates[(kind.table, column.name)] = column.template
                links += [(kind.table, column.name, f"{t}.{c}") for t, c in column.joins]
                if column.path.startswith("$params."):
                    own_urls |= {(t, c) for t, c in column.joins if c.endswith("url")}
    parent = {table: table for table in keys}

    def root(table: str) -> str:
        while parent[table] != table:
            table = parent[table]
        return table

    for table, name, target in links:
        other, other_name = target.split(".")
        if keys.get(table) == name and keys.get(other) == other_name:
            parent[root(table)] = root(other)
    return Relations(keys, {t: root(t) for t in keys}, asked_by, templates, frozenset(own_urls))


_RELATIONS: dict[tuple[int, int], tuple[Any, Any, Relations]] = {}
_KEPT = 4


def relations_for(config: SandboxConfig) -> Relations:
    """The relations of every endpoint `config`'s sandbox knows the declaration of, read once per catalog."""
    found = config.__dict__.get("_relations")
    if isinstance(found, Relations):
        return found
    ids = (id(config.catalog), id(config.declared))
    kept = _RELATIONS.get(ids)
    if kept is None or kept[0] is not config.catalog or kept[1] is not config.declared:
        declarations = {**config.catalog, **config.declared}
        made = relations_of(read_declaration(path, d) for path, d in declarations.items())
        while len(_RELATIONS) >= _KEPT:
            del _RELATIONS[next(iter(_RELATIONS))]
        kept = _RELATIONS[ids] = (config.catalog, config.declared, made)
    object.__setattr__(config, "_relations", kept[2])
    return kept[2]


def detail_key(s: Scope, param: str, value: str, key_column: str) -> str:
    """The key of the record a detail answer asked for with `param=value` is about: the value where it is the
    key or an id, else the id of what it names (`subjects.subject_id`)."""
    if param == key_column or ID_NAME.search(param):
        return value
    return subject_id(s, value, did=key_column == "did")


@dataclass(frozen=True)
class Asked:
    """A request as the records of its answer see it."""

    echo: Mapping[str, str]
    """Its values (cursors aside): a text column of a parameter's name repeats it."""
    subjects: Mapping[str, str]
    """The parameters naming what it is about, but a URL naming a record; and what that record's listing was
    asked for."""
    listing: Mapping[str, str]
    """What its listed records' URLs carry: the parameters naming what it is about, but a record's URL."""
    named: Named | None
    relations: Relations

    def subject_key(self, s: Scope, column: DeclaredColumn) -> str | None:
        """The key of the one record a detail answer is about (None: the answer names none)."""
        if self.named is not None:
            return self.named.key
        for param, value in self.listing.items():
            return detail_key(s, param, value, column.name)
        # else an id it was asked by that the declaration leaves optional (a basic profile's `userId`)
        return next((v for p, v in self.echo.items() if v and ID_NAME.search(p)), None)

    def secure_id(self, s: Scope, column: DeclaredColumn) -> str | None:
        """A `sec_uid` of the account the request names by its handle, as the coded endpoints make it
        (`MS4wLjABAAAA` and 40 hex digits: the videos' `author.sec_uid`); None for another column."""
        handle = self.subjects.get("user_id") or self.subjects.get("handle")
        if column.name != "sec_uid" or not handle:
            return None
        return SECURE_PREFIX + subject_secret(s, handle, 40)

    def joined(self, s: Scope, column: DeclaredColumn, about_named: bool) -> str | None:
        """A `joins` column's value the request decides (None: none; the holder's is the caller's).
        `about_named`: the record is the one the request's URL names (a detail answer), which resolves its
        columns as its listing did; a list in the answer (the video's comments) is not that record."""
        relations = self.relations
        subjects = self.subjects if about_named else self.listing
        if self.named is not None:
            for table, other in column.joins:
                value = relations.value_of(table, other, self.named.key)
                if value is not None and relations.same_ids(self.named.table, table):
                    return value
        for table, other in column.joins:
            key_column = relations.keys.get(table)
            for param in relations.asked_by.get(table, ()):
                if key_column is not None and (value := subjects.get(param)):
                    key = detail_key(s, param, value, key_column)
                    made = relations.value_of(table, other, key, {param: value})
                    if made is not None:
                        return made
        return None

    def unnamed(self, column: DeclaredColumn) -> str | None:
        """The key column a column joins when it names a thing the request may not (a comment's author) in a
        table whose details are about what a handle or URL names: its drawn value is then one of their ids
        (`subject_id`, a channel's `UC...`); None for another column."""
        return next((other for t, other in column.joins if _subject_keyed(self.relations, t, other)), None)


def _subject_keyed(relations: Relations, table: str, column: str) -> bool:
    """Whether `column` is the key of `table` and that table's details are asked for by what names a thing (a
    handle, a URL): its ids are `subject_id`'s."""
    key_column = relations.keys.get(table)
    params = relations.asked_by.get(table, ())
    return column == key_column and any(p != key_column and not ID_NAME.search(p) for p in params)


def asked(decl: DeclaredEndpoint, values: Mapping[str, str], relations: Relations) -> Asked:
    subjects = {p: values[p] for p in decl.subject_params if values.get(p)}
    found = next((n for v in subjects.values() if (n := named(v)) is not None), None)
    listing = {p: v for p, v in subjects.items() if named(v) is None}
    inherited = dict(found.context) if found is not None else {}
    return Asked(values, {**inherited, **listing}, listing, found, relations)


def read(doc: Any, path: str) -> Any:
    """The value at a plain record path (keys and `[n]`), None where there is none."""
    for kind, arg in steps(path):
        if kind == "key" and isinstance(doc, dict):
            doc = doc.get(arg)
        elif kind == "index" and isinstance(doc, list) and len(doc) > arg:
            doc = doc[arg]
        else:
            return None
    return doc


def filled(template: str, values: Mapping[str, Any], echo: Mapping[str, str]) -> str | None:
    """A template with its record's values and the request's parameters put in (None: one is missing)."""
    parts = {}
    for name in _PLACEHOLDER.findall(template):
        got = echo.get(name[len("$params.") :]) if name.startswith("$params.") else values.get(name)
        if got is None:
            return None
        parts[name] = str(got)
    return _PLACEHOLDER.sub(lambda m: parts[m.group(1)], template)
