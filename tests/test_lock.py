"""What a fresh machine installs is what was tested: uv.lock pins everything and agrees with pyproject.toml.

`make install` runs `uv sync --locked`, which refuses a lock that no longer matches pyproject.toml; these tests
say the same before anyone runs it, and check that the environment the suite runs in is the lock's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from tests.flow_helpers import ROOT
from tools import lockfile

UV = Path(sys.executable).with_name("uv")
LOCK = ROOT / "uv.lock"


def uv_lock_check(project: Path) -> subprocess.CompletedProcess[str]:
    """`uv lock --check` offline: does the lock satisfy the project's declared requirements?"""
    return subprocess.run(
        [str(UV), "lock", "--check", "--offline", "--project", str(project)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_lock_matches_pyproject() -> None:
    checked = uv_lock_check(ROOT)
    assert checked.returncode == 0, checked.stderr


def test_a_dependency_added_without_locking_is_caught(tmp_path: Path) -> None:
    """The check above can fail: the same copy passes unedited and is refused once pyproject.toml names a
    dependency the lock does not hold. (Offline, uv refuses it either as a lock to update or, where the new
    package is not in the cache, as a resolution it cannot make; both stop `make install`.)"""
    shutil.copy(LOCK, tmp_path / "uv.lock")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    pyproject = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(pyproject)
    assert uv_lock_check(tmp_path).returncode == 0
    edited = pyproject.replace('"croniter>=2,<8",', '"croniter>=2,<8",\n  "six>=1.16",')
    assert edited != pyproject
    (tmp_path / "pyproject.toml").write_text(edited)
    checked = uv_lock_check(tmp_path)
    assert checked.returncode != 0
    assert "needs to be updated" in checked.stderr or "network was disabled" in checked.stderr, checked.stderr


def test_every_dependency_is_pinned_with_hashes() -> None:
    """Transitive packages included: every registry package has one version and a hash for each file."""
    data = tomllib.loads(LOCK.read_text())
    registry = [p for p in data["package"] if "registry" in p.get("source", {})]
    assert len(registry) > 100  # prefect alone brings ~100
    for package in registry:
        files = [package["sdist"]] if "sdist" in package else []
        files += package.get("wheels", [])
        assert files and all(f.get("hash", "").startswith("sha256:") for f in files), package["name"]


def test_the_extras_are_locked() -> None:
    """dev, dask, bench and docs (and any extra added later) resolve in the lock, not on the day of install."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (harvest,) = [p for p in tomllib.loads(LOCK.read_text())["package"] if p["name"] == "harvest"]
    assert set(harvest["optional-dependencies"]) == set(declared)
    locked = lockfile.locked_versions(LOCK)
    for extra in ("dask", "bench", "docs"):
        for dependency in harvest["optional-dependencies"][extra]:
            assert dependency["name"] in locked, (extra, dependency["name"])


def test_the_suite_runs_on_the_locked_versions() -> None:
    """Every installed distribution the lock knows is at the locked version: the tested software is the lock's."""
    locked = lockfile.locked_versions(LOCK)
    installed = {d.metadata["Name"].lower().replace("_", "-"): d.version for d in metadata.distributions()}
    compared = {name: version for name, version in installed.items() if name in locked}
    assert len(compared) > 100
    assert {n: v for n, v in compared.items() if v not in locked[n]} == {}
    for name in ("prefect", "pyyaml", "duckdb", "pyarrow", "httpx", "pydantic", "uv"):
        assert (installed[name],) == locked[name]


def test_the_uv_that_installs_is_the_locked_one() -> None:
    requirement = lockfile.uv_requirement(LOCK)
    (version,) = lockfile.locked_versions(LOCK)["uv"]
    assert requirement.startswith(f"uv=={version} ")
    assert requirement.count("--hash=sha256:") >= 2  # the sdist and the wheels of every platform
    assert subprocess.run([str(UV), "--version"], capture_output=True, text=True).stdout.split()[1] == version


def lock_text(**versions: str) -> str:
    packages = [
        f'[[package]]\nname = "{name}"\nversion = "{version}"\nsource = {{ registry = "https://pypi.org/simple" }}\n'
        for name, version in versions.items()
    ]
    project = '[[package]]\nname = "harvest"\nversion = "0.1.0"\nsource = { editable = "." }\n'
    return "version = 1\n\n" + "\n".join([*packages, project])


def test_an_upgrade_says_what_moved_in_the_changelog(tmp_path: Path) -> None:
    old, new, changelog = tmp_path / "old.lock", tmp_path / "new.lock", tmp_path / "CHANGELOG.md"
    old.write_text(lock_text(pyyaml="6.0.3", duckdb="2.0.1", gone="1.0"))
    new.write_text(lock_text(pyyaml="6.0.4", duckdb="2.0.1", fresh="0.2"))
    changelog.write_text("# Changelog\n\n## [Unreleased]\n### Added\n- something\n")
    assert (
        lockfile.main(["changes", str(old), str(new), "--changelog", str(changelog), "--date", "2026-11-24"])
        == 0
    )
    assert changelog.read_text() == (
        "# Changelog\n\n## [Unreleased]\n"
        "### Dependencies (2026-11-24, make upgrade)\n"
        "- fresh 0.2 (new)\n- gone 1.0 (dropped)\n- pyyaml 6.0.3 -> 6.0.4\n\n"
        "### Added\n- something\n"
    )


def test_an_upgrade_that_moved_nothing_leaves_the_changelog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock, changelog = tmp_path / "uv.lock", tmp_path / "CHANGELOG.md"
    lock.write_text(lock_text(pyyaml="6.0.4"))
    changelog.write_text("# Changelog\n\n## [Unreleased]\n")
    assert lockfile.main(["changes", str(lock), str(lock), "--changelog", str(changelog)]) == 0
    assert changelog.read_text() == "# Changelog\n\n## [Unreleased]\n"
    assert "nothing moved" in capsys.readouterr().out
