"""Running a contender as a process and measuring it: wall time, CPU of the whole process tree, peak RSS.

Peak RSS is sampled every 20 ms over the process and all its descendants (a temporary Prefect server is one),
so a short spike between samples can be missed; CPU comes from the kernel's accounting of waited children,
which is exact.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Measured:
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    returncode: int
    stdout: str
    stderr: str


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in _tree(proc):
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def run_measured(cmd: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 900) -> Measured:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(cmd), env=dict(env or os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    watched = psutil.Process(proc.pid)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss(watched))
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        stop.set()
        sampler.join()
        if proc.poll() is None:  # timed out (or interrupted): leave no contender running behind the bench
            for p in _tree(watched)[::-1]:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            proc.communicate()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Measured(wall, cpu, peak / 2**20, proc.returncode, out, err)
