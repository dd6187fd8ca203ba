"""How a command's `--help` reads: its sentences wrapped between words at the terminal's width, its arguments
named in the usage line."""

from __future__ import annotations

import inspect
import re
from typing import Any

from typer.core import TyperCommand


def paragraphs(text: str) -> str:
    """A docstring's paragraphs each as one line, for the help to wrap at the terminal's width: typer keeps the
    source's line breaks, which cut sentences mid-line on any other width."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


class NamedArguments(TyperCommand):
    """A command whose usage line names its arguments as POSIX usage does (`SPEC`, `[OUTPUT]`, `SPEC...`):
    typer writes a required one in braces (`{SPEC}`), which reads as a placeholder left unfilled."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [re.sub(r"^\{(.*)\}", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]
