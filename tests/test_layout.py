"""The layout's promises, read from the source: imports run one way, one name for each thing, rooms stay small.

An AST walk, so a lazy import inside a function counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.endpoints import OLD_BALANCE

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = ("connectors", "tasks", "flows", "sandbox")

# What each top-level package may import from the others: data flows spec -> plan -> requests -> pages ->
# records -> files -> tables, so the service's description knows nothing of Prefect tasks, the tasks nothing of
# flows, and the sandbox (a stand-in for the real service) nothing of harvest but the two modules of the
# declaration language it serves declarations in: the one record-path parser and the one list of paging styles.
ALLOWED: dict[str, set[str]] = {
    "connectors": set(),
    "tasks": {"connectors"},
    "flows": {"connectors", "tasks", "sandbox"},
    "sandbox": set(),
}
NARROW: dict[str, set[str]] = {
    "sandbox": {"harvest.connectors.catalog.record_paths", "harvest.connectors.catalog.paging_styles"},
}
"""Single modules a package may import from a package it may not use."""

MAX_MODULES_PER_FOLDER = 15
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(p for top in PRODUCTION for p in (ROOT / top).rglob("*.py"))


def _imported_tops(tree: ast.AST) -> set[tuple[str, int, str]]:
    found: set[tuple[str, int, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {(_top(alias.name), node.lineno, alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add((_top(node.module), node.lineno, node.module))
    return found


def _top(module: str) -> str:
    """The package of harvest's own an import names (`harvest.flows.cli` -> `flows`), or the library's name."""
    parts = module.split(".")
    return parts[1] if parts[0] == "harvest" and len(parts) > 1 else parts[0]


def layer_breaches(modules: list[Path]) -> list[str]:
    out = []
    for path in modules:
        top = path.relative_to(ROOT).parts[0]
        for imported, line, module in _imported_tops(ast.parse(path.read_text(encoding="utf-8"))):
            if module in NARROW.get(top, set()):
                continue
            if imported in ALLOWED and imported != top and imported not in ALLOWED[top]:
                out.append(
                    f"{path.relative_to(ROOT)}:{line} imports {imported} ({top} may use {sorted(ALLOWED[top])})"
                )
    return out


def test_imports_run_one_way() -> None:
    assert layer_breaches(_modules()) == []


def test_the_layer_check_sees_a_breach(tmp_path: Path) -> None:
    """The check itself must be able to fail: a connector that imports a flow, even lazily, is named."""
    bad = ROOT / "connectors" / "_layer_probe_tmp.py"
    bad.write_text("def f():\n    from harvest.flows.cli import app\n    return app\n", encoding="utf-8")
    try:
        assert layer_breaches([bad]) == [
            "connectors/_layer_probe_tmp.py:2 imports flows (connectors may use [])"
        ]
    finally:
        bad.unlink()


def test_the_sandbox_reads_the_path_language_and_paging_styles_only() -> None:
    """The sandbox writes records at the paths harvest reads them from and pages in harvest's styles with the
    same two modules; any other module of harvest is a breach, and those two import nothing else of it."""
    bad = ROOT / "sandbox" / "_layer_probe_tmp.py"
    bad.write_text("from harvest.connectors.catalog.endpoints import ENDPOINTS\n", encoding="utf-8")
    try:
        assert layer_breaches([bad]) == [
            "sandbox/_layer_probe_tmp.py:1 imports connectors (sandbox may use [])"
        ]
    finally:
        bad.unlink()
    for module in NARROW["sandbox"]:
        source = ROOT / (module.removeprefix("harvest.").replace(".", "/") + ".py")
        used = {name for _, _, name in _imported_tops(ast.parse(source.read_text(encoding="utf-8")))}
        assert {name for name in used if name.startswith("harvest.")} <= NARROW["sandbox"], module


def test_no_two_modules_or_classes_share_a_name() -> None:
    names: dict[str, list[str]] = defaultdict(list)
    classes: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        rel = str(path.relative_to(ROOT))
        if path.name == "__init__.py":
            if path.parent.name not in PRODUCTION:
                names[path.parent.name].append(rel)
        else:
            names[path.stem].append(rel)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                classes[node.name].append(rel)
    assert {k: v for k, v in names.items() if len(v) > 1} == {}
    assert {k: v for k, v in classes.items() if len(v) > 1} == {}


def test_rooms_stay_small() -> None:
    crowded = {}
    for folder in {p.parent for p in _modules()}:
        count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
        if count > MAX_MODULES_PER_FOLDER:
            crowded[str(folder.relative_to(ROOT))] = count
    long_modules, long_functions = {}, {}
    for path in _modules():
        text = path.read_text(encoding="utf-8")
        rel = str(path.relative_to(ROOT))
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions[f"{rel}:{node.name}"] = length
    assert crowded == {}
    assert long_modules == {}
    assert long_functions == {}


@pytest.mark.parametrize("top", PRODUCTION)
def test_docs_point_inside_the_repository(top: str) -> None:
    """A docstring that cites a file outside the repository sends a reader nowhere."""
    outside = [
        f"{p.relative_to(ROOT)}"
        for p in (ROOT / top).rglob("*.py")
        if "shared/spec" in p.read_text(encoding="utf-8") or "DEVELOPERS.md" in p.read_text(encoding="utf-8")
    ]
    assert outside == []


def test_each_endpoint_path_is_written_in_the_catalog_and_the_sandbox_only() -> None:
    """A path changes in two places, never a third: the catalog (`connectors/catalog/endpoints/*.yaml`, what harvest
    asks) and the sandbox (what it emulates). harvest's code holds no endpoint's path: endpoints are data."""
    from harvest.connectors.catalog.endpoints import ENDPOINTS
    from harvest.connectors.catalog.job_catalog import builtin_files

    catalog = "".join(file.read_text(encoding="utf-8") for file in builtin_files())
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in _modules()}
    spread = {}
    for endpoint in ENDPOINTS:
        holders = sorted(rel for rel, text in texts.items() if endpoint.path in text)
        if f"\n  {endpoint.path}:\n" not in catalog or any(not h.startswith("sandbox/") for h in holders):
            spread[endpoint.path] = holders
    assert spread == {}


def test_the_balance_path_is_written_once_in_harvest_and_once_in_the_sandbox() -> None:
    """`/v1/credit-balance` is a value in code in one module of harvest (the client asks it) and one of the
    sandbox (it serves it): a move of the endpoint changes those two lines. Docstrings may name it."""
    holders = set()
    for p in _modules():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        docs = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}  # docstrings
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in docs and OLD_BALANCE in str(node.value):
                holders.add(str(p.relative_to(ROOT)))
    assert holders == {"connectors/http/balance.py", "sandbox/served_paths.py"}


def test_connectors_hold_no_per_endpoint_code() -> None:
    """No endpoint path, and no table of a built-in endpoint, is written in connectors/, tasks/ or flows/: what
    harvest knows of an endpoint is its declaration."""
    from harvest.connectors.catalog.endpoints import ENDPOINTS

    names = {e.path for e in ENDPOINTS} | {k.table for e in ENDPOINTS for k in e.kinds}
    written = {
        str(p.relative_to(ROOT)): sorted(n for n in names if re.search(rf"[\"'`]{re.escape(n)}[\"'`]", text))
        for p in _modules()
        if not str(p.relative_to(ROOT)).startswith("sandbox/")
        for text in [p.read_text(encoding="utf-8")]
    }
    assert {module: found for module, found in written.items() if found} == {}


def test_where_things_live_names_every_module_and_no_other() -> None:
    """docs/decisions.md "Where things live": one table per folder. A module added, moved or renamed without its
    row fails here, so the table a newcomer reads stays the tree."""
    import re

    text = (ROOT / "docs" / "decisions.md").read_text(encoding="utf-8")
    section = text[text.index("## Where things live") :]
    section = section[: section.index("\n## ", 1)]
    named, folder = set(), None
    for line in section.splitlines():
        if heading := re.match(r"### `(.+)/`", line):
            folder = heading.group(1)
        elif (row := re.match(r"\| `([\w.]+\.py)` \|", line)) and folder:
            named.add(f"{folder}/{row.group(1)}")
    actual = {str(p.relative_to(ROOT)) for p in _modules() if p.name != "__init__.py"}
    assert sorted(actual - named) == [], "modules without a row"
    assert sorted(named - actual) == [], "rows without a module"


FAULT_PATCHES = {
    ("test_export.py", "_copy_run"),  # a Ctrl-C mid-copy: no public call stops there
    ("test_real_platform_answers.py", "_tolerant"),  # a parser an older harvest lacked
    ("test_dask_resume.py", "_paying"),  # a round stuck on a worker: no answer holds one there for 15 minutes
}
"""The private names of harvest a test may touch: only to patch a fault in (docs/decisions.md)."""


def test_tests_read_no_private_name_of_harvest() -> None:
    """A test checks what a user sees or a public name: a private one holds the code's shape, not its behaviour.
    Attributes of other libraries' objects (dask's scheduler) are not harvest's and not counted."""
    theirs = {"_sockets"}
    reached = set()
    for p in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harvest"):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.Attribute) and ast.unparse(node.value) not in {"self", "cls"}:
                names = [node.attr]
            for name in names:
                if name.startswith("_") and not name.startswith("__") and name not in theirs:
                    reached.add((p.name, name))
    assert reached == FAULT_PATCHES
