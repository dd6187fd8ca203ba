"""The account's balance floor (`budget.min_balance`): the credits a run must leave in the account.

Kept apart from the budget because it is a different kind of limit: the budget counts what this run spent,
the floor watches what the service says the whole account has left (other jobs on the same key spend too).
The service reports the balance in every JSON answer (`credits_remaining`); once a reported balance falls
below the floor, the ledger grants nothing more. The ledger calls this under its own lock.
"""

from __future__ import annotations

from harvest.connectors.credits.reservations import Refusal


class BalanceFloor:
    def __init__(self, min_balance: int | None) -> None:
        self.min_balance = min_balance
        self.account_remaining: int | None = None
        """The last `credits_remaining` the service reported for the account."""
        self.reached = False

    def observe(self, credits_remaining: int) -> bool:
        """Record a reported balance; True when this one is the first to fall below the floor."""
        self.account_remaining = credits_remaining
        newly = self.min_balance is not None and credits_remaining < self.min_balance and not self.reached
        self.reached = self.reached or newly
        return newly

    def refusal(self) -> Refusal | None:
        """Why nothing more may be granted, once the floor was passed."""
        if not self.reached:
            return None
        return Refusal(
            "budget",
            f"the account balance ({self.account_remaining}) fell below the floor of {self.min_balance} credits",
        )
