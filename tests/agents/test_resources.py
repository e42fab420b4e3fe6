"""Resources per agent: the ``resources:`` section of an agent config, the flags of
``rollout`` and ``run`` over it, the env file whose values reach the sandbox and nothing else,
the record in config.json / group.json, resume, and reproduction with the same machine."""

from __future__ import annotations

import asyncio
import gzip
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from paperbench.agents import (
    Agent,
    AgentLimits,
    AgentOutcome,
    NoteEvent,
    RunContext,
    load_agent,
    resources_from_flags,
)
from paperbench.agents._resources import AgentResources, ResolvedResources, RunResources, resolve
from paperbench.agents._rollout import rollout
from paperbench.agents._rollout_files import RolloutConfig, RolloutResult, RolloutStatus
from paperbench.agents._rollout_plan import RolloutOptions
from paperbench.cli import app
from paperbench.errors import ConfigError, UsageError
from paperbench.papers import Paper, PaperSource
from paperbench.runs._config import EvalConfig
from paperbench.runs._group import check_resume
from paperbench.runs._pipeline import reproduce_config, run_stages
from paperbench.runs._ray import gpus_of
from paperbench.sandbox import NetworkPolicy, SandboxBackend, SandboxConfig, SandboxSpec
from paperbench.sandbox._docker import device_requests, host_config_args
from tests.agents.step_agent import INSTRUCTIONS, REPO
from tests.runs.groups import make_group, sleeper_agent
from tests.sandbox.docker_fixtures import TEST_LABELS, sweep

SECRET = "hf-SECRET-value-0123456789abcdef"
OTHER = "sk-OTHER-secret-fedcba9876543210"
LOCAL = SandboxConfig(backend="local")
runner = CliRunner()


def _paper() -> Paper:
    return PaperSource(repo_root=REPO).load("calibration-binning")


def _yaml(folder: Path, resources: str, *, name: str = "res") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(f"type: dummy\nname: {name}\nresources:\n{resources}")
    return path


def _env_file(folder: Path, text: str = f"HF_TOKEN={SECRET}\nOWN_OPENAI_KEY='{OTHER}'\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "agent.env"
    path.write_text(text)
    return path


# --- the YAML section ------------------------------------------------------------------


def test_a_full_resources_section_loads(tmp_path: Path) -> None:
    _env_file(tmp_path)
    path = _yaml(
        tmp_path,
        "  gpus: 1\n  gpu_type: NVIDIA A10\n  cpus: 6\n  memory_mb: 32768\n  disk_mb: 100000\n"
        "  image: pb-env\n  env: {MY_FLAG: '1'}\n  env_file: agent.env\n",
    )
    loaded = load_agent(path)
    r = loaded.config.resources
    assert (r.gpus, r.gpu_type, r.cpus, r.memory_mb, r.disk_mb) == (
        1,
        "NVIDIA A10",
        6,
        32768,
        100000,
    )
    assert (r.image, r.env, r.env_file) == ("pb-env", {"MY_FLAG": "1"}, "agent.env")
    resolved, env = resolve(r, config_file=loaded.path)
    assert env == {"MY_FLAG": "1", "HF_TOKEN": SECRET, "OWN_OPENAI_KEY": OTHER}
    assert resolved.env_names == ("HF_TOKEN", "MY_FLAG", "OWN_OPENAI_KEY")
    assert resolved.env_file == str(tmp_path / "agent.env")
    assert SECRET not in resolved.model_dump_json()


@pytest.mark.parametrize(
    ("resources", "where", "words"),
    [
        ("  gpu: 1\n", "$.resources.gpu", "unknown key"),
        ("  gpus: -1\n", "$.resources.gpus", "greater than or equal to 0"),
        ("  memory_mb: lots\n", "$.resources.memory_mb", "integer"),
        ("  cpus: 0\n", "$.resources.cpus", "greater than 0"),
        ("  env: {HTTPS_PROXY: 'http://x'}\n", "$.resources.env", "set by the sandbox"),
        ("  env: {no_proxy: x}\n", "$.resources.env", "set by the sandbox"),
        ("  env: {'A-B': x}\n", "$.resources.env", "not a variable name"),
        ("  env_file: missing.env\n", "$.resources.env_file", "missing.env: cannot be read"),
    ],
)
def test_bad_resources_are_one_line_naming_file_and_path(
    tmp_path: Path, resources: str, where: str, words: str
) -> None:
    path = _yaml(tmp_path, resources)
    with pytest.raises(ConfigError) as info:
        load_agent(path)
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith(f"{path}: {where}"), line
    assert words in line


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("GOOD=1\nthis is not a line\n", "line 2: expected NAME=value"),
        ("TOKEN\n", "line 1: TOKEN has no value"),
        ("HTTP_PROXY=http://evil\n", "line 1: HTTP_PROXY is set by the sandbox"),
        ("PAPERBENCH_X=1\n", "line 1: PAPERBENCH_X is set by the sandbox"),
    ],
)
def test_a_bad_env_file_is_named_with_its_line(tmp_path: Path, text: str, words: str) -> None:
    env = _env_file(tmp_path, text)
    path = _yaml(tmp_path, "  env_file: agent.env\n")
    with pytest.raises(ConfigError) as info:
        load_agent(path)
    line = str(info.value)
    assert "\n" not in line and line.startswith(f"{path}: $.resources.env_file: env file {env}")
    assert words in line


def test_an_env_file_is_not_interpolated_from_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_ONLY", "from-the-host")
    _env_file(tmp_path, "A=${HOST_ONLY}\n")
    path = _yaml(tmp_path, "  env_file: agent.env\n")
    _, env = resolve(load_agent(path).config.resources, config_file=path)
    assert env == {"A": "${HOST_ONLY}"}


def test_identity_hashes_env_names_never_values(tmp_path: Path) -> None:
    env = _env_file(tmp_path, f"HF_TOKEN={SECRET}\n")
    path = _yaml(tmp_path, "  gpus: 1\n  env_file: agent.env\n")
    first = load_agent(path).identity.sha256
    env.write_text(f"HF_TOKEN={OTHER}\n")  # a new value of the same key: the same agent
    assert load_agent(path).identity.sha256 == first
    env.write_text(f"HF_TOKEN={OTHER}\nWANDB_API_KEY=x\n")  # another key: another agent
    assert load_agent(path).identity.sha256 != first
    env.write_text(f"HF_TOKEN={SECRET}\n")
    _yaml(tmp_path, "  gpus: 2\n  env_file: agent.env\n")  # another resource: another agent
    assert load_agent(path).identity.sha256 != first
    # a config without resources keeps the identity it had before the section existed
    plain = tmp_path / "plain.yaml"
    plain.write_text("type: dummy\nname: plain\n")
    empty = tmp_path / "empty.yaml"
    empty.write_text("type: dummy\nname: plain\nresources: {}\n")
    assert load_agent(plain).identity == load_agent(empty).identity


# --- overrides ---------------------------------------------------------------------------


def test_flags_override_the_yaml_field_by_field(tmp_path: Path) -> None:
    _env_file(tmp_path / "yaml")
    flag_env = _env_file(tmp_path / "flag", f"FLAG_KEY={OTHER}\n")
    path = _yaml(
        tmp_path / "yaml",
        "  gpus: 1\n  gpu_type: NVIDIA A10\n  cpus: 6\n  env: {A: yaml}\n  env_file: agent.env\n",
    )
    flags = resources_from_flags(
        gpus=0, gpu_type=None, cpus=2, memory=None, disk=512, image=None, agent_env=flag_env
    )
    assert flags is not None
    resolved, env = resolve(load_agent(path).config.resources, flags, config_file=path)
    assert (resolved.gpus, resolved.gpu_type, resolved.cpus, resolved.disk_mb) == (
        0,
        "NVIDIA A10",
        2,
        512,
    )
    assert env == {"A": "yaml", "FLAG_KEY": OTHER}  # the flag's env file instead of the YAML's
    assert resolved.env_file == str(flag_env)
    assert (
        resources_from_flags(
            gpus=None, gpu_type=None, cpus=None, memory=None, disk=None, image=None, agent_env=None
        )
        is None
    )


def test_a_bad_agent_env_flag_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^--agent-env .*nope\.env: cannot be read"):
        resources_from_flags(
            gpus=None,
            gpu_type=None,
            cpus=None,
            memory=None,
            disk=None,
            image=None,
            agent_env=tmp_path / "nope.env",
        )


def test_limits_and_gpu_request_as_the_docker_engine_gets_them() -> None:
    """No GPU here: the arguments the engine would receive."""
    resolved = ResolvedResources(gpus=2, cpus=6, memory_mb=4096, disk_mb=1000)
    spec = SandboxSpec(
        image="x",
        limits=resolved.limits(SandboxSpec(image="x").limits),
        gpu=resolved.gpu_request(),
    )
    args = host_config_args(
        spec, network_mode="none", disk_mounts=[], tmpfs={}, storage_size_mb=None
    )
    assert args["nano_cpus"] == 6_000_000_000
    assert args["mem_limit"] == "4096m"
    (request,) = device_requests(spec.gpu)
    assert request["Count"] == 2 and request["Capabilities"] == [["gpu"]]
    assert ResolvedResources().gpu_request() is None


def test_notes_say_the_resources_for_the_instructions() -> None:
    notes = RunResources(
        gpus=1, gpu_type="NVIDIA A10", hours=24, env_names=("HF_TOKEN", "OPENAI_API_KEY")
    ).notes()
    assert "1 NVIDIA A10 GPU." in notes and "24 hours" in notes
    assert "HF_TOKEN, OPENAI_API_KEY" in notes
    assert RunResources().notes() == ""


# --- through a real rollout --------------------------------------------------------------


class EnvAgent(Agent):
    """Prints its environment variables in the sandbox and notes the output (as a tool's
    output would be), then stops."""

    name = "env-agent"

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}
        self.resources: RunResources | None = None
        self.memory_max = ""

    async def run(self, ctx: RunContext) -> AgentOutcome:
        self.resources = ctx.resources
        for name in ("HF_TOKEN", "OWN_OPENAI_KEY", "MY_FLAG", "MY_MODE"):
            result = await ctx.sandbox.exec(f"printenv {name}", timeout=30)
            self.seen[name] = result.stdout.strip()
            ctx.transcript.append(NoteEvent(kind="printenv", text=result.stdout))
        cgroup = "/sys/fs/cgroup"  # v2, else v1
        read = f"cat {cgroup}/memory.max 2>/dev/null || cat {cgroup}/memory/memory.limit_in_bytes"
        limit = await ctx.sandbox.exec(read, timeout=30)
        self.memory_max = limit.stdout.strip()
        await ctx.sandbox.exec("echo done > /home/submission/done.txt", timeout=30)
        return AgentOutcome(status="submitted")


class Scripted:
    """A loaded agent config whose agent is :class:`EnvAgent` (the config's resources, path
    and identity as loaded)."""

    def __init__(self, path: Path) -> None:
        self.loaded = load_agent(path)
        self.agent = EnvAgent()

    @property
    def config(self) -> Any:
        return self.loaded.config

    @property
    def path(self) -> Path:
        return self.loaded.path

    @property
    def identity(self) -> Any:
        return self.loaded.identity

    def build(self, model: Any) -> Agent:
        return self.agent


def _rollout(out: Path, agent: Any, **kw: Any) -> RolloutResult:
    options: dict[str, Any] = {
        "sandbox": LOCAL,
        "network": NetworkPolicy.NONE,
        "snapshot_every_s": None,
        "instructions": INSTRUCTIONS,
        "limits": AgentLimits(wall_time_s=7200),
    }
    options.update(kw)
    return asyncio.run(rollout(_paper(), agent, options=RolloutOptions(**options), out_dir=out))


def _every_byte(folder: Path) -> bytes:
    """Every file under ``folder``, archives unpacked."""
    out = b""
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        if path.name.endswith(".tar.gz"):
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    handle = tar.extractfile(member)
                    out += handle.read() if handle else b""
            out += gzip.decompress(path.read_bytes())
        else:
            out += path.read_bytes()
    return out


def _check_env_run(out: Path, scripted: Scripted, env_file: Path) -> None:
    seen = {"HF_TOKEN": SECRET, "OWN_OPENAI_KEY": OTHER, "MY_FLAG": "1", "MY_MODE": "offline"}
    assert scripted.agent.seen == seen
    given = scripted.agent.resources
    assert given is not None and given.hours == 2 and given.gpu_type == "NVIDIA A10"
    assert given.env_names == ("HF_TOKEN", "MY_FLAG", "MY_MODE", "OWN_OPENAI_KEY")
    config = RolloutConfig.model_validate_json((out / "config.json").read_text())
    assert config.resources.env_names == given.env_names
    assert config.resources.env_file == str(env_file)
    status = RolloutStatus.model_validate_json((out / "status.json").read_text())
    assert status.status == "submitted" and status.resources == config.resources
    everything = _every_byte(out)
    assert b"done" in everything  # the archives were read
    assert SECRET.encode() not in everything and OTHER.encode() not in everything
    transcript = (out / "transcript.jsonl").read_bytes()
    assert b"[HF_TOKEN]" in transcript and b"[OWN_OPENAI_KEY]" in transcript
    assert b'"offline\\n"' in transcript  # a value of the YAML's env is no secret


def test_env_file_values_reach_the_sandbox_and_no_run_file(tmp_path: Path) -> None:
    env_file = _env_file(tmp_path / "agent")
    path = _yaml(
        tmp_path / "agent",
        "  gpu_type: NVIDIA A10\n  env: {MY_FLAG: '1', MY_MODE: offline}\n  env_file: agent.env\n",
    )
    scripted = Scripted(path)
    out = tmp_path / "run"
    _rollout(out, scripted)
    _check_env_run(out, scripted, env_file)


@pytest.mark.docker
def test_env_file_values_reach_a_docker_sandbox_and_no_run_file(
    tmp_path: Path, docker_client: Any, docker_images: dict[str, str]
) -> None:
    env_file = _env_file(tmp_path / "agent")
    path = _yaml(
        tmp_path / "agent",
        "  gpu_type: NVIDIA A10\n  cpus: 1\n  memory_mb: 1024\n"
        "  env: {MY_FLAG: '1', MY_MODE: offline}\n"
        "  env_file: agent.env\n",
    )
    scripted = Scripted(path)
    out = tmp_path / "run"
    try:
        result = _rollout(
            out,
            scripted,
            sandbox=SandboxConfig(backend="docker"),
            image=docker_images["paperbench-agent"],
            labels=TEST_LABELS,
        )
    finally:
        sweep(docker_client)
    assert result.status.sandbox_backend == "docker"
    assert scripted.agent.memory_max == str(1024 * 1024 * 1024)  # memory_mb reached the engine
    _check_env_run(out, scripted, env_file)


class _Recording(SandboxBackend):
    """The local backend, keeping the specs it is asked to start."""

    def __init__(self, inner: SandboxBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.isolation_kind = inner.isolation_kind

    async def start(self, spec: SandboxSpec) -> Any:
        STARTED.append(spec)
        return await self.inner.start(spec)


STARTED: list[SandboxSpec] = []


class RecordingConfig(SandboxConfig):
    """The local backend's configuration, building a backend that records its specs."""

    async def build(self) -> SandboxBackend:
        return _Recording(await super().build())


def test_rollout_overrides_reach_the_sandbox_spec_and_a_changed_one_is_refused_on_resume(
    tmp_path: Path,
) -> None:
    path = _yaml(tmp_path / "agent", "  gpus: 0\n  cpus: 4\n")
    STARTED.clear()
    out = tmp_path / "run"
    override = AgentResources(gpus=1, memory_mb=2048)
    first = asyncio.run(
        rollout(
            _paper(),
            load_agent(path),
            options=RolloutOptions(
                sandbox=RecordingConfig(backend="local"),
                network=NetworkPolicy.NONE,
                snapshot_every_s=None,
                instructions=INSTRUCTIONS,
                resources=override,
            ),
            out_dir=out,
        )
    )
    assert first.status.status == "submitted"
    (spec,) = STARTED
    assert spec.gpu is not None and spec.gpu.count == 1
    assert (spec.limits.cpus, spec.limits.memory_mb) == (4, 2048)
    (request,) = device_requests(spec.gpu)
    assert request["Count"] == 1
    recorded = json.loads((out / "config.json").read_text())["resources"]
    assert (recorded["gpus"], recorded["cpus"], recorded["memory_mb"]) == (1, 4, 2048)
    # an unfinished run resumed with another resource is refused, naming the field
    (out / "status.json").unlink()
    with pytest.raises(ConfigError, match=r"config\.json: \$\.resources\.gpus"):
        asyncio.run(
            rollout(
                _paper(),
                load_agent(path),
                options=RolloutOptions(
                    sandbox=RecordingConfig(backend="local"),
                    network=NetworkPolicy.NONE,
                    snapshot_every_s=None,
                    instructions=INSTRUCTIONS,
                    resources=AgentResources(gpus=2, memory_mb=2048),
                ),
                out_dir=out,
                resume=True,
            )
        )


# --- the CLI -----------------------------------------------------------------------------


def _cli(args: list[str]) -> Any:
    return runner.invoke(app, args, env={"COLUMNS": "200"})


def test_rollout_cli_flags_are_recorded_and_shown_by_name(tmp_path: Path) -> None:
    env_file = _env_file(tmp_path)
    out = tmp_path / "run"
    result = _cli(
        [
            "rollout",
            "--paper",
            "calibration-binning",
            "--agent",
            "dummy",
            "--sandbox",
            "local",
            "--network",
            "none",
            "--out",
            str(out),
            "--cpus",
            "2",
            "--memory",
            "2048",
            "--gpu-type",
            "NVIDIA A10",
            "--agent-env",
            str(env_file),
            "--env",
            "MY_MODE=offline",
        ]
    )
    assert result.exit_code == 0, result.output
    assert "env HF_TOKEN, MY_MODE, OWN_OPENAI_KEY" in result.output
    assert SECRET not in result.output
    recorded = json.loads((out / "config.json").read_text())["resources"]
    assert recorded["cpus"] == 2 and recorded["memory_mb"] == 2048
    assert recorded["env_names"] == ["HF_TOKEN", "MY_MODE", "OWN_OPENAI_KEY"]
    assert SECRET.encode() not in _every_byte(out)


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--gpus", "-1", "--gpus"),
        ("--cpus", "0", "--cpus"),
        ("--memory", "1", "--memory"),
        ("--agent-env", "/nonexistent/agent.env", "--agent-env /nonexistent/agent.env"),
        ("--env", "NOEQUALS", "--env NOEQUALS: expected NAME=value"),
        ("--env", "HTTPS_PROXY=http://x", "--env: HTTPS_PROXY is set by the sandbox"),
    ],
)
@pytest.mark.parametrize("command", ["rollout", "run"])
def test_bad_resource_flags_are_one_line(
    tmp_path: Path, command: str, flag: str, value: str, words: str
) -> None:
    if command == "rollout":
        args = ["rollout", "--paper", "calibration-binning", "--agent", "dummy"]
        args += ["--out", str(tmp_path / "out")]
    else:
        args = ["run", "--runs-dir", str(tmp_path / "runs"), "--no-report", "--agent", "dummy"]
    result = _cli([*args, flag, value])
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output and words in result.output
    assert not list((tmp_path / "runs").glob("*/group.json"))


# --- a group -----------------------------------------------------------------------------


def test_a_group_passes_resources_to_rollout_and_reproduction(tmp_path: Path) -> None:
    env_file = _env_file(tmp_path / "keys")
    specs = make_group(
        tmp_path, "res", 0, 1, agent={"gpus": 1, "cpus": 2, "memory_mb": 3000, "env_file": env_file}
    )
    (spec,) = specs
    entry = spec.config.agents[0]
    assert entry.resources is not None
    assert (entry.resources.gpus, entry.resources.cpus, entry.resources.memory_mb) == (1, 2, 3000)
    assert entry.resources.env_names == ("HF_TOKEN", "OWN_OPENAI_KEY")
    group_json = (Path(spec.group_dir) / "group.json").read_bytes()
    assert SECRET.encode() not in group_json and b"HF_TOKEN" in group_json
    # reproduction: the same GPUs, CPUs and memory; on Ray, the task's GPU resource
    repro = reproduce_config(spec)
    assert repro.gpu is not None and repro.gpu.count == 1
    # reproduce.sh gets the agent's variables (the notes tell the agent so), never on disk
    assert repro.env["HF_TOKEN"] == SECRET and "env" not in repro.model_dump()
    assert (repro.limits.cpus, repro.limits.memory_mb) == (2, 3000)
    assert repro.limits.disk_mb == 50 * 1024  # not said: the reproduction's own default
    assert gpus_of(repro.model_dump(mode="json")) == 1.0
    outcome = asyncio.run(run_stages(spec, ["rollout", "monitor", "reproduction"]))
    assert outcome is None  # grading remains
    rolled = json.loads((spec.folder / "config.json").read_text())["resources"]
    assert (rolled["gpus"], rolled["cpus"], rolled["memory_mb"]) == (1, 2, 3000)
    assert rolled["env_names"] == ["HF_TOKEN", "OWN_OPENAI_KEY"]
    meta = json.loads((spec.folder / "reproduction" / "metadata.json").read_text())
    assert meta["config"]["gpu"]["count"] == 1
    assert meta["config"]["limits"]["cpus"] == 2 and meta["config"]["limits"]["memory_mb"] == 3000
    assert SECRET.encode() not in _every_byte(Path(spec.group_dir))
    # a resume whose env file lost a key is refused: the runs would mix two configurations
    env_file.write_text(f"HF_TOKEN={SECRET}\n")
    with pytest.raises(ConfigError, match=r"group\.json: \$\.agents"):
        check_resume(Path(spec.group_dir))


def test_a_group_image_is_the_reproduction_image_too(tmp_path: Path) -> None:
    agent = sleeper_agent(tmp_path / "a", 0)
    text = agent.read_text() + "resources:\n  image: pb-env:1\n  disk_mb: 9000\n"
    agent.write_text(text)
    options = EvalConfig.model_validate(
        {
            "group": "img",
            "papers": "calibration-binning",
            "agents": [str(agent)],
            "judge": {"config": "dummy"},
        }
    )
    from paperbench.runs._group import plan_group
    from paperbench.runs._pipeline import RunSpec
    from paperbench.runs._store import run_keys

    config = plan_group(options, SandboxConfig(backend="local"))
    (key,) = run_keys(config)
    repro = reproduce_config(RunSpec(group_dir=str(tmp_path), key=key, config=config))
    assert repro.image == "pb-env:1" and repro.limits.disk_mb == 9000 and repro.gpu is None


def test_run_cli_flags_reach_the_group_the_rollout_and_the_reproduction(tmp_path: Path) -> None:
    env_file = _env_file(tmp_path)
    runs = tmp_path / "runs"
    args = ["run", "--runs-dir", str(runs), "--group", "g", "--no-report", "--agent", "dummy"]
    args += ["--judge", "dummy", "--sandbox", "local", "--papers", "calibration-binning"]
    args += ["--gpus", "1", "--gpu-type", "NVIDIA A10", "--memory", "2048"]
    args += ["--agent-env", str(env_file)]
    result = _cli(args)
    assert result.exit_code == 0, result.output
    assert "agent dummy: 1 GPU (NVIDIA A10), 2048 MB memory, env HF_TOKEN" in result.output
    group = json.loads((runs / "g" / "group.json").read_text())
    said = {k: v for k, v in group["resources"].items() if v not in (None, {})}
    assert said == {
        "gpus": 1,
        "gpu_type": "NVIDIA A10",
        "memory_mb": 2048,
        "env_file": str(env_file),
    }
    run = runs / "g" / "calibration-binning" / "dummy" / "seed-0"
    rolled = json.loads((run / "config.json").read_text())["resources"]
    assert (rolled["gpus"], rolled["memory_mb"]) == (1, 2048)
    meta = json.loads((run / "reproduction" / "metadata.json").read_text())
    assert meta["config"]["gpu"]["count"] == 1 and meta["config"]["limits"]["memory_mb"] == 2048
    assert SECRET.encode() not in _every_byte(runs) and SECRET not in result.output
    again = _cli(["run", "--runs-dir", str(runs), "--resume", "g", "--gpus", "2"])
    assert again.exit_code == 2 and "drop --gpus" in again.output


@pytest.mark.parametrize("command", ["rollout", "run"])
def test_an_image_without_docker_is_refused_before_any_file(tmp_path: Path, command: str) -> None:
    """The local backend runs the host's own system: an image would be silently unused."""
    if command == "rollout":
        args = ["rollout", "--paper", "calibration-binning", "--agent", "dummy"]
        args += ["--out", str(tmp_path / "out")]
    else:
        args = ["run", "--runs-dir", str(tmp_path / "out"), "--no-report", "--agent", "dummy"]
        args += ["--judge", "dummy", "--papers", "calibration-binning"]
    result = _cli([*args, "--sandbox", "local", "--image", "pb-env"])
    assert result.exit_code == 2, result.output
    assert "image pb-env" in result.output and "only the Docker backend" in result.output
    assert not (tmp_path / "out").exists()


def test_papercoder_repair_rounds_get_the_group_reproduce_timeout(tmp_path: Path) -> None:
    from paperbench.agents import PapercoderConfig, load_agent
    from paperbench.runs._pipeline import _with_group_settings
    from paperbench.runs._store import GroupReproduction

    agent = load_agent("papercoder")
    group = make_group(tmp_path, "pc", 0, 1)[0].config
    timed = group.model_copy(update={"reproduction": GroupReproduction(timeout_s=1234)})
    changed = _with_group_settings(agent, timed).config
    assert isinstance(changed, PapercoderConfig) and changed.repair_timeout_s == 1234
    assert _with_group_settings(agent, group).config == agent.config  # none set: unchanged
