"""Agent configs as data: YAML files in the ``agents/`` catalog (shipped in the wheel) or anywhere.

``load_agent("basic")`` loads ``agents/basic.yaml`` from the catalog; ``load_agent("my.yaml")``
loads any file. The ``type`` key picks the agent (basic, iterative, dummy, replay,
papercoder); unknown keys and bad values are one :class:`~paperbench.errors.ConfigError` line
naming the file and the key path. Prompt and transcript files are named relative to the
YAML's folder. :attr:`LoadedAgent.identity` hashes the resolved config and every file it
names, so two rollouts are comparable only when their identities match; of the
``resources.env_file`` (keys for the agent's own use) it hashes the variables' names only,
never their values.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from paperbench._config_io import (
    catalog_entries,
    read_yaml_mapping,
    resolve_catalog_ref,
    validation_error_line,
)
from paperbench.agents._base import AgentLimits
from paperbench.agents._resources import AgentResources, resolve
from paperbench.errors import ConfigError

if TYPE_CHECKING:
    from paperbench.agents._base import Agent
    from paperbench.llm import Model

AGENT_TYPES = ("basic", "iterative", "dummy", "replay", "papercoder", "command")
ToolName = Literal["bash", "python", "read_file_chunk", "search_file", "web_fetch", "submit"]


def catalog_dir() -> Path:
    """The ``agents/`` catalog: inside the installed package, or the repository's folder."""
    return Path(str(resources.files("paperbench") / "_catalog" / "agents"))


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    """Defaults to the file's stem."""
    description: str = ""
    model: str | None = Field(default=None, pattern=r"^[^/\s]+/\S+$")
    """``provider/model`` the agent calls; None for agents without a model."""
    limits: AgentLimits = Field(default_factory=AgentLimits)
    model_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Provider options of the agent's model (``ModelConfig.options``) per provider, used for
    whichever model the run calls: e.g. ``{openai: {api: responses}, anthropic:
    {thinking_budget: 25600}}``; validated by the provider at the first call."""
    sandbox_user: Literal["root", "sandbox"] = "sandbox"
    """Who runs the agent's commands: ``sandbox``, an unprivileged user who owns the
    submission (the default), or ``root``, the sandbox's own superuser, for agents that
    install system packages (PaperBench's agents are root in their container)."""
    instructions: str | None = None
    """The task instructions written to /home/instructions.txt (a file relative to the YAML);
    None: the catalog's ``prompts/instructions.md``."""
    instructions_code_dev: str | None = None
    """The Code-Dev variant of ``instructions``; None: ``prompts/instructions_code_dev.md``."""
    resources: AgentResources = Field(default_factory=AgentResources)
    """GPUs, CPUs, memory, disk, image and environment of the agent's sandbox."""


class ToolSettings(BaseModel):
    """What the tools may do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: tuple[ToolName, ...] = (
        "bash",
        "python",
        "read_file_chunk",
        "search_file",
        "web_fetch",
        "submit",
    )
    """Tools offered to the model; web_fetch only when the sandbox network allows it."""
    timeout_s: float = Field(default=600, gt=0)
    """Default per-call timeout of bash and python (the model may ask for less or more, up
    to ``max_timeout_s``)."""
    max_timeout_s: float = Field(default=3600, gt=0)
    output_chars: int = Field(default=16_000, ge=256)
    """A tool output longer than this is cut (see ``output_cut``), and the cut is said."""
    output_cut: Literal["middle", "head"] = "middle"
    """What a long output keeps: its head and tail (``middle``: the middle is cut) or only
    its head (``head``, as PaperBench's tools do)."""
    search_max_matches: int = Field(default=200, ge=1)
    fetch_max_chars: int = Field(default=32_000, ge=256)
    read_default_lines: int = Field(default=200, ge=1)
    """Lines read_file_chunk shows when the model does not say how many."""
    read_max_lines: int = Field(default=2000, ge=1)
    """Most lines one read_file_chunk call may show; asking for more is an error result."""


class _LoopCommon(_Common):
    tools: ToolSettings = Field(default_factory=ToolSettings)
    prompts: dict[str, str] = Field(
        default_factory=lambda: {
            "system": "prompts/system.md",
            "restart": "prompts/restart.md",
        }
    )
    """Prompt name → file, relative to the YAML's folder."""
    context_window: int = Field(default=128_000, ge=2_048)
    """The model's window in tokens. Before it is full the oldest tool outputs are shortened,
    then the oldest turns dropped (see paperbench/agents/_context.py)."""
    answer_tokens: int = Field(default=8_192, ge=256)
    """Room kept for the model's answer."""
    drop_fraction: float = Field(default=0.3, gt=0, le=1)
    """Share of the turns dropped at once when old turns must go (PaperBench: 30 %)."""
    context_summary: bool = False
    """Ask the model for a summary of the turns dropped (a paid call each time)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Output cap per model call (None: the provider's default). Raised when an answer's tool
    call is cut off at it, up to what the model allows."""
    max_empty_answers: int = Field(default=3, ge=1)
    """Answers in a row with no text and no tool call that end the run."""
    prompt_cache: bool = True
    """Cache the conversation so far at each step: a rolling breakpoint on Anthropic, a
    ``prompt_cache_key`` per run on OpenAI."""
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None

    reminder_every_steps: int | None = Field(default=None, ge=1)
    """Every this many steps the model is told the time used and left (prompt ``reminder``,
    with ``{elapsed}``, ``{time_limit}``, ``{time_left}``), sent before the step's model
    call; None: never. A step whose answer has no tool call is answered with the prompt
    ``no_tool_call`` when given."""


class BasicConfig(_LoopCommon):
    """A ReAct tool loop until the model calls submit or a limit is reached."""

    type: Literal["basic"]


class IterativeConfig(_LoopCommon):
    """A tool loop without a submit tool: after each step the model is told the time left
    and asked to continue, until the time (or another limit) is up."""

    type: Literal["iterative"]
    prompts: dict[str, str] = Field(
        default_factory=lambda: {
            "system": "prompts/system.md",
            "restart": "prompts/restart.md",
            "continue": "prompts/continue.md",
        }
    )
    continue_in_history: bool = True
    """True: the ``continue`` message follows each step and stays in the conversation. False
    (PaperBench's IterativeAgent): it is added to every model request as the last message and
    never kept, so it does not pile up; ``continue_code_dev`` replaces it for Code-Dev."""


class DummyConfig(_Common):
    """Writes a trivial reproduce.sh and README to /home/submission; no model."""

    type: Literal["dummy"]


class ReplayConfig(_LoopCommon):
    """The tool loop with the model's answers read in order from a recorded transcript
    (``transcript``, relative to the YAML); the tools really run."""

    type: Literal["replay"]
    transcript: str


class PapercoderConfig(_Common):
    """PaperCoder's plan → analyze → code (→ repair) pipeline."""

    type: Literal["papercoder"] = "papercoder"
    plan_retries: int = Field(default=2, ge=0)
    """Times an unusable planning (or coding) answer is re-asked before the run fails."""
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    """Reasoning effort of every model call (None: the model's own setting). PaperCoder asks
    o3-mini for ``high`` in every stage; a model without reasoning refuses any value."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Answer limit of every model call in tokens (None: the provider's default, as
    PaperCoder sends none). The model layer sends it under the provider's own name
    (``max_completion_tokens`` or ``max_output_tokens`` for OpenAI's reasoning models)."""
    repair_rounds: int = Field(default=0, ge=0)
    repair_timeout_s: float = Field(default=12 * 3600, gt=0)
    """Timeout of one ``bash reproduce.sh`` run in a repair round: by default the
    reproduction stage's (``ReproduceConfig.timeout_s``), so that a repair round does not call
    a run that the reproduction would let finish a failure. Cut to the agent's time left
    (said in a note)."""
    repair_log_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    """Output of a repair run kept (stdout and stderr interleaved, head and tail), as the
    reproduction keeps its log (``ReproduceConfig.log_limit_bytes``)."""
    max_files: int = Field(default=30, ge=1)
    prompts: dict[str, str] = Field(default_factory=dict)
    """Prompt name → file, relative to the YAML's folder."""


class CommandConfig(_Common):
    """An external agent (Claude Code, Codex CLI, mini-SWE-agent, any CLI): a command run
    headless in the agent's sandbox, its model calls sent to the run's model gateway on the
    host (which holds the key, costs, caps and records every call), its own event stream read
    into the transcript (:mod:`paperbench.agents._external`)."""

    type: Literal["command"]
    api: Literal["anthropic", "openai"]
    """The provider API the agent speaks: its base URL (``{base_url}``) is the gateway's for
    that API, and the run's model must be of that provider (or an OpenAI-compatible endpoint
    for ``openai``)."""
    launch: str = Field(min_length=1)
    """The shell command, run in /home/submission as the sandbox's agent user. Placeholders:
    ``{instructions_file}`` (the task, as a file), ``{model}`` (the model's name without its
    provider), ``{base_url}``, ``{token}`` (the run's gateway token, never the key),
    ``{home}`` (the home folder of the agent's user)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment of the command (the same placeholders), e.g. the base URL and token under
    the names the agent reads."""
    files: dict[str, str] = Field(default_factory=dict)
    """Files written before the launch, path (absolute, or relative to ``{home}``) → text
    (the same placeholders), e.g. a config file."""
    events: Literal["claude-stream-json", "codex-json", "mini-swe-agent", "none"] = "none"
    """How the agent reports what it does: read into the transcript (see
    :mod:`paperbench.agents._external_events`)."""
    trajectory: str | None = None
    """A file the agent writes its trajectory to (``mini-swe-agent``), read at the end."""
    session_dirs: list[str] = Field(default_factory=list)
    """Folders of the agent's home that hold its sessions (e.g. ``.claude``): saved into the
    run folder (``agent_session/``) after the first model call, then at most every
    ``session_every_s`` seconds when a call was made since, and at the end; put back in the
    next session's home after a restart or a resume."""
    session_every_s: float = Field(default=15, gt=0)
    resume_launch: str | None = None
    """The command of a new session when a saved one exists: the agent's own way to go on
    with its session (e.g. ``claude -p ... --continue``), told the note of the restart in
    ``{resume_file}``. None: a new session with the instructions and the note."""
    grace_s: float = Field(default=30, gt=0)
    """Between the polite signal (SIGTERM) and the kill, when a limit stops the agent."""
    poll_s: float = Field(default=2.0, gt=0)
    """How often the agent's output is read into the transcript while it works."""
    install: list[str] = Field(default_factory=list)
    """Shell commands run as root, in order, at image build time on top of the agent's image
    (``resources.image``, default ``paperbench-agent``): the agent runs in the derived image
    ``paperbench-agent-custom:<hash>``, built once (with the registries' network) and reused
    while its tag exists. Pin versions here (``pip install 'x==1.2'``, ``npm install -g
    y@3.4``) rather than installing at every rollout. Docker only."""


def command_agent_refusal(
    config: CommandConfig, model: str | None, network: str
) -> tuple[str, str] | None:
    """Why a run of the command agent ``config`` cannot be set up: (the flag to change, the
    reason), or None. Its model must be of the provider whose API it speaks, and its sandbox
    reaches the model gateway only through the egress proxy (``network=filtered``)."""
    name = config.name or config.type
    if network != "filtered":
        return "--network", (
            f"{network}: the {name} agent reaches its model through the gateway, by the "
            "egress proxy: use --network filtered"
        )
    provider = (model or "").split("/", 1)[0]
    if config.api == "anthropic" and provider != "anthropic":
        return "--model", (
            f"{model}: the {name} agent speaks Anthropic's API: give it an anthropic/ model"
        )
    if config.api == "openai" and provider == "anthropic":
        return "--model", (
            f"{model}: the {name} agent speaks OpenAI's API: give it an openai/ model (or an "
            "OpenAI-compatible endpoint)"
        )
    return None


AnyAgentConfig = (
    BasicConfig | IterativeConfig | DummyConfig | ReplayConfig | PapercoderConfig | CommandConfig
)
AgentConfig = Annotated[AnyAgentConfig, Field(discriminator="type")]
"""Any agent config, told apart by its ``type:`` (basic, iterative, papercoder, replay, dummy)."""
_ADAPTER: TypeAdapter[AnyAgentConfig] = TypeAdapter(AgentConfig)


class AgentIdentity(BaseModel):
    """What makes two rollouts comparable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: str
    sha256: str
    """Over the resolved config (canonical JSON) and every file it names (name and bytes)."""
    model: str | None = None


PAPER_PLACEHOLDER = "{paper}"
"""In a replay's ``transcript``: the id of the paper the agent runs on."""


class LoadedAgent(BaseModel):
    """A validated config, where it came from, its prompts' text and its identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: AgentConfig
    path: Path
    prompts: dict[str, str] = Field(default_factory=dict)
    """Prompt name → text."""
    instructions: dict[str, str] = Field(default_factory=dict)
    """The agent's own instructions: ``full`` and/or ``code_dev`` → text (read at load)."""
    identity: AgentIdentity

    def for_paper(self, paper_id: str) -> LoadedAgent:
        """This agent for one paper: a replay whose ``transcript`` names ``{paper}`` reads
        that paper's recorded transcript (``replays/{paper}.jsonl``); others are unchanged.

        Raises:
            ConfigError: no recorded transcript for this paper.
        """
        config = self.config
        if not (isinstance(config, ReplayConfig) and PAPER_PLACEHOLDER in config.transcript):
            return self
        name = config.transcript.replace(PAPER_PLACEHOLDER, paper_id)
        if not (self.path.parent / name).is_file():
            raise ConfigError(
                f"no recorded transcript for paper {paper_id} ({name} is missing): the replay "
                "agent only replays papers it has a recording of; choose another --agent",
                file=self.path,
                path="$.transcript",
            )
        return self.model_copy(update={"config": config.model_copy(update={"transcript": name})})

    def build(self, model: Model | None) -> Agent:
        """The agent this config describes, calling ``model``.

        Raises:
            ConfigError: the agent needs a model and ``model`` is None.
        """
        config = self.config
        if isinstance(config, DummyConfig):
            from paperbench.agents._loop import DummyAgent

            return DummyAgent(config)
        if isinstance(config, ReplayConfig):
            from paperbench.agents._replay import ReplayAgent

            if PAPER_PLACEHOLDER in config.transcript:
                raise ConfigError(
                    "the transcript names {paper}, the paper the agent runs on: run it on a "
                    "paper (paperbench rollout --paper ID, or paperbench run)",
                    file=self.path,
                    path="$.transcript",
                )
            return ReplayAgent(config, self.prompts, self.path.parent / config.transcript)
        if model is None:
            raise ConfigError(
                f"the {config.type} agent needs a model: set model: provider/model",
                file=self.path,
                path="$.model",
            )
        if isinstance(config, CommandConfig):
            from paperbench.agents._external import ExternalAgent

            return ExternalAgent(config, model)
        if isinstance(config, PapercoderConfig):
            module = importlib.import_module("paperbench.agents._papercoder")
            agent: Agent = module.PapercoderAgent(config, model, config_dir=self.path.parent)
            return agent
        from paperbench.agents._loop import BasicAgent, IterativeAgent

        if isinstance(config, IterativeConfig):
            return IterativeAgent(config, self.prompts, model)
        return BasicAgent(config, self.prompts, model)


def catalog_names() -> list[str]:
    return catalog_entries(catalog_dir())


def resolve_agent_path(ref: str | Path) -> Path:
    """A catalog name or a path to a YAML file (:func:`resolve_catalog_ref`)."""
    return resolve_catalog_ref(ref, catalog_dir(), kind="agent", flag="--agent")


def load_agent(ref: str | Path) -> LoadedAgent:
    """Load, validate and identify an agent config.

    Raises:
        ConfigError: the file is missing, is not YAML, has an unknown key or a bad value, or
            names a file that cannot be read (one line: file, key path, what to do).
    """
    path = resolve_agent_path(ref)
    data = read_yaml_mapping(path, expected="type, model, limits, ...")
    try:
        config = _ADAPTER.validate_python(data)
    except ValidationError as exc:
        where, message = validation_error_line(
            exc, tag="type", tags=AGENT_TYPES, readme="agents/README.md"
        )
        raise ConfigError(message, file=path, path=where) from exc
    if config.name is None:
        config = config.model_copy(update={"name": path.stem})
    files = _named_files(config)
    prompts: dict[str, str] = {}
    instructions: dict[str, str] = {}
    contents: dict[str, bytes] = {}
    for key, name in files.items():
        file = path.parent / name
        try:
            contents[key] = file.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"file {file} cannot be read ({exc.strerror or exc.__class__.__name__}); "
                "paths are relative to the config's folder",
                file=path,
                path=f"$.{key}",
            ) from exc
        if key.startswith("prompts.") or key in _INSTRUCTION_KEYS:
            try:
                text = contents[key].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError("not UTF-8 text", file=path, path=f"$.{key}") from exc
            if key in _INSTRUCTION_KEYS:
                instructions[_INSTRUCTION_KEYS[key]] = text
            else:
                prompts[key.removeprefix("prompts.")] = text
    digest = hashlib.sha256()
    dumped = config.model_dump(mode="json")
    if config.resources == AgentResources():
        del dumped["resources"]  # identities of configs without resources are as they were
    if dumped.get("install") == []:
        del dumped["install"]  # nor those of command agents without install commands
    digest.update(json.dumps(dumped, sort_keys=True).encode())
    for key in sorted(contents):
        digest.update(f"\x00{key}\x00{files[key]}\x00".encode())
        digest.update(contents[key])
    if config.resources.env_file is not None:  # the names of its variables, never the values
        resolved, _ = resolve(config.resources, config_file=path)
        digest.update(f"\x00resources.env_file\x00{','.join(resolved.env_names)}".encode())
    identity = AgentIdentity(
        name=config.name or path.stem,
        type=config.type,
        sha256=digest.hexdigest(),
        model=config.model,
    )
    return LoadedAgent(
        config=config, path=path, prompts=prompts, instructions=instructions, identity=identity
    )


_INSTRUCTION_KEYS = {"instructions": "full", "instructions_code_dev": "code_dev"}
"""Config key → :attr:`LoadedAgent.instructions` key."""


def _named_files(config: AnyAgentConfig) -> dict[str, str]:
    out: dict[str, str] = {}
    prompts: dict[str, str] = getattr(config, "prompts", {})
    for key, name in prompts.items():
        out[f"prompts.{key}"] = name
    for key in _INSTRUCTION_KEYS:
        if (name := getattr(config, key)) is not None:
            out[key] = name
    if isinstance(config, ReplayConfig) and PAPER_PLACEHOLDER not in config.transcript:
        out["transcript"] = config.transcript  # a per-paper one is read by for_paper()
    return out


def instructions_text(code_dev: bool = False, agent: LoadedAgent | None = None) -> str:
    """The task instructions written to /home/instructions.txt: the full variant or the
    Code-Dev one (write the code, do not run the experiments); ``agent``'s own when its
    config names them, else the catalog's."""
    own = agent.instructions.get("code_dev" if code_dev else "full") if agent else None
    if own is not None:
        return own
    name = "instructions_code_dev.md" if code_dev else "instructions.md"
    return (catalog_dir() / "prompts" / name).read_text(encoding="utf-8")


def config_dump(loaded: LoadedAgent) -> dict[str, Any]:
    """The resolved config and its identity, as recorded in a run's files."""
    return {
        "config": loaded.config.model_dump(mode="json"),
        "path": str(loaded.path),
        "identity": loaded.identity.model_dump(mode="json"),
    }
