"""Every sentence harvest prints fits a terminal of 80 columns: what a user runs there, as a user runs it
(`.venv/bin/harvest` in a clean shell, COLUMNS=80, the output taken for a terminal as rich takes it with
TTY_COMPATIBLE), prints no line wider than 80 columns, unless what runs past is one value that cannot break
(a path, an id, a URL, a `command` quoted to be copied whole). A terminal would break the words of a longer
line wherever the 80th column falls."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from rich.cells import cell_len

from harvest.flows.cli import app
from tests.endpoints import PROFILE
from tests.flow_helpers import ROOT, job_spec, write_spec
from tests.process_helpers import FINISH_TIMEOUT
from tests.shell_helpers import clean_env, user_dir

WIDTH = 80
TERMINAL = {"COLUMNS": str(WIDTH), "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}
"""An 80-column terminal, as rich sees one (`TTY_COMPATIBLE`: the output is shown on a terminal)."""
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_QUOTED = re.compile(r"`[^`]*`")

BAD_SPEC = """\
name: typos
service: {base_url: sandbox}
budget: {max_credits: 10}
queries:
  - id: videos
    endpoint: /v1/short_video/user/videos
    params: {handle: nasa}
"""
"""Typos whose problems name the allowed keys and the closest endpoints: long sentences."""
HANDLES = [f"an-account-whose-handle-is-long-enough-to-fill-a-line-{n:02d}" for n in range(22)]
"""More queries than are listed one a line (`flows.run.progress.LISTED_WELL`), with ids of 80 columns."""


def too_wide(text: str) -> list[str]:
    """The lines of `text` wider than WIDTH whose overflow is more than one value: words a terminal would
    break. A line of one value (a path, an id, a URL, a backquoted command), indented or not, may run past."""
    wide = []
    for line in _ESCAPES.sub("", text).splitlines():
        line = line.rstrip()
        if cell_len(line) > WIDTH and " " in _QUOTED.sub("`", line.strip()):
            wide.append(f"{cell_len(line)}: {line}")
    return wide


def typed(cwd: Path, home: Path, *args: str) -> subprocess.Popen[str]:
    """`.venv/bin/harvest ARGS` typed in `cwd` in a terminal of 80 columns."""
    return subprocess.Popen(
        [".venv/bin/harvest", *args], cwd=cwd, env={**clean_env(home), **TERMINAL}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def printed(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=FINISH_TIMEOUT)
    return proc.returncode, out + err


@pytest.mark.scenario
def test_what_a_user_runs_on_an_80_column_terminal_fits_it(prefect_api_url: str, tmp_path: Path) -> None:
    cwd, home = user_dir(tmp_path, prefect_api_url)
    (cwd / "typos.yaml").write_text(BAD_SPEC)
    long_ids = {"id": "videos", "endpoint": PROFILE, "for_each": {"handle": HANDLES}}
    write_spec(cwd, job_spec("sandbox", "out", [long_ids], name="long-ids"))
    demo = str(ROOT / "configs" / "demo.yaml")
    helps = [
        (),
        *(((c.name or c.callback.__name__).replace("_command", ""),) for c in app.registered_commands),
    ]
    started = [(("--help" if not c else c[0], "--help"), typed(cwd, home, *c, "--help")) for c in helps]
    started += [(("validate", "typos.yaml"), typed(cwd, home, "validate", "typos.yaml"))]
    started += [(("plan", demo), typed(cwd, home, "plan", demo))]
    said = {command: printed(proc) for command, proc in started}  # the quick ones at once, side by side
    for command in (("run", "job.yaml"), ("runs", "out"), ("export", "out", "--to", "lake")):
        said[command] = printed(typed(cwd, home, *command))
    codes = {command: code for command, (code, _) in said.items()}
    assert codes == {c: 2 if c == ("validate", "typos.yaml") else 0 for c in said}, codes
    assert "closest" in said[("validate", "typos.yaml")][1]  # the long sentences are there to be measured
    assert "20 queries have ended well" in said[("run", "job.yaml")][1]
    wide = {" ".join(command): lines for command, (_, text) in said.items() if (lines := too_wide(text))}
    assert wide == {}, "\n".join(f"harvest {c}:\n" + "\n".join(lines) for c, lines in wide.items())


@pytest.mark.parametrize("billed", [20, 5, None])
def test_the_services_bill_fits_80_columns(
    billed: int | None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bill line beside harvest's count (another user of the key, answers lost, a balance unknown), which
    the embedded sandbox never prints: as `harvest run` prints it on a terminal of 80 columns."""
    from harvest.flows.commands.run_report import print_summary
    from harvest.tasks.output.run_summary import RunSummary

    for name, value in TERMINAL.items():
        monkeypatch.setenv(name, value)
    summary = RunSummary(
        run_id="r1", job="j", service="https://api.example", status="complete", budget=100,
        credits_spent=10, records=10, loaded=False, tables={}, queries=[], service_billed=billed,
        bill_unknown=None if billed else "the balance endpoint did not answer after the run",
    )  # fmt: skip
    print_summary(summary, Path("out"))
    text = capsys.readouterr()
    assert "the service's bill" in text.out + text.err
    assert too_wide(text.out + text.err) == []
