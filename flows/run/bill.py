"""What the service billed a run, beside what harvest counted: the account's balance, read around each session.

A run reads the free balance (`connectors.http.balance.PATH`) before its first request and after its last; each
reading is written to the run's journal at once (`RunJournal.balance`), so a process killed mid-run leaves its
`before` behind. A run's bill is the sum over its sessions (the first process, then each resume) of how far the balance fell
while the session ran:

- a session that ended normally (also by Ctrl-C) fell by `before - after`;
- a session killed before its `after` reading fell by `before - the next session's before`, if that fall is what
  the session itself can have been billed: at least the charges its answers named, at most every credit it
  counted (refusals whose charge is unknown, requests in flight at the kill, billed or not). Anything else means
  another charge on the account between the kill and the resume (another job on the same key, a top-up), and
  the bill is unknown;
- a session with requests but no reading (the balance endpoint gave no usable answer) makes the bill unknown;
- the embedded sandbox is an account of the process that runs it: each session's readings are of its own
  account, so a killed session's fall cannot be read from the next one's, and its bill is unknown (never blamed
  on another user of a key nobody else has).

Unknown is said as such ("unknown") rather than as a number that is wrong.

A resumed run settles what its killed sessions counted without knowing the charge against that bill at once
(`carry_over`), so a kill does not leave the refusals and the requests in flight counted as spent for good.
"""

from __future__ import annotations

from collections.abc import MutableSequence
from dataclasses import dataclass
from typing import Any

from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.errors import HarvestError, NotTheService
from harvest.connectors.http.client import ServiceClient
from harvest.flows.spec.service_url import EMBEDDED_SANDBOX
from harvest.tasks.output.journal import JournalState, SessionBalance
from harvest.tasks.output.manifest import RunManifest


@dataclass(frozen=True)
class Bill:
    credits: int | None
    """What the balance fell by over the run's sessions; None when that cannot be known."""
    unknown_because: str | None = None


def _session_fall(
    session: SessionBalance, next_before: int | None, one_account: bool
) -> tuple[int | None, str | None]:
    """(credits the session was billed, or None and why) from its readings and the next session's `before`;
    `one_account`: False when each session had an account of its own (the embedded sandbox)."""
    counted = session.settled + session.open
    if session.before is None:
        if counted == 0:
            return 0, None  # killed before its first request: nothing was sent
        return None, "the balance could not be read when an earlier part of the run started"
    if session.after is not None:
        return session.before - session.after, None
    if not one_account:
        return None, "the run was killed, and the embedded sandbox's account ended with the killed process"
    if next_before is None:
        return None, "the run was killed and the balance could not be read when it resumed"
    fall = session.before - next_before
    if session.named <= fall <= counted:
        return fall, None
    return None, (
        f"the run was killed, and between its start and the resume the balance fell by {fall} credits where "
        f"the killed part was billed {session.named} to {counted}: something else used or topped up the account"
    )


def _next_reading(later: list[SessionBalance], before: int | None) -> int | None:
    """The next `before` reading, passing over sessions killed before they read it (they sent nothing)."""
    for session in later:
        if session.before is not None or session.settled + session.open:
            return session.before
    return before


def run_bill(
    earlier: list[SessionBalance], before: int | None, after: int | None, one_account: bool = True
) -> Bill:
    """The run's bill: the earlier sessions' (from the journal) and this session's `before` and `after`.
    `one_account`: False when each session had an account of its own (the embedded sandbox)."""
    total = 0
    for n, session in enumerate(earlier):
        fall, why = _session_fall(session, _next_reading(earlier[n + 1 :], before), one_account)
        if fall is None:
            return Bill(None, why)
        total += fall
    if before is None or after is None:
        unread = " and ".join(w for w, reading in (("before", before), ("after", after)) if reading is None)
        return Bill(None, f"the balance could not be read {unread} the run")
    return Bill(total + before - after)


def first_reading(earlier: list[SessionBalance], before: int | None) -> int | None:
    """The balance before the run's first request: `balance_before` of the run, across resumes."""
    for session in earlier:
        if session.before is not None:
            return session.before
    return before


async def probe_balance(client: ServiceClient, ledger: CreditLedger) -> int | None:
    """The account balance before anything is paid; a refused key, or an address where something else answers
    (a deployment's run: `harvest run` refused it before Prefect started), stops the run here, at no cost."""
    try:
        return await client.credit_balance()
    except NotTheService as exc:
        ledger.stop("stopped", f"nothing was paid: {exc}")
    except HarvestError as exc:
        ledger.stop("stopped", f"the service refused the API key before anything was paid: {exc}")
    return None


def carry_over(
    ledger: CreditLedger,
    client: ServiceClient,
    earlier: JournalState,
    before: int | None,
    one_account: bool = True,
) -> None:
    """The earlier sessions' unknown charges (refusals, requests in flight at a kill) settled against what they
    were billed, before this session pays: what the balance shows was not billed goes back to the budget, and
    later readings settle the run as a whole (`AccountBalance.earlier_bill`). Nothing when that bill is unknown
    (a reading missing, or another charge on the account between a kill and the resume).

    Only once nothing the killed session started can still pay: its own requests were answered before the
    service is asked for the balance, and the Dask cluster harvest started died with it. Rounds on a cluster
    given by `address` go on paying within their grants after the flow that handed them out was killed, so the
    caller waits for them first (`flows.run.dask.killed_rounds`), and does not carry over when it could not."""
    if before is None or not earlier.balances:
        return
    bill = run_bill(earlier.balances, before, before, one_account)
    if bill.credits is None:
        return
    client.balance.earlier_bill = bill.credits
    ledger.carry_over(earlier.named, earlier.unknown, earlier.unread)
    ledger.reconcile(bill.credits)


def one_account(service: str) -> bool:
    """Whether every session of a run against `service` reads one account: not the embedded sandbox, which each
    process starts afresh."""
    return service != EMBEDDED_SANDBOX


async def read_after(client: ServiceClient) -> int | None:
    """The balance after the run; a refusal now (an emptied account) only makes the bill unknown."""
    try:
        return await client.credit_balance()
    except HarvestError:
        return None


def note_bill(
    manifest: RunManifest, earlier: list[SessionBalance], before: int | None, after: int | None
) -> None:
    """What the service billed the run over all its sessions, from the balance readings."""
    bill = run_bill(earlier, before, after, one_account(manifest.service))
    manifest.service_billed, manifest.bill_unknown = bill.credits, bill.unknown_because
    manifest.balance_before, manifest.balance_after = first_reading(earlier, before), after


def settle_refusals(
    ledger: CreditLedger, summaries: MutableSequence[dict[str, Any]], billed: int | None
) -> None:
    """The refusals counted at their reservation, settled against the session's bill (the balance read before
    and after): what it was not billed goes back, and each query's credits say what the service charged it."""
    if billed is not None:
        ledger.reconcile(billed)
    if not ledger.given_back:  # here, or before the session paid (`carry_over`), or while it paid
        return
    spent = ledger.per_query_spent
    for n, summary in enumerate(summaries):  # written back: packed summaries hand out copies
        summaries[n] = {**summary, "credits": spent.get(summary["query_id"], 0)}
