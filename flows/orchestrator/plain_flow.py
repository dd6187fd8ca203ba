"""A Prefect flow whose parameters are plain JSON values, sent to Prefect's API as they are.

Prefect serializes a flow run's parameters with FastAPI's `jsonable_encoder`, and importing FastAPI for that
alone cost ~0.2 s of every `harvest run` (timeline of a 2,000-handle fan-out, 2026-11-27: the flow run's
creation took 0.28 s, 0.22 s of it the import; the whole run takes ~13 s). `collect_job`'s parameters are
strings, numbers, booleans and None: they need no encoder. Anything else still goes through Prefect's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from prefect import Flow

P = ParamSpec("P")
R = TypeVar("R")

_PLAIN = (str, int, float, bool, type(None))


class PlainParametersFlow(Flow[P, R]):
    shown: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """What Prefect's API is given of the parameters (the flow body gets them as passed): a flow that refuses
    a secret among them keeps it out of the flow run Prefect records before the body runs."""

    def serialize_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        if self.shown is not None:
            parameters = self.shown(parameters)
        if all(type(value) in _PLAIN for value in parameters.values()):
            return dict(parameters)
        return super().serialize_parameters(parameters)


def plain_flow(
    shown: Callable[[dict[str, Any]], dict[str, Any]] | None = None, **options: Any
) -> Callable[[Callable[P, R]], PlainParametersFlow[P, R]]:
    """`prefect.flow(**options)` for a flow of plain parameters (`shown`: `PlainParametersFlow.shown`)."""

    def decorate(fn: Callable[P, R]) -> PlainParametersFlow[P, R]:
        made = PlainParametersFlow(fn=fn, **options)
        made.shown = shown
        return made

    return decorate
