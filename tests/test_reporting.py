"""What a run tells people: the Prefect artifact of a run, progress lines in cron logs, examples in --help."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.flows.run.progress import LogLines
from harvest.sandbox.wire.serving import running
from tests.endpoints import PINS, PROFILE
from tests.flow_helpers import SECRET_KEY, job_spec, run_flow, write_spec

COMMANDS = ("run", "validate", "plan", "endpoints", "schema", "runs", "load", "sql", "sandbox", "demo")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_shows_an_example(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0
    example = next(line for line in result.output.splitlines() if "Example:" in line)
    assert f"harvest {command}" in example


def test_log_lines_report_finished_queries_with_pages_records_and_credits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = LogLines(every=3600)
    lines.query_started("videos[handle=nasa]", PROFILE)
    lines.page_landed("videos[handle=nasa]", records=10, credits=1)
    lines.page_landed("videos[handle=nasa]", records=7, credits=1)
    assert capsys.readouterr().err == ""  # no heartbeat within the interval, no line per page
    lines.query_finished("videos[handle=nasa]", "complete")
    assert (
        capsys.readouterr().err == "harvest: videos[handle=nasa]: complete, 2 pages, 17 records, 2 credits\n"
    )


def test_a_query_whose_pages_held_what_did_not_land_gets_its_line_past_the_listed_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Past the first 20 queries that ended well, a well-ended query gets its line only when its pages held what
    did not land as records: items a `where` left out, a cursor the declaration does not read."""
    from harvest.flows.run.progress import LISTED_WELL

    lines = LogLines(every=3600)
    for n in range(LISTED_WELL + 2):
        lines.query_started(f"q{n}", "/v1/example/listing")
        lines.query_finished(f"q{n}", "complete")
    capsys.readouterr()
    lines.query_started("thread", "/v1/example/listing")
    lines.query_finished("thread", "complete", ["3 items left out", "`more.cursor` unread"])
    assert capsys.readouterr().err == (
        "harvest: thread: complete, 0 pages, 0 records, 0 credits; 3 items left out; `more.cursor` unread\n"
    )


def test_a_run_publishes_its_summary_as_prefect_artifacts(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with running(api_keys={SECRET_KEY: 1000}, pages=(2, 2)) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url,
                tmp_path / "out",
                [{"id": "pins", "endpoint": PINS, "params": {"query": "tea"}}],
                name="artifact_job",
                credits=50,
            ),
        )
        summary = run_flow(spec)
    assert summary.credits_spent == 3  # two pages of pins and the page ending pin search (`-end-`)
    history = CliRunner().invoke(app, ["runs", str(tmp_path / "out")], env={"COLUMNS": "300"})
    assert history.exit_code == 0
    assert summary.run_id in history.output and "3/50" in history.output and "complete" in history.output

    with get_client(sync_client=True) as client:
        table = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["harvest-artifact-job"]))
        )
        tables = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["harvest-artifact-job-tables"]))
        )
    assert table and tables
    data = table[0].data if isinstance(table[0].data, list) else json.loads(str(table[0].data))
    assert data == [
        {"query_id": "pins", "endpoint": PINS, "status": "complete", "pages": 3,
         "records": summary.records, "credits": 3}
    ]  # fmt: skip
    assert "3/50 credits" in (table[0].description or "")
    assert "| pinboard_pins |" in str(tables[0].data)
    for artifact in (*table, *tables):
        assert SECRET_KEY not in json.dumps(artifact.model_dump(mode="json"))


def test_the_summary_shows_the_services_bill_beside_harvests_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harvest.flows.commands.run_report import print_summary
    from harvest.tasks.output.run_summary import RunSummary

    summary = RunSummary(
        run_id="r1", job="j", service="http://127.0.0.1:1", status="complete", budget=100,
        credits_spent=12, records=5, loaded=False, tables={}, service_billed=9,
        queries=[{"query_id": "[b]q[/b]", "status": "complete", "pages": 12, "records": 5, "credits": 12}],
    )  # fmt: skip
    print_summary(summary, Path("out"))
    printed = capsys.readouterr()
    assert "balance fell by 9 credits" in printed.out and "harvest counted 12" in printed.out
    assert "another job" not in printed.out, "a bill below harvest's own count is harvest's own requests"
    assert "[b]q[/b]" in printed.out, "query ids print literally"
    summary.service_billed = 12
    print_summary(summary, Path("out"))
    assert "balance fell" not in capsys.readouterr().out
    summary.service_billed = -10  # topped up during the run: it rose, and said so, never "fell by -10"
    print_summary(summary, Path("out"))
    printed = capsys.readouterr()
    assert "balance rose by 10 credits" in printed.out and "fell by -" not in printed.out, printed.out
    summary.service_billed = 15  # more than every request harvest sent can have been billed: someone else's
    print_summary(summary, Path("out"))
    assert "3 more than the 12 harvest's own requests can have been billed" in capsys.readouterr().out


def test_a_wide_fan_out_is_one_row_of_the_run_table_plus_its_queries_that_did_not_end_well() -> None:
    from harvest.connectors.paging.pager import OK_STATUSES
    from harvest.tasks.output.run_summary import WIDE, query_rows

    def q(qid: str, status: str = "complete") -> dict[str, object]:
        return {"query_id": qid, "status": status, "pages": 2, "records": 5, "credits": 2}

    wide = [q(f"videos[handle=h{i:03d}]") for i in range(WIDE + 5)]
    wide[3]["status"] = wide[7]["status"] = "failed"
    got = list(query_rows([*wide, q("pins[query=a]"), q("pins[query=b]", "drift")], OK_STATUSES))
    assert got == [
        ("pins[query=a]", "complete", True, 2, 5, 2),
        ("pins[query=b]", "drift", False, 2, 5, 2),
        (f"videos ({WIDE + 5} queries)", f"{WIDE + 3} complete, 2 failed", False, 50, 125, 50),
        ("videos[handle=h003]", "failed", False, 2, 5, 2),
        ("videos[handle=h007]", "failed", False, 2, 5, 2),
    ]


def test_prefect_does_not_walk_the_queries_of_the_summary_a_flow_returns() -> None:
    """Prefect visits a flow's returned state, item by item, for futures to resolve (`resolve_futures_to_states`):
    a wide fan-out's 10,000 query summaries must not be 10,000 dicts walked key by key at the run's end. The
    summary still iterates, indexes, compares and pickles as the list it holds."""
    import pickle

    from prefect.states import Completed
    from prefect.utilities.collections import visit_collection

    from harvest.tasks.output.run_summary import RunSummary

    queries = [
        {"query_id": f"v[h={i}]", "status": "complete", "pages": 1, "records": 2, "credits": 1}
        for i in range(500)
    ]
    summary = RunSummary(
        run_id="r1", job="j", service="http://127.0.0.1:1", status="complete", budget=500,
        credits_spent=500, records=1000, loaded=True, tables={"t": 1000}, queries=queries,
    )  # fmt: skip
    visited: list[object] = []
    visit_collection(Completed(data=summary), visit_fn=lambda x: visited.append(x) or x, return_data=False)
    assert not any(v is queries[0] or v == "v[h=0]" for v in visited), "a query summary was walked"
    assert len(visited) < 200, len(visited)
    assert summary.queries == queries and summary.queries[3] == queries[3] and len(summary.queries) == 500
    assert pickle.loads(pickle.dumps(summary)).queries == queries
    assert summary.as_dict()["queries"] == queries


WIDTH = 80


@pytest.mark.parametrize("command", sorted(c.name or c.callback.__name__ for c in app.registered_commands))
def test_every_command_help_wraps_between_words_and_names_its_arguments(command: str) -> None:
    """`harvest COMMAND --help` in an 80-column terminal: the usage line names each argument (`OUTPUT`, not a
    placeholder such as `{output}`), and the description's sentences run to the width: a line ends early only
    where the next word would not fit, or a paragraph ends."""
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0
    lines = [line.rstrip() for line in result.output.splitlines()]
    (usage,) = [line for line in lines if line.startswith(" Usage: ")]
    named = usage.split(f" {command} ", 1)[1]
    assert "{" not in named and named == named.upper(), usage
    at = lines.index(usage) + 1
    described = lines[at : next(i for i, line in enumerate(lines) if line.startswith("╭"))]
    early = [
        (line, after)
        for line, after in itertools.pairwise(described)
        if line.strip() and after.strip() and len(line) + 1 + len(after.split()[0]) < WIDTH
    ]
    assert early == [], early


def test_one_query_unstarted_or_stopped_is_said_in_the_singular(capsys: pytest.CaptureFixture[str]) -> None:
    """`1 queries stopped ...` and `1 query never started, their fan-out's cap ...` read as one query does; two
    as two."""
    from harvest.flows.commands.run_report import report
    from harvest.flows.run.run_again import RunAgain
    from harvest.tasks.output.run_summary import RunSummary

    capped = "credit budget exhausted: the fan-out's cap of 4 credits (max_credits_total) has 0 left"

    def q(qid: str, status: str, pages: int, error: str | None = None) -> dict[str, object]:
        return {"query_id": qid, "status": status, "pages": pages, "records": pages, "credits": pages,
                "error": error}  # fmt: skip

    def said(*queries: dict[str, object]) -> list[str]:
        summary = RunSummary(
            run_id="r1", job="j", service="sandbox", status="budget_exhausted", budget=9, credits_spent=6,
            records=6, loaded=False, tables={}, queries=list(queries),
        )  # fmt: skip
        report(summary, RunAgain(Path("job.yaml")), Path("out"))
        return capsys.readouterr().err.splitlines()

    videos, comments = q("videos[handle=a]", "budget_exhausted", 2), q("comments[url=u0]", "complete", 4)
    err = said(videos, comments)
    assert "1 query stopped with its cursor kept: `harvest run job.yaml --continue` picks it up" in err, err
    err = said(videos, comments, q("comments[url=u1]", "budget_exhausted", 0, capped))
    assert (
        "1 query never started, its fan-out's cap (max_credits_total) spent before its turn: 1 of 2 comments "
        "(comments[url=u1])"
    ) in err, err
    assert (
        "2 queries stopped with their cursors kept: `harvest run job.yaml --continue` picks them up" in err
    ), err


def test_a_night_that_left_queries_unstarted_says_which_and_exits_as_the_job_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`budget_exhausted` without a page is a query that never started: counted per spec query, a few ids
    named, why; exit 0 unless the spec's `budget.unstarted_exit_code` is 3. A query stopped after its first
    pages is not one (it started), and a failure still exits 1."""
    from harvest.flows.commands.run_report import exit_code, print_summary
    from harvest.tasks.output.run_summary import RunSummary

    budget = "credit budget exhausted: page 0 needs 1 credit(s) but the run's budget of 9 credits has 0 left"

    def q(qid: str, status: str, pages: int) -> dict[str, object]:
        return {"query_id": qid, "status": status, "pages": pages, "records": pages, "credits": pages,
                "error": budget if status == "budget_exhausted" else None}  # fmt: skip

    queries = [q("videos[handle=a]", "budget_exhausted", 2), q("videos[handle=b]", "complete", 3)]
    queries += [q(f"comments[url=u{n}]", "complete", 1) for n in range(3)]
    queries += [q(f"comments[url=v{n}]", "budget_exhausted", 0) for n in range(5)]
    summary = RunSummary(
        run_id="r1", job="j", service="sandbox", status="budget_exhausted", budget=9, credits_spent=9,
        records=9, loaded=False, tables={}, queries=queries,
    )  # fmt: skip
    print_summary(summary, Path("out"))
    line = next(x for x in capsys.readouterr().err.splitlines() if "never started" in x)
    assert line == (
        "5 queries never started, the run's budget spent before their turn: 5 of 8 comments "
        "(comments[url=v0], comments[url=v1], comments[url=v2] and 2 more)"
    )
    assert exit_code(summary) == 0
    summary.unstarted_exit_code = 3
    assert exit_code(summary) == 3
    summary.queries[1]["status"] = "failed"
    assert exit_code(summary) == 1  # a failure says more than a shortfall
    for unstarted in summary.queries[5:]:
        unstarted["pages"] = 1  # each took a page: none is unstarted, the night exits 0
    summary.queries[1]["status"] = "complete"
    assert exit_code(summary) == 0


def test_the_new_fields_line_counts_them_puts_a_table_that_kept_nothing_first_and_says_where_the_rest_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """20 new fields of a table that landed well, 2 of one whose records were all lost (its key renamed): the
    lost table's come first, the line says how many, where every query's list is, and how to silence one."""
    from harvest.flows.commands.run_report import print_summary
    from harvest.tasks.output.run_summary import RunSummary

    landed = {"seen": 5, "kept": 5, "new_fields": [f"extra_{n:02d}" for n in range(20)]}
    lost = {"seen": 3, "kept": 0, "no_key": 3, "new_fields": ["itemId", "zz_note"]}
    extraction = {"tables": {"aa_posts": landed, "zz_clips": lost}}
    summary = RunSummary(
        run_id="r1", job="j", service="http://127.0.0.1:1", status="complete", budget=100, credits_spent=2,
        records=5, loaded=False, tables={},
        queries=[{"query_id": "q", "status": "complete", "pages": 2, "records": 5, "credits": 2,
                  "extraction": extraction}],
    )  # fmt: skip
    print_summary(summary, Path("out"))
    said = " ".join(capsys.readouterr().err.split())
    shown = ", ".join(
        ["zz_clips.itemId", "zz_clips.zz_note", *(f"aa_posts.extra_{n:02d}" for n in range(13))]
    )
    assert (
        "22 new fields no column reads (kept in `raw`; a record kind's `ignore:` leaves one there on purpose): "
        f"{shown}, and 7 more (every query's: `harvest sql out 'SELECT query_id, new_fields FROM query_state'`)"
    ) in said, said
