"""`pip install .` (not editable) gives a working `harvest demo`: everything the demo needs ships in the wheel.

The wheel is built and installed without dependencies into a fresh virtual environment that borrows the
project environment's site-packages for them (a .pth line): what is tested is the wheel's own content, in a
few seconds instead of a full download of Prefect and its dependencies. It is built from a copy of the files git
would commit, never in the checkout: setuptools' build/ there would carry stale modules into the wheel. uv builds
and installs it offline, from the cache `make install` filled (the build backend included): tests send nothing
past 127.0.0.1.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

from tests.flow_helpers import ROOT, subprocess_env

UV = Path(sys.executable).with_name("uv")


def source_copy(target: Path) -> set[str]:
    """The files git would commit (tracked, or new and not ignored), copied to `target`; their paths."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\0")  # fmt: skip
    files = {name for name in listed if name and (ROOT / name).is_file()}
    for name in files:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name)
    return files


def test_a_wheel_install_runs_the_demo(tmp_path: Path) -> None:
    wheels, source = tmp_path / "wheels", tmp_path / "source"
    files = source_copy(source)
    checkout_before = sorted(p.name for p in ROOT.iterdir())
    build = subprocess.run(
        [str(UV), "build", "--wheel", "--offline", "-q", "-o", str(wheels), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    assert sorted(p.name for p in ROOT.iterdir()) == checkout_before, "the build wrote into the checkout"
    (wheel,) = wheels.glob("harvest-*.whl")
    modules = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".py")]
    assert modules and set(modules) <= files, sorted(set(modules) - files)  # nothing but the sources
    env_dir = tmp_path / "fresh"
    venv.create(env_dir, with_pip=False)
    (site,) = (env_dir / "lib").glob("python*/site-packages")
    (site / "borrowed-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(UV), "pip", "install", "--offline", "--python", str(python), "--no-deps", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    where = subprocess.run(
        [str(python), "-c", "import flows, configs; print(flows.__file__, configs.spec_path('demo.yaml'))"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert str(site) in where.stdout and str(ROOT) not in where.stdout, where.stdout + where.stderr
    demo = subprocess.run(
        [str(env_dir / "bin" / "harvest"), "demo", "--output", str(tmp_path / "demo")],
        env=subprocess_env(tmp_path), capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "status: complete" in demo.stdout and (tmp_path / "demo" / "harvest.duckdb").exists()
