"""Query parameter models: the edge where a user's YAML meets the service's documented parameters.

Unknown parameters are refused, because the real service silently ignores them: a misspelled cursor or filter
would quietly return (and bill) the wrong pages.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator


class Params(BaseModel):
    """Base of every endpoint's parameter model."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    path_params: ClassVar[tuple[str, ...]] = ()
    one_of_groups: ClassVar[tuple[tuple[str, ...], ...]] = ()
    """Where the interface does not say which of two identifiers is needed, at least one of each group is
    required."""
    one_of: ClassVar[tuple[str, ...]] = ()
    """The first group (the only one of every built-in endpoint)."""
    replaced: ClassVar[dict[str, str]] = {}
    """Parameter -> the one the service has replaced it with (still taken, warned: `replaced_warnings`)."""

    @model_validator(mode="after")
    def _at_least_one(self) -> Params:
        for group in self.one_of_groups or ((self.one_of,) if self.one_of else ()):
            if all(getattr(self, name) in (None, "") for name in group):
                raise ValueError(f"give at least one of: {', '.join(group)}")
        return self

    def query_pairs(self) -> list[tuple[str, str]]:
        """The query string as ordered pairs: lists repeat their key, booleans are `true`/`false`."""
        pairs: list[tuple[str, str]] = []
        for name, value in self.model_dump(exclude_none=True, by_alias=True).items():
            if name in self.path_params:
                continue
            pairs.extend((name, _encode(v)) for v in (value if isinstance(value, list) else [value]))
        return pairs

    def path_values(self) -> dict[str, str]:
        return {name: str(getattr(self, name)) for name in self.path_params}


def _encode(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
