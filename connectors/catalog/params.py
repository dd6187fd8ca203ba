"""Query parameter models: the edge where a user's YAML meets the service's documented parameters.

Unknown parameters are refused, because the real service silently ignores them: a misspelled cursor or filter
would quietly return (and bill) the wrong pages. The service's rules between parameters (at least one of, exactly
one of, one that needs or rules out others) are the model's too, so a spec breaking one is refused before
anything is sent, and a dependent query a parent's value would make break one is skipped, named.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, get_args

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

PARAM_RULE = "param_rule"
"""The pydantic error type of a broken rule; its context names the parameter (`param`) and what is allowed."""


def is_set(value: Any) -> bool:
    """Whether a parameter counts as given: not absent, null, empty text or an empty list."""
    return value is not None and value != "" and value != []


def has_value(got: Any, value: Any) -> bool:
    """Whether a parameter's value is `value` (a boolean only ever equals a boolean)."""
    if isinstance(got, bool) or isinstance(value, bool):
        return got is value
    return bool(got == value)


def _listed(names: tuple[str, ...]) -> str:
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


@dataclass(frozen=True)
class Requirement:
    """`param` (with `value`; any value when None) needs every one of `needs` set too."""

    param: str
    value: Any
    needs: tuple[str, ...]


@dataclass(frozen=True)
class Exclusion:
    """`param`, when set, rules every one of `excludes` out."""

    param: str
    excludes: tuple[str, ...]


@dataclass(frozen=True)
class ParamRules:
    """The service's rules between an endpoint's parameters, beyond "at least one of" (`Params.one_of_groups`)."""

    exactly_one_of: tuple[tuple[str, ...], ...] = ()
    requires: tuple[Requirement, ...] = ()
    excludes: tuple[Exclusion, ...] = ()

    @classmethod
    def of(cls, decl: Mapping[str, Any]) -> ParamRules:
        """The rules of a plain declaration (`connectors.catalog.declarations.plain`)."""
        return cls(
            tuple(tuple(group) for group in decl.get("exactly_one_of", ())),
            tuple(
                Requirement(r["param"], r.get("value"), tuple(r["needs"])) for r in decl.get("requires", ())
            ),
            tuple(Exclusion(r["param"], tuple(r["excludes"])) for r in decl.get("excludes", ())),
        )

    def broken(self, values: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
        """(the parameter to blame, what is wrong, what is allowed) for each rule `values` break."""
        given = {name for name, value in values.items() if is_set(value)}
        for group in self.exactly_one_of:
            both = [name for name in group if name in given]
            allowed = f"exactly one of {_listed(group)}"
            if not both:
                yield group[0], f"give exactly one of {_listed(group)} (none is set)", allowed
            elif len(both) > 1:
                yield both[1], f"{' and '.join(both)} are set: give only one of them", allowed
        for need in self.requires:
            if need.param not in given or (
                need.value is not None and not has_value(values[need.param], need.value)
            ):
                continue
            missing = tuple(name for name in need.needs if name not in given)
            if missing:
                what = need.param if need.value is None else f"{need.param}={_shown(need.value)}"
                yield need.param, f"{what} needs {_listed(missing)} as well", f"set {', '.join(missing)} too"
        for rule in self.excludes:
            clash = [name for name in rule.excludes if name in given]
            if rule.param in given and clash:
                allowed = f"{rule.param} alone, or {_listed(rule.excludes)} without {rule.param}"
                yield clash[0], f"{clash[0]} cannot be combined with {rule.param}", allowed


def _shown(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


class Params(BaseModel):
    """Base of every endpoint's parameter model."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    path_params: ClassVar[tuple[str, ...]] = ()
    one_of_groups: ClassVar[tuple[tuple[str, ...], ...]] = ()
    """Where the interface does not say which of two identifiers is needed, at least one of each group is
    required."""
    one_of: ClassVar[tuple[str, ...]] = ()
    """The first group (the only one of every built-in endpoint)."""
    param_rules: ClassVar[ParamRules] = ParamRules()
    replaced: ClassVar[dict[str, str]] = {}
    """Parameter -> the one the service has replaced it with (still taken, warned: `JobSpec.replaced_params`)."""

    @model_validator(mode="after")
    def _at_least_one(self) -> Params:
        for group in self.one_of_groups or ((self.one_of,) if self.one_of else ()):
            if all(getattr(self, name) in (None, "") for name in group):
                raise ValueError(f"give at least one of: {', '.join(group)}")
        values = {name: getattr(self, name) for name in type(self).model_fields}
        for param, problem, allowed in self.param_rules.broken(values):
            raise PydanticCustomError(
                PARAM_RULE, "{problem}", {"problem": problem, "param": param, "allowed": allowed}
            )
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

    def json_body(self, sent: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The parameters as a POST's JSON body, typed as declared (numbers, booleans, lists), path parameters
        left in the path; `sent` (a cursor, a page number: text, as a query string has them) on top, typed by
        their parameter's declared type."""
        body = {
            name: value
            for name, value in self.model_dump(mode="json", exclude_none=True, by_alias=True).items()
            if name not in self.path_params
        }
        fields = type(self).model_fields
        for name, text in (sent or {}).items():
            body[name] = _typed(fields[name].annotation if name in fields else str, text)
        return body


def _typed(annotation: Any, text: str) -> Any:
    """Text as the declared type of its parameter takes it (a page number as a number)."""
    kinds = {annotation, *get_args(annotation)}
    if int in kinds and text.lstrip("-").isdigit():
        return int(text)
    if float in kinds:
        try:
            return float(text)
        except ValueError:
            return text
    if bool in kinds and text in ("true", "false"):
        return text == "true"
    return text


def _encode(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
