"""The `harvest run` commands a run prints for going on (resume, `--continue`, `--fresh`), complete as typed.

A printed command is pasted into another shell, a runbook or a cron line: it must do what it says there, where
only the key is in the environment. So it repeats every choice the user made outside the spec: the service URL
when the spec does not name the one the run used (`--base-url`, or HARVEST_BASE_URL: a fresh shell has neither),
`--output`, `--budget` and `--full` when given. Every word is shell-quoted (`flows.console.harvest_line`).

The budget is the night's, not the session's: a resumed run keeps the budget it was started with, so the
`--continue` its session prints names it too (pasted without it, the continue spent the spec's budget); a
command printed from a manifest alone (`harvest runs`) names the run's recorded budget, and the service it
recorded unless the spec file names that very URL.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from harvest.flows.console import harvest_line
from harvest.flows.spec import JobSpec
from harvest.flows.spec.service_url import recorded_url

if TYPE_CHECKING:
    from harvest.tasks.output.manifest import RunManifest


@dataclass(frozen=True)
class RunAgain:
    """How `harvest run` was called, as far as a command to go on needs it."""

    spec: Path
    base_url: str | None = None
    """The service URL the run used, when the spec does not name it (given by `--base-url` or the environment)."""
    output: Path | None = None
    budget: int | None = None
    full: bool = False

    @classmethod
    def of(
        cls,
        spec_path: Path,
        spec: JobSpec,
        service_url: str,
        output: Path | None = None,
        budget: int | None = None,
        full: bool = False,
    ) -> RunAgain:
        """`service_url`: the URL the run resolved (`flows.spec.resolve_base_url`), named in the commands unless
        the spec names that very URL."""
        in_spec = spec.service.base_url == service_url  # the model keeps it as `check_base_url` wrote it
        return cls(spec_path, None if in_spec else service_url, output, budget, full)

    def resuming(self, budget: int, spec_budget: int) -> RunAgain:
        """The commands of a session resuming a run whose budget is `budget`: named when it is not the spec's
        and the session was given none (a `--budget` given replaced the run's, and is named already)."""
        if self.budget is not None or budget == spec_budget:
            return self
        return replace(self, budget=budget)

    def of_another_run(self) -> RunAgain:
        """The commands for another run of the job (the unfinished one a `--continue` found): its budget is the
        one it started with, and what it does with incremental queries is its own (no `--budget`, `--full`)."""
        return RunAgain(self.spec, self.base_url, self.output)

    def command(self, *mode: str) -> str:
        """`harvest run SPEC ...` with the run's own options, then `mode` (`--continue`, `--fresh`)."""
        words: list[object] = ["run", self.spec]
        if self.base_url is not None:
            words += ["--base-url", self.base_url]
        if self.output is not None:
            words += ["--output", self.output]
        if self.budget is not None:
            words += ["--budget", self.budget]
        if self.full:
            words.append("--full")
        return harvest_line(*words, *mode)


def rerun_of(run: RunManifest, output: Path) -> RunAgain | None:
    """How an unfinished run is started again from a shell, known from its manifest alone: its spec file, the
    service it recorded unless the spec names it, this output directory and its budget (the manifest cannot
    tell a `--budget` from the spec's, and naming it is right either way); None for a deployment's run (spec
    text, no file)."""
    if run.spec_file is None:
        return None
    url = recorded_url(run.service)
    named = _spec_names(run.spec_file, url)
    return RunAgain(Path(run.spec_file), None if named else url, output, run.budget)


def _spec_names(spec_file: str, url: str) -> bool:
    """Whether the spec file names `url` as its service: then the command needs no `--base-url` (pasted, it
    would pin a URL the spec may later change). A spec that no longer reads names none, and the URL is named."""
    from harvest.flows.spec import UsageError, load_spec

    try:
        return load_spec(spec_file).service.base_url == url
    except UsageError:
        return False


def resume_hint(run: RunManifest, output: Path) -> str:
    """How an unfinished run goes on, said by commands that know only its manifest (`harvest runs`, `load`,
    `rebuild`); a deployment's run is resumed by the deployment's next run."""
    again = rerun_of(run, output)
    if again is None:
        return (
            "the next run of its deployment resumes it, "
            f"`prefect deployment run collect_job/{run.job} -p mode=fresh` abandons it"
        )
    return f"`{again.command()}` resumes it, `{again.command('--fresh')}` abandons it"
