"""Nothing left behind in the system's temporary folder: each command of the demo and the exports, run as a user
runs them (`.venv/bin/harvest` in a clean shell whose TMPDIR is a folder of the test's own), leaves that folder
as it found it. A nightly job's export runs every night: one folder left per export is one more a night. The
same exports write the files the README's line of `harvest export` names, where it names them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.flow_helpers import HARVEST, ROOT, subprocess_env
from tests.landed_demo import SOMEONE_ELSES, LandedDemo
from tests.nightly_helpers import night
from tests.process_helpers import FINISH_TIMEOUT
from tests.shell_helpers import clean_env, user_dir


def entries(tmp: Path) -> set[str]:
    return set(os.listdir(tmp))


def typed(cwd: Path, home: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`.venv/bin/harvest ARGS` typed in `cwd`, with the system's temporary folder at `tmp`."""
    return subprocess.run(
        [".venv/bin/harvest", *args], cwd=cwd, env={**clean_env(home), "TMPDIR": str(tmp)}, text=True,
        capture_output=True, timeout=FINISH_TIMEOUT,
    )  # fmt: skip


@pytest.mark.scenario
def test_the_demo_and_every_export_leave_the_temporary_folder_as_found_and_write_what_the_readme_says(
    landed_demo: LandedDemo, prefect_api_url: str, tmp_path: Path
) -> None:
    """The session's demo (`tests.landed_demo`: typed in a clean shell with a TMPDIR of its own), then the
    commands a user runs on what it landed, each in the same kind of shell (on a copy of the output)."""
    assert landed_demo.returncode == 0, landed_demo.stdout + landed_demo.stderr
    assert SOMEONE_ELSES in landed_demo.tmp_before  # the folder is shared: what others keep there stays
    left = sorted(landed_demo.tmp_after - landed_demo.tmp_before)
    assert landed_demo.tmp_after == landed_demo.tmp_before, left
    cwd, home = user_dir(tmp_path, prefect_api_url)
    landed_demo.copy_output(cwd / "demo")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp / SOMEONE_ELSES).mkdir()
    commands = [
        ("sql", "demo", "SELECT count(*) FROM runs"),
        ("runs", "demo"),
        ("export", "demo", "--to", "lake/files"),
        ("export", "demo", "--to", "lake/delta", "--format", "delta"),
        ("export", "demo", "--to", "lake/iceberg", "--format", "iceberg"),
        ("export", "demo", "--to", "lake/snapshot", "--snapshot"),
    ]
    for command in commands:
        before = entries(tmp)
        done = typed(cwd, home, tmp, *command)
        assert done.returncode == 0, (command, done.stdout + done.stderr)
        assert entries(tmp) == before, (command, sorted(entries(tmp) - before))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (export,) = [line for line in readme.splitlines() if line.startswith("| `harvest export ")]
    plain, snapshot = export.split("(`--snapshot`", 1)
    named = re.findall(r"`(_[^`]+)`", plain)
    assert named and all(list((cwd / "lake/files").glob(n.replace("<id>", "*"))) for n in named), export
    at_root = re.findall(r"`(_[^`]+)`", snapshot.split(")", 1)[0])
    assert at_root and all((cwd / "lake/snapshot" / n).is_file() for n in at_root), export


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_export_stopped_midway_leaves_the_temporary_folder_as_found(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: signal.Signals
) -> None:
    """Ctrl-C, or a service manager's SIGTERM, once a lakehouse export has begun writing its tables: the export
    stops (exit 130, nothing committed past what it says) and the system's temporary folder is as it was,
    DuckDB's spill folder of the table being merged included."""
    output, lake, tmp = tmp_path / "out", tmp_path / "lake", tmp_path / "tmp"
    night(tmp_path, output, 0, monkeypatch)
    tmp.mkdir()
    (tmp / "someone else's").mkdir()
    before = entries(tmp)
    env = {**subprocess_env(tmp_path), "TMPDIR": str(tmp)}
    export = subprocess.Popen(
        [str(HARVEST), "export", str(output), "--to", str(lake), "--format", "delta"], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    while not lake.exists() and export.poll() is None:  # the first table is being written
        time.sleep(0.01)
    export.send_signal(stop)
    _, err = export.communicate(timeout=FINISH_TIMEOUT)
    assert export.returncode == 130 and f"{stop.name}: interrupted" in err, (export.returncode, err)
    assert entries(tmp) == before, sorted(entries(tmp) - before)
