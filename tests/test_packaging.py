"""`pip install .` (not editable) gives a working `harvest demo`: everything the demo needs ships in the wheel,
under the one import name `harvest`, so a user's project with its own `flows/`, `tasks/` and `configs/` packages
imports harvest, runs a job from a flow of its own and serves harvest's deployments from its own directory.

The wheel is built and installed without dependencies into a fresh virtual environment that borrows the
project environment's site-packages for them (a .pth line): what is tested is the wheel's own content, in a
few seconds instead of a full download of Prefect and its dependencies. It is built from a copy of the files git
would commit, never in the checkout: setuptools' build/ there would carry stale modules into the wheel. uv builds
and installs it offline, from the cache `make install` filled (the build backend included): tests send nothing
past 127.0.0.1.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import venv
import zipfile
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, ROOT, SECRET_KEY, job_spec, rows, subprocess_env

UV = Path(sys.executable).with_name("uv")


def source_copy(target: Path) -> set[str]:
    """The files git would commit (tracked, or new and not ignored), copied to `target`; their paths."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\0")  # fmt: skip
    files = {name for name in listed if name and ((ROOT / name).is_file() or (ROOT / name).is_symlink())}
    for name in files:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_symlink():  # harvest/flows -> ../flows: the link, as git holds it
            (target / name).symlink_to((ROOT / name).readlink())
        else:
            shutil.copy2(ROOT / name, target / name)
    return files


CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 2)}, page_size=4)


class Installed(NamedTuple):
    site: Path
    python: Path
    harvest: Path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel, built from what git would commit, installed into a fresh environment."""
    tmp_path = tmp_path_factory.mktemp("wheel")
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
    names = zipfile.ZipFile(wheel).namelist()
    modules = {n.removeprefix("harvest/") for n in names if n.endswith(".py") and n != "harvest/__init__.py"}
    assert all(n.startswith("harvest/") for n in names if n.endswith(".py")), "one top-level package"
    assert modules and modules <= files, sorted(modules - files)  # nothing but the sources
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
    return Installed(site, python, env_dir / "bin" / "harvest")


@pytest.mark.scenario
def test_a_wheel_install_runs_the_demo(installed: Installed, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(installed.python), "-c", "import harvest.flows; print(harvest.flows.__file__, harvest.spec_path('demo.yaml'))"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert str(installed.site) in where.stdout and str(ROOT) not in where.stdout, where.stdout + where.stderr
    for name in ("flows", "tasks", "connectors", "configs", "sandbox"):  # only `harvest` is installed
        assert not list(installed.site.glob(f"{name}*")), name
    demo = subprocess.run(
        [str(installed.harvest), "demo", "--output", str(tmp_path / "demo")],
        env=subprocess_env(tmp_path), capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "status: complete" in demo.stdout and (tmp_path / "demo" / "harvest.duckdb").exists()


PROJECT_FLOW = """
import asyncio, sys

import configs, flows, tasks  # this project's own packages, not harvest's
from prefect import flow

from harvest import collect_job


@flow
async def nightly(spec: str, output: str) -> None:
    await collect_job(spec_path=spec, output=output)


if __name__ == "__main__":
    print("own packages:", flows.__file__, tasks.__file__, configs.__file__)
    asyncio.run(nightly(sys.argv[1], sys.argv[2]))
"""


def user_project(root: Path, base_url: str) -> Path:
    """A Prefect project laid out as Prefect's examples are: its own `flows/`, `tasks/` and `configs/`."""
    for package in ("flows", "tasks", "configs"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text(f"OWN = {package!r}\n")
    (root / "flows" / "nightly.py").write_text(PROJECT_FLOW)
    (root / "jobs").mkdir()
    spec = job_spec(
        base_url,
        "out/served",
        [{"id": "pins", "endpoint": PINS, "params": {"query": "oak desk"}}],
        name="project-pins",
        credits=50,
    )
    (root / "jobs" / "pins.yaml").write_text(yaml.safe_dump(spec))
    return root


def test_a_project_with_its_own_flows_runs_and_serves_harvest(
    installed: Installed, prefect_api_url: str, tmp_path: Path
) -> None:
    from prefect.deployments import run_deployment

    from tests.test_serve import _deployment

    with running(CONFIG) as sb:
        project = user_project(tmp_path / "project", sb.base_url)
        env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=prefect_api_url)
        own = subprocess.run(
            [str(installed.python), "-m", "flows.nightly", "jobs/pins.yaml", str(tmp_path / "by-flow")],
            cwd=project, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert own.returncode == 0, own.stdout[-2000:] + own.stderr[-2000:]
        assert f"{project}/flows/__init__.py" in own.stdout  # the project's `flows`, harvest's beside it
        assert rows(tmp_path / "by-flow" / "harvest.duckdb", "SELECT status FROM runs") == [("complete",)]
        assert rows(tmp_path / "by-flow" / "harvest.duckdb", "SELECT count(*) FROM pinboard_pins")[0][0] > 0

        serving = subprocess.Popen(
            [str(installed.harvest), "serve", "jobs"], cwd=project, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            _deployment("project-pins", time.monotonic() + 120, serving, project / "out" / "served")
            flow_run = run_deployment("collect_job/project-pins", timeout=240)
            assert flow_run.state is not None and flow_run.state.is_completed(), flow_run.state
        finally:
            serving.send_signal(signal.SIGINT)
            out, err = serving.communicate(timeout=60)
    db = project / "out" / "served" / "harvest.duckdb"
    assert rows(db, "SELECT status FROM runs") == [("complete",)], out + err
    assert SECRET_KEY not in out + err + own.stdout + own.stderr
