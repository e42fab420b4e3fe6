"""What an evaluation is asked to do: :class:`EvalConfig`, one typed model for Python and the
command line alike.

``paperbench.evaluate(EvalConfig(...))`` takes it from Python; ``paperbench run`` is made from
it (each field marked with a :class:`~paperbench._flags.Flag` is an option, its
default the field's default, written once here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from paperbench._flags import (
    AllowUnsandboxed,
    Flag,
    SandboxBackendOption,
    parse_concurrency,
    parse_networks,
)
from paperbench.agents._snapshots import DEFAULT_SNAPSHOT_EVERY_S
from paperbench.judge._config import DEFAULT_LEAVES_AT_ONCE
from paperbench.llm._registry import ModelChecks
from paperbench.llm._types import DEFAULT_MAX_CONNECTIONS
from paperbench.sandbox._internal_nets import IPNetwork

DEFAULT_RUNS_DIR = Path("runs")
DEFAULT_AGENT = "replay"
DEFAULT_JUDGE = "simple"

STAGE_CONCURRENCY: dict[str, int] = {"rollout": 4, "reproduction": 2, "grading": 4}
"""Runs in each stage at once, unless asked otherwise. Set ``reproduction`` to the number of
GPUs divided by the GPUs one reproduction takes."""


def _concurrency(values: list[str] | None) -> dict[str, int]:
    stages = {**STAGE_CONCURRENCY, "leaves": DEFAULT_LEAVES_AT_ONCE}
    return parse_concurrency(values, stages)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _ModelSection(ModelChecks):
    """A section naming a model and its server: both checked as given, before any work."""


class JudgeSettings(_ModelSection):
    """Who grades the runs."""

    config: Annotated[str, Flag("--judge", metavar="CONFIG")] = Field(
        default=DEFAULT_JUDGE,
        description="A judge config: a catalog name (simple, simple-faithful, dummy, random) "
        "or a YAML file.",
    )
    model: Annotated[str | None, Flag("--judge-model", metavar="PROVIDER/MODEL")] = Field(
        default=None, description="Use this model for every role of the judge."
    )
    base_url: Annotated[str | None, Flag("--judge-base-url", metavar="URL")] = Field(
        default=None,
        description="An OpenAI- or Anthropic-compatible server for the judge's calls.",
    )
    batch: Annotated[bool, Flag("--batch", shared=True)] = Field(
        default=False,
        description="Send the judge's calls through the providers' batch APIs at half price.",
    )


class AgentSettings(_ModelSection):
    """What every rollout of the group gets over its agent config's own settings."""

    model: Annotated[str | None, Flag("--agent-model", metavar="PROVIDER/MODEL")] = Field(
        default=None, description="Use this model for every agent."
    )
    base_url: Annotated[str | None, Flag("--agent-base-url", metavar="URL")] = Field(
        default=None,
        description="An OpenAI- or Anthropic-compatible server for the agents' calls.",
    )
    max_steps: Annotated[int | None, Flag("--max-steps", shared=True)] = Field(
        default=None, ge=1, description="Steps of each rollout (default: the agent config's)."
    )
    max_time_s: Annotated[float | None, Flag("--max-time", shared=True)] = Field(
        default=None, gt=0, description="Wall time of each rollout, in seconds."
    )
    max_dollars: Annotated[float | None, Flag("--max-dollars", shared=True)] = Field(
        default=None, gt=0, description="Dollars of each rollout."
    )
    max_tokens: Annotated[int | None, Flag("--max-tokens", shared=True)] = Field(
        default=None, ge=1, description="Tokens of each rollout."
    )
    snapshot_every_s: Annotated[float, Flag("--snapshot-every", shared=True)] = Field(
        default=DEFAULT_SNAPSHOT_EVERY_S,
        gt=0,
        description="Seconds between snapshots of a rollout's /home/submission.",
    )
    gpus: Annotated[int | None, Flag("--gpus", shared=True)] = Field(
        default=None, ge=0, description="GPUs of each agent's sandbox and its reproduction."
    )
    gpu_type: Annotated[str | None, Flag("--gpu-type", shared=True)] = Field(
        default=None, description="What the GPUs are, told to the agent."
    )
    cpus: Annotated[float | None, Flag("--cpus", shared=True)] = Field(
        default=None, gt=0, description="CPUs of each agent's sandbox and its reproduction."
    )
    memory_mb: Annotated[int | None, Flag("--memory", shared=True)] = Field(
        default=None, ge=64, description="Memory of each sandbox in MB."
    )
    disk_mb: Annotated[int | None, Flag("--disk", shared=True)] = Field(
        default=None, ge=16, description="Writable space of each sandbox in MB."
    )
    image: Annotated[str | None, Flag("--image", shared=True)] = Field(
        default=None, description="The image of each agent's sandbox and its reproduction."
    )
    env: Annotated[list[str] | None, Flag("--env", shared=True)] = Field(
        default=None, description="NAME=VALUE pairs set in each agent's sandbox."
    )
    env_file: Annotated[Path | None, Flag("--agent-env", shared=True)] = Field(
        default=None, description="A dotenv file of keys for the agents' own use."
    )


class SandboxSettings(_Section):
    """Where untrusted code runs."""

    backend: SandboxBackendOption = "auto"
    allow_unsandboxed: AllowUnsandboxed = False
    allow_uncapped_disk: Annotated[bool, Flag("--allow-uncapped-disk", shared=True)] = Field(
        default=False, description="Allow sandboxes without a disk cap."
    )
    allow_networks: Annotated[
        tuple[IPNetwork, ...],
        Flag("--allow-network", shared=True, convert=parse_networks),
    ] = Field(
        default=(),
        description="Internal ranges the agents' and reproductions' sandboxes may reach.",
    )


class ReproductionSettings(_Section):
    """How the submissions are reproduced."""

    skip: Annotated[bool, Flag("--skip-reproduction")] = Field(
        default=False,
        description="Do not run reproduce.sh: the judge grades without its log and outputs "
        "(said and recorded).",
    )
    timeout_s: Annotated[float | None, Flag("--reproduce-timeout", shared=True)] = Field(
        default=None, gt=0, description="Time of each reproduce.sh, in seconds."
    )


class ExecutorSettings(_Section):
    """How the runs are worked on: none of it changes what a run is, so a resume takes it."""

    kind: Annotated[Literal["local", "ray"], Flag("--executor", on_resume=True)] = Field(
        default="local", description="local: this process; ray: each run's stages as Ray tasks."
    )
    ray_address: Annotated[
        str | None, Flag("--ray-address", metavar="HOST:PORT", on_resume=True)
    ] = Field(default=None, description="With --executor ray: the cluster to join.")
    max_connections: Annotated[int, Flag("--max-connections", shared=True, on_resume=True)] = Field(
        default=DEFAULT_MAX_CONNECTIONS, ge=1, description="Requests in flight."
    )
    concurrency: Annotated[
        dict[str, int],
        Flag("--concurrency", shared=True, on_resume=True, convert=_concurrency),
    ] = Field(
        default_factory=lambda: _concurrency(None),
        description="Runs in a stage at once (stages rollout, reproduction, grading; leaves: "
        "leaves graded at once per run), e.g. reproduction=1 for one GPU.",
    )


class EvalConfig(BaseModel):
    """An evaluation: papers × agents × seeds through rollout, monitor, reproduction and
    grading, into ``runs_dir/group/``.

    The defaults are the command line's: the bundled papers, the replay agent (no model
    needed), the sandbox that answers (Docker, else the local one with bubblewrap), a
    reproduction, and the simple judge.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: Annotated[str | None, Flag("--group", metavar="NAME")] = Field(
        default=None, description="Name of the new group (default: the date and time)."
    )
    runs_dir: Annotated[Path, Flag("--runs-dir", metavar="FOLDER", on_resume=True)] = Field(
        default=DEFAULT_RUNS_DIR, description="Where groups are written."
    )
    papers: Annotated[str | None, Flag("--papers", metavar="PAPERS")] = Field(
        default=None,
        description="Comma-separated paper ids or a split name (default: every paper).",
    )
    data_dir: Annotated[Path | None, Flag("--data-dir", shared=True)] = Field(
        default=None, description="A PaperBench data directory (default: the bundled papers)."
    )
    agents: Annotated[list[str], Flag("--agent", metavar="CONFIG")] = Field(
        default_factory=lambda: [DEFAULT_AGENT],
        min_length=1,
        description="An agent config (catalog name or YAML); repeat for several.",
    )
    seeds: Annotated[int, Flag("--seeds")] = Field(
        default=1, ge=1, description="Runs per paper and agent."
    )
    code_dev: Annotated[bool, Flag("--code-dev", shared=True)] = Field(
        default=False,
        description="Code-Dev: only Code Development leaves count, and nothing is reproduced.",
    )
    resources_provided: Annotated[bool, Flag("--resources-provided", shared=True)] = Field(
        default=False, description="Weight 0 for dataset and model acquisition."
    )
    monitor_policy: Annotated[Literal["disqualify", "flag"], Flag("--monitor-policy")] = Field(
        default="disqualify",
        description="A blacklist hit disqualifies the run (score 0) or is only flagged.",
    )
    budget_dollars: Annotated[float | None, Flag("--budget-dollars", shared=True)] = Field(
        default=None, ge=0, description="Dollars for the whole group."
    )
    report: Annotated[bool, Flag("--report/--no-report", on_resume=True)] = Field(
        default=True, description="Write the report (tables, summary.json, HTML) at the end."
    )
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    reproduction: ReproductionSettings = Field(default_factory=ReproductionSettings)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
