"""What a refused spec or call says: every problem names the file, the line, the field and what is allowed."""

from __future__ import annotations

from dataclasses import dataclass

from harvest.flows.spec.yaml_reader import Loc

Found = tuple[Loc, str, str | None]
"""A problem before it has a file and line: (location, problem, allowed)."""


class UsageError(Exception):
    """A mistake in how harvest was called or configured: exit code 2, and nothing was spent."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    field: str
    problem: str
    allowed: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        text = f"{where}: {self.field}: {self.problem}" if self.field else f"{where}: {self.problem}"
        return f"{text}; allowed: {self.allowed}" if self.allowed else text


class SpecError(UsageError):
    """An invalid job spec, with every problem found (one per line of the message)."""

    def __init__(self, problems: list[Problem]):
        self.problems = tuple(sorted(problems, key=lambda p: p.line or 0))
        super().__init__("\n".join(str(p) for p in self.problems))
