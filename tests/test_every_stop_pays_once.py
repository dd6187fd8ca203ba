"""Every stop pays once: whatever chain of runs led to a resume, and whatever stopped a run, the command harvest
prints (or the job run again) pays nothing twice but the requests in flight at a kill.

Real `harvest run` processes against the sandbox over HTTP, as a nightly job meets them; the sandbox's own
ledger says what was paid twice, DuckDB and the Parquet say that every record landed once.
The processes talk to the session's Prefect test server (PREFECT_API_URL), so none starts a temporary one.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries, paid_twice
from tests.flow_helpers import HARVEST, SECRET_KEY, subprocess_env, write_spec
from tests.process_helpers import FINISH_TIMEOUT, finish, pasted, start_run, wait_for_requests
from tests.test_resume_kill import CONCURRENCY, CONFIG, assert_landed_once, job, kill_hard


def printed_resume(output: Path, tmp_path: Path) -> str:
    """The command `harvest runs` prints to resume the job's unfinished run, as printed."""
    listed = subprocess.run(
        [str(HARVEST), "runs", str(output)], env=subprocess_env(tmp_path), capture_output=True, text=True,
        timeout=FINISH_TIMEOUT,
    )  # fmt: skip
    found = re.findall(r"`([^`]+)` resumes it", listed.stderr)
    assert len(found) == 1, listed.stdout + listed.stderr
    return found[0]


@pytest.mark.scenario
def test_a_killed_continue_resumed_as_printed_pays_nothing_settled_before_it(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """A night stops at its budget with the creatives and their details complete and the pins stopped at
    their cursors; `--continue` is killed two pages in; the resume `harvest runs` prints goes on from there: the
    creatives and details are not asked again, the pins go on from the cursors the night kept."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, credits=80))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        assert code == 0 and "--continue` picks them up" in err, out + err
        night = len(data_entries(sb))
        proc = start_run(spec, tmp_path, prefect_api_url, "--continue", "--budget", "500")
        wait_for_requests(sb, night + 2, proc)
        kill_hard(proc, sb)
        code, out, err = pasted(printed_resume(output, tmp_path), tmp_path, prefect_api_url)
        entries = data_entries(sb)
    assert code == 0, out + err
    stopped, continued = sorted(all_manifests(OutputLayout(output)), key=lambda m: m.started)
    assert stopped.status == "budget_exhausted" and {q["status"] for q in stopped.queries} >= {"complete"}
    assert continued.continues == stopped.run_id and continued.resumes == 1
    assert continued.status == "complete", continued.queries
    assert paid_twice(entries) <= CONCURRENCY, "only the pages in flight at the kill may be paid twice"
    for run in (stopped, continued):
        assert_landed_once(output, run.run_id)


def piped(spec: Path, tmp_path: Path, api_url: str, streams: str) -> tuple[int, str, str]:
    """`harvest run SPEC {streams}| head -n 1` in a shell, as typed: its exit code (the shell's PIPESTATUS),
    what head printed and what harvest wrote elsewhere."""
    env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=api_url)
    line = f"{HARVEST} run {spec} {streams}| head -n 1; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(
        ["bash", "-c", line], env=env, capture_output=True, text=True, timeout=FINISH_TIMEOUT
    )
    return done.returncode, done.stdout, done.stderr


def test_a_closed_output_stops_the_run_resumably_and_fails_no_page(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """`harvest run SPEC 2>&1 | head -n 1`: the reader leaves after the run's first line, and every later line
    meets a closed pipe. The run stops as on SIGTERM (exit 130), nothing it paid is called unreadable, and the
    job run again (`| head -n 1` too) resumes it: every record once, no page paid twice, a bill that blames
    nobody."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        code, first_line, _ = piped(spec, tmp_path, prefect_api_url, "2>&1 ")
        (stopped,) = all_manifests(OutputLayout(output))
        code2, _, err2 = piped(spec, tmp_path, prefect_api_url, "")
        entries, billed = data_entries(sb), sb.billed_total()
    assert code == 130 and first_line.startswith("harvest: run "), first_line
    assert stopped.status == "interrupted" and "a closed std" in (stopped.error or ""), stopped
    assert code2 == 0, err2
    (run,) = all_manifests(OutputLayout(output))
    assert run.run_id == stopped.run_id and run.status == "complete" and run.resumes == 1, run.queries
    assert "could not be read" not in err2 and "Traceback" not in err2, err2
    assert paid_twice(entries) == 0, "a closed output lets every page in flight land"
    assert run.service_billed == billed == run.credits_spent and "something else" not in err2
    assert_landed_once(output, run.run_id)


def test_a_run_piped_to_head_ends_complete_and_lands_every_record_once(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """`harvest run SPEC | head -n 1`, as typed: stdout carries the summary, whose second line meets the closed
    pipe once every page landed. That is no failure of the run: exit 0, the run complete, every record once,
    no page called unreadable, a bill that blames nobody."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        code, first_line, err = piped(spec, tmp_path, prefect_api_url, "")
        entries, billed = data_entries(sb), sb.billed_total()
    assert code == 0 and first_line.count("\n") == 1, first_line + err
    (run,) = all_manifests(OutputLayout(output))
    assert run.status == "complete" and run.resumes == 0, run.queries
    assert "could not be read" not in err and "Traceback" not in err, err
    assert paid_twice(entries) == 0
    assert run.service_billed == billed == run.credits_spent and "something else" not in err
    assert_landed_once(output, run.run_id)
