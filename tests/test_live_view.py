"""What a person reads while a run goes and when it ends: the live view at 80 columns, plain sentences without a
terminal, a resumed run saying what it resumes, and the end saying which outputs are history and which current.

The first tests draw the view from counts; the scenario runs real `harvest run` processes against a gated
sandbox: one killed with SIGKILL mid-way (no terminal), its resume in a pseudo-terminal of 80 x 24 (the screen
read through a VT emulator, mid-run and at the end), then a second whole run of the job (no terminal), whose
printed query is pasted into a shell.
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
from rich.console import Console

from harvest.flows.console import add_row, table
from harvest.flows.live_view import LiveView
from harvest.flows.run.progress import LISTED_WELL, LogLines, RunFacts
from harvest.sandbox.config import SandboxConfig
from tests.endpoints import EMBED, PROFILE
from tests.flow_helpers import BIG_BALANCE, HARVEST, ROOT, SECRET_KEY, job_spec, subprocess_env, write_spec
from tests.process_helpers import finish, start_run
from tests.sandbox_gate import gated, settle
from tests.terminal_helpers import Terminal, printed_command, unwrapped, whole

BUDGET = 1000


def facts(**changes: object) -> RunFacts:
    values: dict[str, object] = {"run_id": "20261127T010203Z-abc123", "job": "accounts", "budget": BUDGET,
                                 "spent": lambda: 0, "planned": 500}  # fmt: skip
    return RunFacts(**{**values, **changes})  # type: ignore[arg-type]


def account(i: int) -> str:
    return f"profile[handle=account_{i:03d}]"


@pytest.fixture
def view() -> Iterator[LiveView]:
    shown = LiveView(Console(file=io.StringIO(), width=80, height=24, force_terminal=True))
    yield shown
    shown.close()


def fan_out(view: LiveView, ended: int, failed: set[int], queries: int = 500, **changes: object) -> float:
    """`queries` one-page queries started, the first `ended` of them ended (`failed` not well); the monotonic
    time 50 s after the run began, when the frame is drawn."""
    view.run_began(facts(spent=lambda: view.credits, page_bounds={account(i): 1 for i in range(queries)},
                         exact=True, **changes))  # fmt: skip
    for i in range(queries):
        view.query_started(account(i), EMBED)
    for i in range(ended):
        view.page_landed(account(i), records=1, credits=1)
        view.query_finished(account(i), "failed" if i in failed else "complete")
    return view.samples[0][0] + 50.0


def rows_of(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith("query "))
    return [line for line in lines[start + 1 :] if line and not line.startswith("and ")]


def test_the_live_view_of_a_wide_fan_out_fits_80_columns_with_the_running_queries_first(
    view: LiveView,
) -> None:
    now = fan_out(view, ended=300, failed={7, 250})
    frame = [line.plain for line in view.lines(80, 24, now)]
    assert len(frame) <= 23 and all(len(line) <= 80 for line in frame), frame
    assert frame[0] == "harvest run 20261127T010203Z-abc123 of job accounts"
    assert re.fullmatch(r"credits 300 of 1000 ━+─+ 30%", frame[1]), frame[1]
    assert (
        frame[2] == "0:50 elapsed · 6.0 pages/s · about 0:33 left"
    )  # 200 one-page queries left at 6 a second
    assert frame[3] == "300 of 500 queries ended (2 not well), 200 running · 300 pages, 300 records"
    rows = rows_of(frame)
    assert rows and all(row.endswith("  running") for row in rows), rows
    assert rows[0].startswith("profile[handle=account_300]")  # in start order
    assert frame[-1] == f"and {500 - len(rows)} more: {200 - len(rows)} running, 298 ended well, 2 not well"


def test_once_few_queries_run_the_ones_that_did_not_end_well_come_next_then_the_latest(
    view: LiveView,
) -> None:
    now = fan_out(view, ended=497, failed={7, 250})
    rows = rows_of([line.plain for line in view.lines(80, 24, now)])
    statuses = [row.split()[-1] for row in rows]
    assert statuses[:5] == ["running"] * 3 + ["failed"] * 2, rows
    assert set(statuses[5:]) == {"complete"}
    assert rows[3].startswith(account(250)) and rows[5].startswith(account(496))


def test_a_query_id_wider_than_its_column_wraps_at_separators_within_the_terminals_height(
    view: LiveView,
) -> None:
    long_id = "creative_detail[material_id=carousel:829e8c67116b4044][region=GB]"
    view.run_began(facts(planned=None))
    for query in (long_id, *(account(i) for i in range(40))):
        view.query_started(query, "/e")
        view.page_landed(query, records=3, credits=1)
    frame = [line.plain for line in view.lines(60, 16)]
    assert len(frame) <= 15 and all(len(line) <= 60 for line in frame), frame
    rows = rows_of(frame)
    wrapped = [rows[0].split()[0]] + [
        line.strip() for line in itertools.takewhile(lambda r: "running" not in r, rows[1:])
    ]
    assert len(wrapped) > 1 and rows[0].endswith("running"), rows
    assert "".join(wrapped) == long_id and whole(long_id, wrapped)  # broken only at separators
    assert frame[3] == "0 queries ended, 41 running · 41 pages, 123 records"  # no planned count: dependents


@pytest.mark.parametrize("width", [80, 50, 30, 20])
def test_no_line_of_the_view_is_wider_than_the_terminal(view: LiveView, width: int) -> None:
    now = fan_out(view, ended=30, failed={3}, queries=60, job="a-job-with-a-long-name")
    frame = [line.plain for line in view.lines(width, 16, now)]
    assert frame and all(len(line) <= width for line in frame), [line for line in frame if len(line) > width]
    assert whole("credits 30 of 1000", frame) and "more: " in unwrapped(frame)


def test_time_left_is_said_only_where_the_plan_knows_the_pages(view: LiveView) -> None:
    view.run_began(facts(page_bounds={"a": 1, "b": 5}, exact=False, planned=2))
    for query in ("a", "b"):
        view.query_started(query, "/e")
    view.page_landed("a", records=1, credits=1)
    view.query_finished("a", "complete")
    view.page_landed("b", records=1, credits=1)
    with view.lock:
        now = view.samples[0][0] + 2.0
        assert view.speed(now) == ["0:02 elapsed", "1.0 pages/s", "0:04 left at most"]  # b: 4 pages at most
    unbounded = LogLines()
    unbounded.run_began(facts(page_bounds=None))
    unbounded.query_started("c", "/e")
    unbounded.page_landed("c", records=1, credits=1)
    with unbounded.lock:
        assert unbounded.speed(unbounded.samples[0][0] + 2.0) == ["0:02 elapsed", "0.5 pages/s"]


def test_a_dask_round_of_several_pages_counts_each_and_the_pages_left_only_within_its_bound(
    view: LiveView,
) -> None:
    """A Dask round reports its pages at once: 3 of a query bounded at 5, then 4 more of which only 2 were
    within the bound (a round counted as one page said "1 page" for three)."""
    view.run_began(facts(page_bounds={"a": 5, "b": 5}, exact=False, planned=2))
    for query in ("a", "b"):
        view.query_started(query, "/e")
    view.page_landed("a", records=12, credits=3, pages=3)
    assert (view.rows["a"].pages, view.pages, view.records, view.pages_left) == (3, 3, 12, 7)
    view.page_landed("a", records=16, credits=4, pages=4)
    assert (view.rows["a"].pages, view.credits, view.pages_left) == (7, 7, 5)
    assert "7 pages, 28 records" in view.totals()


def test_the_closing_line_after_the_load_tells_no_pace_of_a_paging_that_ended(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The demo's last progress line, printed after a 15 s load, said `0.9 pages/s` of a run that paged at 30."""
    lines = LogLines(every=3600)
    lines.run_began(facts(planned=LISTED_WELL + 1, page_bounds=None))
    for i in range(LISTED_WELL + 1):
        lines.query_started(f"q{i}", PROFILE)
        lines.page_landed(f"q{i}", records=1, credits=1)
        lines.query_finished(f"q{i}", "complete")
    with lines.lock:
        start = lines.samples[0][0]
        lines.samples.append((start + 1.0, lines.pages))  # paging ended a second in; the load took 14 more
        assert lines.speed(start + 15.0) == ["0:15 elapsed"]
    lines.close()
    last = capsys.readouterr().err.splitlines()[-1]
    assert "0 running" in last and "pages/s" not in last, last


def test_a_resumed_run_says_which_run_it_resumes_and_how_much_had_landed(
    view: LiveView, capsys: pytest.CaptureFixture[str]
) -> None:
    resumed = facts(kind="resume", previous="20261127T010203Z-abc123", previous_status="running",
                    ended_before=140, pages_before=350, records_before=2800, spent_before=412, going_on=6)  # fmt: skip
    said = ("resumes run 20261127T010203Z-abc123, which was killed: 140 queries had ended with 350 pages and 2800 "
            "records, 412 of 1000 credits were spent; 6 unfinished queries go on where they stopped")  # fmt: skip
    LogLines().run_began(resumed)
    assert capsys.readouterr().err == f"harvest: job accounts {said}\n"
    view.run_began(resumed)
    frame = [line.plain for line in view.lines(80, 24)]
    assert all(len(line) <= 80 for line in frame)
    assert whole(said, frame[1:4]), frame


def test_without_a_terminal_a_wide_fan_out_is_plain_sentences_listing_what_did_not_end_well(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A nightly log of 2,000 accounts is a few dozen lines, and the one that failed is among them."""
    lines = LogLines(every=3600)
    lines.run_began(facts(planned=2000, budget=5000, spent=lambda: lines.credits))
    for i in range(2_000):
        query = f"videos[handle=h{i:05d}]"
        lines.query_started(query, PROFILE)
        lines.page_landed(query, records=3, credits=1)
        lines.query_finished(query, "failed" if i == 1_500 else "complete")
    lines.close()
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "harvest: run 20261127T010203Z-abc123 of job accounts: 2000 queries; budget 5000 credits"
    assert len(err) == 1 + LISTED_WELL + 3, err[-5:]  # the run, the listed, the note, the failure, the totals
    assert err[LISTED_WELL + 1] == (
        "harvest: 20 queries have ended well, each on a line above; from here on a query gets a line only when "
        "it does not end well, and the others are counted in the progress lines"
    )
    assert "harvest: videos[handle=h01500]: failed, 1 page, 3 records, 1 credit" in err
    assert re.fullmatch(
        r"harvest: \d+:\d\d elapsed: 2000 of 5000 credits spent; 2000 of 2000 queries ended \(1 not well\), "
        r"0 running; 2000 pages, 6000 records(; [\d.]+ pages/s)?",
        err[-1],
    ), err[-1]


def test_without_a_terminal_every_query_the_budget_stopped_gets_its_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A query stopped by the budget (or a cap) did not end well: it is not counted among the 20 listed ones,
    and past them it still gets its line, so a cron log names every query that did not end well."""
    lines = LogLines(every=3600)
    lines.run_began(facts(planned=LISTED_WELL + 5, page_bounds=None))
    ids = [f"q{i:02d}" for i in range(LISTED_WELL + 5)]
    stopped = {ids[5], *ids[-4:]}
    for query in ids:
        lines.query_started(query, PROFILE)
        lines.page_landed(query, records=2, credits=1)
        lines.query_finished(query, "budget_exhausted" if query in stopped else "complete")
    err = [line.removeprefix("harvest: ") for line in capsys.readouterr().err.splitlines()[1:]]
    note = next(n for n, line in enumerate(err) if line.startswith(f"{LISTED_WELL} queries have ended well"))
    assert [line.split(":")[0] for line in err[:note]] == ids[: LISTED_WELL + 1]
    assert err[5] == "q05: budget_exhausted, 1 page, 2 records, 1 credit"
    assert err[note + 1 :] == [f"{q}: budget_exhausted, 1 page, 2 records, 1 credit" for q in ids[-4:]]


def test_without_a_terminal_queries_that_never_started_are_left_to_the_end_s_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A capped fan-out of thousands leaves most of its queries without a page (`budget_exhausted`, 0 pages):
    the end of the run names them in one line (`never_started_line`), so the log gives none of them its own."""
    lines = LogLines(every=3600)
    lines.run_began(facts(planned=3, page_bounds=None))
    for query, status, pages in [
        ("a", "complete", 1),
        ("b", "budget_exhausted", 0),
        ("c", "budget_exhausted", 1),
    ]:
        lines.query_started(query, PROFILE)
        for _ in range(pages):
            lines.page_landed(query, records=2, credits=1)
        lines.query_finished(query, status)
    err = [line.removeprefix("harvest: ") for line in capsys.readouterr().err.splitlines()[1:]]
    assert err == [
        "a: complete, 1 page, 2 records, 1 credit",
        "c: budget_exhausted, 1 page, 2 records, 1 credit",
    ]


def test_a_resume_of_one_query_says_it_in_the_singular() -> None:
    said = facts(kind="resume", previous_status="running", ended_before=1, pages_before=1, records_before=1,
                 going_on=1).began()  # fmt: skip
    assert (
        "1 query had ended with 1 page and 1 record" in said and "1 unfinished query goes on where it" in said
    )
    assert facts(kind="continue", previous="r1", going_on=1).carried() == (
        "continues run r1: 1 query picks up at its saved cursor"
    )


def test_table_titles_and_cells_break_only_at_separators() -> None:
    """rich wrapped a title at its table's width, and cells anywhere: `.../out/ha` / `rvest.duckdb`."""
    path = "/tmp/pytest-of-someone/pytest-1234/test_a_long_name0/out/harvest.duckdb"
    rows = table("table", "rows", title=f"rows per table in {path}", right=("rows",))
    add_row(rows, "photo_app_embeds", 60)
    long_id = "creative_detail[material_id=carousel:829e8c67116b4044]"
    queries = table("query", "status", "pages", title="run 20261127T010203Z-abc123 (http://127.0.0.1:8765)")
    add_row(queries, long_id, "complete", 1)
    printed = []
    for shown, width in ((rows, 80), (queries, 40)):
        console = Console(file=io.StringIO(), width=width, force_terminal=False)
        console.print(shown)
        printed.append(console.file.getvalue().splitlines())  # type: ignore[attr-defined]
        assert all(len(line) <= width for line in printed[-1])
    assert printed[0][:2] == [f"rows per table in {path.removesuffix('harvest.duckdb')}", "harvest.duckdb"]
    assert whole("run 20261127T010203Z-abc123 (http://127.0.0.1:8765)", printed[1][:2]), printed[1]
    cells = [line.split("│")[1].strip() for line in printed[1] if line.startswith("│")]
    assert "".join(cells) == long_id and whole(long_id, cells), cells


# ------------------------------------------------------------------------------------- real runs, a scenario
HANDLES = [f"acct{i:02d}" for i in range(60)]
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, latency=0.02)
FIRST_PAGES, THEN_PAGES = 12, 10
"""Pages the killed run is let to get, and the resumed one before its frame is read."""


@dataclass
class Scenario:
    output: Path
    run_id: str
    killed_err: str
    frame: list[str]
    """The resumed run's screen, while it stood at the gate."""
    end: list[str]
    """Everything the resumed run left on the terminal."""
    resumed_code: int
    second: tuple[int, str, str]
    """The job's second whole run: exit code, stdout, stderr."""


COUNTED = "(running|ended well|not well)"


def _frame_ready(shown: list[str]) -> bool:
    """A frame drawn once every unfinished query has started: on a loaded machine the first frames come while
    the resumed run still starts its queries (the queries not shown are then all ended ones). A frame read half
    drawn (`and 36 more: 26 ru`) is refused here and by `Terminal.wait_for` (two reads must agree)."""
    text = "\n".join(shown)
    counts = re.search(r"^(\d+) of (\d+) queries ended(?: \(\d+ not well\))?, (\d+) running", text, re.M)
    all_started = bool(counts) and int(counts[1]) + int(counts[3]) == int(counts[2])  # type: ignore[index]
    counted = rf"^and \d+ more: \d+ {COUNTED}(, \d+ {COUNTED})*$"  # whole: not a line the screen is drawing
    drawn = bool(re.search(counted, text, re.M)) and "pages/s" in text and "credits " in text
    return all_started and drawn


@pytest.fixture(scope="module")
def scenario(prefect_api_url: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    tmp = tmp_path_factory.mktemp("live")
    output = tmp / "out"
    with gated(CONFIG) as sb:
        queries = [{"id": "embed", "endpoint": EMBED, "for_each": {"handle": HANDLES}}]
        spec = write_spec(
            tmp, job_spec(sb.base_url, output, queries, name="accounts", credits=BUDGET, concurrency=4)
        )
        sb.gate.close_after(FIRST_PAGES)
        first = start_run(spec, tmp, prefect_api_url)
        sb.gate.wait_frozen(first)
        os.killpg(first.pid, signal.SIGKILL)
        _, _, killed_err = finish(first)
        sb.gate.open()
        settle(sb)
        (run_id,) = [p.name for p in (output / "raw").iterdir() if p.is_dir()]
        sb.gate.close_after(THEN_PAGES)
        env = subprocess_env(tmp, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=prefect_api_url)
        terminal = Terminal([str(HARVEST), "run", str(spec)], env)
        sb.gate.wait_frozen(terminal.proc)
        frame = terminal.wait_for(_frame_ready, "a frame with its rows, speed and credits")
        sb.gate.open()
        resumed_code = terminal.finish()
        second = finish(start_run(spec, tmp, prefect_api_url))
    return Scenario(output, run_id, killed_err, frame, terminal.everything(), resumed_code, second)


@pytest.mark.scenario
def test_the_live_view_at_80_columns_shows_credits_of_the_budget_elapsed_and_pages_a_second(
    scenario: Scenario,
) -> None:
    frame = scenario.frame
    assert all(len(line) <= 80 for line in frame)
    assert frame[0] == f"harvest run {scenario.run_id} of job accounts", frame
    assert any(re.fullmatch(rf"credits \d+ of {BUDGET} [━─]+ +\d+%", line) for line in frame), frame
    assert any(re.match(r"\d+:\d\d elapsed · \d+\.\d pages/s", line) for line in frame), frame


def test_a_resumed_run_on_a_terminal_says_which_run_it_resumes_and_how_much_had_landed(
    scenario: Scenario,
) -> None:
    said = re.search(
        rf"resumes run {scenario.run_id}, which was killed: (\d+) quer(?:y|ies) had ended with (\d+) pages? and (\d+) "
        rf"records?, (\d+) of {BUDGET} credits were spent; (\d+) unfinished quer(?:y goes|ies go) on",
        unwrapped(scenario.frame),
    )
    assert said, scenario.frame
    ended, pages, records, spent, going_on = map(int, said.groups())
    listed = [line for line in scenario.killed_err.splitlines() if ": complete, 1 page," in line]
    # one page, one record a handle; a query the journal had ended may not have printed its line by the kill
    assert ended == pages == records >= len(listed) > 0
    assert ended <= spent <= FIRST_PAGES + 4  # plus the requests in flight at the kill
    assert going_on == len(HANDLES) - ended  # every planned query had started; the kept ones do not run
    assert scenario.resumed_code == 0


def test_with_more_queries_than_rows_the_running_ones_come_first_and_the_rest_are_counted(
    scenario: Scenario,
) -> None:
    frame = scenario.frame
    rows = rows_of(frame)
    counted = [line for line in frame if line.startswith("and ")]
    more = re.fullmatch(r"and (\d+) more: (\d+) running(, (\d+) ended well)?", counted[-1])
    assert more and rows, "\n".join(frame)
    assert all(row.split()[-1] == "running" for row in rows)
    ended_before = int(re.search(r"(\d+) quer(?:y|ies) had ended", unwrapped(frame)).group(1))  # type: ignore[union-attr]
    assert len(rows) + int(more.group(1)) == len(HANDLES) - ended_before


def test_the_end_on_a_terminal_says_what_is_history_and_what_is_current_without_breaking_a_word(
    scenario: Scenario,
) -> None:
    end, output = scenario.end, scenario.output
    assert all(len(line) <= 80 for line in end)
    assert whole(f"run {scenario.run_id} (http://127.0.0.1:", end)
    assert whole(f"rows per table in {output}/harvest.duckdb", end), "\n".join(end)
    assert whole(f"{output}/parquet/ is history, every run adds the rows it fetched", end), "\n".join(end)
    assert whole(f"the tables in {output}/harvest.duckdb are current, one row per key", end)
    continued = re.sub(r" \\\n *", " ", "\n".join(end))  # a command broken between words with ` \`
    assert f"harvest export {output} --to DIR --snapshot\n" in continued
    copied = printed_command(end, "Current rows of photo_app_embeds")  # as copied from the 80-column screen
    assert sorted(r["handle"] for r in rows_from(copied, ROOT, output.parent)) == HANDLES


def rows_from(command: str, cwd: Path, home: Path) -> list[dict[str, str]]:
    """The rows the command gives, pasted into bash in a clean environment (CSV added, to count them)."""
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    done = subprocess.run(["bash", "-c", command + " --format csv --limit 0"], cwd=cwd, env=clean,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return list(csv.DictReader(io.StringIO(done.stdout)))


def test_the_query_printed_at_the_end_gives_one_row_per_key_from_the_parquet_of_two_runs(
    scenario: Scenario, tmp_path: Path
) -> None:
    code, out, err = scenario.second
    assert code == 0, out + err
    assert "parquet/ is history" in out and "harvest.duckdb are current" in out
    command = printed_command(out.splitlines(), "Current rows of ")
    ordered = " ".join(command.split())  # as printed: a line for the partition, one for the order
    assert "photo_app_embeds" in command
    assert "PARTITION BY handle ORDER BY _fetched_at DESC, file_row_number DESC" in ordered, command
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    as_printed = subprocess.run(["bash", "-c", command], cwd=ROOT, env=clean, capture_output=True, text=True)
    assert as_printed.returncode == 0 and "showing" not in as_printed.stderr, as_printed.stderr
    current = rows_from(command, ROOT, tmp_path)
    assert sorted(r["handle"] for r in current) == HANDLES  # one row per key
    history = duckdb.execute(
        f"SELECT count(*), count(DISTINCT _run_id) FROM read_parquet("
        f"'{scenario.output}/parquet/photo_app_embeds/*/*.parquet', hive_partitioning = true)"
    ).fetchone()
    assert history == (2 * len(HANDLES), 2)  # what the query is for: every key twice in the Parquet
    second_run = re.match(r"harvest: run (\S+) of job", err)
    assert second_run and {r["_run_id"] for r in current} == {second_run.group(1)}  # the newest fetch of each


def test_without_a_terminal_a_run_speaks_in_plain_sentences(scenario: Scenario) -> None:
    _, out, err = scenario.second
    for text in (scenario.killed_err, err, out):
        assert "\x1b[" not in text  # no cursor moves, no colours
    first = scenario.killed_err.splitlines()[0]
    assert (
        first
        == f"harvest: run {scenario.run_id} of job accounts: {len(HANDLES)} queries; budget {BUDGET} credits"
    )
    lines = err.splitlines()
    assert any(line.startswith(f"harvest: {LISTED_WELL} queries have ended well") for line in lines)
    assert re.fullmatch(
        rf"harvest: \d+:\d\d elapsed: {len(HANDLES)} of {BUDGET} credits spent; {len(HANDLES)} of "
        rf"{len(HANDLES)} queries ended, 0 running; {len(HANDLES)} pages, {len(HANDLES)} records.*",
        lines[-1],
    ), lines[-1]
