"""The command-line options that more than one command takes, each written once.

Every command imports its shared options from here, so that one flag has one name, one unit,
one type and one default everywhere (``tests/test_cli_flags.py`` walks every command and fails
when two differ). The conventions:

- durations are ``DURATION`` values: a number of seconds, or a number with ``s``, ``m`` or
  ``h`` (``90``, ``90s``, ``10m``, ``12h``); they reach the code as seconds (float);
- sizes are in MB (``--memory``, ``--disk``), money in dollars (``--max-dollars``,
  ``--budget-dollars``);
- a limit that an agent config can set defaults to ``None``, meaning "the config's";
- ``--concurrency`` is ``STAGE=N`` on every command; each command names the stages it takes;
- ``--model``/``--base-url`` override the one model a command calls; ``run`` calls two kinds,
  so it has ``--agent-model``/``--agent-base-url`` and ``--judge-model``/``--judge-base-url``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from paperbench._flags import parse_concurrency as parse_concurrency
from paperbench._flags import parse_networks as parse_networks
from paperbench.agents._rollout_files import DEFAULT_SNAPSHOT_EVERY_S as DEFAULT_SNAPSHOT_EVERY_S
from paperbench.errors import UsageError
from paperbench.judge._job import DEFAULT_LEAVES_AT_ONCE as DEFAULT_LEAVES_AT_ONCE
from paperbench.llm._types import DEFAULT_MAX_CONNECTIONS as DEFAULT_MAX_CONNECTIONS

DATA_DIR_ENV = "PAPERBENCH_DATA_DIR"


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smh]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: str | float | None) -> float | None:
    """``90``, ``90s``, ``10m``, ``12h`` → seconds (> 0).

    Raises:
        typer.BadParameter: not a positive duration (click names the flag).
    """
    if value is None or isinstance(value, int | float):
        seconds = None if value is None else float(value)
    else:
        match = _DURATION.match(value)
        if match is None:
            raise typer.BadParameter(
                f"expected a duration such as 90, 90s, 10m or 12h, found {value!r}"
            )
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds is not None and (not math.isfinite(seconds) or seconds <= 0):
        raise typer.BadParameter(f"expected a duration > 0, found {value!r}")
    return seconds


def _positive_number(value: float | None) -> float | None:
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise typer.BadParameter(f"expected a number > 0, found {value}")
    return value


def _non_negative_number(value: float | None) -> float | None:
    if value is not None and (not math.isfinite(value) or value < 0):
        raise typer.BadParameter(f"expected a number ≥ 0, found {value}")
    return value


# --- where the inputs are --------------------------------------------------------------

DataDir = Annotated[
    Path | None,
    typer.Option(
        envvar=DATA_DIR_ENV,
        help="A PaperBench data directory, holding papers/ (default: the bundled papers).",
    ),
]
Paper = Annotated[str, typer.Option("--paper", metavar="ID", help="The paper's id.")]
OptionalPaper = Annotated[str | None, typer.Option("--paper", metavar="ID", help="The paper's id.")]
Split = Annotated[
    str | None, typer.Option(help="A named split of the papers, e.g. lite, dev, all.")
]
Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
Out = Annotated[Path | None, typer.Option("--out", metavar="FOLDER", help="Output folder.")]
Resume = Annotated[
    str | None,
    typer.Option(
        "--resume",
        metavar="FOLDER",
        help="Continue what an interruption stopped, from the folder it left (rollout: the run "
        "folder; run: the group's folder or name): finished work is kept, the rest goes on "
        "where it stopped.",
    ),
]

# --- the modes -------------------------------------------------------------------------

CodeDev = Annotated[
    bool,
    typer.Option(
        "--code-dev",
        help="Code-Dev: only Code Development leaves count, and nothing is reproduced.",
    ),
]
ResourcesProvided = Annotated[
    bool,
    typer.Option(
        "--resources-provided",
        help="Weight 0 for the leaves of finegrained category 'Dataset and Model Acquisition' "
        "(the datasets and models were provided).",
    ),
]

# --- models ----------------------------------------------------------------------------


def model_flag(flag: str, value: str) -> str:
    """``value`` if a provider can serve it (``provider/model``, the provider registered or a
    named endpoint); else :class:`UsageError` naming ``flag``, before any work."""
    from paperbench.llm._registry import check_model_name

    try:
        return check_model_name(value)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def base_url_flag(flag: str, value: str) -> str:
    """``value`` if it is an http(s) URL with a host; else :class:`UsageError` naming
    ``flag``."""
    from paperbench.llm._types import check_base_url

    try:
        return check_base_url(value)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _check_model(param: typer.CallbackParam, value: str | None) -> str | None:
    return None if value is None else model_flag(param.opts[0], value)


def _check_base_url(param: typer.CallbackParam, value: str | None) -> str | None:
    return None if value is None else base_url_flag(param.opts[0], value)


Model = Annotated[
    str | None,
    typer.Option(
        metavar="PROVIDER/MODEL",
        callback=_check_model,
        help="Use this model instead of the config's (e.g. openai/gpt-4o).",
    ),
]
ResumableModel = Annotated[
    str | None,
    typer.Option(
        metavar="PROVIDER/MODEL",
        callback=_check_model,
        help="The model that answers (required; a --resume takes the run's).",
    ),
]
BaseUrl = Annotated[
    str | None,
    typer.Option(
        metavar="URL",
        callback=_check_base_url,
        help="An OpenAI- or Anthropic-compatible server (its API base URL) for the model's "
        "calls; the provider prefix of the model says which protocol.",
    ),
]
MaxConnections = Annotated[
    int, typer.Option(min=1, help="Requests in flight per provider endpoint.")
]
Batch = Annotated[
    bool,
    typer.Option(
        "--batch",
        help="Send the judge's calls through the providers' batch APIs at half price, one "
        "batch per judge step across the leaves (slower: a batch may take up to 24 h; "
        "resumable). Same as `batch: true` in the judge config.",
    ),
]

# --- sandboxes -------------------------------------------------------------------------

Sandbox = Annotated[
    Literal["auto", "docker", "local"],
    typer.Option(
        help="Sandbox backend; auto: Docker when an engine answers, else the local backend "
        "with bubblewrap (said as a warning)."
    ),
]
AllowUnsandboxed = Annotated[
    bool,
    typer.Option(
        "--allow-unsandboxed",
        help="Without bubblewrap, run untrusted code as PLAIN HOST SUBPROCESSES instead of "
        "refusing. Said loudly and recorded as isolation none.",
    ),
]
AllowUncappedDisk = Annotated[
    bool,
    typer.Option(
        "--allow-uncapped-disk",
        help="Let sandboxes run without a disk cap: agent sandboxes get no default cap "
        "(50 GiB), and any sandbox whose cap cannot be enforced runs instead of being refused. "
        "Said and recorded.",
    ),
]
Gpus = Annotated[
    int | None,
    typer.Option(min=0, help="GPUs for the sandbox (default: the agent config's, else none)."),
]
GpuType = Annotated[
    str | None, typer.Option(help="What the GPUs are, told to the agent (e.g. 'NVIDIA A10').")
]
Cpus = Annotated[
    float | None,
    typer.Option(
        min=0.01, help="CPUs for the sandbox (default: the agent config's, else no limit)."
    ),
]
Memory = Annotated[
    int | None,
    typer.Option(
        min=64,
        metavar="MB",
        help="Memory limit of the sandbox in MB (default: the agent config's, else 8192).",
    ),
]
Disk = Annotated[
    int | None,
    typer.Option(
        min=16,
        metavar="MB",
        help="Cap of the sandbox's writable space in MB (default: the agent config's, else "
        "none for an agent and 51200 for a reproduction).",
    ),
]
Image = Annotated[
    str | None,
    typer.Option(
        help="The sandbox's image (default: the agent config's, else paperbench-agent for an "
        "agent and paperbench-reproducer for a reproduction)."
    ),
]
Env = Annotated[
    list[str] | None,
    typer.Option(
        metavar="NAME=VALUE",
        help="Set in the agent's sandbox (repeat for several; over the agent config's env). "
        "Recorded with the run: not for keys (use --agent-env).",
    ),
]
AgentEnv = Annotated[
    Path | None,
    typer.Option(
        "--agent-env",
        metavar="FILE",
        help="A dotenv file of keys for the agent's own use (NAME=value lines), set in its "
        "sandbox; the names are recorded, never the values. Instead of the agent config's "
        "env_file.",
    ),
]
Network = Annotated[
    Literal["none", "full", "filtered"] | None,
    typer.Option(
        help="Network of the sandbox: filtered (only through the egress proxy, with the "
        "paper's blacklist, logged), full or none (default: filtered for an agent, full for a "
        "reproduction).",
    ),
]
AllowNetwork = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-network",
        metavar="CIDR",
        help="Let the sandbox reach this private, link-local or other internal range, which "
        "full and filtered refuse otherwise (repeat for several; said and recorded). The "
        "host's own addresses and the cloud metadata addresses stay refused even inside it.",
    ),
]


# --- limits ----------------------------------------------------------------------------

MaxSteps = Annotated[
    int | None, typer.Option(min=1, help="Steps of each rollout (default: the agent config's).")
]
MaxTime = Annotated[
    float | None,
    typer.Option(
        metavar="DURATION",
        parser=parse_duration,
        help="Wall time of each rollout, e.g. 12h (default: the agent config's).",
    ),
]
MaxDollars = Annotated[
    float | None,
    typer.Option(
        callback=_positive_number, help="Dollars of each rollout (default: the agent config's)."
    ),
]
MaxTokens = Annotated[
    int | None, typer.Option(min=1, help="Tokens of each rollout (default: the agent config's).")
]
SnapshotEvery = Annotated[
    float,
    typer.Option(
        metavar="DURATION",
        parser=parse_duration,
        show_default=False,
        help="Time between snapshots of a rollout's /home/submission, e.g. 5m (default: "
        f"{DEFAULT_SNAPSHOT_EVERY_S / 60:g}m).",
    ),
]
ReproduceTimeout = Annotated[
    float | None,
    typer.Option(
        metavar="DURATION",
        parser=parse_duration,
        help="Time limit of each reproduce.sh over all its attempts, e.g. 12h (default: 12h).",
    ),
]
BudgetDollars = Annotated[
    float | None,
    typer.Option(
        callback=_non_negative_number,
        help="Dollars for all the model calls of the command, shared by every run and worker.",
    ),
]
Concurrency = Annotated[
    list[str] | None,
    typer.Option(
        metavar="STAGE=N",
        help="How many at once, per stage (repeat or comma-separate; the stages this command "
        "takes are listed in its help).",
    ),
]

SHARED: dict[str, Any] = {
    "--data-dir": DataDir,
    "--paper": Paper,
    "--resume": Resume,
    "--out": Out,
    "--model": Model,
    "--base-url": BaseUrl,
    "--code-dev": CodeDev,
    "--resources-provided": ResourcesProvided,
    "--max-connections": MaxConnections,
    "--sandbox": Sandbox,
    "--allow-unsandboxed": AllowUnsandboxed,
    "--allow-uncapped-disk": AllowUncappedDisk,
    "--gpus": Gpus,
    "--gpu-type": GpuType,
    "--cpus": Cpus,
    "--memory": Memory,
    "--disk": Disk,
    "--image": Image,
    "--env": Env,
    "--agent-env": AgentEnv,
    "--network": Network,
    "--allow-network": AllowNetwork,
    "--max-steps": MaxSteps,
    "--max-time": MaxTime,
    "--max-dollars": MaxDollars,
    "--max-tokens": MaxTokens,
    "--snapshot-every": SnapshotEvery,
    "--reproduce-timeout": ReproduceTimeout,
    "--budget-dollars": BudgetDollars,
    "--concurrency": Concurrency,
    "--batch": Batch,
}
"""The shared options by flag: a config field marked ``Flag(name, shared=True)`` is made into
the option here (see :mod:`paperbench._model_options`)."""
