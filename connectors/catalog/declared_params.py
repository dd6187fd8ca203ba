"""An endpoint's parameter model, made from its declaration with `pydantic.create_model` on `Params`.

A model, not a hand-written check, because everything that reads parameters already reads a pydantic model: a
spec's parameters are validated by it (unknown ones refused, enums, bounds, patterns), its errors are put in a
user's words by `flows.spec.explain`, `flows.spec.describe` and `harvest endpoints` describe its fields, and a
query's request is its dump (`Params.query_pairs`). A declared endpoint and a built-in one are then the same
thing to every reader.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, create_model

from harvest.connectors.catalog.params import ParamRules, Params

_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "list": list[str]}
_BOUNDS = {
    "min": "ge",
    "max": "le",
    "min_length": "min_length",
    "max_length": "max_length",
    "pattern": "pattern",
}


def params_model(
    path: str,
    params: Mapping[str, Mapping[str, Any]],
    one_of: Sequence[Sequence[str]],
    rules: ParamRules = ParamRules(),
) -> type[Params]:
    """The model of a plain declaration's `params` (`connectors.catalog.declarations.plain`), in declared order."""
    fields: dict[str, Any] = {}
    for name, p in params.items():
        annotation = Literal[tuple(p["enum"])] if p.get("enum") else _TYPES[p["type"]]
        bounds = {arg: p[key] for key, arg in _BOUNDS.items() if p.get(key) is not None}
        if p.get("description"):
            bounds["description"] = p["description"]
        if not p.get("required"):
            annotation = annotation | None
        if p["type"] == "string" and "true" in (p.get("enum") or ()):  # outermost: the annotation stays plain
            annotation = Annotated[annotation, BeforeValidator(_bool_as_text)]
        fields[name] = (
            annotation,
            Field(**bounds) if p.get("required") else Field(p.get("default"), **bounds),
        )
    model: type[Params] = create_model(_class_name(path), __base__=Params, **fields)
    model.path_params = tuple(n for n, p in params.items() if p.get("in") == "path")
    groups = tuple(tuple(group) for group in one_of)
    model.one_of_groups = groups
    model.one_of = groups[0] if groups else ()
    model.replaced = {n: p["replaced_by"] for n, p in params.items() if p.get("replaced_by")}
    model.param_rules = rules
    return model


def _bool_as_text(value: Any) -> Any:
    """A YAML `true` for an on/off text (`enum: ["true"]`, `includeExtras`) is its text, as a spec writes it;
    any other boolean stays one and is refused (an unquoted `no` for a handle is a mistake, not a text)."""
    return "true" if value is True else value


def _class_name(path: str) -> str:
    return "Params" + "".join(part.title() for part in re.split(r"[^A-Za-z0-9]+", path) if part)
