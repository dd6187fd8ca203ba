"""Every command harvest prints for the user to run next works as printed, pasted into a clean shell.

The user runs `.venv/bin/harvest` without activating anything, from a working directory whose name has a space,
with a spec that does not name the service (`--base-url` on the command line) and an output directory given by
`--output` (a space in it too). Each printed command (the resume after Ctrl-C, twice; the resume `harvest runs`
prints from the manifest; `--continue` after a budget stop; `load` while DuckDB was held; `rebuild` after the
database was lost, overwritten, or a landed file cut short; the demo's `sql` and Python lines) is taken from harvest's output exactly as printed and run
with `bash -c` in an environment holding only PATH, HOME and the key, from the user's directory; each must do
what its line says. Prefect: the API of the test session's server, written in HOME's Prefect profile as a user
with a Prefect server has it (the environment stays clean).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from harvest.sandbox.config import FaultKind, SandboxConfig
from harvest.sandbox.expected import full_crawl
from tests.crawl_helpers import data_entries, paid_twice
from tests.endpoints import PINS
from tests.flow_helpers import (
    BIG_BALANCE,
    SECRET_KEY,
    held_duckdb,
    key_set,
    rows,
    write_spec,
)
from tests.landed_demo import LandedDemo
from tests.process_helpers import FINISH_TIMEOUT, Watched
from tests.sandbox_gate import GatedSandbox, gated
from tests.shell_helpers import clean_env, harvest, pasting, user_dir

PARAMS = {"query": "oak desk"}
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (30, 30)}, page_size=5)
STOPPING = "stopping; letting the requests in flight land"


def ctrl_c(sb: GatedSandbox, proc: subprocess.Popen[str]) -> tuple[int, str]:
    """Ctrl-C in the terminal once the run paid 5 more pages: exit code and stderr."""
    sb.gate.close_after(5, path=PINS)
    run = Watched(proc)
    sb.gate.wait_frozen(run.proc)
    os.killpg(run.proc.pid, signal.SIGINT)
    run.wait_for_stderr(STOPPING)
    sb.gate.open()
    code, _, err = run.finish()
    return code, err


def typed(cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`.venv/bin/harvest ARGS` typed by the user in `cwd`, run to its end."""
    return subprocess.run(
        [".venv/bin/harvest", *args], cwd=cwd, env=clean_env(home), capture_output=True, text=True,
        timeout=FINISH_TIMEOUT,
    )  # fmt: skip


def pasted(command: str, cwd: Path, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The printed command, run as printed by a shell in the user's directory (`env`: what the user set too)."""
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env={**clean_env(home), **env}, capture_output=True, text=True,
        timeout=FINISH_TIMEOUT,
    )  # fmt: skip


def printed(text: str, ending: str) -> str:
    """The one command in backticks that `text` prints just before `ending`."""
    found = re.findall(r"`([^`]+)`" + re.escape(ending), text)
    assert len(found) == 1, (ending, text)
    return found[0]


def pq_rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


def manifests(output: Path) -> list[Any]:
    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.manifest import all_manifests

    return all_manifests(OutputLayout(output))


@pytest.mark.scenario
def test_resume_continue_load_and_rebuild_work_as_printed_in_a_clean_shell(
    prefect_api_url: str, tmp_path: Path
) -> None:
    cwd, home = user_dir(tmp_path, prefect_api_url)
    output = cwd / "out dir"
    with gated(CONFIG) as sb:
        spec = {"name": "night", "budget": {"credits": 1000}, "output": "elsewhere",
                "queries": [{"id": "pins", "endpoint": PINS, "params": PARAMS}]}  # fmt: skip
        (cwd / "my specs").mkdir()
        write_spec(cwd / "my specs", spec, "night job.yaml")
        options = ["--base-url", sb.base_url, "--output", "out dir", "--budget", "20"]
        code1, err1 = ctrl_c(sb, harvest(cwd, home, "run", "my specs/night job.yaml", *options))
        resume = printed(err1, " resumes it")
        code2, err2 = ctrl_c(sb, pasting(resume, cwd, home))  # resumed, and stopped again
        listed = typed(cwd, home, "runs", "out dir")
        from_runs = printed(listed.stderr, " resumes it")

        resumed = pasted(from_runs, cwd, home)  # pays on to the budget of 20 credits, then says how to go on
        go_on = printed(resumed.stderr, " picks it up")

        with held_duckdb(output / "harvest.duckdb", mark=False):  # a notebook holds the database
            continued = pasted(go_on, cwd, home, HARVEST_DUCKDB_LOCK_WAIT_SECONDS="1")
        load = printed(continued.stderr, " when it is free")
        loaded = pasted(load, cwd, home)

        (output / "harvest.duckdb").unlink()  # the database is lost; the user asks harvest to load
        asked = typed(cwd, home, "load", "out dir")
        rebuild = printed(asked.stderr, " builds it again from the raw pages")
        rebuilt = pasted(rebuild, cwd, home)

        (output / "harvest.duckdb").write_bytes(b"not a database")  # overwritten by a stray copy
        garbled = typed(cwd, home, "load", "out dir")
        remake = printed(garbled.stderr, " makes it again from the landed pages")
        remade = pasted(remake, cwd, home)
        cut = sorted((output / "parquet").rglob("*.parquet"))[0]  # a copy stopped halfway
        cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
        exported = typed(cwd, home, "export", "out dir", "--to", "lake")
        reland = printed(exported.stderr, " lands it again from its raw pages")
        relanded = pasted(reland, cwd, home)
        paid = [e for e in data_entries(sb) if e.path == PINS]
    assert code1 == 130, err1
    assert resume == (
        f".venv/bin/harvest run 'my specs/night job.yaml' --base-url {sb.base_url} --output 'out dir' "
        "--budget 20"
    )
    assert code2 == 130 and printed(err2, " resumes it") == resume, err2
    spec_file = str(cwd / "my specs" / "night job.yaml")
    assert from_runs == (  # `harvest runs` knows the run's spec file, service and budget
        f".venv/bin/harvest run {shlex.quote(spec_file)} --base-url {sb.base_url} --output 'out dir' "
        "--budget 20"
    ), listed.stderr
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert go_on == f"{from_runs} --continue"
    assert continued.returncode == 1, continued.stdout + continued.stderr  # held past the wait: cron hears it
    assert "is still, after waiting 1 s, open in another process" in continued.stderr, continued.stderr
    assert load == ".venv/bin/harvest load 'out dir'"
    assert loaded.returncode == 0 and "loaded run" in loaded.stdout, loaded.stdout + loaded.stderr
    assert rebuild == ".venv/bin/harvest rebuild 'out dir'", asked.stderr
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert garbled.returncode == 1 and remake == rebuild, garbled.stderr
    assert remade.returncode == 0, remade.stdout + remade.stderr
    assert exported.returncode == 1 and reland == rebuild, exported.stderr
    assert relanded.returncode == 0, relanded.stdout + relanded.stderr
    assert len(pq_rows(cut)) > 0  # landed again, whole

    stopped, chained = sorted(manifests(output), key=lambda m: m.started)
    assert stopped.status == "budget_exhausted" and stopped.resumes == 2 and stopped.credits_spent == 20
    assert chained.continues == stopped.run_id and chained.status == "complete", chained
    assert (
        len(paid) == 31 and paid_twice(paid) == 0
    )  # every page once (30 and `-end-`), across the stop and both runs
    expected = {(PARAMS["query"], p["id"]) for p in full_crawl(PINS, PARAMS, CONFIG)["pins"]}
    db = output / "harvest.duckdb"
    assert key_set(db, "pinboard_pins") == expected  # rebuilt from the raw pages, every pin there
    assert rows(db, "SELECT count(*) FROM runs") == [(2,)]
    assert not (cwd / "elsewhere").exists()  # every command kept to the output the user gave


@pytest.mark.scenario
def test_a_night_resumed_by_the_nightly_command_prints_a_continue_that_keeps_the_night_s_budget(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """`harvest run SPEC --budget 8` stopped with Ctrl-C after 5 pages, then the nightly command without
    `--budget`, as cron runs it: the resume keeps the run's budget of 8, and the `--continue` it prints on its
    budget stop names it. It printed none: pasted, the continue spent up to the spec's 1000."""
    cwd, home = user_dir(tmp_path, prefect_api_url)
    with gated(CONFIG) as sb:
        spec = {"name": "night", "budget": {"credits": 1000}, "output": "out dir",
                "queries": [{"id": "pins", "endpoint": PINS, "params": PARAMS}]}  # fmt: skip
        write_spec(cwd, spec, "night.yaml")
        code1, err1 = ctrl_c(
            sb, harvest(cwd, home, "run", "night.yaml", "--base-url", sb.base_url, "--budget", "8")
        )
        resumed = typed(cwd, home, "run", "night.yaml", "--base-url", sb.base_url)
        go_on = printed(resumed.stderr, " picks it up")
        continued = pasted(go_on, cwd, home)
    assert code1 == 130, err1
    assert resumed.returncode == 0 and "credits spent: 8 of a budget of 8" in resumed.stdout, resumed.stdout
    assert go_on == f".venv/bin/harvest run night.yaml --base-url {sb.base_url} --budget 8 --continue"
    assert continued.returncode == 0, continued.stdout + continued.stderr
    assert "credits spent: 8 of a budget of 8" in continued.stdout, continued.stdout


@pytest.mark.scenario
def test_a_refused_continue_prints_a_fresh_start_that_keeps_the_night_s_budget(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """A night stopped with Ctrl-C; the next `--continue --budget 8` is refused (an unfinished run is resumed,
    not continued) and prints the `--fresh` that abandons it: pasted, the new night spends 8, its budget. It
    printed the `--fresh` without `--budget`: pasted, it paid all 31 pages, up to the spec's 1000."""
    cwd, home = user_dir(tmp_path, prefect_api_url)
    with gated(CONFIG) as sb:
        spec = {"name": "night", "budget": {"credits": 1000}, "output": "out dir",
                "queries": [{"id": "pins", "endpoint": PINS, "params": PARAMS}]}  # fmt: skip
        write_spec(cwd, spec, "night.yaml")
        url = ["--base-url", sb.base_url]
        code1, err1 = ctrl_c(sb, harvest(cwd, home, "run", "night.yaml", *url, "--budget", "20"))
        refused = typed(cwd, home, "run", "night.yaml", *url, "--budget", "8", "--continue")
        fresh = printed(refused.stderr, " abandons it (its data is kept)")
        started = pasted(fresh, cwd, home)
    assert code1 == 130, err1
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert fresh == f".venv/bin/harvest run night.yaml --base-url {sb.base_url} --budget 8 --fresh"
    assert started.returncode == 0, started.stdout + started.stderr
    assert "credits spent: 8 of a budget of 8" in started.stdout, started.stdout
    abandoned, new = sorted(manifests(cwd / "out dir"), key=lambda m: m.started)
    assert abandoned.status == "abandoned" and (new.budget, new.credits_spent) == (8, 8), new


@pytest.mark.scenario
def test_harvest_runs_names_no_base_url_the_spec_names_and_its_resume_works_as_printed(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """The spec names the service; a `--budget 8` night stopped with Ctrl-C. `harvest runs` printed its resume
    with `--base-url` and the spec's own URL (noise, and pinned: the spec's URL changed later, the pasted line
    kept the old one); now without it, and pasted it resumes the run to its budget of 8."""
    cwd, home = user_dir(tmp_path, prefect_api_url)
    with gated(CONFIG) as sb:
        spec = {"name": "night", "budget": {"credits": 1000}, "output": "out dir",
                "service": {"base_url": sb.base_url},
                "queries": [{"id": "pins", "endpoint": PINS, "params": PARAMS}]}  # fmt: skip
        spec_file = write_spec(cwd, spec, "night.yaml")
        code1, err1 = ctrl_c(sb, harvest(cwd, home, "run", "night.yaml", "--budget", "8"))
        listed = typed(cwd, home, "runs", "out dir")
        from_runs = printed(listed.stderr, " resumes it")
        resumed = pasted(from_runs, cwd, home)
    assert code1 == 130, err1
    assert from_runs == (
        f".venv/bin/harvest run {shlex.quote(str(spec_file))} --output 'out dir' --budget 8"
    ), listed.stderr
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "credits spent: 8 of a budget of 8" in resumed.stdout, resumed.stdout
    (run,) = manifests(cwd / "out dir")
    assert run.resumes == 1 and run.credits_spent == 8, run


@pytest.mark.scenario
def test_a_night_whose_pages_kept_failing_goes_on_with_the_continue_it_prints_paying_only_what_is_missing(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """The service fails every try of the third page (5xx past the client's 5 attempts): the query fails, the
    night exits 1 and its last line gives the `--continue` command, which pasted pays from the third page on.
    No command was printed, and a plain rerun (a new night) paid every page again."""
    cwd, home = user_dir(tmp_path, prefect_api_url)
    failing = [None, None, *[FaultKind.SERVER_ERROR] * 5]
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (6, 6)}, page_size=5,
        fault_plan_by_path={PINS: failing},
    )  # fmt: skip
    with gated(config) as sb:
        spec = {"name": "night", "budget": {"credits": 100}, "output": "out dir",
                "queries": [{"id": "pins", "endpoint": PINS, "params": PARAMS}]}  # fmt: skip
        write_spec(cwd, spec, "night.yaml")
        night = pasted(f".venv/bin/harvest run night.yaml --base-url {sb.base_url}", cwd, home)
        go_on = printed(night.stderr, " picks it up")
        continued = pasted(go_on, cwd, home)
        answered = [e for e in data_entries(sb) if e.path == PINS and e.fault is None]
    assert night.returncode == 1, night.stderr
    assert go_on == f".venv/bin/harvest run night.yaml --base-url {sb.base_url} --continue", night.stderr
    assert continued.returncode == 0, continued.stdout + continued.stderr
    assert len(answered) == 7 and paid_twice(answered) == 0  # 6 pages and `-end-`, each answered once
    expected = {(PARAMS["query"], p["id"]) for p in full_crawl(PINS, PARAMS, config)["pins"]}
    assert key_set(cwd / "out dir" / "harvest.duckdb", "pinboard_pins") == expected


def test_a_load_duckdb_refused_for_its_memory_limit_says_why_and_loads_as_printed(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """A run whose load needed more than DuckDB's memory limit (here a user's 2MB) ends paid and landed, says
    why it is not loaded (not "when it is free": no one holds the file, and loading again as it was fails
    again), and the command it prints, with a higher limit, loads it."""
    cwd, home = user_dir(tmp_path, prefect_api_url)
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)}, page_size=5)
    with gated(config) as sb:
        spec = {"name": "night", "budget": {"credits": 100}, "output": "out dir",
                "queries": [{"id": "pins", "endpoint": PINS, "params": PARAMS}]}  # fmt: skip
        write_spec(cwd, spec, "night.yaml")
        run = pasted(
            f"HARVEST_DUCKDB_MEMORY_LIMIT=2MB .venv/bin/harvest run night.yaml --base-url {sb.base_url}",
            cwd,
            home,
        )
        said = " ".join(run.stderr.split())  # lines joined where the terminal's width broke them
        commands = set(re.findall(r"`(HARVEST_DUCKDB_MEMORY_LIMIT=[^`]+)`", said))
        loaded = pasted(next(iter(commands)), cwd, home) if len(commands) == 1 else None
        paid = data_entries(sb)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "warning: not loaded into DuckDB yet: loading" in said and "than DuckDB's limit of 2MB" in said, (
        said
    )
    assert "when it is free" not in said, said
    assert commands == {"HARVEST_DUCKDB_MEMORY_LIMIT=512MB .venv/bin/harvest load 'out dir'"}, said
    assert loaded is not None and loaded.returncode == 0, loaded
    assert "loaded run" in loaded.stdout, loaded.stdout + loaded.stderr
    assert len(paid) == 4 and paid_twice(paid) == 0  # 3 pages and `-end-`, paid once
    expected = {(PARAMS["query"], p["id"]) for p in full_crawl(PINS, PARAMS, config)["pins"]}
    assert key_set(cwd / "out dir" / "harvest.duckdb", "pinboard_pins") == expected


def test_the_embedded_sandbox_and_the_demo_print_commands_that_work(
    landed_demo: LandedDemo, prefect_api_url: str, tmp_path: Path
) -> None:
    """The embedded sandbox asked for by `--base-url sandbox`: the `--continue` line names it; the demo's
    query lines (`harvest sql`, Python with duckdb) run as printed. The demo is the session's
    (`tests.landed_demo`: `harvest demo --output "demo's out"` typed the same way in a user's directory)."""
    cwd, home = user_dir(tmp_path, prefect_api_url)
    (cwd / "specs").mkdir()
    spec = {"name": "try", "budget": {"credits": 100}, "output": "try out",
            "queries": [{"id": "pins", "endpoint": PINS, "params": PARAMS}]}  # fmt: skip
    write_spec(cwd / "specs", spec, "try it.yaml")
    first = harvest(cwd, home, "run", "specs/try it.yaml", "--base-url", "sandbox", "--budget", "1")
    _, err = first.communicate(timeout=FINISH_TIMEOUT)
    go_on = printed(err, " picks it up")
    continued = pasted(go_on, cwd, home)
    demo_out, demo_err = landed_demo.stdout, landed_demo.stderr  # typed in its own user's directory
    shown = demo_out.split("(DuckDB SQL, read-only):\n", 1)[1]
    queries, rest = shown.split("\nFrom Python (the duckdb package, read-only):\n")
    sql, every_table = queries.split("\nEvery table and its rows", 1)
    python, warehouse = rest.split("\nFor a warehouse: ")
    sql, python, every_table = sql.strip(), python.strip(), every_table.split(":\n", 1)[1].strip()
    demo_dir = landed_demo.cwd  # read only: the printed lines only read
    queried, read = pasted(sql, demo_dir, home), pasted(python, demo_dir, home)
    listed = pasted(every_table, demo_dir, home)
    assert first.returncode == 0, err
    assert go_on == ".venv/bin/harvest run 'specs/try it.yaml' --base-url sandbox --budget 1 --continue"
    assert continued.returncode == 0, continued.stdout + continued.stderr
    stopped, chained = sorted(manifests(cwd / "try out"), key=lambda m: m.started)
    assert chained.continues == stopped.run_id and chained.credits_spent == 1
    assert landed_demo.returncode == 0, demo_out + demo_err
    assert sql.startswith(".venv/bin/harvest sql 'demo'\"'\"'s out' '\n      SELECT "), sql
    shown_lines = [*sql.splitlines(), *python.splitlines(), *every_table.splitlines()]
    assert max(len(line) for line in shown_lines) < 80  # no terminal cuts them
    assert warehouse == (  # what docs/handoff.md has a loader go by: the exports' manifests, not folders
        ".venv/bin/harvest export 'demo'\"'\"'s out' --to DIR sends the runs not sent there yet, with a manifest "
        "of the new files\n"
    ), warehouse
    assert queried.returncode == 0 and "play_count" in queried.stdout, queried.stdout + queried.stderr
    assert listed.returncode == 0 and "short_video_videos" in listed.stdout, listed.stdout + listed.stderr
    assert read.returncode == 0 and "query_state" not in read.stderr and "complete" in read.stdout, (
        read.stdout + read.stderr
    )


@pytest.mark.scenario
def test_the_export_retry_and_the_fresh_start_work_as_printed(prefect_api_url: str, tmp_path: Path) -> None:
    """A run whose export failed prints how to send it later; `harvest runs` prints how to abandon an
    unfinished run: both pasted into a clean shell, with a space in every path."""
    cwd, home = user_dir(tmp_path, prefect_api_url)
    output, blocked = cwd / "out dir", cwd / "lake dir"
    blocked.write_text("a file where the export wants a directory")
    spec = {"name": "night", "budget": {"credits": 1000}, "output": "out dir",
            "export": {"to": "lake dir/night"}, "queries": [{"id": "pins", "endpoint": PINS, "params": PARAMS}]}  # fmt: skip
    with gated(CONFIG) as sb:
        write_spec(cwd, spec, "night job.yaml")
        first = harvest(cwd, home, "run", "night job.yaml", "--base-url", sb.base_url)
        _, err1 = first.communicate(timeout=FINISH_TIMEOUT)
        (retry,) = re.findall(r"retry: `([^`]+)`", err1)
        blocked.unlink()
        sent = pasted(retry, cwd, home)

        code2, _ = ctrl_c(
            sb, harvest(cwd, home, "run", "night job.yaml", "--base-url", sb.base_url, "--full")
        )
        listed = typed(cwd, home, "runs", "out dir")
        fresh = printed(listed.stderr, " abandons it")
        started = pasted(fresh, cwd, home)
    assert first.returncode == 1 and "export failed" in err1, err1
    assert retry == ".venv/bin/harvest export 'out dir' --to 'lake dir/night'", err1
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert (blocked / "night" / "_exports").is_dir()  # the night's data reached the lake
    assert code2 == 130
    assert fresh.endswith(" --fresh") and started.returncode == 0, fresh + started.stdout + started.stderr
    statuses = sorted((m.started, m.status) for m in manifests(output))
    assert [s for _, s in statuses] == ["complete", "abandoned", "complete"], statuses


def test_a_job_spec_given_where_the_output_directory_belongs_is_said_with_the_command_that_works(
    landed_demo: LandedDemo, prefect_api_url: str, tmp_path: Path
) -> None:
    """`harvest runs night.yaml` said "no runs found under night.yaml" (exit 1) and `harvest sql night.yaml ...`
    said "night.yaml/harvest.duckdb does not exist: run a job first": untrue of a job that had run. Every command
    that takes the output directory refuses the spec (exit 2), names where the job lands and the command as it
    should have been typed, which works pasted. The demo's output is the session's (read only)."""
    _, home = user_dir(tmp_path, prefect_api_url)
    spec = {"name": "night", "budget": {"credits": 10}, "output": "demo's out",
            "queries": [{"id": "pins", "endpoint": PINS, "params": PARAMS}]}  # fmt: skip
    spec_file = str(write_spec(tmp_path, spec, "night job.yaml"))
    cwd = landed_demo.cwd  # where the spec's relative output is the demo's
    said = {
        command: typed(cwd, home, command, spec_file, *rest)
        for command, *rest in [
            ("runs",), ("load",), ("rebuild",), ("raw",), ("export", "--to", str(tmp_path / "lake")),
            ("sql", "SELECT count(*) AS n FROM runs", "--format", "csv"),
        ]
    }  # fmt: skip
    runs_line = printed(said["runs"].stderr, "\n")
    sql_line = printed(said["sql"].stderr, "\n")
    listed, queried = pasted(runs_line, cwd, home), pasted(sql_line, cwd, home)
    for command, result in said.items():
        assert result.returncode == 2, (command, result.stdout + result.stderr)
        assert result.stderr.startswith(
            f"error: {spec_file} is a job spec, not its output directory; the job lands in demo's out: "
            f"`.venv/bin/harvest {command} 'demo'\"'\"'s out'"
        ), (command, result.stderr)
    assert not (tmp_path / "lake").exists()
    assert (
        sql_line == ".venv/bin/harvest sql 'demo'\"'\"'s out' 'SELECT count(*) AS n FROM runs' --format csv"
    )
    assert listed.returncode == 0 and "demo" in listed.stdout and "complete" in listed.stdout, listed.stdout
    assert queried.returncode == 0 and queried.stdout.split() == ["n", "1"], queried.stdout + queried.stderr
