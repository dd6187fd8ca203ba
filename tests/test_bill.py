"""The service's bill of a run across its sessions, from the balance readings its journal keeps (`flows.run.bill`):
journals written by the real `RunJournal`, read back by the real `read_journal`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.client import ServiceClient
from harvest.flows.run.bill import Bill, carry_over, first_reading, run_bill
from harvest.tasks.output.journal import RunJournal, read_journal


def session(
    path: Path,
    before: int | None,
    settled: list[int],
    open_: list[int],
    after: int | None,
    refusals: list[int] = [],  # noqa: B006
) -> None:
    """One process's part of a run: its readings, settled reservations (answers that named their charge, then
    refusals counted at their reservation) and reservations a kill left open."""
    journal = RunJournal(path)
    if before is not None:
        journal.balance("before", before)
    rid = 0
    for amount, unknown in [*((a, None) for a in settled), *((a, "refusal") for a in refusals)]:
        rid += 1
        journal.reserved(rid, "q", amount)
        journal.closed(rid, amount, unknown)
    for amount in open_:
        rid += 1
        journal.reserved(rid, "q", amount)
    if after is not None:
        journal.balance("after", after)
    journal.close()


def test_a_clean_stop_and_its_resume_add_their_falls_and_leave_the_gap_out(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    session(path, 1000, [1] * 7, [], 993)  # Ctrl-C after 7 credits; another job spends 50 before the resume
    earlier = read_journal(path).balances
    assert run_bill(earlier, 943, 940).credits == 7 + 3
    assert first_reading(earlier, 943) == 1000


def test_a_killed_session_is_billed_to_the_next_reading_when_that_fits_what_it_counted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.jsonl"
    session(path, 1000, [1] * 40, [1] * 4, None)  # kill -9 with 4 requests in flight
    session(path, None, [], [], None)  # killed again before it read the balance: it sent nothing
    earlier = read_journal(path).balances
    for in_flight_billed in range(5):
        resumed_at = 1000 - 40 - in_flight_billed
        bill = run_bill(earlier, resumed_at, resumed_at - 60)
        assert (bill.credits, bill.unknown_because) == (40 + in_flight_billed + 60, None)


def test_another_charge_between_the_kill_and_the_resume_makes_the_bill_unknown(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    session(path, 1000, [1] * 40, [1] * 4, None)
    earlier = read_journal(path).balances
    spent_elsewhere = run_bill(earlier, 1000 - 40 - 12, 900)
    topped_up = run_bill(earlier, 1000 - 40 + 100, 1000)
    for bill in (spent_elsewhere, topped_up):
        assert bill.credits is None and "something else used or topped up the account" in (
            bill.unknown_because or ""
        )
    assert "fell by 52 credits where the killed part was billed 40 to 44" in (
        spent_elsewhere.unknown_because or ""
    )


def test_a_missing_reading_makes_the_bill_unknown(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    session(path, None, [1] * 3, [], None)  # the balance endpoint gave no usable answer, requests were sent
    assert run_bill(read_journal(path).balances, 500, 490).credits is None
    assert run_bill([], 500, None).credits is None and run_bill([], 500, 497).credits == 3
    # the words name the reading that failed: the one before was read
    assert run_bill([], 500, None).unknown_because == "the balance could not be read after the run"
    assert (
        run_bill([], None, None).unknown_because == "the balance could not be read before and after the run"
    )


def test_refusals_a_killed_session_counted_are_not_blamed_on_another_user(tmp_path: Path) -> None:
    """The killed part counted 40 pages, 12 refusals and 4 requests in flight; the balance fell by 42 (two of the
    four in flight were answered). That is what the run itself can have been billed."""
    path = tmp_path / "journal.jsonl"
    session(path, 1000, [1] * 40, [1] * 4, None, refusals=[1] * 12)
    earlier = read_journal(path)
    assert (earlier.named, earlier.unknown["q"], earlier.spent["q"]) == (40, 16, 56)
    assert run_bill(earlier.balances, 958, 950) == Bill(42 + 8)


async def test_a_resume_gives_back_what_the_killed_sessions_counted_and_were_not_billed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.jsonl"
    session(path, 1000, [1] * 40, [1] * 4, None, refusals=[1] * 12)
    session(path, 958, [1] * 5, [1] * 2, None, refusals=[1] * 3)  # billed 5 and one of the two in flight
    earlier = read_journal(path)
    ledger = CreditLedger(60, opening=earlier.spent)
    assert ledger.spent == 66 and ledger.remaining == 0
    async with ServiceClient("http://127.0.0.1:9", "k", ledger) as client:  # nothing is sent
        carry_over(ledger, client, earlier, 952)
        assert client.balance.earlier_bill == 48  # later readings add this session's fall to it
    assert ledger.spent == ledger.per_query_spent["q"] == 48 and ledger.remaining == 12


def test_a_killed_run_on_the_embedded_sandbox_blames_nobody(tmp_path: Path) -> None:
    """The embedded sandbox lives in harvest's process: the resume reads a new one's balance (the same start
    balance again), so a killed part's fall cannot be read from it. That is said; no other user is blamed for a
    key nobody else has."""
    from harvest.flows.run.bill import note_bill
    from harvest.flows.spec.service_url import EMBEDDED_SANDBOX
    from harvest.tasks.output.manifest import RunManifest

    path = tmp_path / "journal.jsonl"
    session(path, 10_000_000, [1] * 3, [1] * 2, None)  # kill -9 with 2 requests in flight
    run = RunManifest("r1", "j", "h", EMBEDDED_SANDBOX, "2026-01-01T00:00:00+00:00", None, "running", 50, 5)
    note_bill(run, read_journal(path).balances, 10_000_000, 10_000_000 - 8)
    assert run.service_billed is None and "something else" not in (run.bill_unknown or "")
    assert "the embedded sandbox's account ended with the killed process" in (run.bill_unknown or "")
    over_http = replace(
        run, service="http://127.0.0.1:1"
    )  # one account across the kill: billed 3 + 1 in flight
    note_bill(over_http, read_journal(path).balances, 10_000_000 - 4, 10_000_000 - 12)
    assert over_http.service_billed == 4 + 8


def test_a_query_a_later_session_started_again_is_not_ended(tmp_path: Path) -> None:
    """A query failed; Prefect retried the flow, which ran it again and paid for more pages before a kill. The
    next resume must go on from those pages, not keep the first session's failed summary (its cursor would
    have a `--continue` pay for them again)."""
    path = tmp_path / "journal.jsonl"
    query = {"query_id": "q", "endpoint": "/e", "params": {}}
    first = RunJournal(path, session=1)
    first.query_started(query)
    first.query_ended({"query_id": "q", "status": "failed", "pages": 2, "next_cursor": "c2"})
    first.close()
    retry = RunJournal(path, session=2)
    retry.query_started(query)
    retry.close()
    assert "q" not in read_journal(path).ended
    last = RunJournal(path, session=3)
    last.query_ended({"query_id": "q", "status": "complete", "pages": 5, "next_cursor": None})
    last.close()
    assert read_journal(path).ended["q"]["status"] == "complete"
