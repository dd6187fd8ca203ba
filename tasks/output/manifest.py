"""The run manifest: one JSON file per run saying what the run is, how it ended and what it landed.

Written when a run starts (status `running`), rewritten atomically when it ends, so a run killed on the way is
still visible (`harvest runs`) and can be resumed. Paths inside are relative to the output directory, so an
output directory can be moved or synced and still loads.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator, MutableSequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from harvest.connectors.catalog.child_kinds import TableKind
from harvest.connectors.catalog.job_catalog import of_runs
from harvest.connectors.paging.pager import OK_STATUSES, query_failed
from harvest.connectors.reading.extraction import ExtractionReport
from harvest.tasks.output.append_file import fsync_dir
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.packed_summaries import each_summary_json

log = logging.getLogger(__name__)

UNFINISHED = frozenset({"running", "interrupted"})
"""Run statuses a later `harvest run` resumes: killed (still `running` on disk) or stopped by Ctrl-C."""


CONTINUABLE = frozenset(
    {"budget_exhausted", "rate_limited", "stopped", "interrupted", "failed", "abandoned", "drift"}
)
"""Query statuses `--continue` picks up at their saved cursor; the others ended for good."""


@dataclass
class RunManifest:
    run_id: str
    job: str
    spec_hash: str
    service: str
    started: str
    finished: str | None
    status: str
    budget: int
    """The budget of the run's last session (a resume's `--budget` replaces it)."""
    credits_spent: int
    queries: MutableSequence[dict[str, Any]] = field(default_factory=list)
    """Each query's summary: a list as read from disk, `PackedSummaries` as the run that pages holds them."""
    loaded: bool = False
    plan_key: str = ""
    """Hash of what identifies the spec's queries: a resume needs the same plan."""
    flow_run_id: str | None = None
    """The Prefect flow run that ran it: a flow retry resumes this run instead of paying again."""
    flow_run_ids: list[str] = field(default_factory=list)
    """Every flow run that ran it, oldest first (the first, then each resume): a resume or an abandon sets the
    earlier ones Crashed in Prefect if a killed process left them Running (`flows.orchestrator.prefect_runs`)."""
    continues: str | None = None
    """The run whose stopped queries this run continues (`--continue`)."""
    resumes: int = 0
    full: bool = False
    """`--full`: its incremental queries page fully and every dependent runs again; its resumes go on so, with
    or without `--full` (a nightly command resumes it)."""
    error: str | None = None
    """Why the whole run stopped, when it did (Ctrl-C, a refused key, an empty account)."""
    balance_before: int | None = None
    balance_after: int | None = None
    """The account balance the service reported before and after the run's last session (`connectors.http.balance.PATH`)."""
    service_billed: int | None = None
    """What the balance fell by over all the run's sessions: the service's own count, beside `credits_spent`.
    None when it cannot be known (`flows.run.bill`), and then `bill_unknown` says why."""
    bill_unknown: str | None = None
    rebuilt: str | None = None
    """When `harvest rebuild` last changed the run's Parquet (a catalog fix): an export sends the run again, to
    the same keys, to every destination that had it before then and got other rows (`export_ledger.due`)."""
    machine_fault: str | None = None
    """What this machine could not write when it stopped the run (a full disk): the run is resumable."""
    rate_limit: dict[str, Any] | None = None
    """What the run met of the service's rate limit (`connectors.http.pace.PaceReport`): requests, 429s, the pace."""
    shapes: dict[str, Any] = field(default_factory=dict)
    """The spec's `shapes` the run read its pages with (`connectors.catalog.shape_overrides`): a rebuild reads them the
    same way unless given a spec's."""
    declared: dict[str, Any] = field(default_factory=dict)
    """The endpoints the job declared (path -> plain declaration, `connectors.catalog.declarations.plain`): what
    `harvest load`, `rebuild`, `export`, the history views and the table checks know a declared kind's table from,
    without the spec (`connectors.catalog.job_catalog.of_runs`)."""
    files: list[tuple[str, str, int]] = field(default_factory=list)
    """(table, path relative to the output root, rows) of the run's own Parquet files (`tasks.landing.open_run_sink`);
    Dask rounds and runs before them list files per query instead."""
    retired_files: list[str] = field(default_factory=list)
    """Parquet files (relative paths) a rebuild removed and did not write again: the parts of Dask rounds become
    one part per query. An export deletes them at a destination that has them, so no row is there twice."""
    spec_file: str | None = None
    """The absolute path of the spec file the run was started with (None for a deployment's spec text): the
    command `harvest runs` and `harvest load` print to resume the run names it."""
    budget_before: int | None = None
    """The earlier budget that capped the run's spending, when a resume gave it a `budget` below what it had
    already spent (it then pays nothing more): `25/10` would read as a hard cap broken (`lowered_budget`)."""

    @property
    def records(self) -> int:
        return sum(int(q["records"]) for q in self.queries)

    @property
    def extraction(self) -> ExtractionReport:
        """What all the run's pages held vs what was kept."""
        total = ExtractionReport()
        for q in self.queries:
            total.add(ExtractionReport.from_dict(q.get("extraction")))
        return total

    def bookkeeping_row(self) -> dict[str, Any]:
        """The run's row of the `runs` table."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # not asdict: no deep copy
        return {**own, "records": self.records, **self.extraction.totals()}

    @property
    def unfinished(self) -> bool:
        return self.status in UNFINISHED

    def identity(self) -> dict[str, Any]:
        """What the run is, without what it did (queries, files): the head its journal's session lines carry."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _DONE}

    def flow_runs(self, current: str | None = None) -> list[str]:
        """Its flow runs so far (manifests before `flow_run_ids` named only the last), then `current`."""
        earlier = self.flow_run_ids or ([self.flow_run_id] if self.flow_run_id else [])
        return list(dict.fromkeys([*earlier, *([current] if current else [])]))

    def all_files(self) -> list[tuple[str, str, int]]:
        """Every Parquet file the run landed: its own, then its queries'."""
        own = [(str(t), str(p), int(n)) for t, p, n in self.files]
        return own + [(str(t), str(p), int(n)) for q in self.queries for t, p, n in q.get("files", [])]

    def files_rewritten(self, removed: list[str]) -> None:
        """The run's files were written again from its raw pages (a resume, `--fresh`): an increment export that
        sent it before sends it again and deletes the names it no longer has, as after `harvest rebuild`."""
        if not removed:
            return
        self.rebuilt = datetime.now(UTC).isoformat()
        kept = {path for _, path, _ in self.all_files()}
        self.retired_files = sorted((set(self.retired_files) | set(removed)) - kept)

    def files_by_table(self, layout: OutputLayout) -> dict[str, list[Path]]:
        out: dict[str, list[Path]] = defaultdict(list)
        for table, path, _rows in self.all_files():
            out[table].append(layout.resolve(path))
        return dict(out)


_FIELDS = {f.name for f in dataclasses.fields(RunManifest)}
_DONE = frozenset({"queries", "files", "retired_files"})


def run_status(statuses: list[str], stopped_kind: str | None = None) -> str:
    """`interrupted` after Ctrl-C; `failed` if any query failed; `budget_exhausted` if one stopped at a cap;
    `rate_limited` if one stopped waiting for the service's rate limit."""
    if stopped_kind == "interrupted":
        return "interrupted"
    if any(s not in OK_STATUSES for s in statuses):
        return "failed"
    for stopped in ("budget_exhausted", "rate_limited"):
        if stopped in statuses:
            return stopped
    return "complete"


def failure_groups(queries: Iterable[dict[str, Any]]) -> list[tuple[list[str], str]]:
    """(query ids, reason) per distinct reason of the failed queries, in the order met: 30 queries stopped by
    one cause are one group."""
    by_reason: dict[str, list[str]] = {}
    for q in queries:
        if query_failed(q["status"]):
            by_reason.setdefault(q.get("error") or q["status"], []).append(q["query_id"])
    return [(ids, reason) for reason, ids in by_reason.items()]


def lowered_budget(spent: int, budget: int, before: int | None) -> str | None:
    """The credits a run spent, said with the earlier budget that capped them, when a resume lowered its budget
    below them (`RunManifest.budget_before`); None for every other run, whose `spent of budget` says it."""
    if before is None or spent <= budget:
        return None
    return (
        f"{spent} under the run's earlier budget of {before}; a resume lowered it to {budget}, below what was "
        "spent, and paid nothing more"
    )


def who(ids: list[str]) -> str:
    """`q1`, or `3 queries (q1, ...)`."""
    return ids[0] if len(ids) == 1 else f"{len(ids)} queries ({ids[0]}, ...)"


def write_manifest(layout: OutputLayout, manifest: RunManifest) -> Path:
    """Replace the run's manifest atomically and durably, under every `durability`: the file is synced before it
    is renamed over the old one and its directory after, so a power cut leaves the old manifest or the new one,
    never an empty file or none (a resume trusts it). A few syncs per run: ~1 ms here."""
    path = layout.manifest_file(manifest.run_id)
    made = [d for d in (path.parent, path.parent.parent, path.parent.parent.parent) if not d.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    try:
        with open(tmp, "wb") as f:
            f.writelines(_manifest_json(manifest))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:  # a write's error names no file: the line that says it names the manifest
        tmp.unlink(missing_ok=True)
        exc.filename = exc.filename or str(path)
        raise
    os.replace(tmp, path)
    for directory in [path.parent, *(d.parent for d in made)]:  # and the new run's directory, raw/, ...
        fsync_dir(directory)
    _remember_head(path, manifest)
    return path


def _manifest_json(manifest: RunManifest) -> Iterator[bytes]:
    """The run's fields, then its queries one line each, written as they come: a 40,000-query night's manifest
    (40 MB) made as one document first held it and what JSON writing grows on top (+38 MB at the run's end)."""
    head = orjson.dumps(
        {f.name: getattr(manifest, f.name) for f in dataclasses.fields(manifest) if f.name != "queries"},
        option=orjson.OPT_INDENT_2,
    )
    yield head.removesuffix(b"\n}") + b',\n  "queries": ['
    comma = b""
    for query in each_summary_json(manifest.queries):
        yield comma + b"\n    " + query
        comma = b","
    yield b"\n  ]\n}\n" if comma else b"]\n}\n"


def read_manifest(path: Path) -> RunManifest:
    data = orjson.loads(path.read_bytes())
    if not isinstance(data, dict):  # JSON, but no manifest (`[1, 2]`): damaged as a cut one is
        raise ValueError(f"{path}: a JSON {type(data).__name__}, not a manifest's object")
    return RunManifest(**{k: v for k, v in data.items() if k in _FIELDS})


def all_manifests(layout: OutputLayout, job: str | None = None) -> list[RunManifest]:
    """Every run under an output directory (of one job, if given), oldest first (`run_heads` orders them), held
    together: for a look at a few runs (a test's); what walks every run of an output reads `each_manifest`."""
    return list(each_manifest(layout, job))


def each_manifest(layout: OutputLayout, job: str | None = None) -> Iterator[RunManifest]:
    """Every run's whole manifest, oldest first, read one at a time: `harvest runs` over a year of nights,
    ~14 MB each for a 10,000-query fan-out, keeps each run's totals, not the nights together."""
    for head in run_heads(layout, job):
        yield head.manifest()


def output_kinds(layout: OutputLayout, *more: RunManifest) -> dict[str, TableKind]:
    """Every record kind an output directory's tables may hold: the built-in ones and those its runs declared
    (`more`: runs whose manifest on disk may not say so yet), by table."""
    return of_runs([*(h.declared for h in run_heads(layout)), *(m.declared for m in more)]).kinds()


@dataclass(frozen=True)
class RunHead:
    """What a manifest says about its run, without the queries: small enough to hold for every run."""

    path: Path
    run_id: str
    job: str
    started: str
    status: str
    loaded: bool
    resumes: int
    flow_run_id: str | None
    continues: str | None
    service: str = ""
    """What the run asked (`ServiceAccess.label`): the base URL, or `sandbox (embedded)`."""
    declared: dict[str, Any] = field(default_factory=dict, compare=False)
    """The endpoints the run declared (`RunManifest.declared`): every load reads them of every run
    (`output_kinds`), and holding the whole manifests for that grew a load by all of them together."""
    rebuilt: str | None = None
    """When its files were last written again (`RunManifest.rebuilt`): an export tells from the head whether it
    sends the run, and reads the manifests of those it sends only."""

    @property
    def unfinished(self) -> bool:
        return self.status in UNFINISHED

    def manifest(self) -> RunManifest:
        return read_manifest(self.path)


_HEADS: dict[Path, tuple[tuple[int, int, int], RunHead]] = {}
"""Manifest path -> (inode, size, mtime) when read, and its head."""


def run_heads(layout: OutputLayout, job: str | None = None) -> list[RunHead]:
    """Every run's head (of one job, if given), oldest first: by start, then run id.

    A run reads what earlier runs did several times (its start, resume, coverage, runs to load first). Whole
    manifests would each time be parsed and held together: at 1,000 runs of a 10-query job 170 ms and 28 MB a
    pass, ~1 GB for a nightly 1,000-query job after a year. Heads are parsed once per process and file version
    (a manifest is replaced, never edited in place, so inode, size and mtime change with it); a whole manifest
    is read when it is needed, one at a time."""
    heads: list[RunHead] = []
    journaled = {j.with_name(MANIFEST) for j in layout.raw_root.glob(f"*/{JOURNAL}")}
    for path in sorted(set(layout.raw_root.glob(f"*/{MANIFEST}")) | journaled):
        head = _head(layout, path)
        if head is not None and (job is None or head.job == job):
            heads.append(head)
    return sorted(heads, key=lambda h: (h.started, h.run_id))


MANIFEST, JOURNAL = "manifest.json", "journal.jsonl"


def _head_of(path: Path, m: RunManifest) -> RunHead:
    return RunHead(
        path, m.run_id, m.job, m.started, m.status, m.loaded, m.resumes, m.flow_run_id, m.continues, m.service,
        orjson.loads(orjson.dumps(m.declared)),  # as a reader of the file finds it (lists, not tuples)
        m.rebuilt,
    )  # fmt: skip


def _remember_head(path: Path, m: RunManifest) -> None:
    """The head of the manifest just written: the run's end lists the runs (its load, its summary), and a
    10,000-query night's manifest (14 MB) parsed again only for its head was ~40 MB and ~0.1 s at that end."""
    st = path.stat()
    _HEADS[path] = ((st.st_ino, st.st_size, st.st_mtime_ns), _head_of(path, m))


def _head(layout: OutputLayout, path: Path) -> RunHead | None:
    """The head of the run whose manifest is `path`, from the cache while the file is the same; a manifest that
    is gone or unreadable is made again from the run's journal first (`recover_manifest`)."""
    try:
        st = path.stat()
        version = (st.st_ino, st.st_size, st.st_mtime_ns)
        known = _HEADS.get(path)
        if known is None or known[0] != version:
            known = _HEADS[path] = (version, _head_of(path, read_manifest(path)))
        return known[1]
    except (OSError, ValueError, TypeError) as exc:  # gone, cut, not a manifest
        return _head(layout, path) if recover_manifest(layout, path.parent.name, exc) else None


_UNRECOVERABLE: set[str] = set()
"""Run directories already said to have no readable manifest and no journal to make one from."""


def recover_manifest(layout: OutputLayout, run_id: str, why: BaseException) -> bool:
    """A run whose manifest a disk lost or cut (or a hand removed) is made again from what its journal's session
    lines say it is, as `running`: the next `harvest run` of the job resumes it from the journal and the raw pages,
    so nothing it paid for is lost or paid again. Says so once; False when the journal cannot say (written by a
    harvest before it did): the run is then left out, its files as they are."""
    from harvest.tasks.output.journal import read_journal

    path, journal = layout.manifest_file(run_id), layout.journal_file(run_id)
    head = read_journal(journal).run if journal.exists() else None
    if head is None:
        if run_id not in _UNRECOVERABLE:
            _UNRECOVERABLE.add(run_id)
            log.warning("run %s has no readable manifest (%s) and its journal does not say what the run was: left "
                        "out of every listing and resume; its raw pages are kept under %s", run_id,
                        _short(why), path.parent)  # fmt: skip
        return False
    if path.exists():  # kept beside, never destroyed
        os.replace(path, path.with_name(f"{MANIFEST}.damaged"))
    fields = {k: v for k, v in head.items() if k in _FIELDS and k not in _DONE}
    write_manifest(layout, RunManifest(**{**fields, "status": "running", "finished": None, "loaded": False}))
    log.warning("run %s had no readable manifest (%s): made again from its journal as unfinished; the next "
                "`harvest run` of job %s resumes it", run_id, _short(why), head.get("job"))  # fmt: skip
    return True


def _short(exc: BaseException) -> str:
    return "missing" if isinstance(exc, FileNotFoundError) else f"{type(exc).__name__}: {exc}".splitlines()[0]


def pending_manifests(layout: OutputLayout, job: str | None = None) -> Iterator[RunManifest]:
    """Runs whose data landed but is not in DuckDB, oldest first: finished ones (complete, budget-stopped,
    failed, abandoned) whose load found DuckDB busy or was cut off, and interrupted ones (Ctrl-C lands what
    was paid before it stops). Not a killed run (still `running` on disk): its resume lands it.

    Each is read when the caller comes to it (weeks of refused loads are weeks of whole manifests), and left
    out if it was loaded meanwhile (another `harvest load`)."""
    for head in run_heads(layout, job):
        if not head.loaded and head.status != "running":
            manifest = head.manifest()
            if not manifest.loaded:
                yield manifest
