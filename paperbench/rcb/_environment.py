"""Whether a problem can run here: its paper's reference solution, tested in this environment
(the sandbox backend and image of the run) as ``rcb validate`` tests it (the annotated files
as they are). A failure the reference solution has too is the environment's, not the model's:
e.g. ``No module named 'torch'`` in an image without torch, or a test that runs past
``--timeout`` on a small machine. Such a problem is not run (no model call, no test) and is
listed with the reason; the rates are over the problems run.

A run keeps each paper's result in ``problems/<paper>/reference.json`` with the environment it
was tested in, so a resume in the same environment does not test it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from paperbench._io import atomic_write_text, read_json
from paperbench.rcb._models import ProblemSet, TestOutcome
from paperbench.rcb._test import RcbJob
from paperbench.sandbox import SandboxConfig

REFERENCE_FILE = "reference.json"
"""A paper's :class:`ReferenceRecord` in a run folder: ``problems/<paper>/reference.json``."""
RCB_IMAGE = "paperbench-rcb"
"""ResearchCodeBench's image (torch, jax, ...): what its tests need."""
BUILD_RCB_IMAGE = f"paperbench images build {RCB_IMAGE}"


class ReferenceRecord(BaseModel):
    """A paper's reference solution tested in one environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environment: str
    """:func:`environment_of` the run that tested it."""
    outcome: TestOutcome


def environment_of(sandbox: SandboxConfig, image: str | None) -> str:
    """What a test's result depends on besides its code: the backend and the image."""
    return f"sandbox {sandbox.backend}, image {image or 'default'}"


def reference_job(problem_set: ProblemSet, paper: str) -> RcbJob:
    """The paper's test with its annotated files as they are: the reference solution."""
    return RcbJob(problem_set.paper(paper).folder, {})


def _path(out: Path, paper: str) -> Path:
    return out / "problems" / paper / REFERENCE_FILE


def stored_references(out: Path, papers: Iterable[str], environment: str) -> dict[str, TestOutcome]:
    """The papers' reference results a run folder holds for ``environment`` (a sandbox error
    is not kept: tested again)."""
    found: dict[str, TestOutcome] = {}
    for paper in papers:
        path = _path(out, paper)
        if not path.is_file():
            continue
        record = ReferenceRecord.model_validate(read_json(path))
        if record.environment == environment and record.outcome.error_class != "sandbox_error":
            found[paper] = record.outcome
    return found


def store_reference(out: Path, paper: str, environment: str, outcome: TestOutcome) -> None:
    """Keep a paper's reference result in the run folder."""
    path = _path(out, paper)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = ReferenceRecord(environment=environment, outcome=outcome)
    atomic_write_text(path, record.model_dump_json(indent=2) + "\n")


def why_not_runnable(outcome: TestOutcome, *, timeout_s: float) -> str | None:
    """Why a problem whose reference gave ``outcome`` cannot run here (None: it can, or the
    sandbox failed, which says nothing about the environment)."""
    if outcome.passed or outcome.error_class == "sandbox_error":
        return None
    if outcome.error_class == "timeout":
        return f"its reference solution also runs past the {timeout_s:g} s --timeout here"
    return f"its reference solution also fails here ({outcome.error_class}: {outcome.detail})"


def advice(
    outcomes: Iterable[TestOutcome],
    *,
    sandbox: SandboxConfig,
    image: str | None,
    timeout_s: float,
    command: str = "rcb run",
) -> str:
    """What makes failing references run: the image to build and give ``command``, the
    option to raise ("" when neither would help)."""
    classes = {o.error_class for o in outcomes if not o.passed}
    said = []
    if "import" in classes and image != RCB_IMAGE:
        docker = " --sandbox docker" if sandbox.backend == "local" else ""
        said.append(
            f"build ResearchCodeBench's image with `{BUILD_RCB_IMAGE}` and give "
            f"`{command}{docker} --image {RCB_IMAGE}`"
        )
    if "timeout" in classes:
        said.append(f"raise --timeout (now {timeout_s:g} s) on a small machine")
    return "; ".join(said)


SHOWN_PAPERS = 5
"""Papers named per reason in the one line of :func:`nothing_runs` (the others counted)."""


def nothing_runs(reasons: Mapping[str, str], hint: str) -> str:
    """The one line of a run none of whose problems can run here: each reason with the
    papers it holds for, and what to do."""
    papers: dict[str, list[str]] = {}
    for paper, why in reasons.items():
        papers.setdefault(why, []).append(paper)
    said = []
    for why, mine in papers.items():
        more = f" and {len(mine) - SHOWN_PAPERS} more" if len(mine) > SHOWN_PAPERS else ""
        said.append(f"{', '.join(mine[:SHOWN_PAPERS])}{more}: {why}")
    line = f"no problem can run in this environment: {'; '.join(said)}"
    return f"{line}. To run them, {hint}" if hint else line
