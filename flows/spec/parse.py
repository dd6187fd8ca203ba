"""Reading a spec file into a checked `JobSpec`: every problem at once, each placed on its line.

Validation is in two passes: pydantic checks the shape (unknown keys, types, ranges), then
`flows.spec.checks` checks what needs the endpoint catalog or the other queries. Line numbers come from the
YAML node tree, matched to each problem's location by its longest known prefix.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harvest.connectors.catalog.declarations import declared_places
from harvest.connectors.catalog.job_catalog import Catalog, for_job
from harvest.flows.spec.checks import (
    cross_problems,
    duplicate_ids,
    fanout_problem,
    query_problems,
    semantic_problems,
)
from harvest.flows.spec.declared import read_declared, yaml_problems
from harvest.flows.spec.describe import keys
from harvest.flows.spec.explain import dotted, explain, normalise, owner
from harvest.flows.spec.key_in_spec import refuse_known_key, spec_key_names
from harvest.flows.spec.model import DECLARED, DECLARED_AT, DEFER_CHECKS, KEY_AT, JobSpec, Query
from harvest.flows.spec.problems import Found, Problem, SpecError
from harvest.flows.spec.yaml_reader import LineMap, UnreadableSpec, load_yaml, read_spec_text


@functools.lru_cache(maxsize=8)
def parse_spec(text: str, file: str = "<spec>") -> JobSpec:
    """Validate the YAML text of a spec; raises SpecError naming file, line, field and what is allowed.

    Memoised on (text, file): `harvest run` checks the spec before anything starts and the flow reads it again
    (~0.2 s each); a `JobSpec` is frozen, so the two may share it. A changed file is new text: parsed again.

    A text holding the key harvest can see (HARVEST_API_KEY's, or that of the variable it names) is refused
    first, before a problem's message could quote it (a refusal is never memoised: it is checked at every call)."""
    refuse_known_key(text, file, spec_key_names(text))
    try:
        data, lines = load_yaml(text)
    except UnreadableSpec as exc:
        raise SpecError([Problem(file, f.line, "", f.problem, f.allowed) for f in exc.flaws]) from None
    if not isinstance(data, dict) or lines is None:
        shape = "a mapping with keys: " + ", ".join(keys(JobSpec))
        raise SpecError([Problem(file, 1, "", "the spec must be a YAML mapping", shape)])
    problems = yaml_problems(file, lines)
    declared, declared_problems = read_declared(data, file, lines)
    problems += declared_problems
    found: list[Found] = []
    spec: JobSpec | None = None
    try:
        places = declared_places(
            declared.where, {f: m.lines if m else None for f, m in declared.lines.items()}
        )
        context = {
            DEFER_CHECKS: True,
            DECLARED: declared.endpoints,
            DECLARED_AT: places,
            KEY_AT: _key_places(data, file, lines),
        }
        spec = JobSpec.model_validate(data, context=context)
    except ValidationError as exc:
        for error in exc.errors():
            if error["type"] == "default_factory_not_called":
                continue  # a consequence of another error (the default output directory needs a valid name)
            loc = normalise(tuple(error["loc"]))
            problem, allowed = explain(error, owner(loc))
            found.append((loc, problem, allowed))
        found.extend(_partial_problems(data, for_job(declared.endpoints)))
    if spec is not None:
        found.extend(semantic_problems(spec))
    found = [f for f in found if not _of_refused(f, declared.refused)]
    problems += [Problem(file, lines.line(loc), dotted(loc), text, ok) for loc, text, ok in found]
    if problems:
        raise SpecError(problems)
    assert spec is not None
    return spec


def _key_places(data: dict[str, Any], file: str, lines: LineMap) -> dict[str, str]:
    """Where the spec writes each of `service.api_key_env` and `api_key_secret` (`JobSpec.key_places`)."""
    service = data.get("service")
    written = [f for f in ("api_key_env", "api_key_secret") if isinstance(service, dict) and f in service]
    return {f: f"{file}:{lines.line(('service', f))}: service.{f}" for f in written}


def _of_refused(found: Found, refused: set[str]) -> bool:
    """An "unknown endpoint" of a path whose declaration was refused: its problem is said where it is declared."""
    loc, text, _ = found
    return any(text == f"unknown endpoint {path!r}" for path in refused) and (
        loc[-1:] == ("endpoint",) or loc[:1] in (("costs",), ("shapes",))
    )


def _partial_problems(data: dict[str, Any], catalog: Catalog) -> list[Found]:
    """The checks still possible when the spec as a whole is invalid: per query for each query of a valid
    shape, and across queries when all are valid (an invalid query would look like a missing parent).
    """
    raw = data.get("queries")
    found: list[Found] = []
    if not isinstance(raw, list):
        return found
    parsed: list[tuple[int, Query]] = []
    for i, item in enumerate(raw):
        try:
            parsed.append((i, Query.model_validate(item)))
        except ValidationError:
            continue
    too_many = fanout_problem(parsed)
    if too_many:
        return [too_many]
    for i, query in parsed:
        found.extend(query_problems(i, query, catalog))
    if parsed and len(parsed) == len(raw):
        found.extend(cross_problems([q for _, q in parsed], catalog))
    else:  # the ids the spec wrote are known even where a query is invalid
        written = [
            (i, q["id"]) for i, q in enumerate(raw) if isinstance(q, dict) and isinstance(q.get("id"), str)
        ]
        found.extend(duplicate_ids((i, qid, True) for i, qid in written))
    return found


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate a spec file; every problem raises SpecError, and nothing is spent."""
    file = str(path)
    try:
        text = read_spec_text(Path(path))
    except FileNotFoundError:
        raise SpecError([Problem(file, None, "", "no such file", _spec_allowed(Path(path)))]) from None
    except UnreadableSpec as exc:
        raise SpecError([Problem(file, f.line, "", f.problem, f.allowed) for f in exc.flaws]) from None
    except (OSError, UnicodeDecodeError) as exc:
        problem = Problem(file, None, "", f"cannot read the spec: {exc}", "a UTF-8 YAML file")
        raise SpecError([problem]) from None
    return parse_spec(text, file)


def _spec_allowed(path: Path) -> str:
    """The help's and the README's examples name `configs/...` as the repository holds it; a user of the
    installed wheel has no such folder, so a shipped spec of that name is pointed at where it was installed."""
    from harvest.configs import spec_path

    parts = path.parts
    if "configs" in parts:
        shipped = spec_path(Path(*parts[len(parts) - parts[::-1].index("configs") :]).as_posix())
        if shipped.is_file():
            return f"the path of a YAML job spec; harvest ships this one at {shipped}"
    return "the path of a YAML job spec"
