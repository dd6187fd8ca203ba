"""The run journal: which queries a run started and ended, and every credit it reserved, durable as it happens.

A crash (kill -9, power loss, Ctrl-C at the wrong moment) must not make harvest forget what it paid for. The raw
pages hold every paid answer; the journal holds the rest of what a resume needs:

- ``start``: a query began (its plain `QuerySpec`), so a resumed run knows it existed even if it never paid;
- ``end``: a query ended, with its summary, so a resumed run does not repeat it (a later ``start`` of it, a
  flow retry running it again, undoes that until it ends again);
- ``reserve`` / ``settle`` / ``release``: the credit ledger's reservations. A reservation never closed was in
  flight at the crash: the service may have billed it, so a resumed run counts it as spent and the budget stays
  a hard cap across the crash. ``adjust``: credits counted for refusals that the account's balance showed were
  not billed, given back (`CreditLedger.reconcile`).
- ``price``: an answer charged more than the cost table's price of its price key (`connectors.credits.prices`),
  the run's highest so far, whatever was held; ``hold``: the run held a price from its first request, what the
  runs before it saw charged; ``seen``: an answer named the charge of a key held so. A resume, a `--continue` and
  the job's next night reserve what they say from their first request (`flows.run.chain.carried`), instead of the
  cost table's price again.
- ``balance``: the account's balance read before the session's first request (``before``) and after its last
  (``after``), so the service's bill of a run survives a crash (`flows.run.bill`).

Each process that writes a run's journal first appends a ``session`` line, carrying what the run is (its
manifest without the queries and files: job, spec hash, plan key, budget, start), so a manifest a disk lost can be
made again from the journal (`tasks.output.manifest.run_heads`); reservation ids restart in every session, so
they are only compared within one. One file per run (``raw/<run_id>/journal.jsonl``), written by
the flow's process only.

Durability: every line survives a killed process (one unbuffered write each). A power cut loses what the
operating system had not written yet, unless the line was synced: under ``durability: fsync`` every line is; by
default the ``session`` and ``end`` lines are (`sync_ends`), and a sync writes every line before it too, so what
a resume trusts (which queries ended, the credits reserved up to then) survives; only the lines of the last
moments before the cut may not. The `end` lines are synced from a thread (`SyncBehind`): written at once, on
the disk within one sync's time, never a wait for the flow's event loop (synced in line, a 2,000-query fan-out
spent 41% of its wall in them on a busy disk). Measured cost in docs/scheduled-jobs.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from harvest.tasks.output.append_file import JsonLinesWriter, iter_json_lines
from harvest.tasks.output.machine_fault import FaultStop


@dataclass
class SessionBalance:
    """One session's balance readings and what it counted as spent: the service's bill, session by session."""

    before: int | None = None
    after: int | None = None
    settled: int = 0
    """Credits of the reservations the session settled (as counted when each ended)."""
    open: int = 0
    """Credits of the reservations still open when the session ended (a crash): billed or not, unknown."""
    named: int = 0
    """Of `settled`, the charges an answer named: what the session was billed at least."""
    unread: int = 0
    """Of `settled`, the answers that came unreadable (billed before they were sent): billed too."""


@dataclass
class JournalState:
    """What a run's journal says, folded: the state a resume starts from."""

    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Query id -> the query as started (plain data), in start order."""
    ended: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Query id -> its summary, for the queries that ended and were not started again after (a flow retry runs a
    failed query again: until it ends again, its first end is no longer its outcome)."""
    spent: Counter[str] = field(default_factory=Counter)
    """Credits per query: settled amounts plus reservations left open by a crash."""
    unknown: Counter[str] = field(default_factory=Counter)
    """Credits per query counted without a named charge and still counted: refusals (429, 5xx) and requests in
    flight at a crash, which the account's balance may show were not billed (`CreditLedger.carry_over`)."""
    in_flight: list[tuple[str, int, int]] = field(default_factory=list)
    """Reservations no session closed, requests that may or may not have been billed: (query id, page, credits
    counted), in the order they were sent; page 0 in journals written before the page was."""
    last_settled: list[tuple[int, int, str, int, int]] = field(default_factory=list)
    """Per session that named its attempt log, its last settled reservation: (the log's session number, the
    reservation's id, query id, page, credits counted). A kill can fall between a settle and its attempt line,
    only ever the session's last settle's (the two are written with no await between them)."""
    sessions: int = 0
    run: dict[str, Any] | None = None
    """What the run is, as its newest session line says (None in journals written before it did)."""
    balances: list[SessionBalance] = field(default_factory=list)
    """Per session, in order: the balance readings and the credits counted (`flows.run.bill`)."""
    prices: dict[str, int] = field(default_factory=dict)
    """Price key -> the highest charge above the cost table an answer named, over every session (`priced`)."""
    held: dict[str, int] = field(default_factory=dict)
    """Price key -> what the run held from its first request, from the runs before it (`held`)."""
    seen: set[str] = field(default_factory=set)
    """Held price keys whose charge an answer named (`seen`)."""

    @property
    def in_flight_at_crash(self) -> int:
        return len(self.in_flight)

    @property
    def total_spent(self) -> int:
        return sum(self.spent.values())

    @property
    def named(self) -> int:
        """The charges answers named, over every session."""
        return sum(session.named for session in self.balances)

    @property
    def unread(self) -> int:
        """The answers that came unreadable, over every session (journals before they were told apart from lost
        requests say "lost" for both)."""
        return sum(session.unread for session in self.balances)


class RunJournal(JsonLinesWriter):
    """Appends journal events; also the credit ledger's journal hook (`reserved`, `closed`).

    When this machine cannot write it (a full disk), a reservation's line raises (the ledger then sends
    nothing), and a query's start or end is not written but stops the run (`faults`): a resume finds such a
    query by its raw pages, or runs it anew if it paid for none. So does a settle's or a release's line: the
    answer it closes still reaches the raw store, and a resume counts the reservation as one in flight at a
    crash (spent whole, until the balance says otherwise)."""

    def __init__(
        self,
        path: Path | str,
        fsync: bool = False,
        faults: FaultStop | None = None,
        sync_ends: bool = True,
        run: dict[str, Any] | None = None,
        session: int | None = None,
    ) -> None:
        """`session`: the number of the session's attempt log (`OutputLayout.session_requests_file`)."""
        super().__init__(path, fsync)
        self.faults = faults
        self.sync_ends = sync_ends
        """Sync the `session` and `end` lines (and so every line before them) even when `fsync` is off."""
        self.session = session
        head = {"e": "session", **({"n": session} if session else {}), **({"run": run} if run else {})}
        self._noted(head, sync=sync_ends)  # not written (a full disk): the run stops before it pays

    def close(self) -> None:
        """Close, with a last sync; the machine's failure to sync stops the run like a failed write."""
        try:
            super().close()
        except OSError as exc:
            if self.faults is None or not self.faults.caught(exc, self.path):
                raise

    def _noted(self, event: dict[str, Any], sync: bool | str = False) -> None:
        try:
            self.append_json(event, sync=sync)
        except OSError as exc:
            if self.faults is None or not self.faults.caught(exc, self.path):
                raise

    def query_started(self, query: dict[str, Any]) -> None:
        self._noted({"e": "start", "query": query})

    def query_ended(self, summary: dict[str, Any]) -> None:
        self._noted({"e": "end", "summary": summary}, sync="behind" if self.sync_ends else False)

    def reserved(self, rid: int, query_id: str, amount: int, page: int = 0) -> None:
        self.append_json({"e": "reserve", "id": rid, "q": query_id, "c": amount, "p": page})

    def balance(self, when: str, credits: int) -> None:
        """The account's balance `before` the session's first request or `after` its last."""
        self._noted({"e": "balance", when: credits})

    def adjusted(self, query_id: str, credits: int) -> None:
        """What a query counted as spent changed by `credits` (refusals the account's balance shows unbilled)."""
        self.append_json({"e": "adjust", "q": query_id, "c": credits})

    def priced(self, key: str, credits: int) -> None:
        """An answer charged `credits` for a request of `key`, more than the cost table says (the run's highest)."""
        self._noted({"e": "price", "k": key, "c": credits})

    def held(self, key: str, credits: int) -> None:
        """The run holds `credits` for every request of `key` from its first: what earlier runs saw charged."""
        self._noted({"e": "hold", "k": key, "c": credits})

    def seen(self, key: str) -> None:
        """An answer named the charge of `key`, a key held from earlier runs."""
        self._noted({"e": "seen", "k": key})

    def closed(
        self, rid: int, counted: int | None, unknown: str | None = None, refused: int = 0, lost: int = 0
    ) -> None:
        """`counted` credits were spent on reservation `rid`; None: released, nothing spent. `unknown`: why no
        answer named the charge ("refusal", "unread", "lost"), so a resume can settle it with the balance; `refused` and
        `lost`: of a named count (a Dask round's), the refusals' credits whose charge no answer named and the
        credits of requests no status came back for: neither is a charge the session was surely billed."""
        if counted is None:
            self._noted({"e": "release", "id": rid})
        elif unknown is None:
            unnamed = {key: credits for key, credits in (("r", refused), ("l", lost)) if credits}
            self._noted({"e": "settle", "id": rid, "c": counted, **unnamed})
        else:
            self._noted({"e": "settle", "id": rid, "c": counted, "u": unknown})


def _events(path: Path) -> Iterator[dict[str, Any]]:
    return iter_json_lines(path) if path.exists() else iter(())


def read_journal(path: Path | str) -> JournalState:
    state = JournalState()
    open_: dict[int, tuple[str, int, int]] = {}
    log_number: int | None = None
    last: tuple[int, int, str, int, int] | None = None

    session = SessionBalance()

    def close_session() -> None:
        for query_id, amount, page in open_.values():
            state.spent[query_id] += amount
            state.unknown[query_id] += amount
            state.in_flight.append((query_id, page, amount))
            session.open += amount
        open_.clear()
        if last is not None:
            state.last_settled.append(last)

    for event in _events(Path(path)):
        kind = event.get("e")
        if kind == "session":
            close_session()
            log_number, last = event.get("n"), None
            state.sessions += 1
            state.run = event.get("run", state.run)
            session = SessionBalance()
            state.balances.append(session)
        elif kind == "balance":
            session.before = event.get("before", session.before)
            session.after = event.get("after", session.after)
        elif kind == "start":
            query = event["query"]
            state.started.setdefault(query["query_id"], query)
            state.ended.pop(query["query_id"], None)  # a later session ran it again (a flow retry): not ended
        elif kind == "end":
            summary = event["summary"]
            state.ended[summary["query_id"]] = summary
        elif kind in PRICE_EVENTS:
            _price_event(state, event)
        elif kind == "reserve":
            open_[event["id"]] = (event["q"], int(event["c"]), int(event.get("p", 0)))
        elif kind == "adjust":  # given back: a refusal's or an in-flight request's credits, of any session
            state.spent[event["q"]] += int(event["c"])
            state.unknown[event["q"]] = max(0, state.unknown[event["q"]] + int(event["c"]))
        elif kind in ("settle", "release"):
            held = open_.pop(event["id"], None)
            if held is not None and kind == "settle":
                credits = int(event["c"])
                if log_number is not None:
                    last = (log_number, event["id"], held[0], held[2], credits)
                _settled(state, session, held[0], credits, event)
    close_session()
    return state


def _settled(
    state: JournalState, session: SessionBalance, query_id: str, credits: int, event: dict[str, Any]
) -> None:
    """A settled reservation: spent, and as what (`u`): a refusal (unknown until the balance says), an answer
    that came unreadable (billed), a lost request (billed or not), or a charge an answer named."""
    state.spent[query_id] += credits
    session.settled += credits
    if event.get("u") == "refusal":
        state.unknown[query_id] += credits
    elif event.get("u") == "unread":
        session.unread += credits
    elif event.get("u") is None:
        refused = int(event.get("r", 0))  # a Dask round's refusals, within its named count
        session.named += credits - refused - int(event.get("l", 0))  # and its lost requests
        state.unknown[query_id] += refused


def read_a_balance(path: Path | str) -> bool:
    """Whether a session of the run read the account's balance (the service answered it there): a session
    killed before its end wrote it only here, not in the run's manifest (`flows.run.preflight.check_service`)."""
    path = Path(path)
    if not path.exists():
        return False
    with path.open("rb") as lines:
        return any(line.startswith(b'{"e":"balance"') for line in lines)


PRICE_EVENTS = ("price", "hold", "seen")
_PRICE_LINES = tuple(b'{"e":"%s"' % kind.encode() for kind in PRICE_EVENTS)


def _price_event(state: JournalState, event: dict[str, Any]) -> None:
    key = event["k"]
    if event["e"] == "seen":
        state.seen.add(key)
        return
    known = state.prices if event["e"] == "price" else state.held
    known[key] = max(int(event["c"]), known.get(key, 0))


def read_prices(path: Path | str) -> JournalState:
    """Only what a run's journal says of prices (`prices`, `held`, `seen`): a night starts from the journals of
    the runs before it, and `harvest plan` reads them too, so the reservation lines (most of a journal) are not
    parsed. A line is one of `RunJournal`'s (orjson writes the event first)."""
    state = JournalState()
    path = Path(path)
    if not path.exists():
        return state
    with path.open("rb") as lines:
        for line in lines:
            if line.startswith(_PRICE_LINES):
                try:
                    _price_event(state, orjson.loads(line))
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    continue  # a torn last line: what a resume would not trust either
    return state
