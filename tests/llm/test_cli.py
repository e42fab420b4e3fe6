"""``paperbench models check`` and ``paperbench models list``."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.testing import FakeLLMServer, FakeUsage, Fault, default_reply

runner = CliRunner()


def _invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["models", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_list_prints_the_price_table() -> None:
    code, out = _invoke("list")
    assert code == 0
    assert "openai/gpt-4o" in out and "anthropic/claude-haiku-4-5" in out and "ollama" in out
    code, out = _invoke("list", "--json")
    data = json.loads(out)
    assert data["prices_per_million_tokens"]["openai/gpt-4o"]["output"] == 10.0
    assert "openrouter" in data["endpoints"]


def test_check_reports_latency_usage_and_cost(fake_llm: FakeLLMServer) -> None:
    def reply(request):  # type: ignore[no-untyped-def]
        base = default_reply(request)
        return type(base)(text=base.text, json=base.json, usage=FakeUsage(input=12, output=3))

    fake_llm.handler = reply
    code, out = _invoke("check", "openai/gpt-4o", "--base-url", fake_llm.openai_url)
    assert code == 0, out
    assert "text" in out and "structured" in out and "1 of 1 models ready" in out
    assert "$0.000060" in out  # 12 input + 3 output tokens on gpt-4o
    assert len(fake_llm.requests) == 2
    assert "response_format" in fake_llm.requests[1].body


def test_check_json_and_standard_base_url_variables(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.openai_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_llm.anthropic_url)
    code, out = _invoke("check", "openai/gpt-4o-mini", "anthropic/claude-haiku-4-5", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["ok"] is True
    assert {(c["model"], c["call"]) for c in data["calls"]} == {
        ("openai/gpt-4o-mini", "text"),
        ("openai/gpt-4o-mini", "structured"),
        ("anthropic/claude-haiku-4-5", "text"),
        ("anthropic/claude-haiku-4-5", "structured"),
    }
    assert {r.protocol for r in fake_llm.requests} == {"chat", "messages"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["openai/gpt-4o"],
            "openai/gpt-4o: set OPENAI_API_KEY (environment or .env) or pass --key",
        ),
        (["anthropic/claude-haiku-4-5"], "set ANTHROPIC_API_KEY"),
        (["nosuch/model"], "unknown provider 'nosuch'"),
        (
            ["openai/gpt-4o", "--base-url", "http://127.0.0.1:9/v1", "--max-wait", "0.2"],
            "cannot reach http://127.0.0.1:9/v1",
        ),
    ],
    ids=["no-openai-key", "no-anthropic-key", "unknown-provider", "unreachable"],
)
def test_check_failures_are_one_line(args: list[str], expected: str) -> None:
    code, out = _invoke("check", *args)
    assert code == 1
    assert expected in out
    assert "Traceback" not in out
    assert "0 of 1 models ready" in out


def test_check_refused_and_unknown_model(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(Fault.http(404, "The model `gpt-nope` does not exist"))
    code, out = _invoke("check", "openai/gpt-nope", "--base-url", fake_llm.openai_url)
    assert code == 1
    assert "openai/gpt-nope: unknown model or wrong base URL (HTTP 404" in out
    fake_llm.script(Fault.http(401, "invalid x-api-key"))
    code, out = _invoke("check", "anthropic/claude-haiku-4-5", "--base-url", fake_llm.url)
    assert code == 1
    assert "API key was rejected" in out and "ANTHROPIC_API_KEY or pass --key" in out


def test_check_usage_errors_exit_2() -> None:
    code, out = _invoke("check", "gpt-4o")
    assert code == 2
    assert "provider/model" in out
    code, _ = _invoke("check")
    assert code == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--max-wait", "-3"], "--max-wait: Input should be greater than or equal to 0"),
        (["--base-url", "notaurl"], "--base-url: expected an http(s) URL"),
        (["--base-url", "localhost:8000/v1"], "--base-url: expected an http(s) URL"),
    ],
    ids=["max-wait", "not-a-url", "no-scheme"],
)
def test_check_bad_flags_name_the_flag(args: list[str], expected: str) -> None:
    code, out = _invoke("check", "openai/gpt-4o", *args)
    assert code == 2
    assert expected in out
    assert "Traceback" not in out and "validation error" not in out
    assert len(out.strip().splitlines()) == 1


def test_check_request_timeout_is_a_duration() -> None:
    code, out = _invoke("check", "openai/gpt-4o", "--request-timeout", "-1")
    assert code == 2 and "--request-timeout" in out and "duration" in out
    assert "Traceback" not in out
    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        args = ["--base-url", url, "--key", "k", "--max-wait", "0", "--request-timeout", "0.3s"]
        code, out = _invoke("check", "openai/gpt-4o", *args)
    assert code == 1 and "no answer within 0.3s" in out, out


def test_base_url_variable_that_is_not_a_url_fails_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "notaurl")
    code, out = _invoke("check", "openai/gpt-4o")
    assert code == 1
    assert "OPENAI_BASE_URL: expected an http(s) URL" in out and "got 'notaurl'" in out
    assert "Traceback" not in out and "cannot reach" not in out


def test_model_config_refuses_a_base_url_that_is_not_http() -> None:
    from paperbench.llm import ModelConfig

    with pytest.raises(ValueError, match="expected an http\\(s\\) URL"):
        ModelConfig(model="openai/gpt-4o", base_url="ftp://example.org")
    assert ModelConfig(model="openai/gpt-4o", base_url="http://127.0.0.1:8000/v1").base_url


def test_check_says_a_missing_key_at_once_without_loading_the_sdk(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    import paperbench

    source = str(Path(paperbench.__file__).parents[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env["PYTHONPATH"] = source
    code = (
        "import sys\nfrom paperbench.cli import app\n"
        "try:\n    app(['models', 'check', 'openai/gpt-4o'])\nexcept SystemExit as e:\n"
        "    print('exit', e.code, 'openai' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert "set OPENAI_API_KEY" in done.stderr, done.stderr
    assert "exit 1 False" in done.stderr  # no retries, and the SDK was never imported


def test_the_built_in_key_table_matches_the_providers() -> None:
    from paperbench.llm._anthropic import AnthropicAPI
    from paperbench.llm._openai import OpenAIAPI
    from paperbench.llm._registry import _BUILTIN_KEYS

    for name, cls in (("openai", OpenAIAPI), ("anthropic", AnthropicAPI)):
        assert _BUILTIN_KEYS[name] == (cls.key_env, cls.base_url_env)


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_request_timeout_is_a_duration(value: str) -> None:
    from typer.testing import CliRunner

    from paperbench.cli import app as main

    result = CliRunner().invoke(main, ["models", "check", "openai/x", "--request-timeout", value])
    assert result.exit_code == 2
    assert "--request-timeout" in result.output and "duration" in result.output
