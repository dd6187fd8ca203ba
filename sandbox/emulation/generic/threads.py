"""Follow-up cursors of a declared endpoint (`paging.follow`): records that hold a thread behind a cursor of their
own, and that thread's records.

About half the records of the follow kind (a stable draw per record) carry, at the follow path, a cursor bound
to their query (`fu<thread>`, an offset, the query's tag: a cursor replayed on another query is refused). Asked
for in the follow parameter with the query's other parameters, it answers the thread's records from that
offset, a page at a time: 1 to 2 pages of records (drawn per thread), its next page behind the declared next
cursor (a comment thread's "more replies", `more.cursor`), its own records carrying threads of their own down to
`THREAD_DEPTH` levels. A thread's records are keyed apart from the query's (a scope of their own), and every
record of every thread is reached once by a client that asks each cursor once.
"""

from __future__ import annotations

from typing import Any

from harvest.sandbox.emulation import cursor_values as cursors
from harvest.sandbox.emulation.generic.declared_form import DeclaredEndpoint, DeclaredKind
from harvest.sandbox.emulation.generic.joined_values import Asked
from harvest.sandbox.emulation.generic.synthetic_values import inner, make_record, put
from harvest.sandbox.emulation.page import Ctx, window
from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.scope import Scope
from harvest.sandbox.emulation.stablehash import Draw

THREAD_TAG = "fu"
THREAD_DEPTH = 2
"""Levels of threads: a record of the query's pages holds one, a record of that thread may hold another."""


def follow_kind(decl: DeclaredEndpoint) -> DeclaredKind | None:
    follow = decl.paging.follow
    return None if follow is None else next((k for k in decl.kinds if k.table == follow.kind), None)


def asked_thread(ctx: Ctx, decl: DeclaredEndpoint) -> tuple[str, int] | None:
    """(thread, offset) when the request asks for a thread's page: a thread cursor in the next cursor's
    parameter (its next page) or in the follow parameter; None for the query's own pages."""
    follow = decl.paging.follow
    if follow is None:
        return None
    s = ctx.scope()
    for name in dict.fromkeys([*(p for p, _ in decl.paging.next), follow.param]):
        token = ctx.params.get(name)
        got = cursors.read_tagged(token, s) if token else None
        if got is not None and got[0].startswith(THREAD_TAG):
            return got[0][len(THREAD_TAG) :], got[1]
    return None


def _size(s: Scope, thread: str, page_size: int, chained: bool) -> int:
    """How many records a thread holds: up to two pages when its next page can be asked for, else one."""
    return Draw(s.key, "thread size", thread).num(1, page_size * (2 if chained else 1))


def thread_scope(ctx: Ctx, thread: str) -> Scope:
    """The scope a thread's records are made in (keys of their own, unique beside the query's)."""
    return ctx.scope(identity=f"{ctx.scope().identity}|thread {thread}")


def thread_records(
    ctx: Ctx, decl: DeclaredEndpoint, thread: str, offset: int, page_size: int, echo: Asked
) -> tuple[list[Record], str | None, list[dict[str, str]]]:
    """The thread's records from `offset` (a page of them), the cursor of its next page (None: this is its
    last), and the follow-ups its records ask (threads of their own, marked on them)."""
    kind = follow_kind(decl)
    assert kind is not None
    chained = decl.paging.page is None and bool(decl.paging.next)
    s, ts = ctx.scope(), thread_scope(ctx, thread)
    size = _size(s, thread, page_size, chained)
    lo, hi = window(offset, page_size, size)
    records = [make_record(kind, ts, pos, echo) for pos in range(lo, hi)]
    asks = mark(decl, kind, records, range(lo, hi), s, thread)
    return records, cursors.encode(THREAD_TAG + thread, hi, s) if chained and hi < size else None, asks


def mark(
    decl: DeclaredEndpoint, kind: DeclaredKind, records: list[Record], positions: range | list[int], s: Scope,
    thread: str = "",
) -> list[dict[str, str]]:  # fmt: skip
    """Put a thread cursor on the records that hold a thread; the follow-up requests they hand out."""
    follow = decl.paging.follow
    depth = thread.count("-") + 1 if thread else 0
    if follow is None or depth >= THREAD_DEPTH:
        return []
    asks: list[dict[str, str]] = []
    for record, pos in zip(records, positions, strict=True):
        child = f"{thread}-{pos}" if thread else str(pos)
        if Draw(s.key, "thread", child).num(0, 1):
            token = cursors.encode(THREAD_TAG + child, 0, s)
            put(inner(kind, record), follow.path, token)
            asks.append({follow.param: token})
    return asks


def thread_next(decl: DeclaredEndpoint, body: Any, token: str | None) -> tuple[Any, dict[str, str] | None]:
    """A thread page's body with its next cursor (and `more` flag) where the declaration reads them."""
    for _, path in decl.paging.next[:1]:
        body = put(body, path, token)
    if decl.paging.more:
        body = put(body, decl.paging.more, token is not None)
    return body, ({decl.paging.next[0][0]: token} if token and decl.paging.next else None)
