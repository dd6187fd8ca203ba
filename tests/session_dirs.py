"""Folders a test session makes outside pytest's `tmp_path` (Prefect homes every test of a worker shares),
taken away when the session ends: each holds a migrated Prefect database (~5 MB), and a machine that runs
`make test` every day would otherwise keep four of them per run in its temporary folder."""

from __future__ import annotations

import shutil
import tempfile

_MADE: list[str] = []


def session_dir(prefix: str) -> str:
    """A new folder, removed by `remove_session_dirs` at the end of the session of the process that made it."""
    path = tempfile.mkdtemp(prefix=prefix)
    _MADE.append(path)
    return path


def remove_session_dirs() -> None:
    while _MADE:
        shutil.rmtree(_MADE.pop(), ignore_errors=True)
