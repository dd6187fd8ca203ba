"""Arguments a user gets wrong on the command line: each refused in one line naming the value and what is
allowed (exit 2), before anything is written, never with a traceback."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from harvest.flows.cli import app

runner = CliRunner()


def test_markdown_under_a_file_is_refused_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """`harvest endpoints --markdown notes.md/endpoints`: making the directory under a file was a traceback."""
    a_file = tmp_path / "notes.md"
    a_file.write_text("mine")
    under = a_file / "endpoints" / "pages"
    result = runner.invoke(app, ["endpoints", "--markdown", str(under)])
    assert result.exit_code == 2, result.output
    assert result.output == (
        f"error: --markdown: {under} is under {a_file}, a file; allowed: a directory (made when missing)\n"
    )
    assert a_file.read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.md"]
