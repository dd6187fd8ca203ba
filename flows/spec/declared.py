"""A job's own endpoints: the catalog files its spec names (`catalogs:`) and its inline `endpoints:`, read and
checked with every problem on its file and line, as plain declarations (`connectors.catalog.declarations.plain`).

`declared_endpoints(SPEC)` and `catalog_file_endpoints(FILE)` are what the sandbox is handed (`harvest sandbox
--spec/--catalog`, the embedded sandbox): the same plain data the run builds its endpoints from, so both sides
agree on what was declared.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harvest.connectors.catalog.declaration_checks import declaration_problems
from harvest.connectors.catalog.declarations import CatalogFile, EndpointDecl, plain
from harvest.connectors.catalog.job_catalog import declared_tables, join_problems
from harvest.flows.spec.explain import dotted, explain, normalise, owner
from harvest.flows.spec.key_in_spec import KeyInSpec, refuse_known_key
from harvest.flows.spec.problems import Problem, SpecError
from harvest.flows.spec.yaml_reader import PRINTABLE, LineMap, Loc, UnreadableSpec, load_yaml, read_spec_text

CATALOG_ALLOWED = "a catalog file (YAML with `endpoints:`), its path relative to the spec's directory"


@dataclass
class Declared:
    """A job's declared endpoints: path -> plain declaration, in the order declared, and where each was."""

    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    where: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    """Path -> (file, line) of its declaration, for the messages of clashes."""
    lines: dict[str, LineMap | None] = field(default_factory=dict)
    """File -> its line map."""
    refused: set[str] = field(default_factory=set)
    """Paths whose declaration has a problem (said once, at the declaration: not again at each query)."""


def spec_dir(spec_file: str) -> Path:
    """Where a spec's `catalogs:` are relative to: its own directory (the working directory for a text)."""
    return Path(spec_file).parent if not spec_file.startswith("<") else Path.cwd()


def read_declared(
    data: Mapping[str, Any], spec_file: str, lines: LineMap | None
) -> tuple[Declared, list[Problem]]:
    """The declarations of a spec's raw data (its `catalogs:` files, then its `endpoints:`), and every problem
    found in them, each on its file and line. Shape problems of the spec's own `endpoints:` are the spec
    model's (`JobSpec`), reported with the spec's other problems: not again here."""
    declared, problems = Declared(), []
    service = data.get("service")
    key_env = service.get("api_key_env") if isinstance(service, dict) else None
    key_names = [key_env] if isinstance(key_env, str) else []
    catalogs = data.get("catalogs")
    for n, name in enumerate(catalogs if isinstance(catalogs, list) else []):
        if not isinstance(name, str):
            continue
        at = lines.line(("catalogs", n)) if lines else None
        path = spec_dir(spec_file) / name
        try:
            decls, file_lines, flaws = _read_catalog(path, key_names)
        except KeyInSpec:
            raise  # the one thing said: the spec's other problems would follow from the unread catalog
        except SpecError as exc:
            if any(p.file == str(path) and p.problem.startswith("no such file") for p in exc.problems):
                problem = f"no such file: {path}"
                problems.append(Problem(spec_file, at, dotted(("catalogs", n)), problem, CATALOG_ALLOWED))
            else:
                problems.extend(exc.problems)
            continue
        problems += flaws
        declared.refused.update(p.field.split('"')[1] for p in flaws if p.field.startswith('endpoints["'))
        problems += _add(declared, decls, str(path), file_lines)
    inline = data.get("endpoints")
    if isinstance(inline, dict):
        valid = {}
        for path, raw in inline.items():
            try:
                valid[str(path)] = EndpointDecl.model_validate(raw)
            except ValidationError:
                declared.refused.add(str(path))
                continue  # JobSpec reports it
        problems += _add(declared, valid, spec_file, lines)
    problems += _clash_problems(declared)
    return declared, problems


def _add(
    declared: Declared, decls: Mapping[str, EndpointDecl], file: str, lines: LineMap | None
) -> list[Problem]:
    problems = []
    declared.lines[file] = lines
    for path, decl in decls.items():
        at: Loc = ("endpoints", path)
        line = lines.line(at) if lines else None
        found = [
            Problem(file, lines.line((*at, *loc)) if lines else None, dotted((*at, *loc)), text, ok)
            for loc, text, ok in declaration_problems(path, decl)
        ]
        if path in declared.where:
            first_file, first_line = declared.where[path]
            where = f"{first_file}:{first_line}" if first_line else first_file
            found.append(
                Problem(file, line, dotted(at), f"{path} is declared already, in {where}", "each path once")
            )
        problems += found
        if found:
            declared.refused.add(path)
        else:
            declared.endpoints[path] = plain(path, decl)
            declared.where[path] = (file, line)
    return problems


def _read_catalog(
    path: Path, key_names: list[str] | None = None
) -> tuple[dict[str, EndpointDecl], LineMap | None, list[Problem]]:
    """A catalog file's declarations valid in shape, and the problems of the others (each endpoint is checked
    on its own: one bad declaration does not hide the file's good ones); SpecError when the file cannot be
    read, is no catalog at all, or holds the key harvest can see (`key_names`: the variables the spec names for
    it), as a spec would be refused: a parameter's default holding it was sent, kept in the raw pages and the
    journal, and printed by `harvest raw`."""
    file = str(path)
    try:
        text = read_spec_text(path)
        refuse_known_key(text, file, key_names or (), "the catalog file")
        data, lines = load_yaml(text)
    except FileNotFoundError:
        raise SpecError([Problem(file, None, "", "no such file", CATALOG_ALLOWED)]) from None
    except UnreadableSpec as exc:
        raise SpecError([Problem(file, f.line, "", f.problem, f.allowed) for f in exc.flaws]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([Problem(file, None, "", f"cannot read it: {exc}", "a UTF-8 YAML file")]) from None
    endpoints = data.get("endpoints") if isinstance(data, dict) else None
    found = yaml_problems(file, lines)
    if isinstance(endpoints, dict):
        found += _unknown_keys(data, file, lines)
    else:
        try:
            CatalogFile.model_validate(data)
        except ValidationError as exc:
            raise SpecError(found + _explained(exc, (), file, lines)) from None
    valid, problems = {}, found
    for endpoint, raw in (endpoints or {}).items():
        try:
            valid[str(endpoint)] = EndpointDecl.model_validate(raw)
        except ValidationError as exc:
            problems += _explained(exc, ("endpoints", str(endpoint)), file, lines)
    return valid, lines, problems


def _unknown_keys(data: Mapping[str, Any], file: str, lines: LineMap | None) -> list[Problem]:
    """A catalog file's top-level keys other than `endpoints`, as the file's model words them: a misspelled second
    block (`endpoint:`) or a `summary:` line validated, and the block's declarations were dropped without a word
    (each endpoint is validated on its own, so the file's model is not run when `endpoints` is a mapping)."""
    problems = []
    for key in data:
        if key not in CatalogFile.model_fields:
            at: Loc = (str(key),)
            problem, allowed = explain(
                {"type": "extra_forbidden", "input": data[key]}, (CatalogFile, str(key))
            )
            problems.append(Problem(file, lines.line(at) if lines else None, dotted(at), problem, allowed))
    return problems


def yaml_problems(file: str, lines: LineMap | None) -> list[Problem]:
    """What a mapping read from YAML hides, in a spec and in its catalog files alike: a key written twice (YAML
    keeps the last, so the first would be dropped without a word) and a control character written as an escape."""
    if lines is None:
        return []
    problems = []
    for loc, line in lines.duplicates:
        if len(loc) == 2 and loc[0] == "endpoints":
            first = f", first at line {lines.lines[loc]}" if loc in lines.lines else ""
            problem, allowed = f"{loc[1]} is declared twice{first} (YAML keeps the last)", "each path once"
        else:
            problem, allowed = f"duplicate key {loc[-1]!r} (YAML keeps the last)", "each key once"
        problems.append(Problem(file, line, dotted(loc), problem, allowed))
    problems += [
        Problem(file, c.line, dotted(c.loc), _escaped(c.char, c.column, c.written), PRINTABLE)
        for c in lines.controls
    ]
    return problems


def _escaped(char: str, column: int | None, written: str) -> str:
    if column is None:  # the value's line and the field: the escape was not found in the value's text
        return f"control character {char} in the value (the line where the value starts)"
    return f"control character {char} at column {column}, written as {written}"


def _explained(exc: ValidationError, at: Loc, file: str, lines: LineMap | None) -> list[Problem]:
    problems = []
    for error in exc.errors():
        loc = normalise((*at, *error["loc"]))
        problem, allowed = explain(error, owner(loc, CatalogFile))
        problems.append(Problem(file, lines.line(loc) if lines else 1, dotted(loc), problem, allowed))
    return problems


def catalog_file_endpoints(path: str | Path) -> dict[str, dict[str, Any]]:
    """A catalog file's endpoints as plain declarations (validated, every default filled); SpecError names
    the file, line, field and what is allowed (`harvest sandbox --catalog FILE`)."""
    declared = Declared()
    decls, lines, problems = _read_catalog(Path(path))
    problems += _add(declared, decls, str(path), lines) + _clash_problems(declared)
    if problems:
        raise SpecError(problems)
    return declared.endpoints


def declared_endpoints(spec: str | Path) -> dict[str, dict[str, Any]]:
    """The endpoints a job spec declares (its `catalogs:` files and its `endpoints:`), as plain declarations:
    path -> the declaration's mapping as `docs/declaring-endpoints.md` writes it, validated and every default
    filled (`connectors.catalog.declarations.plain`). The whole spec is checked first; SpecError names the file
    (the spec or a catalog file), the line, the field and what is allowed (`harvest sandbox --spec SPEC`, the
    embedded sandbox of `service.base_url: sandbox`)."""
    from harvest.flows.spec.parse import load_spec

    return load_spec(spec).declared()


def _table_clashes(
    owners: dict[str, tuple[Any, str]],
    children: dict[str, tuple[str, ...]],
    path: str,
    table: str,
    kind: dict[str, Any],
) -> Iterator[tuple[str, str]]:
    """(problem, allowed) for a declared record table, or one of its child tables, that another endpoint (or
    harvest) owns with another key, other columns or other child tables; the first declaration owns it."""
    from harvest.connectors.catalog.job_catalog import (
        declared_child_signatures,
        declared_signature,
        describe_signature,
    )

    own_children = tuple(kind.get("children", {}))
    if children.setdefault(table, own_children) != own_children:
        yield (
            f"{owners[table][1]} is a table already, with other child tables: {', '.join(children[table]) or 'none'}",
            "another table name, or the same child tables",
        )
    for name, signature in {table: declared_signature(kind), **declared_child_signatures(kind)}.items():
        owner_signature, owner_name = owners.setdefault(name, (signature, f"{name} of {path}"))
        if owner_signature != signature:
            yield (
                f"{owner_name} is a table already, with another key or other columns",
                f"another table name, or the same key and columns: {describe_signature(owner_signature)}",
            )


def _clash_problems(declared: Declared) -> list[Problem]:
    """Declared paths the built-in catalog has, and declared tables another endpoint or harvest owns with
    another key or other columns (a table holds one kind of record)."""
    from harvest.connectors.catalog.job_catalog import builtin, kind_signature

    catalog = builtin()
    owners = {k.table: (kind_signature(k), f"the built-in {k.table}") for k in catalog.kinds().values()}
    children = {
        k.table: tuple(c.table for c in k.children) for e in catalog.endpoints.values() for k in e.kinds
    }
    problems = []
    for path, decl in declared.endpoints.items():
        file, line = declared.where[path]
        lines = declared.lines.get(file)
        if path in catalog.endpoints:
            problem = f"{path} is a built-in endpoint (`harvest endpoints`): a job cannot declare it again"
            allowed = "a path harvest does not have; `shapes:` reads a built-in endpoint's changed answers"
            problems.append(Problem(file, line, dotted(("endpoints", path)), problem, allowed))
            declared.refused.add(path)
            continue
        for table, kind in decl["records"].items():
            at: Loc = ("endpoints", path, "records", table)
            for problem, allowed in _table_clashes(owners, children, path, table, kind):
                problems.append(
                    Problem(file, lines.line(at) if lines else line, dotted(at), problem, allowed)
                )
                declared.refused.add(path)
    problems += _join_problems(declared, {t: k.schema.names for t, k in catalog.kinds().items()})
    for path in declared.refused:
        declared.endpoints.pop(path, None)  # the job's catalog never holds a refused declaration
    return problems


def _join_problems(declared: Declared, builtin_tables: Mapping[str, list[str]]) -> list[Problem]:
    """Declared columns whose `joins` names a table or a column the job's catalog (the built-in tables and the
    job's own) does not have."""
    tables = {**builtin_tables, **declared_tables(declared.endpoints)}
    problems = []
    for path, at, problem, allowed in join_problems(declared.endpoints, tables):
        file, line = declared.where[path]
        lines = declared.lines.get(file)
        loc: Loc = ("endpoints", path, *at)
        problems.append(Problem(file, lines.line(loc) if lines else line, dotted(loc), problem, allowed))
        declared.refused.add(path)
    return problems
