"""The demo, landed once per test session as a user runs it, for every test that reads what it leaves.

`harvest demo` asks every endpoint of the catalog (161 tables): about a minute of two cores here. The tests
that check what it prints, what it lands and what it leaves in the system's temporary folder read one landed
demo (`landed_demo`) instead of each landing their own. It runs as a user runs it: `.venv/bin/harvest demo
--output "demo's out"` typed in a clean shell (only PATH, HOME and the key) from a working directory whose name
has a space, with the system's temporary folder (TMPDIR) a folder of its own that others keep things in too,
and Prefect's API in HOME's profile (the session's harness server; the temporary server has tests of its own).

With xdist every worker is its own process: the first worker that asks lands the demo under a file lock in the
session's shared temporary folder, and the others wait for it and read what it left. A test that writes (an
export, a second night) works on a copy of the output (`copy_output`), never on the shared one.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

OUTPUT = "demo's out"
"""The demo's `--output`, as typed: relative to the user's directory, with a quote a shell must escape."""
SOMEONE_ELSES = "someone else's"
"""What another program keeps in the shared temporary folder: it must still be there after the demo."""


@dataclass(frozen=True)
class LandedDemo:
    """One `harvest demo` a user ran, and what it left."""

    cwd: Path
    """The user's working directory (`.venv` in it, a link to the project's)."""
    output: Path
    """The demo's output directory (`cwd / OUTPUT`). Read it only: `copy_output` for a test that writes."""
    tmp: Path
    """The system's temporary folder the demo ran with (TMPDIR)."""
    tmp_before: frozenset[str]
    tmp_after: frozenset[str]
    """The temporary folder's entries before and after the demo."""
    returncode: int
    stdout: str
    stderr: str

    def copy_output(self, to: Path) -> Path:
        """The landed output copied to `to` (a fresh path), for a test that writes into it."""
        shutil.copytree(self.output, to, symlinks=True)
        return to


def _land(root: Path, prefect_api_url: str) -> None:
    """Run the demo in `root` and write what it printed and left beside it (`landed.json`)."""
    from tests.process_helpers import FINISH_TIMEOUT  # imported when used: a plugin loads before the tests
    from tests.shell_helpers import clean_env, user_dir

    cwd, home = user_dir(root, prefect_api_url)
    tmp = root / "tmp"
    (tmp / SOMEONE_ELSES).mkdir(parents=True)
    before = sorted(os.listdir(tmp))
    done = subprocess.run(
        [".venv/bin/harvest", "demo", "--output", OUTPUT], cwd=cwd, env={**clean_env(home), "TMPDIR": str(tmp)},
        capture_output=True, text=True, timeout=FINISH_TIMEOUT,
    )  # fmt: skip
    landed = {
        "cwd": str(cwd), "tmp": str(tmp), "tmp_before": before, "tmp_after": sorted(os.listdir(tmp)),
        "returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
    }  # fmt: skip
    (root / "landed.json").write_text(json.dumps(landed), encoding="utf-8")


@pytest.fixture(scope="session")
def landed_demo(prefect_api_url: str, tmp_path_factory: pytest.TempPathFactory) -> LandedDemo:
    """The session's one landed demo (see the module's docstring); landed by the first worker that asks."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' common folder
    root = shared / "landed-demo"
    with open(shared / "landed-demo.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait here while the first lands it
        try:
            if not (root / "landed.json").exists():
                shutil.rmtree(root, ignore_errors=True)  # what a lander that failed midway left
                root.mkdir()
                _land(root, prefect_api_url)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    landed = json.loads((root / "landed.json").read_text(encoding="utf-8"))
    cwd = Path(landed["cwd"])
    return LandedDemo(
        cwd=cwd,
        output=cwd / OUTPUT,
        tmp=Path(landed["tmp"]),
        tmp_before=frozenset(landed["tmp_before"]),
        tmp_after=frozenset(landed["tmp_after"]),
        returncode=landed["returncode"],
        stdout=landed["stdout"],
        stderr=landed["stderr"],
    )
