"""Queries on a Dask cluster, in rounds: the budget stays a hard cap and breadth-first across machines.

The flow keeps the one credit ledger. Each round it grants the running queries some pages' worth of credits,
breadth-first (the queries with the fewest pages first, one page at a time, at most `round_pages` each; one page
in all for an endpoint no answer has priced yet, `grants.allocate`), and reserves the grants in its ledger before
submitting. A query's task runs on any worker with a ledger capped at its grant, so the sum of what tasks can
spend never passes what the flow had left; what a task did not spend goes back when the round settles. Unfinished
queries are submitted again with their cursors; dependent queries start from the values their parents' records
carried in the round before; a resume starts again every query its earlier sessions started and did not end
(`Discovery.started_before`). When the budget runs short, pages are granted one at a time to the queries
furthest behind: page counts end within one of each other. Why rounds and not a ledger served to the workers:
docs/decisions.md ("Dask: rounds of grants, not a served ledger").
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any

from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.credits.reservations import Refusal, Reservation
from harvest.connectors.errors import MissingApiKey
from harvest.connectors.paging.pager import PagerStart, QuerySpec, base_id
from harvest.connectors.refusal_errors import cap_refused, exhausted
from harvest.flows.orchestrator.dask_runner import dask_task_runner
from harvest.flows.run import progress
from harvest.flows.run.dask.grants import Running, allocate, reprice
from harvest.flows.run.discovery import Discovery
from harvest.flows.run.plan import Plan
from harvest.flows.run.start import RunStart
from harvest.flows.spec import JobSpec
from harvest.tasks.landing import reland_query, task_result
from harvest.tasks.output.journal import RunJournal
from harvest.tasks.output.layout import OutputLayout, query_hash
from harvest.tasks.output.machine_fault import FaultStop, MachineFault
from harvest.tasks.output.packed_summaries import PackedSummaries
from harvest.tasks.output.query_summary import history_fields
from harvest.tasks.output.staging import frames_of, open_staging, stage_name
from harvest.tasks.query_line import note_round
from harvest.tasks.round_task import collect_round, state_from_plain, state_to_plain, unnamed, values_hook
from harvest.tasks.staged_commit import StagedRun
from harvest.tasks.staged_known import stage_known

log = logging.getLogger(__name__)


class Rounds:
    def __init__(
        self,
        spec: JobSpec,
        the_plan: Plan,
        start: RunStart,
        journal: RunJournal,
        ledger: CreditLedger,
        layout: OutputLayout,
        run: dict[str, Any],
        scrub: Callable[[str], str] = str,
        settle_refusals: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        """`scrub` cuts the key out of a broken task's error text (workers read the key themselves);
        `settle_refusals` reads the balance and gives back the refusals it shows were not billed (the flow
        client's `AccountBalance.settle_refusals`) before the rounds end for want of credits, as a local run does."""
        self.scrub, self.settle_refusals = scrub, settle_refusals
        self.spec, self.plan, self.start, self.journal, self.ledger = spec, the_plan, start, journal, ledger
        self.layout, self.run_info = layout, run
        self.started = datetime.fromisoformat(run["started"])
        self.endpoints = spec.endpoints()
        self.discovery = Discovery(the_plan, start, run["incremental"])
        self.seen: set[str] = set()
        self.running: list[Running] = []
        self.summaries = PackedSummaries(start.kept.values())
        self.parts = 0
        self.faults = journal.faults or FaultStop(ledger)
        self.staged: StagedRun | None = None
        """With `runner.staging`: the run's stages in the store (workers share no disk with the flow)."""
        self.session = secrets.token_hex(4)
        """Names this process's rounds (a resumed flow counts its parts from 1 again)."""
        self.accepted_at = time.time()
        """When the run last saw an accepted answer, as its rounds reported (each round's pace counts from it)."""

    def add(self, query: QuerySpec) -> None:
        if query.query_id in self.seen:
            return
        self.seen.add(query.query_id)
        for child in self.discovery.left_over(self.layout.db, query):
            self.add(child)
        decided = self.start.decide(query)
        if decided is None:
            return
        self.journal.query_started(asdict(decided))
        endpoint, incremental = self.endpoints[decided.endpoint], self.run_info["incremental"]
        r = Running(decided, endpoint.price_of(decided.params), price_key=endpoint.price_key(decided.params))
        r.credits = r.before = self.ledger.per_query_spent.get(decided.query_id, 0)  # earlier sessions' too
        self.running.append(r)
        progress.current().query_started(decided.query_id, decided.endpoint)
        if self.staged is not None:  # workers cannot read the job's DuckDB: its known keys go to the store
            try:
                r.known = stage_known(self.staged, decided, endpoint, incremental)
            except MachineFault as fault:  # nothing is granted once the run stops
                self.faults.stop(fault)
        if decided.resume:  # its raw pages land here (staging workers cannot read them); rounds go on
            self.reland(r)

    def reland(self, r: Running) -> None:
        """Land the query's raw pages in the output directory again and go on from the last one (a resumed
        query, or a round whose worker died or whose files failed their check), finding its dependents."""
        self.parts += 1
        endpoint = self.endpoints[r.spec.endpoint]
        found, hook = values_hook(self.wanted(r.spec), r.spec.params, endpoint)
        run_id = self.run_info["run_id"]
        point, r.files = reland_query(self.layout, run_id, self.started, r.spec, endpoint, self.parts, hook)
        r.state = state_to_plain(point, point.pages, point.records, point.extraction.as_dict())
        r.pages, r.records = point.pages, point.records
        r.spec = QuerySpec(**{**asdict(r.spec), "resume": False})
        self.discover(r.spec, found)

    def open_staging(self) -> None:
        """The staging store, proved writable before a credit is spent; what earlier sessions left in it is
        committed first. A store that fails stops the run like a full disk (exit 75, resumable)."""
        if (url := self.spec.runner.staging) is None:
            return
        try:
            store = open_staging(url)
            store.probe()
            staged = StagedRun(store, self.layout, self.spec.name, self.run_info["run_id"], self.started)
            staged.sweep()
        except MachineFault as fault:
            self.faults.stop(fault)
            return
        self.staged = staged

    def wanted(self, query: QuerySpec) -> list[list[str]]:
        return [[dep.kind, dep.field] for dep in self.discovery.dependents_of(query.query_id)]

    async def run(self) -> PackedSummaries:
        self.open_staging()
        for query in [*self.plan.queries, *self.start.continue_at.values(), *self.discovery.started_before()]:
            self.add(query)  # a resume's dependents of parents that ended too: no parent's pages find them
        with dask_task_runner(self.spec) as runner:
            while self.running and self.ledger.stopped is None:
                reprice(self.running, self.ledger.learned_prices)
                for r in [r for r in self.running if self.cap_below_price(r)]:
                    self.end(r, self.unsendable(r))
                grants = allocate(
                    self.running, self.free(), self.spec.runner.round_pages, self.ledger.fanout_left,
                    self.ledger.priced_keys,
                )  # fmt: skip
                granted = [r for r in self.running if grants[r.spec.query_id] > 0]
                settle = self.settle_refusals if not granted and self.ledger.refused_unknown else None
                if settle is not None and await settle():
                    continue  # refusals the service did not bill went back to the budget: grant again
                if not granted or not await self.one_round(runner, granted, grants):
                    break  # nothing granted, or the ledger refused every grant: a round more would change nothing
        self.close_rounds()
        stopped = self.ledger.stopped
        for r in list(self.running):
            why = stopped or self.why_no_credits(r)
            status = "budget_exhausted" if why.kind == "budget" else why.kind
            self.end(r, {**self.last_summary(r, status, why.reason), "capped": why.capped})
        return self.summaries

    def close_rounds(self) -> None:
        """Once the Dask client is closed (no attempt of a round can come): the rounds' claims on a shared disk
        go, and pages a round left in the store after its commit (a task Dask ran again) reach the raw files."""
        shutil.rmtree(self.layout.round_claims(self.run_info["run_id"]), ignore_errors=True)
        if self.staged is None:
            return
        try:
            self.staged.sweep()
        except MachineFault as fault:  # they stay in the store; the next run of the job commits them
            self.faults.stop(fault)

    def free(self) -> int:
        """What a round may grant: the budget left, and never more than keeps the account at `min_balance` (the
        ledger's room above the floor: workers pay at once and see the balance only after paying). A round
        grants everything before any of it settles, so its grants together must fit the room."""
        room = self.ledger.floor_room()
        return self.ledger.remaining if room is None else min(self.ledger.remaining, max(0, room))

    def cap_below_price(self, r: Running) -> bool:
        """One request of the query costs more than its whole `max_credits`: no grant can ever hold one (a
        dependent query's price is first known here, from its parent's values)."""
        return r.spec.max_credits is not None and r.cost > r.spec.max_credits

    def unsendable(self, r: Running) -> dict[str, Any]:
        """Its end as the local runner says it (`connectors.refusal_errors.cap_refused`): the ledger's refusal, its
        `cap_below_price`, so the run says it could not send a request, not that the budget had no credits."""
        assert r.spec.max_credits is not None
        refusal = Refusal.query_cap(r.spec.max_credits, r.credits, r.cost)
        exc = cap_refused(refusal, r.spec.query_id, r.spec.endpoint, r.pages, r.credits)
        return {**self.last_summary(r, "budget_exhausted", str(exc)), "cap_below_price": exc.cap_below_price}

    def why_no_credits(self, r: Running) -> Refusal:
        """Why a query got no grant as the rounds ended, as the local ledger says (a fan-out cap is no budget)."""
        group, left = base_id(r.spec.query_id), self.ledger.fanout_left(r.spec.query_id)
        if left is not None and left < r.cost:
            return Refusal.fanout_cap(group, self.plan.caps[group], self.ledger.fanout_spent(group))
        floor, balance = self.ledger.min_balance, self.ledger.account_remaining
        why = "the run's budget has no credits left"
        if floor is not None and balance is not None and self.free() < self.ledger.remaining:
            why = f"the account balance ({balance}) is at the floor of {floor} credits (budget.min_balance)"
        return Refusal("budget", why)

    async def one_round(self, runner: Any, granted: list[Running], grants: dict[str, int]) -> bool:
        """Whether it submitted anything: a free page is refused once an overcharge or the floor took the room."""
        submitted: list[tuple[Running, Reservation, str, Any]] = []
        client = self.run_info["client"]  # a known rate limit is shared by the round's tasks
        known = client["per_second"]
        shared = known / len(granted) if known and granted else None
        run = {
            **self.run_info,
            "client": {
                **client,
                "per_second": shared,
                "idle_seconds": max(0.0, time.time() - self.accepted_at),
            },
            "prices": self.ledger.learned_prices,
        }
        for r in granted:
            amount = grants[r.spec.query_id] * r.cost
            reservation = await self.ledger.reserve(
                r.spec.query_id, r.pages, amount, query_cap=r.spec.max_credits
            )
            sent = reservation and self.faults.written(self.journal.path, self.ledger.sending, reservation)
            if sent is None:  # refused, or its journal line could not be written (the run stops)
                continue
            self.parts += 1
            r.rounds += 1
            query = asdict(r.spec)
            stage = stage_name(self.session, self.parts, query_hash(r.spec.query_id))  # claimed, then paid
            params = {"run": run, "query": query, "state": r.state, "grant": amount, "part": self.parts,
                      "round_no": r.rounds, "wanted": self.wanted(r.spec), "stage": stage,
                      "known": r.known}  # fmt: skip
            submitted.append((r, sent, stage, runner.submit(collect_round, parameters=params)))
        balances: list[int] = []
        for r, reservation, stage, future in submitted:
            await asyncio.to_thread(future.wait)
            state = future.state
            note_round(self.run_info["run_id"], future.task_run_id, r.spec.query_id, r.rounds, state)
            if self.staged is not None:
                balance = await self.settle_staged(r, reservation, state, stage)
            else:
                balance = await self.settle(r, reservation, state)
            future.wrapped_future.release()  # settled: Dask has no reason to run it again if its worker dies
            if balance is not None:
                balances.append(balance)
        if balances:  # the lowest is the latest: the balance only falls while the run pays
            self.ledger.observe_remaining(min(balances))
        return bool(submitted)

    async def settle(
        self,
        r: Running,
        reservation: Reservation,
        state: Any,
        settled: dict[str, Any] | None = None,
        files: list[Any] | None = None,
    ) -> int | None:
        """Settle one query's grant to what its task spent; returns the account balance the task last saw.
        `settled`: a staged round's result, its grant settled and its `files` committed (`settle_staged`)."""
        if settled is None:
            try:
                result = await task_result(state)  # a failed query's round ends Failed and still reports
            except MissingApiKey as exc:
                return self.unsent(reservation, exc)
            except Exception as exc:  # the task broke: what it spent is unknown, so the grant counts
                self.ledger.settle(reservation, None)
                r.credits += reservation.amount
                self.end(r, self.last_summary(r, "failed", self.scrub(f"{type(exc).__name__}: {exc}")))
                return None
            if result.get("unpaid"):  # its claim could not be made (a full disk): nothing was sent
                self.ledger.release(reservation)
                self.faults.reported(result["stop"])
                return None
            self.heard(result)  # before the settle
            if result.get("rerun"):  # Dask ran it again (its worker died): the first may have spent it all
                self.ledger.settle(reservation, None)
                r.credits += reservation.amount
                self.relanded(r, "its worker died")
                return None
            self.ledger.settle(reservation, result["spent"], **unnamed(result))
            r.credits += result["spent"]
            self.faults.reported(result.get("stop"))  # its worker could not write what it paid for
        else:
            result = settled
        balance: int | None = result.get("balance")
        summary = result["summary"]
        r.files += summary["files"] if files is None else files
        # this session's, as the local runner counts them: a resumed query starts from its relanded pages (`add`)
        pages, records = summary["pages"] - r.pages, summary["records"] - r.records
        r.state, r.pages, r.records = result["state"], summary["pages"], summary["records"]
        progress.current().page_landed(r.spec.query_id, records, result["spent"], pages)
        self.discover(r.spec, result["found"])
        if summary["status"] == "budget_exhausted" and self.grant_was_the_limit(r):
            return balance  # its grant ran out: it goes on next round, or ends with the run's stop
        ended, cap, q = {**summary, "credits": r.credits, "files": r.files}, r.spec.max_credits, r.spec
        if summary["status"] == "budget_exhausted" and cap is not None:  # its cap, not its grant, ended it
            why = Refusal.query_cap(cap, r.credits)
            ended["error"] = str(exhausted(why.reason, q.query_id, q.endpoint, r.pages, r.cost, r.credits))
            ended["capped"] = why.capped
        self.end(r, ended)
        return balance

    async def settle_staged(self, r: Running, reservation: Reservation, state: Any, stage: str) -> int | None:
        """Settle a staged round: commit what it staged, then go on as `settle` does.

        A round whose worker died (Dask's error, or the attempt Dask ran again, which pays nothing) may have
        spent its whole grant, so the grant counts; its staged pages are committed and the query goes on from
        the last one in a later round. Only a round that broke without staging a page ends its query `failed`."""
        assert self.staged is not None
        try:
            result = await task_result(state)
        except MissingApiKey as exc:
            return self.unsent(reservation, exc)
        except Exception as exc:
            result = {"broke": self.scrub(f"{type(exc).__name__}: {exc}")}
        lost = "rerun" in result or "broke" in result
        self.heard(result)  # before the settle
        self.ledger.settle(reservation, None if lost else result["spent"], **unnamed(result))
        r.credits += reservation.amount if lost else result["spent"]
        unstaged = frames_of(result.get("unstaged") or [])
        files = self.staged.commit_round(r.spec.query_id, stage, result.get("staged"), unstaged)
        self.faults.reported(result.get("stop"))
        if lost or files is None:
            why = result.get("broke") or ("its worker died" if lost else "its files did not arrive whole")
            spent = 0 if lost else result["spent"]
            self.relanded(r, why, spent, result.get("broke"))
            return None if lost else result.get("balance")
        return await self.settle(r, reservation, state, settled=result, files=files)

    def relanded(self, r: Running, why: str, spent: int = 0, broke: str | None = None) -> None:
        """A round whose result is lost (its worker died: Dask's new attempt paid nothing) or unusable: what it
        stored lands again, the query goes on from its last page; one that `broke` without a page ends `failed`."""
        pages, records = r.pages, r.records
        log.warning("query %s: a round lost (%s); what it stored lands again", r.spec.query_id, why)
        self.reland(r)
        progress.current().page_landed(r.spec.query_id, r.records - records, spent, r.pages - pages)
        if broke is not None and r.pages == pages:
            self.end(r, self.last_summary(r, "failed", broke))
        elif self.ledger.stopped is not None:
            self.end(r, self.last_summary(r, self.ledger.stopped.kind, self.ledger.stopped.reason))

    def unsent(self, reservation: Reservation, missing: MissingApiKey) -> int | None:
        """A worker without the API key sent nothing: the grant goes back whole, and the run stops with one
        message rather than each query failing on its own with its grant counted."""
        self.ledger.release(reservation)
        why = f"a Dask worker could not read the API key, so nothing was sent: {self.scrub(str(missing))}"
        self.ledger.stop("stopped", why + " (on every worker, as the spec's `service` names it)")
        return None

    def heard(self, result: dict[str, Any]) -> None:
        """What a round learned for the whole run: the prices the service charged, when it last accepted a
        request (the next rounds' paces count their `max_wait` from it), and a stop the service's answer meant for
        every request (a refused key, 401/402), which ends the rounds as it ends a local run."""
        self.ledger.heard(**result.get("prices", {}))
        if "idle" in result:
            self.accepted_at = max(self.accepted_at, time.time() - result["idle"])
        if result.get("stopped"):
            self.ledger.stop("stopped", result["stopped"])

    def grant_was_the_limit(self, r: Running) -> bool:
        """Its round ran out of its grant, not of its own `max_credits`: the query is not done. It stays running:
        the next round goes on from its cursor, or, when the run stopped meanwhile (a full disk), the rounds' end
        ends it with that stop (`interrupted`: resumed). Ended here, no resume would ask for its other pages."""
        cap = r.spec.max_credits
        return cap is None or r.credits + r.cost <= cap

    def discover(self, parent: QuerySpec, found: dict[str, list[Any]]) -> None:
        for dep in self.discovery.dependents_of(parent.query_id):
            for child in self.discovery.children(parent, dep, found.get(f"{dep.kind}.{dep.field}", [])):
                self.add(child)

    def last_summary(self, r: Running, status: str, error: str) -> dict[str, Any]:
        state, run_id = r.state or {}, self.run_info["run_id"]
        cursor = state.get("cursor", r.spec.start_cursor)
        paged = state_from_plain(state) or PagerStart(cursor=cursor)
        return {
            **history_fields(r.spec, paged, status, cursor),
            "query_id": r.spec.query_id, "endpoint": r.spec.endpoint, "asks": r.spec.asks, "status": status,
            "pages": r.pages, "records": state.get("records", 0), "credits": r.credits, "earlier": r.spec.earlier,
            "pages_before": r.spec.pages_before, "next_cursor": cursor, "error": error, "files": r.files,
            "extraction": state.get("extraction", {}),
            "raw_file": self.layout.relative(self.layout.raw_file(run_id, r.spec.query_id)),
            "requests_file": self.layout.relative(self.layout.requests_file(run_id, r.spec.query_id)),
        }  # fmt: skip

    def end(self, r: Running, summary: dict[str, Any]) -> None:
        if r in self.running:
            self.running.remove(r)
        self.journal.query_ended(summary)
        notes = progress.query_notes(summary, self.ledger.refused_of(r.spec.query_id))
        progress.current().query_finished(r.spec.query_id, summary["status"], notes, r.credits - r.before)
        self.summaries.append(summary)
