"""A ``command`` agent's ``install:`` commands: run once at image build time into a derived
image (``paperbench-agent-custom:<hash>``) that later rollouts reuse, on the real Docker engine;
a failing command is one line naming ``$.install[i]``; the local backend refuses ``install``.
Also: ``stage_image`` builds one of the project's own images named without a tag when it is
missing."""

from __future__ import annotations

import asyncio
import json
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from paperbench.agents import AgentLimits, load_agent
from paperbench.agents._rollout import rollout
from paperbench.agents._rollout_plan import RolloutOptions
from paperbench.errors import ConfigError
from paperbench.llm import ModelConfig
from paperbench.papers import PaperSource
from paperbench.sandbox import NetworkPolicy, SandboxConfig, _images, stage_image
from paperbench.testing import FakeLLMServer, FakeReply
from tests.sandbox.docker_fixtures import docker_client  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
OPENAI_KEY = "sk-host-key-never-in-the-sandbox"
INSTALL = "pip install --no-cache-dir 'tomli==2.0.1'"
AGENT_SH = """set -e
python3 -c 'import tomli; assert tomli.__version__ == "2.0.1", tomli.__version__'
body='{"model": "MODEL", "messages": [{"role": "user", "content": "hi"}]}'
curl -sf "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" \\
  -H 'Content-Type: application/json' -d "${body/MODEL/$MODEL}" > "$HOME/answer.json"
python3 - <<'PY'
import json, os, tomli
answer = json.load(open(os.path.expanduser("~/answer.json")))
word = answer["choices"][0]["message"]["content"].split()[0]
value = tomli.loads(f'x = "{word}"')["x"]
open("/home/submission/reproduce.sh", "w").write(f"echo {value} > result.txt\\n")
PY
"""


def _config(tmp_path: Path, install: list[str], name: str = "my-agent") -> Path:
    lines = "\n".join(f"  - {json_str(c)}" for c in install)
    text = f"""type: command
model: openai/gpt-5
api: openai
install:
{lines}
env:
  OPENAI_BASE_URL: "{{base_url}}"
  OPENAI_API_KEY: "{{token}}"
  MODEL: "{{model}}"
files:
  agent.sh: {json_str(AGENT_SH)}
launch: bash {{home}}/agent.sh
"""
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def json_str(text: str) -> str:
    return json.dumps(text)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeLLMServer]:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("OPENAI_BASE_URL", "PAPERBENCH_PRICES"):
        monkeypatch.delenv(name, raising=False)
    with FakeLLMServer() as fake:
        fake.handler = lambda request: FakeReply(text="replicated")
        yield fake


def _rollout(out: Path, config: Path, server: FakeLLMServer, backend: str = "docker") -> Any:
    return asyncio.run(
        rollout(
            PaperSource(repo_root=REPO).load("calibration-binning"),
            load_agent(config),
            options=RolloutOptions(
                model_config=ModelConfig(model="openai/gpt-5", base_url=server.openai_url),
                sandbox=SandboxConfig(backend=backend),  # type: ignore[arg-type]
                network=NetworkPolicy.FILTERED,
                snapshot_every_s=None,
                limits=AgentLimits(wall_time_s=300),
            ),
            out_dir=out,
        )
    )


def _reproduce_sh(out: Path) -> str:
    with tarfile.open(out / "submission.tar.gz") as tar:
        for member in tar.getmembers():
            if member.name.removeprefix("./") == "reproduce.sh":
                data = tar.extractfile(member)
                assert data is not None
                return data.read().decode()
    raise AssertionError("no reproduce.sh in the submission")


@pytest.mark.docker
@pytest.mark.slow
def test_install_builds_a_derived_image_once_and_the_next_rollout_reuses_it(
    server: FakeLLMServer,
    tmp_path: Path,
    docker_client: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = _config(tmp_path, [INSTALL])
    base = _images.ensure_images(("paperbench-agent",), client=docker_client)["paperbench-agent"]
    base_id = docker_client.images.get(base).id
    tag = _images.derived_tag(base_id, [INSTALL], _images.ImageOptions())
    if _images.image_present(tag, client=docker_client):  # a build this test can see
        docker_client.images.remove(tag, force=True)
    builds: list[float] = []
    real_build = _images._build_derived

    def counted(*args: Any, **kwargs: Any) -> None:
        started = time.monotonic()
        real_build(*args, **kwargs)
        builds.append(time.monotonic() - started)

    monkeypatch.setattr(_images, "_build_derived", counted)

    first = _rollout(tmp_path / "run1", config, server)
    assert first.status.status == "submitted", first.status.error
    assert first.status.sandbox_image == tag
    assert _reproduce_sh(tmp_path / "run1") == "echo replicated > result.txt\n"
    assert len(server.requests) == 1  # through the gateway, with the host's key
    assert OPENAI_KEY in server.requests[0].headers["authorization"]
    assert len(builds) == 1
    print(f"derived image {tag} built in {builds[0]:.1f}s")
    image_id = docker_client.images.get(tag).id

    second = _rollout(tmp_path / "run2", config, server)
    assert second.status.status == "submitted", second.status.error
    assert second.status.sandbox_image == tag
    assert docker_client.images.get(tag).id == image_id
    assert len(builds) == 1  # not built again


@pytest.mark.docker
@pytest.mark.slow
def test_a_failing_install_command_is_one_line_naming_it(
    server: FakeLLMServer,
    tmp_path: Path,
    docker_client: Any,  # noqa: F811
) -> None:
    config = _config(tmp_path, ["echo no-such-package >&2; exit 7", INSTALL], name="broken")
    result = _rollout(tmp_path / "run", config, server)
    error = result.status.error or ""
    assert result.status.status == "error"
    assert "\n" not in error
    assert error.startswith(f"{config}: $.install[0]: install command failed"), error
    assert "no-such-package" in error and "non-zero code: 7" in error
    assert not server.requests  # the agent never started


def test_the_local_backend_refuses_install_at_plan_time(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    config = _config(tmp_path, [INSTALL])
    out = tmp_path / "run"
    with pytest.raises(ConfigError) as caught:
        _rollout(out, config, server, backend="local")
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"{config}: $.install: ")
    assert "--sandbox docker" in line
    assert not out.exists()


class _Docker:
    name = "docker"


def test_stage_image_builds_an_own_image_named_without_a_tag_when_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    present: dict[str, bool] = {"paperbench-agent-cli": False}
    built: list[tuple[str, ...]] = []

    def ensure(names: tuple[str, ...], **kw: Any) -> dict[str, str]:
        built.append(names)
        kw["log"]("building paperbench-agent-cli: step 1/9: ARG BASE")
        return {n: f"{n}:0123456789ab" for n in names}

    monkeypatch.setattr(_images, "image_present", lambda ref, **_: present.get(ref, True))
    monkeypatch.setattr(_images, "ensure_images", ensure)
    backend: Any = _Docker()

    # missing: built, and its tag is what the stage runs
    tag = asyncio.run(stage_image(backend, "paperbench-agent", "paperbench-agent-cli"))
    assert (tag, built) == ("paperbench-agent-cli:0123456789ab", [("paperbench-agent-cli",)])
    said = [r.getMessage() for r in caplog.records]  # its steps, with the time so far
    assert "building paperbench-agent-cli: step 1/9: ARG BASE (0 s)" in said, said
    # present: used as it is
    present["paperbench-agent-cli"] = True
    assert asyncio.run(stage_image(backend, "paperbench-agent", "paperbench-agent-cli")) == (
        "paperbench-agent-cli"
    )
    # another image, or one of ours with a tag: never built here
    for image in ("python:3.12", "paperbench-agent-cli:latest"):
        present[image] = False
        assert asyncio.run(stage_image(backend, "paperbench-agent", image)) == image
    assert len(built) == 1


def test_paperbench_run_refuses_install_on_the_local_backend_before_any_work(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    import paperbench
    from paperbench.runs._config import EvalConfig, JudgeSettings, SandboxSettings

    config = _config(tmp_path, [INSTALL])
    settings = EvalConfig(
        group="g",
        runs_dir=tmp_path / "runs",
        papers="calibration-binning",
        agents=[str(config)],
        judge=JudgeSettings(config="dummy"),
        sandbox=SandboxSettings(backend="local"),
        report=False,
    )
    with pytest.raises(ConfigError) as caught:
        paperbench.evaluate(settings)
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"{config}: $.install: ")
    assert "--sandbox docker" in line
    assert not (tmp_path / "runs" / "g").exists()
