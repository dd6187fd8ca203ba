"""What a chain of finished runs settled (a run and the runs it `--continue`s, oldest first): the queries that
ended for good, those stopped with a cursor kept, and the prices the service was seen charging. A continued run
starts from it (`flows.run.start.Continue`), and so does the resume of one (`flows.run.start.Resume`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harvest.connectors.paging.pager import QuerySpec
from harvest.tasks.output.journal import read_journal
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import CONTINUABLE, RunManifest, run_heads


@dataclass(frozen=True)
class Settled:
    """What a chain of finished runs settled, each query's newest status deciding: queries that ended for good
    (`done`: not asked again) and queries stopped with a cursor kept (`at`: asked again from there)."""

    done: frozenset[str] = frozenset()
    at: Mapping[str, QuerySpec] = field(default_factory=dict)
    last: RunManifest | None = None
    """The chain's newest run (the one a continued run names)."""
    prices: Mapping[str, int] = field(default_factory=dict)
    """Price key -> the highest charge the chain's answers taught its ledgers (`JournalState.prices`): a
    continued run's first request holds it, not the cost table's price the service was seen passing."""


def newest_chain(layout: OutputLayout, job: str) -> list[RunManifest]:
    """The job's newest finished run and the runs it continues, oldest first."""
    runs = {h.run_id: h for h in run_heads(layout, job) if not h.unfinished}
    if not runs:
        return []
    newest = max(runs.values(), key=lambda h: (h.started, h.run_id))
    return chain_from(runs, newest.run_id)


def chain_from(runs: Mapping[str, Any], run_id: str | None) -> list[RunManifest]:
    """Run `run_id` (a head of `runs`) and the runs it continues, oldest first; empty for None."""
    chain: list[Any] = []
    while run_id is not None and run_id in runs and len(chain) <= len(runs):
        chain.append(runs[run_id])
        run_id = runs[run_id].continues
    return [h.manifest() for h in chain[::-1]]


def settled_by(layout: OutputLayout, chain: list[RunManifest]) -> Settled:
    """What a chain of finished runs settled: each query's newest status across it decides."""
    if not chain:
        return Settled()
    status: dict[str, dict[str, Any]] = {}
    specs: dict[str, dict[str, Any]] = {}
    prices: dict[str, int] = {}
    for run in chain:
        journal = read_journal(layout.journal_file(run.run_id))
        specs.update(journal.started)
        prices = highest(prices, journal.prices)
        status.update({q["query_id"]: q for q in run.queries})
    done: set[str] = set()
    at: dict[str, QuerySpec] = {}
    for qid, summary in status.items():
        waiting = summary.get("next_cursor") or summary.get("follow_state")  # a page or follow-ups to ask
        # drifted on its last page with nothing waiting: all paid and kept (`harvest rebuild` lands them)
        if summary["status"] not in CONTINUABLE or (summary["status"] == "drift" and not waiting):
            done.add(qid)
        elif qid in specs:
            spec = {**specs[qid], "start_cursor": summary.get("next_cursor"), "resume": False}
            spec["follow_state"] = summary.get("follow_state")  # follow-up requests it had waiting
            at[qid] = QuerySpec(**spec)
    return Settled(frozenset(done), at, chain[-1], prices)


def highest(*known: Mapping[str, int]) -> dict[str, int]:
    """Price key -> the highest of the prices known for it."""
    out: dict[str, int] = {}
    for prices in known:
        for key, credits in prices.items():
            out[key] = max(credits, out.get(key, 0))
    return out
