"""A field in words: `harvest endpoints` and every error's `allowed:` part describe fields the same way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from harvest.connectors.catalog.params import Params
from harvest.flows.spec.model import PATTERN_WORDS


@dataclass(frozen=True)
class ParamInfo:
    """One parameter of an endpoint, as `harvest endpoints` and error messages describe it."""

    name: str
    type: str
    required: bool
    allowed: tuple[str, ...] = ()
    constraint: str | None = None
    in_path: bool = False

    def describe(self) -> str:
        if self.allowed:
            return "one of: " + ", ".join(self.allowed)
        words = {"string": "text", "integer": "an integer", "boolean": "true or false"}
        text = words.get(self.type, f"a {self.type}")
        return f"{text}: {self.constraint}" if self.constraint else text


def keys(model: type[BaseModel]) -> list[str]:
    """The keys a user writes for a model (aliases where they differ from field names)."""
    return [info.alias or name for name, info in model.model_fields.items()]


def _type_info(annotation: Any) -> tuple[str, tuple[str, ...]]:
    """(type name, allowed literal values) of an annotation, with None dropped from unions."""
    origin = get_origin(annotation)
    if origin in (Union, UnionType):
        members = [a for a in get_args(annotation) if a is not NoneType]
        if len(members) == 1:
            return _type_info(members[0])
        return " or ".join(_type_info(m)[0] for m in members), ()
    if origin is Literal:
        return "string", tuple(str(v) for v in get_args(annotation))
    if origin is list:
        inner = get_args(annotation)
        return "list of " + (_type_info(inner[0])[0] if inner else "values"), ()
    if origin is dict:
        return "mapping", ()
    names = {str: "string", int: "integer", bool: "boolean", float: "number", Path: "path"}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping with keys " + ", ".join(keys(annotation)), ()
    return names.get(annotation, getattr(annotation, "__name__", str(annotation))), ()


def _constraint(info: FieldInfo) -> str | None:
    bounds: dict[str, Any] = {}
    for item in info.metadata:
        for attr in ("ge", "le", "min_length", "max_length", "pattern"):
            value = getattr(item, attr, None)
            if value is not None:
                bounds[attr] = value
    parts = []
    if "ge" in bounds and "le" in bounds:
        parts.append(f"from {bounds['ge']} to {bounds['le']}")
    elif "ge" in bounds:
        parts.append(f">= {bounds['ge']}")
    elif "le" in bounds:
        parts.append(f"<= {bounds['le']}")
    if "min_length" in bounds and "max_length" in bounds:
        parts.append(f"{bounds['min_length']} to {bounds['max_length']} long")
    elif "min_length" in bounds:
        parts.append(f"at least {bounds['min_length']} long")
    elif "max_length" in bounds:
        parts.append(f"at most {bounds['max_length']} long")
    if "pattern" in bounds:
        parts.append(PATTERN_WORDS.get(bounds["pattern"], f"matching {bounds['pattern']}"))
    return ", ".join(parts) or None


def field_info(name: str, info: FieldInfo, path_params: tuple[str, ...] = ()) -> ParamInfo:
    type_name, allowed = _type_info(info.annotation)
    return ParamInfo(name, type_name, info.is_required(), allowed, _constraint(info), name in path_params)


def describe_params(params: type[Params]) -> list[ParamInfo]:
    return [field_info(name, info, params.path_params) for name, info in params.model_fields.items()]
