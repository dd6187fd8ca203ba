"""The timeline of a one-page `harvest run` with Prefect's temporary server: what happens when, in harvest and
in the server, relative to the moment the process was spawned (`python bench/timeline.py [--times N]`).

Hooks in `bench/timeline_hooks/sitecustomize.py` (loaded through PYTHONPATH, in harvest and in the server it
starts) write timestamps of imports, the server's start, readiness, the flow, exit handlers and the kill.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import HARVEST, env_for, one_page_spec, sandbox

HOOKS = Path(__file__).resolve().parent / "timeline_hooks"


def once(spec: Path, out: Path, home: Path, log: Path, extra: dict[str, str]) -> tuple[float, int]:
    shutil.rmtree(out, ignore_errors=True)
    log.unlink(missing_ok=True)
    env = {**env_for(home, None), "PYTHONPATH": str(HOOKS), "HARVEST_TIMELINE_FILE": str(log), **extra}
    t0 = time.time()
    proc = subprocess.run([HARVEST, "run", str(spec)], env=env, capture_output=True, text=True)
    end = time.time()
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr)
        server_log = home / "temporary-server.log"
        if server_log.exists():
            print(server_log.read_text()[-3000:])
    print(f"{'t (s)':>7}  {'pid':>7}  event")
    harvest_pid = None
    for line in log.read_text().splitlines():
        ts, pid, label = line.split(" ", 2)
        harvest_pid = harvest_pid or pid
        who = "" if pid == harvest_pid else "  [server]"
        print(f"{float(ts) - t0:7.3f}  {pid:>7}  {label}{who}")
    print(f"{end - t0:7.3f}           harvest exited ({proc.returncode})")
    return end - t0, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--times", type=int, default=2)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for harvest (repeatable)")
    args = parser.parse_args()
    extra = dict(e.split("=", 1) for e in args.env)
    work = Path(tempfile.mkdtemp(prefix="harvest-timeline-"))
    try:
        with sandbox(1, 10) as base:
            out = work / "one-page"
            spec = one_page_spec(work, base, out)
            home = work / "prefect-home"
            once(spec, out, home, work / "warm.log", extra)  # the first run creates the database
            print("---- warm runs")
            walls = [once(spec, out, home, work / "timeline.log", extra)[0] for _ in range(args.times)]
            print("walls:", " ".join(f"{w:.2f}" for w in walls))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
