"""Catalog files are parsed once per content: an edit is read at once, whatever its size and time stamp, and a
folder harvest cannot write costs only the parse."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from harvest.connectors.catalog.job_catalog import builtin_files, parsed
from tests.flow_helpers import PYTHON


def test_every_built_in_file_reads_back_as_parsed(tmp_path: Path) -> None:
    for file in builtin_files():
        copy = tmp_path / file.name
        copy.write_bytes(file.read_bytes())
        first, again = parsed(copy), parsed(copy)
        assert first == again == yaml.safe_load(file.read_text(encoding="utf-8")), file.name
    assert len(list((tmp_path / "__pycache__").glob("*.marshal"))) == len(builtin_files())


def test_an_edit_of_the_same_size_and_time_is_read(tmp_path: Path) -> None:
    """A `git checkout` of a file keeps neither, but an edit may keep both: the content decides."""
    file = tmp_path / "platform.yaml"
    file.write_text("endpoints: {price: 1}\n")
    stamp = file.stat().st_mtime_ns
    assert parsed(file) == {"endpoints": {"price": 1}}
    file.write_text("endpoints: {price: 7}\n")
    os.utime(file, ns=(stamp, stamp))
    assert parsed(file) == {"endpoints": {"price": 7}}
    read = subprocess.run(  # a new process reads the stored parse: the same answer
        [
            PYTHON,
            "-c",
            f"from harvest.connectors.catalog.job_catalog import parsed; print(parsed(__import__('pathlib').Path({str(file)!r})))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert read.stdout.strip() == "{'endpoints': {'price': 7}}"


def test_a_folder_that_cannot_be_written_and_values_marshal_cannot_hold_are_parsed(tmp_path: Path) -> None:
    dated = tmp_path / "dated.yaml"
    dated.write_text("since: 2024-01-01\n")
    assert str(parsed(dated)["since"]) == "2024-01-01"
    assert not list((tmp_path / "__pycache__").glob("dated*")), (
        "a date cannot be stored: nothing half-written"
    )
    blocked = tmp_path / "blocked"  # `__pycache__` a file: nothing can be stored, not even by root
    blocked.mkdir()
    (blocked / "__pycache__").write_text("")
    (blocked / "p.yaml").write_text("a: 1\n")
    assert parsed(blocked / "p.yaml") == parsed(blocked / "p.yaml") == {"a": 1}
    assert sorted(p.name for p in blocked.iterdir()) == ["__pycache__", "p.yaml"]
