"""The service's bill of a run across its sessions, from the balance readings its journal keeps (`flows.run.bill`):
journals written by the real `RunJournal`, read back by the real `read_journal`."""

from __future__ import annotations

from pathlib import Path

from flows.run.bill import first_reading, run_bill
from tasks.output.journal import RunJournal, read_journal


def session(path: Path, before: int | None, settled: list[int], open_: list[int], after: int | None) -> None:
    """One process's part of a run: its readings, settled reservations and reservations a kill left open."""
    journal = RunJournal(path)
    if before is not None:
        journal.balance("before", before)
    rid = 0
    for amount in settled:
        rid += 1
        journal.reserved(rid, "q", amount)
        journal.closed(rid, amount)
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
    assert "fell by 52 credits where the killed part counted 40 to 44" in (
        spent_elsewhere.unknown_because or ""
    )


def test_a_missing_reading_makes_the_bill_unknown(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    session(path, None, [1] * 3, [], None)  # the balance endpoint gave no usable answer, requests were sent
    assert run_bill(read_journal(path).balances, 500, 490).credits is None
    assert run_bill([], 500, None).credits is None and run_bill([], 500, 497).credits == 3
