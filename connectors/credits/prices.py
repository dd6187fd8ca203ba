"""What each endpoint really costs, as the service's answers show it: the credit ledger's price memory.

The cost table (the catalog, or a job's `costs:`) is what harvest *expects* to pay; the service decides what it
*charges*. Reserving the table's price is only a hard cap while the two agree, so the ledger keeps these facts
per price key (an endpoint) and uses them to keep a price rise from passing the budget by more than one page:

- **seen**: an answer the service billed as a page (its body readable) has come back. Until then the key is
  *unseen* and at most one reservation of it is open at a time (`must_wait`): every query's first page waiting
  on the same unknown price would otherwise all be sent at a price that may be wrong (60 fanned-out queries of a
  `costs: {path: 0}` job spent 62 credits of a budget of 5). The cost is one round trip per endpoint per run.
  On Dask, where each worker's ledger lives one round, the flow grants such a key to one query a round
  (`flows.run.dask.grants.allocate`, by the keys its rounds reported seen): one round per endpoint per run.
- **learned**: the highest charge seen above what was reserved. Later reservations hold at least it. A run
  starts with what the runs before it saw the service charging (`known`: a resume's, a `--continue`'s, and a
  plain next night's, `flows.run.chain.carried`): the catalog's price again would let its first request pay the
  excess a second time, past a budget that could not hold it. It still goes one request at a time until an
  answer of its own shows the price.
- **charged**: the highest charge above the cost table an answer of *this run* named, whatever was held: what
  the run tells the runs after it (`PriceNews`, journaled). A price held from earlier runs that no answer of this
  run charges, though one named a charge for its key, is so not passed on: the service went back to the table's
  price, and the next night holds the table's price again (one night of conservative holds).
- **shortfall**: reservations granted before the price was learned and not yet sent hold too little. Their
  missing credits are kept off the budget for new reservations, and `sending` tops each one up (or the ledger
  gives it back to be reserved again) before its request leaves. Requests already on the wire will be charged
  the new price too (`on_the_wire`): the ledger tops their holds up the moment the price is learned, so no
  request leaves while those already sent may take the credits it would use. Only they can pay past the
  budget, by their own excess.

Not thread-safe on its own: the credit ledger calls it under its lock.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harvest.connectors.credits.reservations import LedgerJournal

log = logging.getLogger("harvest.ledger")


@dataclass(frozen=True)
class PriceNews:
    """What an answer told of a price key that the runs after this one must hear (the run's journal)."""

    key: str
    charged: int | None = None
    """A new highest charge above the cost table in this run (a `price` line)."""
    seen: bool = False
    """The first charge an answer of this session named for a key held from earlier runs (a `seen` line): with
    no `price` line of the run, the service charged no more than the table, and the price is not passed on."""


class Prices:
    def __init__(
        self, known: Mapping[str, int] | None = None, charged: Mapping[str, int] | None = None
    ) -> None:
        """`known`: what reservations hold from the first (what earlier runs, or sessions, saw charged);
        `charged`: what this run's journal already says its answers were charged above the table (a resume's)."""
        self._learned: dict[str, int] = dict(known or {})
        """Price key -> the highest charge seen above a reservation (what later reservations hold)."""
        self._held = frozenset(self._learned)
        """Keys held from the first, from earlier runs or sessions."""
        self._charged: dict[str, int] = dict(charged or {})
        """Price key -> the highest charge above the cost table this run's answers named."""
        self._named: set[str] = set()
        """Keys whose price an answer of this session named (a page's answer, its charge said)."""
        self._seen: set[str] = set()
        """Price keys a billed, readable answer has priced."""
        self._open: Counter[str] = Counter()
        """Price key -> reservations open under it (granted, not yet settled or released)."""
        self._key_of: dict[int, str] = {}
        """Open reservation id -> its price key."""
        self._listed: dict[int, int] = {}
        """Open reservation id -> what the cost table prices its request at (what the run is told is normal)."""
        self._unsent: dict[int, int] = {}
        """Reservation id -> amount held, for open reservations whose request has not been sent yet."""
        self.shortfall = 0
        """Credits the unsent reservations lack against the learned prices (kept off the budget)."""

    def price(self, key: str | None, amount: int) -> int:
        """What a reservation of `amount` under `key` must hold: never less than what the key was charged."""
        return amount if key is None else max(amount, self._learned.get(key, 0))

    def learned(self) -> dict[str, int]:
        return dict(self._learned)

    def answered(self) -> dict[str, Any]:
        """This session's answers, as plain data (what a Dask round reports to the flow's ledger, `heard`):
        `charged`, the highest charge above the cost table per key; `named`, the keys whose charge an answer
        named; `seen`, the keys an answer priced."""
        return {"charged": dict(self._charged), "named": sorted(self._named), "seen": sorted(self._seen)}

    def seen(self) -> frozenset[str]:
        """The keys an answer of this session priced (here, or in a Dask round: `heard`)."""
        return frozenset(self._seen)

    def must_wait(self, key: str | None) -> bool:
        """True while the key's price is unseen and a reservation of it is already open: one at a time."""
        return key is not None and key not in self._seen and self._open[key] > 0

    def granted(self, rid: int, key: str | None, amount: int, listed: int) -> None:
        if key is None:
            return
        self._open[key] += 1
        self._key_of[rid] = key
        self._unsent[rid] = amount
        self._listed[rid] = listed

    def _short(self, rid: int) -> int:
        held = self._unsent.get(rid)
        key = self._key_of.get(rid)
        if held is None or key is None:
            return 0
        return max(0, self._learned.get(key, 0) - held)

    def sending(self, rid: int) -> int:
        """The request of `rid` leaves: the credits it lacks against the learned price (0: it holds enough)."""
        short = self._short(rid)
        self.shortfall -= short
        self._unsent.pop(rid, None)
        return short

    def key_of(self, rid: int) -> str | None:
        return self._key_of.get(rid)

    def on_the_wire(self, key: str) -> tuple[int, list[int]]:
        """The key's learned price, and its open reservations whose requests have left (they will be charged
        it, whatever they hold)."""
        sent = [rid for rid, k in self._key_of.items() if k == key and rid not in self._unsent]
        return self._learned.get(key, 0), sent

    def closed(self, rid: int, reserved: int, charged: int | None, priced: bool) -> PriceNews | None:
        """Reservation `rid` (holding `reserved`) closed; `charged`: what its answer named (None: released, or
        the charge is unknown). A charge above what it held teaches the key's price, and the unsent reservations
        of the key now lack the difference. Returns what the run's journal must hear, if anything."""
        self.shortfall -= self._short(rid)
        self._unsent.pop(rid, None)
        listed = self._listed.pop(rid, 0)
        key = self._key_of.pop(rid, None)
        if key is None:
            return None
        self._open[key] -= 1
        if self._open[key] <= 0:
            del self._open[key]
        if priced:
            self._seen.add(key)
        if charged is None:
            return None
        if charged > max(reserved, self._learned.get(key, 0)):
            self._learned[key] = charged
            self.shortfall = sum(self._short(r) for r in self._unsent)
        return self._news(key, charged if charged > listed else None, priced)

    def heard(self, charged: Mapping[str, int], named: Iterable[str], seen: Iterable[str]) -> list[PriceNews]:
        """What another ledger's answers showed (a Dask round's, `answered`): learned here as if answered here."""
        named = set(named)
        self._seen.update(named, seen)
        news = [self._news(key, charged.get(key), key in named) for key in sorted({*named, *charged})]
        for key, credits in charged.items():
            if credits > self._learned.get(key, 0):
                self._learned[key] = credits
        return [n for n in news if n is not None]

    def _news(self, key: str, above: int | None, priced: bool) -> PriceNews | None:
        """An answer named a charge for `key`; `above`: that charge, when above the cost table's price; `priced`:
        the answer was a page's (a refusal's charge says nothing of the page's price)."""
        seen = priced and key in self._held and key not in self._named
        if priced:
            self._named.add(key)
        rose = above is not None and above > self._charged.get(key, 0)
        if rose:
            assert above is not None
            self._charged[key] = above
        if not rose and not seen:
            return None
        return PriceNews(key, above if rose else None, seen)


def held_from_the_first(prices: Mapping[str, int], journal: LedgerJournal | None, warn: bool = True) -> None:
    """A run opens holding what earlier runs saw the service charging: it says so, once per key (as the overcharge
    that taught it was: a warning), and its journal keeps what it held, for the runs after it."""
    for key, credits in sorted(prices.items()):
        if journal is not None:
            journal.held(key, credits)
        if warn:
            log.warning(
                "%s: every request holds %d credits from the first, the price the service was last seen charging, "
                "above the cost table's; update the cost table", key, credits,
            )  # fmt: skip
