"""A model server that does not answer fails ``grade``, ``judge-eval``, ``run`` and
``rcb run`` at once, in one line naming the flag and the URL, before any folder is written;
a server that answers is asked nothing but one plain request (no model request)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.errors import ModelUnavailableError
from paperbench.llm import ModelConfig
from paperbench.llm._probe import probe_servers
from paperbench.testing import FakeLLMServer
from tests.rcb.broken import PSET

PAPER = "calibration-binning"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent() -> Iterator[str]:
    """A server that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_a_closed_port_fails_every_command_that_fans_out_in_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    submission = tmp_path / "submission"
    submission.mkdir()
    model = ["--model", "openai/gpt-4o", "--base-url", url]
    agent = ["--agent", "basic", "--agent-base-url", url, "--judge-base-url", url]
    commands = {
        "grade": ["grade", str(submission), "--paper", PAPER, *model, "--out", "out"],
        "judge-eval": ["judge-eval", *model, "--out", "out"],
        "run": ["run", "--papers", PAPER, *agent, "--sandbox", "local", "--no-report"],
        "rcb run": ["rcb", "run", "--rcb-dir", str(PSET.parent), *model, "--out", "out"],
    }
    for name, args in commands.items():
        started = time.monotonic()
        result = CliRunner().invoke(app, args, env={"COLUMNS": "300", "OPENAI_API_KEY": ""})
        took = time.monotonic() - started
        flag = "--agent-base-url" if name == "run" else "--base-url"
        assert result.exit_code == 1, (name, result.output)
        line = result.output.strip()
        assert line.startswith(f"error: {flag} {url}: the server does not answer ("), line
        assert line.endswith(f"start it or give another {flag}") and "\n" not in line, line
        assert "leaves to grade" not in result.output
        assert took < 30, (name, took)
        assert sorted(p.name for p in Path.cwd().iterdir()) == ["submission"], name


def test_a_server_that_never_answers_is_found_within_the_probe_time(silent: str) -> None:
    config = ModelConfig(model="openai/gpt-4o", base_url=silent)
    with pytest.raises(ModelUnavailableError, match=r"no answer within 0\.3 s"):
        asyncio.run(probe_servers([("--base-url", config)], timeout_s=0.3))


def test_a_server_that_answers_gets_no_model_request(fake_llm: FakeLLMServer) -> None:
    configs = [
        ("--base-url", ModelConfig(model="openai/gpt-4o", base_url=fake_llm.openai_url)),
        ("--base-url", ModelConfig(model="anthropic/claude-haiku-4-5", base_url=fake_llm.url)),
        ("--judge", ModelConfig(model="openai/gpt-4o")),  # the provider's own API: not asked
    ]
    asyncio.run(probe_servers(configs, timeout_s=5))
    assert fake_llm.requests == []
