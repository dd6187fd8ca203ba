"""The cron line and the systemd units of docs/scheduled-jobs.md, run as written there.

The documented setup commands and the crontab line run with cron's environment (`env -i`, `PATH=/usr/bin:/bin`,
`HOME`, `SHELL=/bin/sh`, no profile, no locale) in a copy of the documented install (`/srv/harvest` becomes a
temporary directory whose `.venv` is this checkout's); the service and timer units pass `systemd-analyze
verify`, and the service's `ExecStart` runs the way systemd starts it (its working directory, its
`EnvironmentFile`, systemd's own PATH and nothing else). Each against the sandbox over HTTP: the exit code, the
log and the rows landed are what a user would check the next morning.
"""

from __future__ import annotations

import getpass
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import running
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, ROOT, SECRET_KEY, job_spec, key_set, subprocess_env

DOC = ROOT / "docs" / "scheduled-jobs.md"
INSTALL = "/srv/harvest"
PARAMS = {"query": "oak desk"}
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)}, page_size=4)
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH systemd gives a service (systemd.exec(5), "Environment variables in spawned processes")."""
RUN_TIMEOUT = 300.0
"""A hang guard: the first start of Prefect's temporary server in a new home migrates its database."""


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)


def documented_setup() -> str:
    """The shell block that creates `logs/` and `harvest.env`."""
    (setup,) = [b for b in _blocks("sh") if "harvest.env" in b]
    return setup


def documented_cron_command() -> str:
    """The command part of the documented crontab line (after its five time fields)."""
    (block,) = _blocks("text")
    (line,) = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    fields = line.split(None, 5)
    assert len(fields) == 6 and "%" not in fields[5], "cron turns an unescaped % into a newline"
    return fields[5]


def documented_unit(name: str) -> str:
    (unit,) = [b for b in _blocks("ini") if b.startswith(f"# /etc/systemd/system/{name}\n")]
    return unit


def install(root: Path, base_url: str) -> None:
    """The documented install, in `root`: this checkout's .venv, the job's spec in jobs/ (its output relative,
    so the job lands where the line `cd`s), then the documented setup with the key filled in."""
    (root / "jobs").mkdir(parents=True)
    (root / ".venv").symlink_to(ROOT / ".venv")
    spec = job_spec(
        base_url, "data/brand-watch", [{"id": "pins", "endpoint": PINS, "params": PARAMS}], name="brand-watch"
    )
    (root / "jobs" / "brand-watch.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    setup = (
        documented_setup()
        .replace(INSTALL, str(root))
        .replace("HARVEST_API_KEY=...", f"HARVEST_API_KEY={SECRET_KEY}")
    )
    subprocess.run(["/bin/sh", "-ec", setup], check=True, cwd=root)
    assert (root / "harvest.env").stat().st_mode & 0o077 == 0, "the key file is readable by others"


def user_home(tmp_path: Path) -> Path:
    """The job user's home; its `.prefect` is the session's, so Prefect's database is migrated once."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".prefect").symlink_to(subprocess_env(tmp_path)["PREFECT_HOME"])
    return home


def landed(root: Path) -> set[tuple[Any, ...]]:
    return key_set(root / "data" / "brand-watch" / "harvest.duckdb", "pinboard_pins")


def expected() -> set[tuple[Any, ...]]:
    return {(PARAMS["query"], pin["id"]) for pin in full_crawl(PINS, PARAMS, CONFIG)["pins"]}


def test_the_documented_crontab_line_runs_the_job_in_crons_environment(tmp_path: Path) -> None:
    root, home = tmp_path / "srv-harvest", user_home(tmp_path)
    with running(CONFIG) as sb:
        install(root, sb.base_url)
        command = documented_cron_command().replace(INSTALL, str(root))
        cron_env = ["PATH=/usr/bin:/bin", f"HOME={home}", "SHELL=/bin/sh", f"LOGNAME={getpass.getuser()}"]
        cron = subprocess.run(
            ["/usr/bin/env", "-i", *cron_env, "/bin/sh", "-c", command],
            cwd=home, capture_output=True, text=True, timeout=RUN_TIMEOUT,
        )  # fmt: skip
        log = (root / "logs" / "brand-watch.log").read_text()
        (root / "harvest.env").write_text("HARVEST_API_KEY=a-key-the-service-refuses\n")
        refused = subprocess.run(
            ["/usr/bin/env", "-i", *cron_env, "/bin/sh", "-c", command],
            cwd=home, capture_output=True, text=True, timeout=RUN_TIMEOUT,
        )  # fmt: skip
    assert cron.returncode == 0 and cron.stdout == cron.stderr == "", "cron would mail this: " + cron.stderr
    assert log.splitlines()[-1] == "harvest exited 0", log
    assert "status: complete" in log and "Traceback" not in log and SECRET_KEY not in log, log
    assert landed(root) == expected()
    # a night that did not exit 0: cron mails what the line printed, the log's tail with the reason in it
    mailed = refused.stdout.splitlines()
    assert mailed[-1] == "harvest exited 2" and any("key" in line for line in mailed), refused.stdout


def _unit_settings(unit: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith(("#", ";"))
    )


@pytest.mark.scenario
def test_the_documented_systemd_units_verify_and_the_service_runs_as_systemd_starts_it(
    tmp_path: Path,
) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here")
    root, home = tmp_path / "srv-harvest", user_home(tmp_path)
    units = tmp_path / "units"
    units.mkdir()
    for name in ("harvest-brand-watch.service", "harvest-brand-watch.timer"):
        (units / name).write_text(documented_unit(name).replace(INSTALL, str(root)))
    with running(CONFIG) as sb:
        install(root, sb.base_url)
        verify = subprocess.run(
            ["systemd-analyze", "verify", *(str(p) for p in sorted(units.iterdir()))],
            capture_output=True, text=True, timeout=RUN_TIMEOUT,
        )  # fmt: skip
        service = _unit_settings((units / "harvest-brand-watch.service").read_text())
        environment = dict(
            line.split("=", 1)
            for line in Path(service["EnvironmentFile"]).read_text().splitlines()
            if line.strip() and not line.startswith(("#", ";"))
        )
        user = getpass.getuser()
        started = subprocess.run(
            shlex.split(service["ExecStart"]), cwd=service["WorkingDirectory"],
            env={"PATH": SYSTEMD_PATH, "HOME": str(home), "USER": user, "LOGNAME": user, "SHELL": "/bin/sh",
                 **environment},
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=RUN_TIMEOUT,
        )  # fmt: skip
    assert verify.returncode == 0 and verify.stdout + verify.stderr == "", verify.stdout + verify.stderr
    assert started.returncode == 0, started.stdout + started.stderr
    assert "status: complete" in started.stdout and "Traceback" not in started.stdout + started.stderr
    assert SECRET_KEY not in started.stdout + started.stderr
    assert landed(root) == expected()
