"""Reading uv.lock for the Makefile: the hashed requirement that bootstraps uv, and what an upgrade moved.

Standard library only: it runs before anything is installed (`make install` needs uv's pin to install uv) and
after `uv lock --upgrade` (`make upgrade` writes what moved into CHANGELOG.md).

    python tools/lockfile.py uv-requirement [uv.lock]
    python tools/lockfile.py changes OLD_LOCK NEW_LOCK [--changelog CHANGELOG.md] [--date YYYY-MM-DD]
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tomllib
from pathlib import Path

UNRELEASED = "## [Unreleased]"
MOVED = "### Dependencies"


def locked_versions(lock: Path) -> dict[str, tuple[str, ...]]:
    """Package name -> the versions the lock pins (the project itself left out).

    Usually one; the lock covers every supported Python, so a package may have one version per Python range.
    """
    data = tomllib.loads(lock.read_text(encoding="utf-8"))
    found: dict[str, set[str]] = {}
    for package in data.get("package", []):
        if "registry" in package.get("source", {}):
            found.setdefault(package["name"], set()).add(package["version"])
    return {name: tuple(sorted(versions)) for name, versions in found.items()}


def uv_requirement(lock: Path) -> str:
    """`uv==X.Y.Z --hash=...` for every file the lock lists for uv: pip's --require-hashes installs it."""
    data = tomllib.loads(lock.read_text(encoding="utf-8"))
    for package in data.get("package", []):
        if package["name"] == "uv":
            files = [package.get("sdist", {}), *package.get("wheels", [])]
            hashes = [f"--hash={f['hash']}" for f in files if "hash" in f]
            if not hashes:
                raise SystemExit(f"{lock}: uv is locked without hashes; run `uv lock` again")
            return " \\\n    ".join([f"uv=={package['version']}", *hashes]) + "\n"
    raise SystemExit(f"{lock}: uv is not locked; it belongs to the dev extra in pyproject.toml")


def changes(old: dict[str, tuple[str, ...]], new: dict[str, tuple[str, ...]]) -> list[str]:
    """One line per package that moved, was added or was dropped, sorted by name."""
    lines = []
    for name in sorted(old.keys() | new.keys()):
        before, after = (" / ".join(v) if v else None for v in (old.get(name), new.get(name)))
        if before == after:
            continue
        if before is None:
            lines.append(f"- {name} {after} (new)")
        elif after is None:
            lines.append(f"- {name} {before} (dropped)")
        else:
            lines.append(f"- {name} {before} -> {after}")
    return lines


def record_in_changelog(changelog: Path, moved: list[str], day: str) -> None:
    """Insert the moves under `## [Unreleased]` as `### Dependencies (<day>, make upgrade)`."""
    text = changelog.read_text(encoding="utf-8")
    if UNRELEASED not in text:
        raise SystemExit(f"{changelog}: no '{UNRELEASED}' heading to record the upgrade under")
    block = "\n".join([f"{MOVED} ({day}, make upgrade)", *moved]) + "\n\n"
    head, tail = text.split(UNRELEASED, 1)
    changelog.write_text(f"{head}{UNRELEASED}\n{block}{tail.lstrip(chr(10))}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/lockfile.py")
    commands = parser.add_subparsers(dest="command", required=True)
    requirement = commands.add_parser("uv-requirement", help="the hashed requirement that installs uv")
    requirement.add_argument("lock", nargs="?", default="uv.lock", type=Path)
    moved = commands.add_parser("changes", help="what moved between two locks")
    moved.add_argument("old", type=Path)
    moved.add_argument("new", type=Path)
    moved.add_argument("--changelog", type=Path)
    moved.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args(argv)
    if args.command == "uv-requirement":
        sys.stdout.write(uv_requirement(args.lock))
        return 0
    lines = changes(locked_versions(args.old), locked_versions(args.new))
    if not lines:
        print("uv.lock: nothing moved")
        return 0
    print("\n".join(lines))
    if args.changelog:
        record_in_changelog(args.changelog, lines, args.date)
        print(f"{args.changelog}: recorded {len(lines)} move(s) under {UNRELEASED}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
