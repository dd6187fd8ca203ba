"""The account's balance floor (`budget.min_balance`): the credits a run must leave in the account.

Kept apart from the budget because it is a different kind of limit: the budget counts what this run spent,
the floor watches what the service says the whole account has left (other jobs on the same key spend too).
The service reports the balance in every JSON answer (`credits_remaining`) and at the balance endpoint.

A run pays several requests at once (`concurrency`), and each answer shows the balance only after its request
was paid: stopping at the first balance below the floor let every request already on the wire take the account
further down (16 credits under a floor of 30 at `concurrency: 16`). So the floor is held in the grants, as the
budget is: what the run holds for requests not yet answered never exceeds the room the account has above the
floor (`room`). The room is taken from the lowest balance reported, less the credits the run counted without
an answer naming the charge (a request lost on the wire, a refusal whose charge is unknown: billed or not, no
reading has shown them yet) until the account's bill gives them back. A request answered while others were in
flight may be counted twice for a moment (in the balance, and as held), which only delays a grant. The ledger
calls this under its own lock.
"""

from __future__ import annotations

from typing import Literal

from harvest.connectors.credits.reservations import Refusal


class BalanceFloor:
    def __init__(self, min_balance: int | None) -> None:
        self.min_balance = min_balance
        self.account_remaining: int | None = None
        """The last `credits_remaining` the service reported for the account."""
        self.lowest: int | None = None
        """The lowest balance reported during the run: the balance only falls while the run pays, and answers
        arrive out of order (a later one may show an older, higher balance)."""
        self.unseen = 0
        """Credits counted without a named charge, which no reading is known to show."""
        self.reached = False

    def observe(self, credits_remaining: int) -> bool:
        """Record a reported balance; True when this one is the first to fall below the floor."""
        self.account_remaining = credits_remaining
        self.lowest = credits_remaining if self.lowest is None else min(self.lowest, credits_remaining)
        newly = self.min_balance is not None and credits_remaining < self.min_balance and not self.reached
        self.reached = self.reached or newly
        return newly

    def counted_unnamed(self, credits: int) -> None:
        self.unseen += credits

    def given_back(self, credits: int) -> None:
        """The account's bill showed `credits` counted without a named charge were never billed."""
        self.unseen = max(0, self.unseen - credits)

    def room(self, held: int) -> int | None:
        """Credits the run may still reserve without taking the account below the floor, while it holds `held`
        for requests not answered yet; None without a floor or before the first reading (nothing to hold it to:
        the first answer brings one)."""
        if self.min_balance is None or self.lowest is None:
            return None
        return self.lowest - self.min_balance - self.unseen - held

    def fits(self, amount: int, held: int) -> Refusal | Literal[True] | None:
        """Whether a request of `amount` credits keeps the account at the floor: True; None (wait) while requests
        are held, whose answers settle or give back what they hold; else why not (already below it, or too
        close to it for this request)."""
        if (passed := self.refusal()) is not None:
            return passed
        room = self.room(held)
        if room is None or room >= amount:
            return True
        if held:
            return None
        return Refusal(
            "budget",
            f"the account balance ({self.lowest}) has {max(0, room)} credits above the floor of "
            f"{self.min_balance} (budget.min_balance), {amount} needed",
        )

    def refusal(self) -> Refusal | None:
        """Why nothing more may be granted, once the floor was passed."""
        if not self.reached:
            return None
        return Refusal(
            "budget",
            f"the account balance ({self.account_remaining}) fell below the floor of {self.min_balance} credits "
            "(budget.min_balance)",
        )
