"""Credit balances per key and the ledger of every answered request.

Both are read by tests from another thread while the server runs, so every access takes a lock. Keys are
compared in constant time (`hmac.compare_digest`) against every configured key, and the ledger never stores a
key, only a short fingerprint of it.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


def key_id(key: str) -> str:
    """A short fingerprint of a key, safe to log."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


class CreditBook:
    """Balances by key. `charge` checks and debits in one step, so concurrent requests cannot overspend."""

    def __init__(self, balances: Mapping[str, int]) -> None:
        self._balances = dict(balances)
        self._lock = threading.Lock()

    def resolve(self, presented: str) -> str | None:
        """The configured key equal to `presented`, compared in constant time against every key."""
        given = presented.encode()
        match = None
        with self._lock:
            keys = list(self._balances)
        for key in keys:
            if hmac.compare_digest(key.encode(), given):
                match = key
        return match

    def balance(self, key: str) -> int:
        with self._lock:
            return self._balances.get(key, 0)

    def charge(self, key: str, cost: int) -> int | None:
        """Debit `cost`; the balance after, or None (nothing debited) when the balance is below the cost."""
        with self._lock:
            current = self._balances.get(key)
            if current is None or current < cost:
                return None
            self._balances[key] = current - cost
            return current - cost

    def set_balance(self, key: str, credits: int) -> None:
        """Top up, drain or add a key (tests)."""
        with self._lock:
            self._balances[key] = credits


@dataclass(frozen=True)
class LedgerEntry:
    """One answered request. `n` numbers the requests to data endpoints (the fault schedule's clock); `status`
    is None for a dropped connection; `credits` is what was billed."""

    n: int | None
    time: float
    path: str
    params: dict[str, str | list[str]]
    status: int | None
    credits: int
    fault: str | None
    key_id: str | None
    path_params: dict[str, str] = field(default_factory=dict)
    """Values of the path's parameters (the material id of a detail request): which item was asked for."""
    method: str = "GET"
    """How it was asked: GET, or POST with its parameters (`params`) in a JSON body."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def params_dict(items: list[tuple[str, str]]) -> dict[str, str | list[str]]:
    """Query parameters as a dict; a repeated parameter becomes a list."""
    out: dict[str, str | list[str]] = {}
    for name, value in items:
        if name in out:
            prev = out[name]
            out[name] = [*prev, value] if isinstance(prev, list) else [prev, value]
        else:
            out[name] = value
    return out


class Ledger:
    def __init__(self) -> None:
        self._entries: list[LedgerEntry] = []
        self._lock = threading.Lock()

    def append(self, entry: LedgerEntry) -> None:
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[LedgerEntry]:
        """A snapshot copy."""
        with self._lock:
            return list(self._entries)

    def billed_total(self, key: str | None = None) -> int:
        """Credits billed to `key` (all keys when None)."""
        kid = None if key is None else key_id(key)
        with self._lock:
            return sum(e.credits for e in self._entries if kid is None or e.key_id == kid)
