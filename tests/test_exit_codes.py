"""The README's table of exit codes holds every code harvest's source can exit with.

Read from the source, not from runs: an AST walk collects the integer codes given to `typer.Exit`, to the
commands' `Failed` errors (`flows.cli_errors`), to `os._exit`, returned by a function named `exit_code`, and assigned to `exit_code`,
`EXIT_CODE` or `INTERRUPTED`; click's own usage error (2) and Python's uncaught exception (1) are added. A new
code without its row fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXITS = {"Exit": 0, "Failed": 1, "QueryFailed": 1, "_exit": 0}
"""Calls that end the process or a command, and the position of their code among the arguments."""
NAMED = {"exit_code", "EXIT_CODE", "INTERRUPTED"}


def _ints(node: ast.AST | None) -> set[int]:
    """The integer literals an expression may evaluate to (both sides of `a if c else b`)."""
    if isinstance(node, ast.IfExp):
        return _ints(node.body) | _ints(node.orelse)
    return {node.value} if isinstance(node, ast.Constant) and type(node.value) is int else set()


def _call_codes(node: ast.Call) -> set[int]:
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    if name not in EXITS:
        return set()
    at = EXITS[name]
    given = [node.args[at]] if len(node.args) > at else []
    given += [k.value for k in node.keywords if k.arg in ("code", "exit_code")]
    return {code for arg in given for code in _ints(arg)}


def source_codes() -> set[int]:
    codes = {1, 2}  # Python's uncaught exception, click's usage error
    for path in sorted(p for top in ("connectors", "tasks", "flows") for p in (ROOT / top).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                codes |= _call_codes(node)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id in NAMED for t in targets):
                    codes |= _ints(node.value)
            elif isinstance(node, ast.FunctionDef) and node.name == "exit_code":
                codes |= {
                    code for r in ast.walk(node) if isinstance(r, ast.Return) for code in _ints(r.value)
                }
    return codes


def readme_codes() -> set[int]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "\n## Exit codes\n" in text, "README.md has no `## Exit codes` section"
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    return {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.M)}


def test_every_exit_code_in_the_source_has_its_row_in_the_readme() -> None:
    found = source_codes()
    assert {0, 1, 2, 75, 130} <= found, f"the walk no longer sees the codes it should: {sorted(found)}"
    assert found <= readme_codes(), (
        f"codes without a row in README.md's exit codes: {sorted(found - readme_codes())}"
    )


def test_the_errors_the_command_line_maps_are_harvests_classes() -> None:
    """`flows.cli_errors.EXIT_CODES` names its classes (importing them would slow `harvest --help`): each name
    is a class that exists, so a renamed one is not silently left to a traceback."""
    import importlib

    from harvest.flows.cli_errors import EXIT_CODES

    for name in EXIT_CODES:
        module, _, cls = name.rpartition(".")
        assert isinstance(getattr(importlib.import_module(module), cls), type), name
