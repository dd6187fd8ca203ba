"""A declared endpoint's pages, in its declared paging style with that style's traps.

The records of the first list kind page by offset (newer items published since at the front of a newest-first
listing, as `SandboxConfig.new_items` asks); the other kinds fill each page by its number, as the multi-list
searches do. Cursors are the sandbox's own (`sandbox.emulation.cursor_values`): opaque and bound to their query,
or for `max_cursor` the last record's time in milliseconds. Each style ends its pages as the built-in endpoints
of that style do, with the quirks on:

- a `more` flag declared: the last page says no more (false, or 0 for `max_cursor`) and still carries a cursor
  (shop products, reels, short-video profile); following it costs a request and answers an empty page;
- `max_id` and `max_cursor` without a flag: the last page still carries its cursor, which answers an empty page
  with none (trimmed reels and profile videos);
- the `cursor` style without a flag (or a token style whose `end_values` are not harvest's `-end-`): the last
  page of records carries a cursor, and the page it asks for answers the first sentinel and no records (pin
  search's `"cursor": "-end-"`), billed;
- `page_id_and_cursor`: the last page keeps the second parameter without the first; sent alone it is refused
  (400, not billed), like page photos;
- otherwise the cursor is null on the last page (comment replies, creative search).

A paged endpoint that is not newest first repeats the last record of a page at the top of the next (the
repeat-items quirk of the searches): keys stay unique, a client that does not deduplicate counts twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harvest.connectors.catalog.paging_styles import END_OF_PAGES
from harvest.sandbox.emulation import cursor_values as cursors
from harvest.sandbox.emulation.generic import threads
from harvest.sandbox.emulation.generic.declared_form import DeclaredEndpoint, DeclaredKind
from harvest.sandbox.emulation.generic.joined_values import Asked, asked, relations_for
from harvest.sandbox.emulation.generic.request_form import DeclaredPageNumbers
from harvest.sandbox.emulation.generic.synthetic_values import (
    empty_record,
    foreign_item,
    inner,
    make_record,
    put,
    with_nested,
)
from harvest.sandbox.emulation.page import Ctx, ServedPage, window, with_repeat
from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.scope import PagePlan, Scope
from harvest.sandbox.wire.validation import InvalidRequest


def page_size(ctx: Ctx, decl: DeclaredEndpoint) -> int:
    """The config's size for this path when it names one, else the request's records-per-page parameter, else
    the declared number, else the config's size."""
    config = ctx.config
    if decl.path in config.page_size_by_path:
        return config.page_size_for(decl.path)
    asked = ctx.params.get(decl.per_page_param) if decl.per_page_param else None
    if asked is not None and asked.isdigit() and int(asked) > 0:
        return int(asked)
    return decl.per_page or config.page_size


def _echo(ctx: Ctx, decl: DeclaredEndpoint) -> Asked:
    """The request as its records see it: values a text column of the same name repeats (the url looked up, the
    advertiser asked for), and what it names, which a column that `joins` another table's agrees with."""
    paging = set(decl.paging.params)
    values = {k: v for k, v in ctx.params.values.items() if k not in paging}
    return asked(decl, values, relations_for(ctx.config))


def _records(kind: DeclaredKind, s: Scope, positions: range | list[int], echo: Asked) -> list[Record]:
    return [make_record(kind, s, pos, echo) for pos in positions]


def _lay_out(
    decl: DeclaredEndpoint,
    lists: dict[str, list[Record]],
    one_pos: int,
    s: Scope,
    echo: Asked,
    page: int = 0,
) -> ServedPage:
    """The body holding every kind at its place (a `first_page_only` one on the first page only; a list of a kind
    with `where` also holds an item of another kind); `records` holds each kind's records (unwrapped, nested
    ones after the item holding them)."""
    body: Any = {}
    records: dict[str, list[Record]] = {}
    for kind in sorted(decl.kinds, key=lambda k: k.at != ""):  # the answer itself first, the rest into it
        if kind.first_page_only and page > 0:
            records[kind.table] = []
        elif kind.one:
            item = make_record(kind, s, one_pos, echo)
            body = put(body, kind.at, item) if kind.at else {**item, **body}
            records[kind.table] = [inner(kind, got) for got in with_nested(kind, [item])]
        else:
            items = lists.get(kind.table, [])
            records[kind.table] = [inner(kind, got) for got in with_nested(kind, items)]
            foreign = foreign_item(kind, s, page) if items else None
            if foreign is not None:
                items = [items[0], foreign, *items[1:]]
            body = put(body, kind.at, items) if kind.at else items
    return ServedPage(body, records, envelope=isinstance(body, dict))


def single(ctx: Ctx, decl: DeclaredEndpoint) -> ServedPage:
    """One answer: each list kind holds up to a page of records (at least one of the first), each object kind
    one record."""
    if (asked := threads.asked_thread(ctx, decl)) is not None:
        return _thread_page(ctx, decl, *asked)
    s = ctx.scope()
    size = page_size(ctx, decl)
    listed = [k for k in decl.kinds if not k.one]
    plan = ctx.page_plan(s, {k.table: size for k in listed}, listed[0].table) if listed else None
    lists = {k.table: _records(k, s, range(plan.last[k.table]), _echo(ctx, decl)) for k in listed if plan}
    page = _lay_out(decl, lists, 0, s, _echo(ctx, decl))
    page.follow = _marked(decl, lists, {t: range(len(r)) for t, r in lists.items()}, s)
    return page


def paged(ctx: Ctx, decl: DeclaredEndpoint) -> ServedPage:
    listed = [k for k in decl.kinds if not k.one]
    if not listed:
        return single(ctx, decl)
    if (asked := threads.asked_thread(ctx, decl)) is not None:
        return _thread_page(ctx, decl, *asked)
    s = ctx.scope()
    size = page_size(ctx, decl)
    primary = listed[0]
    plan = ctx.page_plan(s, {k.table: size for k in listed}, primary.table)
    new = ctx.new_items
    total = plan.total(primary.table) + new
    start = _start(ctx, decl, s, new)
    if start >= total > 0 and ctx.dangling and ends_with_sentinel(decl):
        return _sentinel(decl)
    lo, hi = window(start, size, total)
    echo = _echo(ctx, decl)
    where = {primary.table: [i - new for i in with_repeat(ctx, lo, hi, total)]}
    where |= {kind.table: list(_page_positions(plan, kind.table, lo // size)) for kind in listed[1:]}
    lists = {kind.table: _records(kind, s, where[kind.table], echo) for kind in listed}
    page = _lay_out(decl, lists, 0, s, echo, page=lo // size + 1 if _asked_later(ctx, decl) else 0)
    page.follow = _marked(decl, lists, where, s)
    _end_signals(ctx, decl, page, s, (lo, hi, total, new))
    return page


def _asked_later(ctx: Ctx, decl: DeclaredEndpoint) -> bool:
    """Whether the request asks for a page after the first (a cursor sent, or a page number past the first)."""
    numbers = decl.paging.page
    if numbers is not None:
        asked = ctx.params.get(numbers.param)
        return asked is not None and str(asked) != str(numbers.first)
    return any(ctx.params.get(param) is not None for param, _ in decl.paging.next)


def _marked(
    decl: DeclaredEndpoint, lists: dict[str, list[Record]], where: Mapping[str, Sequence[int]], s: Scope
) -> list[dict[str, str]]:
    """The thread cursors of the follow kind's records (`threads`), put on them; the follow-ups they ask."""
    kind = threads.follow_kind(decl)
    if kind is None or kind.table not in lists:
        return []
    return threads.mark(decl, kind, lists[kind.table], list(where[kind.table]), s)


def _thread_page(ctx: Ctx, decl: DeclaredEndpoint, thread: str, offset: int) -> ServedPage:
    """A page of a thread's records, the other kinds as on the query's pages (a list kind empty)."""
    kind = threads.follow_kind(decl)
    assert kind is not None
    s, echo = ctx.scope(), _echo(ctx, decl)
    records, token, asks = threads.thread_records(ctx, decl, thread, offset, page_size(ctx, decl), echo)
    lists = {k.table: records if k is kind else [] for k in decl.kinds if not k.one}
    page = _lay_out(decl, lists, 0, s, echo, page=1)  # a thread's page is never the query's first
    page.follow = asks
    page.body, page.next = threads.thread_next(decl, page.body, token)
    return page


_FLAGGED = ("max_id", "max_cursor")
"""Styles whose last page keeps its cursor without a flag saying so (the trimmed answers of reels, profile)."""


def ends_with_sentinel(decl: DeclaredEndpoint) -> bool:
    """Whether the last page of records carries a cursor to a page holding only the sentinel (pin search's
    way): a `cursor` style without a `more` flag (the service's own cursor style ends so), or a token style
    whose declaration names sentinels of its own. Flags, `max_id`/`max_cursor` and paired cursors have their
    own traps."""
    paging = decl.paging
    if not paging.end_values or paging.more or paging.style in (*_FLAGGED, "page_id_and_cursor"):
        return False
    return paging.style == "cursor" or paging.end_values != END_OF_PAGES


def _page_positions(plan: PagePlan, table: str, page_no: int) -> range:
    first = plan.start(table, page_no)
    return range(first, first + plan.count(table, page_no))


def _start(ctx: Ctx, decl: DeclaredEndpoint, s: Scope, new: int) -> int:
    """Where the asked page starts; `InvalidRequest` (400, not billed) for a cursor that is not this query's, or
    a page number the service does not answer (past `last`)."""
    if decl.paging.page is not None:
        return _page_start(ctx, decl.paging.page, page_size(ctx, decl))
    params = [param for param, _ in decl.paging.next]
    given = {p: v for p in params if (v := ctx.params.get(p)) is not None}
    if not given:
        return 0
    if len(given) < len(params):
        missing = next(p for p in params if p not in given)
        raise InvalidRequest(missing, f"{' and '.join(repr(p) for p in params)} must be passed together")
    if decl.paging.style == "max_cursor":
        return cursors.parse_ms_cursor(s, given[params[0]], floor=-new) + new
    starts = [cursors.decode(given[p], f"d{n}", s, p) for n, p in enumerate(params)]
    if any(at != starts[0] for at in starts[1:]):
        raise InvalidRequest(params[-1], f"'{params[-1]}' does not belong with '{params[0]}'")
    return starts[0]


def _page_start(ctx: Ctx, numbers: DeclaredPageNumbers, size: int) -> int:
    asked = ctx.params.get(numbers.param)
    number = numbers.first if asked is None else int(asked)
    past = numbers.last is not None and number > numbers.last
    if number < numbers.first or past or (number - numbers.first) % numbers.step:
        upto = "" if numbers.last is None else f" to {numbers.last}"
        step = "" if numbers.step == 1 else f", every {numbers.step}"
        raise InvalidRequest(numbers.param, f"'{numbers.param}' must be from {numbers.first}{upto}{step}")
    return (number - numbers.first) // numbers.step * size


def _page_signals(
    decl: DeclaredEndpoint, page: ServedPage, size: int, span: tuple[int, int, int, int]
) -> None:
    """A page-number page's end signals: the `more` flag and the count of pages where declared; `next` as a
    client reading them goes on (never past `last`), `dangling` the number one past the end (an empty page)."""
    numbers, paging = decl.paging.page, decl.paging
    assert numbers is not None
    lo, hi, total, _ = span
    after = numbers.first + (lo // size + 1) * numbers.step
    within = numbers.last is None or after <= numbers.last
    ask = {numbers.param: str(after)} if within else None
    if hi < total:
        page.next = ask
    elif lo < hi:
        page.dangling = ask
    if paging.more:
        page.body = put(page.body, paging.more, hi < total)
    if numbers.pages:
        page.body = put(page.body, numbers.pages, max(1, -(-total // size)))


def _sentinel(decl: DeclaredEndpoint) -> ServedPage:
    """The page behind the last page's cursor: the sentinel where the cursor goes; no records, as pin search
    answers, unless a cursor sits inside an object (then empty lists: a page whose content is only a sentinel)."""
    body: dict[str, Any] = {}
    for _, path in decl.paging.next:
        body = put(body, path, decl.paging.end_values[0])
    if any("." in path or "[" in path for _, path in decl.paging.next):
        for kind in decl.kinds:
            if not kind.one and kind.at:
                body = put(body, kind.at, [])
    return ServedPage(body, {kind.table: [] for kind in decl.kinds})


def _end_signals(
    ctx: Ctx, decl: DeclaredEndpoint, page: ServedPage, s: Scope, span: tuple[int, int, int, int]
) -> None:
    """Cursors and the `more` flag of a page, and `next`/`dangling` as a client reading them goes on."""
    if decl.paging.page is not None:
        _page_signals(decl, page, page_size(ctx, decl), span)
        return
    lo, hi, total, new = span
    paging = decl.paging
    more = hi < total
    if paging.style == "max_cursor":
        token = str(cursors.ms_cursor(s, hi - 1 - new)) if lo < hi else "0"
        tokens = {paging.next[0][0]: token}
    else:
        tokens = {p: cursors.encode(f"d{n}", hi, s) for n, (p, _) in enumerate(paging.next)}
    keep = ctx.dangling and lo < hi  # the last page of records keeps a cursor where the style's quirk has it
    if more:
        sent, page.next = tokens, tokens
    elif keep and paging.more:
        sent, page.dangling = tokens, tokens
    elif keep and paging.style in _FLAGGED:
        sent, page.next = tokens, tokens
    elif keep and paging.style == "page_id_and_cursor":
        sent = {p: tokens[p] for p, _ in paging.next[1:]}
    elif keep and ends_with_sentinel(decl):
        sent, page.next = tokens, tokens
    else:
        sent = {}
    for param, path in paging.next:
        wire = sent.get(param)
        if paging.style == "max_cursor":
            page.body = put(page.body, path, int(wire) if wire else 0)
        else:
            page.body = put(page.body, path, wire)
    if paging.more:
        flag: Any = (1 if more else 0) if paging.style == "max_cursor" else more
        page.body = put(page.body, paging.more, flag)
    if decl.path in ctx.config.drift.stuck_cursor:
        _stuck(ctx, decl, page)


def _stuck(ctx: Ctx, decl: DeclaredEndpoint, page: ServedPage) -> None:
    """The `stuck_cursor` drift, wherever the declaration puts its cursors: a page asked for with cursors hands
    the same ones back (a client that does not notice pays for that page forever)."""
    asked = {p: ctx.params.get(p) for p, _ in decl.paging.next}
    if all(asked.values()):
        for param, path in decl.paging.next:
            value = asked[param]
            page.body = put(
                page.body, path, int(value) if decl.paging.style == "max_cursor" and value else value
            )


def not_found_body(decl: DeclaredEndpoint) -> Any:
    """The service's "not found" of a declared endpoint: 200, its lists empty, its objects null (the answer
    itself with every column null), no cursor, the flag false."""
    body: Any = {}
    for kind in sorted(decl.kinds, key=lambda k: k.at != ""):
        if kind.at == "":
            body = {**empty_record(kind), **body} if kind.one else []
        else:
            body = put(body, kind.at, None if kind.one else [])
    if isinstance(body, dict) and not decl.paging.single:
        for _, path in decl.paging.next:
            body = put(body, path, 0 if decl.paging.style == "max_cursor" else None)
        if decl.paging.more:
            body = put(body, decl.paging.more, 0 if decl.paging.style == "max_cursor" else False)
    return body
