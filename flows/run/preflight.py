"""The output directory and the service, checked before Prefect starts and before any request is paid for; the
job's lock, taken there too.

A run that cannot land its data should fail in a second, not after Prefect started (10 s and two tracebacks
for an `output` under a regular file) or after the credits were spent (a corrupt `harvest.duckdb`, or one with
tables harvest did not make, was found only at the load step). Everything here only looks, but for one empty
directory made and removed at once to learn whether directories can be made there: a refused run leaves no trace.

So should a run that talks to the wrong address, or with a key the service refuses: `check_service` reads the
free balance once (`connectors.http.balance.read_before_run`), and a URL where something else answers (the
service's address with `/v1` appended: 404s that became "not found" and a green night) or nothing can (nothing
listening, a name that does not resolve, TLS refused) is refused with one line naming the URL and what answered.
A key the service refuses is refused with one line naming where the key came from, not the URL: the service
answers a wrong key with 402 and its out-of-credits message, as it answers an empty account.
A run the flow starts itself (a deployment's, a team's own flow) asks only whether the service is away
(`away_for_now`), where it answered the job before: that run has no command line to refuse it before Prefect.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from harvest.flows.console import harvest_line
from harvest.flows.spec import UsageError
from harvest.flows.spec.service_url import EMBEDDED_SANDBOX

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from harvest.connectors.catalog.child_kinds import TableKind
    from harvest.connectors.http.auth import ApiKey
    from harvest.flows.spec.model import JobSpec
from harvest.tasks.output import job_lock
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.machine_fault import EXIT_CODE, as_machine_fault

DATA_DIRS = ("raw", "parquet")
"""Subdirectories an output directory owns; another job's output inside them would mix into its data."""


class LowDiskSpace(UsageError):
    """Less free space where the run writes than `min_free_mb`: refused before anything is paid; once space is
    freed, the same command runs (exit 75, EX_TEMPFAIL, as a run a full disk stopped)."""

    exit_code = EXIT_CODE


def check_output_dir(
    path: Path,
    min_free_mb: float = 0,
    kinds: Mapping[str, TableKind] | None = None,
    declared: tuple[Path | str, Collection[str]] | None = None,
) -> None:
    """Raise UsageError (exit 2) unless a run can create, write and load into `path`; LowDiskSpace (exit 75)
    when its filesystem has less than `min_free_mb` free. `kinds`: the job's record tables (its catalog's:
    built-in and declared); the tables the output's earlier runs declared are checked too. `declared`: the
    spec file and the tables it (or its catalogs) declares, for the rebuild a refusal advises."""
    path = Path(path).expanduser()
    _check_no_question_mark(path)
    _check_creatable(path)
    _check_writable(path)
    _check_makes_directories(path)
    _check_not_inside_another_job(path)
    _check_database(OutputLayout(path), kinds or {}, declared)
    _check_load_settings()
    _check_free_space(path, min_free_mb)


def lock_job(layout: OutputLayout, job: str) -> job_lock.JobLock:
    """The job's lock (one run per job and output), taken once per run by whoever starts it: `harvest run`
    before Prefect starts (so a second run is refused in a second), the flow itself for a deployment's run.
    Raises UsageError (exit 2) naming the run that holds it, LowDiskSpace (exit 75) on a full disk."""
    try:
        return job_lock.acquire(layout.lock_file(job))
    except job_lock.JobLocked as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # the checks found the directory creatable; it changed since
        fault = as_machine_fault(exc, layout.lock_file(job))
        if fault is not None and fault.full:  # exit 75: the same command runs once space is freed
            raise LowDiskSpace(f"output: {fault}; nothing was sent, free space there and run again") from None
        raise UsageError(f"output: cannot create {layout.lock_file(job)}: {exc.strerror or exc}") from None


class ServiceAway(UsageError):
    """Nothing answers at a service URL that answered this job before: a service down for now, not a wrong URL
    (exit 75, EX_TEMPFAIL: the same command runs once it answers, as a cron job's next night would)."""

    exit_code = EXIT_CODE


AWAY_THEN = "the same command runs the job once it answers"
"""What a `ServiceAway` line says comes next, for `harvest run`."""


def check_service(
    url: str, key: ApiKey, key_source: str, answered_before: Callable[[], str | None] = lambda: None
) -> None:
    """Raise UsageError (exit 2) unless `url` answers its balance as the service does and accepts the key
    (`key_source` says where the key came from). A busy service (429, 5xx past a few brief tries) is no reason to
    refuse: the run's own retries take it from there. `answered_before`: the newest earlier run of the job the
    service answered at this URL, if any; nothing answering there then is ServiceAway (exit 75), not a wrong URL."""
    import asyncio

    asyncio.run(acheck_service(url, key, key_source, answered_before))


async def acheck_service(
    url: str,
    key: ApiKey,
    key_source: str,
    answered_before: Callable[[], str | None] = lambda: None,
    then: str = AWAY_THEN,
) -> None:
    """`check_service` in a running event loop (a flow's); `then`: what a `ServiceAway` line says comes next."""
    from harvest.connectors.errors import NotTheService, OutOfCredits, Unauthorized
    from harvest.connectors.http.balance import read_before_run

    try:
        await read_before_run(url, key)
    except NotTheService as exc:
        if exc.unreachable and (run := answered_before()) is not None:
            raise ServiceAway(
                f"service: {exc.where}: {exc.answered}, where it answered run {run} of this job: away for now; "
                f"nothing was sent, and {then}"
            ) from None
        raise UsageError(f"service: {exc}; nothing was sent") from None
    except Unauthorized:
        raise UsageError(
            f"service: the service refused the API key (HTTP 401): fix the key in {key_source}, then run "
            "again. Nothing was paid"
        ) from None
    except OutOfCredits:
        raise UsageError(
            "service: the service refused the API key, or the account is out of credits (HTTP 402: it "
            f"answers both with the same message and does not say which): fix the key in {key_source}, or "
            "top up the account, then run again. Nothing was paid"
        ) from None


def answered_before(layout: OutputLayout, job: str, label: str) -> str | None:
    """The newest run of the job whose balance the service answered at `label` (its URL, `service_label`); a
    run killed mid-run (a reboot, the OOM killer) has it in its journal only."""
    from harvest.tasks.output.journal import read_a_balance
    from harvest.tasks.output.manifest import run_heads

    for head in reversed(run_heads(layout, job)):
        run = head.manifest()
        if run.service == label and (
            run.balance_before is not None or read_a_balance(layout.journal_file(run.run_id))
        ):
            return run.run_id
    return None


SERVED_AWAY_THEN = "the job's next run collects it once the service answers"
"""What comes next after a deployment's (or a team's flow's) run found the service away."""


async def away_for_now(
    url: str, key: ApiKey, layout: OutputLayout, job: str, label: str
) -> ServiceAway | None:
    """For a run the flow starts itself (a deployment's, `harvest serve`'s, a team's own flow): whether nothing
    answers where the service answered this job before, asked as `harvest run` asks before Prefect starts (one
    free balance read, 3 tries). Asked only when such an earlier run exists: the first run of a job, and every
    other answer (a refused key, another server, a busy service), are left to the run's own first balance read
    (`flows.run.bill.probe_balance`), so they cost no second request."""
    run = answered_before(layout, job, label)
    if run is None:
        return None
    try:
        await acheck_service(url, key, "", lambda: run, SERVED_AWAY_THEN)
    except ServiceAway as exc:
        return exc
    except UsageError:
        return None
    return None


def _check_free_space(path: Path, min_free_mb: float) -> None:
    where = _nearest_existing(path)
    free = shutil.disk_usage(where).free
    if free < min_free_mb * 2**20:
        floor = f"{min_free_mb:,.0f}" if float(min_free_mb).is_integer() else f"{min_free_mb:,}"
        raise LowDiskSpace(
            f"output: {where} has {free / 2**20:,.0f} MB free, below the floor of {floor} MB a run needs "
            "(`min_free_mb` in the spec): nothing was sent; free space there, then run again"
        )


def _check_load_settings() -> None:
    from harvest.tasks.database.load_settings import LoadSettingError, check_load_settings

    try:
        check_load_settings()
    except LoadSettingError as exc:
        raise UsageError(str(exc)) from None


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.absolute().parents):
        if candidate.exists():
            return candidate
    return Path("/")


def _check_no_question_mark(path: Path) -> None:
    """DuckDB reads what follows a `?` in a database's path as options and names its write-ahead log before it
    (`/data/a?b/harvest.duckdb` logs to `/data/a.wal?b/...`): the first commit failed after every page was paid."""
    where = path.absolute()
    if "?" in str(where):
        raise UsageError(
            f"output: {where} has a '?' in it, where DuckDB cannot keep its database (it reads what follows '?' "
            "as options); allowed: a directory whose path has no '?' (--output or `output:` in the spec)"
        )


def _check_creatable(path: Path) -> None:
    existing = _nearest_existing(path)
    if existing.is_dir():
        _check_no_broken_link(path, existing)
        return
    where = "is a file" if existing == path else f"is under {existing}, which is a file"
    raise UsageError(
        f"output: {path} {where}, not a directory; allowed: a directory harvest can create "
        "(--output or `output:` in the spec)"
    )


def _check_no_broken_link(path: Path, existing: Path) -> None:
    """A component that is a symbolic link to nothing does not `exist()`, and no mkdir can make it."""
    for candidate in (path, *path.absolute().parents):
        if candidate == existing:
            return
        if candidate.is_symlink():
            raise UsageError(
                f"output: {path} cannot be created: {candidate} is a symbolic link that leads nowhere "
                f"(to {os.readlink(candidate)}); allowed: a directory harvest can create (--output or "
                "`output:` in the spec)"
            )


def _check_writable(path: Path) -> None:
    existing = _nearest_existing(path)
    statvfs = getattr(os, "statvfs", None)  # POSIX only
    read_only_fs = bool(statvfs and statvfs(existing).f_flag & os.ST_RDONLY)
    if read_only_fs or not os.access(existing, os.W_OK | os.X_OK):
        what = "cannot be written" if existing == path else f"cannot be created: {existing} is not writable"
        if read_only_fs:
            what += " (read-only file system)"
        raise UsageError(f"output: {path} {what}; allowed: a directory you can write to")


def _check_makes_directories(path: Path) -> None:
    """Make and remove an empty directory where the run will make its own.

    Permission bits and `os.access` do not tell everything: /sys refuses root (EPERM), and so do immutable
    directories, ACLs, quotas and full disks. Without this the run failed at its first mkdir, with a traceback.
    """
    existing = _nearest_existing(path)
    try:
        probe = tempfile.mkdtemp(prefix=".harvest-check-", dir=existing)
    except OSError as exc:
        what = (
            "cannot be written"
            if existing == path
            else f"cannot be created: making a directory in {existing}"
        )
        reason = exc.strerror or type(exc).__name__
        raise UsageError(
            f"output: {path} {what} failed ({reason}); allowed: a directory you can write to"
        ) from None
    os.rmdir(probe)


def _is_output_root(directory: Path) -> bool:
    """A directory holding a job's data: its DuckDB file, or a run manifest under raw/."""
    layout = OutputLayout(directory)
    if layout.db.is_file():
        return True
    return layout.raw_root.is_dir() and next(layout.raw_root.glob("*/manifest.json"), None) is not None


def _check_not_inside_another_job(path: Path) -> None:
    resolved = path.resolve()
    for inside in (resolved, *resolved.parents):
        if inside.name in DATA_DIRS and _is_output_root(inside.parent):
            raise UsageError(
                f"output: {path} is inside the {inside.name}/ directory of another job's output "
                f"({inside.parent}); allowed: a directory of its own, e.g. a sibling of {inside.parent}"
            )


def _check_database(
    layout: OutputLayout, kinds: Mapping[str, TableKind], declared: tuple[Path | str, Collection[str]] | None
) -> None:
    """An existing harvest.duckdb must open read-only as a DuckDB database, and its tables must be ones the load
    step can write into (`tasks.database.table_check`); busy (locked) is fine."""
    db = layout.db
    if not db.exists() and not db.is_symlink():
        return
    import duckdb

    try:
        if not db.is_file():
            raise OSError("not a regular file")
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            return  # another process holds it: the run lands Parquet and says to run `harvest load`
        raise UsageError(unreadable_database(db, exc)) from None
    except (duckdb.Error, OSError) as exc:
        raise UsageError(unreadable_database(db, exc)) from None
    from harvest.tasks.database.table_check import table_problems
    from harvest.tasks.output.manifest import output_kinds

    try:
        problems = table_problems(con, {**output_kinds(layout), **kinds})
    except duckdb.Error as exc:
        raise UsageError(unreadable_database(db, exc)) from None
    finally:
        con.close()
    if problems:
        raise UsageError(foreign_tables(db, problems, declared))


def unreadable_database(db: Path, exc: BaseException) -> str:
    """What to do about a database file DuckDB cannot open: move it aside; the runs' data is elsewhere too."""
    layout = OutputLayout(db.parent)
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return (
        f"output: {db} is not a readable DuckDB database ({reason}); nothing was sent. "
        f"Move it aside (mv {db} {db}.broken) and run again: the run starts a new database. "
        f"The rows of earlier runs stay in {layout.parquet_root} and their raw pages in {layout.raw_root}; "
        "the new database holds only runs from then on"
    )


SHOWN_PROBLEMS = 5


def foreign_tables(
    db: Path, problems: list[str], declared: tuple[Path | str, Collection[str]] | None = None
) -> str:
    """A database whose tables the load cannot write into: most likely not harvest's, so it goes elsewhere. A
    table the spec declares (a changed key) is rebuilt with `--spec SPEC`: without it, `rebuild` knows only the
    declarations the output's runs recorded, and is refused the same way."""
    shown = "; ".join(problems[:SHOWN_PROBLEMS])
    if len(problems) > SHOWN_PROBLEMS:
        shown += f"; and {len(problems) - SHOWN_PROBLEMS} more"
    text = (
        f"output: {db} has tables harvest cannot load into ({shown}); nothing was sent. "
        "Give this job an output directory of its own (--output or `output:` in the spec)"
    )
    root = db.parent
    if next(OutputLayout(root).raw_root.glob("*/manifest.json"), None) is not None:
        text += (
            f", or, if it is harvest's database from another version, build it anew from the raw pages: "
            f"`{harvest_line('rebuild', root, *_spec_words(problems, declared))}`"
        )
    return text


def declared_by(spec: JobSpec, spec_path: Path | str | None) -> tuple[Path | str, Collection[str]] | None:
    """The spec file and the tables it (or its catalogs) declares: a refusal over one of them (a changed key)
    advises `harvest rebuild OUTPUT --spec SPEC`. None for a spec given as text (no file to name)."""
    from harvest.connectors.catalog.job_catalog import declared_tables

    return None if spec_path is None else (spec_path, list(declared_tables(spec.declared())))


def _spec_words(problems: list[str], declared: tuple[Path | str, Collection[str]] | None) -> list[object]:
    """`--spec SPEC` when a problem is of a table the spec declares (each problem starts `TABLE:`)."""
    if declared is None:
        return []
    spec, tables = declared
    named = {problem.split(":", 1)[0].lower() for problem in problems}
    return ["--spec", spec] if named & {t.lower() for t in tables} else []


def refuse_mixed_services(layout: OutputLayout, service: str) -> None:
    """A run against the embedded sandbox into an output that holds runs against the service, or the other way
    round: refused before anything is paid. The sandbox's made-up records would land in the same tables as real
    ones (`harvest run nightly.yaml --base-url sandbox`, to try a job offline, wrote into the nightly's DuckDB),
    and an incremental query would then stop at keys only the sandbox had."""
    from harvest.tasks.output.manifest import run_heads  # here: the checks before Prefect starts stay light

    sandbox = service == EMBEDDED_SANDBOX
    other = next(
        (h for h in run_heads(layout) if h.service and (h.service == EMBEDDED_SANDBOX) != sandbox), None
    )
    if other is not None:
        raise UsageError(
            f"{layout.root} holds run {other.run_id} of job {other.job} against {other.service}, and this run "
            f"asks {service}: {'made-up' if sandbox else 'real'} records would land in the same tables. Give "
            "this run an output of its own (--output DIR, or the spec's output)"
        )
