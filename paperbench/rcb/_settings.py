"""What ``paperbench rcb run`` and ``paperbench.rcb_run()`` are asked: :class:`RcbSettings`, one
typed model (each field marked with a :class:`~paperbench._flags.Flag` is an option of the
command, its default the field's); :func:`prepare_rcb_run` checks it and makes what the run
goes on: its options (run.json), its problem set, its folder.

A resume (``resume``) takes the run's own options: a field set (from Python) or an option
given (on the command line) that differs from the run's is refused, naming its flag."""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict, Field, field_validator

from paperbench._flags import (
    AllowUnsandboxed,
    Flag,
    SandboxBackendOption,
    model_flags,
    parse_concurrency,
)
from paperbench.errors import UsageError
from paperbench.llm._registry import ModelChecks
from paperbench.rcb._models import Mode, RcbSummary
from paperbench.rcb._resume import resumed_options
from paperbench.rcb._runner import RcbRunOptions
from paperbench.sandbox import SandboxConfig

RCB_DIR_ENV = "PAPERBENCH_RCB_DIR"
RCB_URL = "https://github.com/PatrickHua/ResearchCodeBench"
RCB_STAGES = {"tests": 4, "agents": 2}
"""The stages of ``--concurrency`` and their defaults: tests (and one-shot calls) and agents
at once."""


def rcb_dir(value: Path | None) -> Path:
    """``--rcb-dir``, else ``$PAPERBENCH_RCB_DIR``.

    Raises:
        UsageError: neither is given (says how to get a problem set).
    """
    if value is not None:
        return value
    env = os.environ.get(RCB_DIR_ENV)
    if env:
        return Path(env)
    raise UsageError(
        f"--rcb-dir: no problem set given; clone {RCB_URL} and pass --rcb-dir DIR "
        f"(or set {RCB_DIR_ENV})"
    )


def papers_flag(value: str | None) -> list[str] | None:
    """``--papers a,b``: the paper ids.

    Raises:
        UsageError: no id in it, naming the flag.
    """
    if value is None:
        return None
    names = [p.strip() for p in value.split(",") if p.strip()]
    if not names:
        raise UsageError("--papers: give paper ids, comma-separated")
    return names


def _concurrency(values: list[str] | None) -> dict[str, int]:
    return parse_concurrency(values, RCB_STAGES)


class RcbSettings(ModelChecks):
    """One ResearchCodeBench run: a model's answers to every problem of a problem set, each
    graded by the paper's test in a fresh sandbox, into a run folder.

    The defaults are the command line's: one-shot, one sample, with the paper, every paper of
    the problem set in ``$PAPERBENCH_RCB_DIR``, the sandbox that answers, and the folder
    rcb-runs/<model>.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Annotated[str | None, Flag("--model", shared=True)] = Field(
        default=None,
        description="The model that answers, PROVIDER/MODEL (required for a new run; a resume "
        "takes the run's).",
    )
    rcb_dir: Annotated[Path | None, Flag("--rcb-dir", shared=True)] = Field(
        default=None,
        description=f"A clone of ResearchCodeBench or its pset/ folder (default: ${RCB_DIR_ENV}; "
        "a resume: the run's).",
    )
    base_url: Annotated[str | None, Flag("--base-url", shared=True)] = Field(
        default=None, description="An OpenAI- or Anthropic-compatible server for the calls."
    )
    papers: Annotated[list[str] | None, Flag("--papers", shared=True, convert=papers_flag)] = Field(
        default=None, description="The paper ids (default: every paper)."
    )
    samples: Annotated[int | None, Flag("--samples")] = Field(
        default=None, ge=1, description="Answers per problem, for pass@k (default: 1)."
    )
    without_paper: Annotated[bool, Flag("--without-paper")] = Field(
        default=False, description="Leave the paper out of the prompt."
    )
    mode: Annotated[Mode, Flag("--mode")] = Field(
        default="one-shot",
        description="one-shot: one answer per model call; agent: the model works on the masked "
        "repository with tools in a sandbox (test and references hidden) and its file is "
        "graded.",
    )
    max_steps: Annotated[int | None, Flag("--max-steps", shared=True)] = Field(
        default=None, ge=1, description="Agent mode: steps of each agent (default: its config's)."
    )
    max_time_s: Annotated[float | None, Flag("--max-time", shared=True)] = Field(
        default=None,
        gt=0,
        description="Agent mode: wall time of each agent in seconds (default: its config's).",
    )
    out: Annotated[Path | None, Flag("--out", shared=True)] = Field(
        default=None, description="The new run's folder (default: rcb-runs/<model>)."
    )
    resume: Annotated[Path | None, Flag("--resume", shared=True)] = Field(
        default=None, description="The folder of a run to continue (instead of out)."
    )
    sandbox: SandboxBackendOption = "auto"
    allow_unsandboxed: AllowUnsandboxed = False
    image: Annotated[str | None, Flag("--image", shared=True)] = Field(
        default=None, description="The sandbox's image."
    )
    timeout_s: Annotated[float, Flag("--timeout", shared=True)] = Field(
        default=60.0, gt=0, description="Time limit of one test in seconds."
    )
    concurrency: Annotated[
        dict[str, int], Flag("--concurrency", shared=True, convert=_concurrency)
    ] = Field(
        default_factory=lambda: dict(RCB_STAGES),
        description="Tests (and one-shot calls) at once, and agents at once: tests=N, agents=N.",
    )
    budget_dollars: Annotated[float | None, Flag("--budget-dollars", shared=True)] = Field(
        default=None, ge=0, description="Dollars for all the model calls of the run."
    )

    @field_validator("papers")
    @classmethod
    def _check_papers(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not [p for p in value if p.strip()]:
            raise ValueError("give paper ids")
        return value

    @field_validator("concurrency")
    @classmethod
    def _check_concurrency(cls, value: dict[str, int]) -> dict[str, int]:
        return parse_concurrency([f"{stage}={n}" for stage, n in value.items()], RCB_STAGES)


@dataclass(frozen=True)
class PreparedRcbRun:
    """An RCB run checked and resolved, before any file of its folder is touched."""

    root: Path
    """The problem set."""
    out_dir: Path
    options: RcbRunOptions
    sandbox: SandboxConfig
    tests: int
    """Tests (and one-shot model calls) at once."""
    agents: int
    """Agents at once (agent mode)."""
    resume: bool


@dataclass(frozen=True)
class RcbRunResult:
    """What :func:`paperbench.rcb_run` leaves: the run's folder, its summary.json and its
    HTML report."""

    out_dir: Path
    summary: RcbSummary
    report: Path
    """The report's index.html."""


_RUN_FIELDS = {
    "model": "model",
    "base_url": "base_url",
    "papers": "papers",
    "samples": "samples",
    "without_paper": "with_paper",
    "mode": "mode",
    "max_steps": "max_steps",
    "max_time_s": "max_time_s",
    "image": "image",
    "timeout_s": "timeout_s",
    "budget_dollars": "budget_dollars",
}
"""The settings that are the run's options (run.json): field → field of
:class:`~paperbench.rcb.RcbRunOptions`."""


def _run_values(s: RcbSettings) -> dict[str, Any]:
    values = {field: getattr(s, name) for name, field in _RUN_FIELDS.items()}
    return {**values, "samples": s.samples or 1, "with_paper": not s.without_paper}


def _options(s: RcbSettings, given: Collection[str]) -> tuple[RcbRunOptions, Path, Path]:
    """The run's options, its problem set and its folder: those given (a new run), or the
    run's own (a resume: a given one that differs is refused, naming it)."""
    values = _run_values(s)
    if s.resume is not None:
        flags = {path[0]: flag.flag for path, _, flag in model_flags(RcbSettings)}
        asked = {
            _RUN_FIELDS[name]: (flags[name], values[_RUN_FIELDS[name]])
            for name in given
            if name in _RUN_FIELDS
        }
        opts = resumed_options(s.resume, asked)
        stored = Path(opts.rcb_dir) if opts.rcb_dir else None
        return opts, s.rcb_dir or stored or rcb_dir(None), s.resume
    if s.model is None:
        raise UsageError("--model: give the model that answers (PROVIDER/MODEL)")
    root = rcb_dir(s.rcb_dir)
    opts = RcbRunOptions.model_validate({**values, "rcb_dir": str(root.resolve())})
    return opts, root, s.out or Path("rcb-runs") / s.model.replace("/", "_")


def prepare_rcb_run(settings: RcbSettings) -> PreparedRcbRun:
    """``settings`` checked and made into what the run goes on. A resume compares the fields
    set in ``settings`` (``model_fields_set``) with the run's own.

    Raises:
        UsageError: a bad value, naming its flag: --resume with --out, a new run without a
            model or a problem set, a resume whose options differ, an agent's limit without
            agent mode.
        InputError: a resumed folder whose run.json is not an RCB run's.
    """
    s = settings
    if s.resume is not None and s.out is not None:
        raise UsageError("--resume FOLDER continues the run in FOLDER; drop --out")
    opts, root, folder = _options(s, s.model_fields_set)
    if opts.mode != "agent" and (opts.max_steps is not None or opts.max_time_s is not None):
        flag = "--max-steps" if opts.max_steps is not None else "--max-time"
        raise UsageError(f"{flag}: limits an agent; give it with --mode agent")
    return PreparedRcbRun(
        root=root,
        out_dir=folder,
        options=opts,
        sandbox=SandboxConfig(backend=s.sandbox, allow_unsandboxed=s.allow_unsandboxed),
        tests=s.concurrency["tests"],
        agents=s.concurrency["agents"],
        resume=s.resume is not None,
    )
