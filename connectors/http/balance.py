"""The account's balance, free to read: it proves the key before anything is paid, and settles what refusals cost.

`GET /v1/credit-balance` costs nothing. A run reads it before its first request (a refused key then stops the
run at no cost) and after its last (the service's own bill, `flows.run.bill`). When the budget runs low while the
ledger holds refusals it counted at their reservation (429s, 5xx: their charge unknown), it is read once more:
what the balance did not fall by was not billed and goes back to the budget (`CreditLedger.reconcile`), so a run
can spend its whole budget however often the service asked it to slow down.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from connectors.credits.ledger import CreditLedger
from connectors.errors import HarvestError, OutOfCredits, ServiceAnswer, Unauthorized
from connectors.http.answers import int_field, parse_body
from connectors.http.auth import ApiKey

log = logging.getLogger("harvest.client")

PATH = "/v1/credit-balance"


class AccountBalance:
    def __init__(self, http: httpx.AsyncClient, key: ApiKey, ledger: CreditLedger) -> None:
        self._http = http
        self._key = key
        self._ledger = ledger
        self.first: int | None = None
        """The session's first reading: where its bill starts."""
        self._settling = asyncio.Lock()
        self._settled_with: tuple[int, int] | None = None
        """(refusal credits, credits spent) when the balance was last read to settle: read again only once either
        changed (more refusals counted, or answers in flight then have settled since)."""

    async def read(self) -> int | None:
        """The account's balance; raises `Unauthorized`/`OutOfCredits` when the service refuses the key, None
        when the endpoint gave no usable answer (not offered, down)."""
        try:
            response = await self._http.get(PATH, headers={"x-api-key": self._key.reveal()})
        except httpx.HTTPError as exc:
            log.warning("could not read the credit balance: %s", self._key.scrub(str(exc)))
            return None
        body = parse_body(self._key.scrub_answer(response.content))
        if response.status_code in (401, 402):
            answer = ServiceAnswer(response.status_code, body, b"")
            error = Unauthorized if response.status_code == 401 else OutOfCredits
            raise error(response=answer, endpoint=PATH)
        count = int_field(body, "creditCount")
        if response.status_code != 200 or count is None:
            log.warning(
                "the credit balance endpoint answered HTTP %d without a balance", response.status_code
            )
            return None
        if self.first is None:
            self.first = count
        self._ledger.observe_remaining(count)
        return count

    async def settle_refusals(self) -> bool:
        """Read the balance and give back what refusals were counted and not billed; whether any came back.
        One reading at a time, and none while nothing changed since the last."""
        spent = self._ledger.spent
        async with self._settling:
            seen = (self._ledger.refused_unknown, self._ledger.spent)
            if self.first is not None and seen[0] and seen != self._settled_with:
                self._settled_with = seen
                try:
                    now = await self.read()
                except HarvestError:
                    now = None
                if now is not None:
                    self._ledger.reconcile(self.first - now)
        return self._ledger.spent < spent  # this reading, or one another query made while this one waited
