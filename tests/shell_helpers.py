"""A user's shell, as the tests that run what a user types start it: a fresh login environment holding only PATH,
HOME and the key; a working directory whose name has a space, with the repository's `.venv` in it; HOME's Prefect
profile pointing at the test session's Prefect server (as a user with a Prefect server has it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.flow_helpers import HARVEST, SECRET_KEY


def clean_env(home: Path) -> dict[str, str]:
    """What a fresh login shell of a user who exported only the key has. And a PYTHONPATH naming this checkout,
    when the tests run with one: `.venv`'s editable install imports the main checkout's code, so a git
    worktree's tests run their own (`PYTHONPATH=$PWD pytest ...`) only so."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "HARVEST_API_KEY": SECRET_KEY}
    here = HARVEST.parent.parent.parent.resolve()
    if any(p and Path(p).resolve() == here for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        env["PYTHONPATH"] = str(here)
    return env


def user_dir(tmp_path: Path, prefect_api_url: str) -> tuple[Path, Path]:
    """(the user's working directory, with the repository's `.venv` in it as a link; HOME, whose Prefect
    profile points at the session's Prefect server)."""
    cwd, home = tmp_path / "work dir", tmp_path / "home"
    cwd.mkdir()
    (cwd / ".venv").symlink_to(HARVEST.parent.parent)
    (home / ".prefect").mkdir(parents=True)
    (home / ".prefect" / "profiles.toml").write_text(
        f'active = "server"\n\n[profiles.server]\nPREFECT_API_URL = "{prefect_api_url}"\n'
        'PREFECT_SERVER_ANALYTICS_ENABLED = "false"\n'
    )
    return cwd, home


def harvest(cwd: Path, home: Path, *args: str) -> subprocess.Popen[str]:
    """`.venv/bin/harvest ARGS` typed by the user in `cwd`, in its own process group (as a terminal's job)."""
    return subprocess.Popen(
        [".venv/bin/harvest", *args], cwd=cwd, env=clean_env(home), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip


def pasting(command: str, cwd: Path, home: Path) -> subprocess.Popen[str]:
    """The printed command, started as printed by a shell in the user's directory (its own process group)."""
    return subprocess.Popen(
        ["bash", "-c", command], cwd=cwd, env=clean_env(home), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
