"""An API key never reaches a log line, a cache file, a cost file, an error or a dump."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path

import pytest
from pydantic import BaseModel

from paperbench.errors import ModelError
from paperbench.llm import Model, ModelConfig, ResponseCache
from paperbench.testing import FakeLLMServer, FakeReply, Fault
from tests.llm.helpers import config_for, gen

ENV_KEY = "sk-test-ENVSECRET-0123456789abcdef"
GIVEN_KEY = "sk-test-GIVENSECRET-0123456789abcdef"


class Verdict(BaseModel):
    score: int


def _files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


@pytest.mark.parametrize("protocol", ["chat", "responses", "messages"])
def test_key_never_in_logs_or_files(
    fake_llm: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    protocol: str,
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the SDKs' and httpx's included
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_KEY)
    monkeypatch.setenv("OPENAI_LOG", "debug")
    monkeypatch.setenv("ANTHROPIC_LOG", "debug")
    fake_llm.script(
        Fault.rate_limit(0.01),
        FakeReply(text="not json"),
        FakeReply(json={"score": 2}),
        Fault.http(401, "bad key"),
    )
    errors: list[str] = []
    with ResponseCache(tmp_path / "cache" / "responses.sqlite") as cache:
        for config in (
            config_for(protocol, fake_llm, cache=True),
            config_for(protocol, fake_llm, cache=True, api_key=GIVEN_KEY),
        ):
            model = Model(config, cache=cache)
            gen(model, "grade", output=Verdict, label="judge_grading")
            try:
                gen(model, "fail please")
            except ModelError as exc:
                errors.append(f"{exc!r} {exc} {exc.__cause__}")
            model.ledger.write(tmp_path / "run" / "costs.json")
            errors.append(repr(model) + repr(config) + config.model_dump_json())
    assert fake_llm.requests  # the keys did travel, in headers only
    sent = {
        r.headers.get("authorization", "") + r.headers.get("x-api-key", "")
        for r in fake_llm.requests
    }
    assert any(ENV_KEY in h for h in sent) and any(GIVEN_KEY in h for h in sent)

    assert "Request options" in caplog.text or "HTTP Request" in caplog.text, caplog.text[:2000]
    texts = [caplog.text, *errors]
    texts += [p.read_bytes().decode("utf-8", "replace") for p in _files_under(tmp_path)]
    for key in (ENV_KEY, GIVEN_KEY, "ENVSECRET", "GIVENSECRET"):
        assert all(key not in text for text in texts), key


def test_config_never_serialises_the_key() -> None:
    config = ModelConfig(model="openai/gpt-4o", api_key=GIVEN_KEY)  # type: ignore[arg-type]
    assert GIVEN_KEY not in repr(config)
    assert GIVEN_KEY not in config.model_dump_json()
    assert "api_key" not in config.model_dump()
    clone = pickle.loads(pickle.dumps(config))  # as Ray would ship it
    assert clone.api_key is None and clone.model == "openai/gpt-4o"
    assert config.api_key is not None  # the original keeps it
    assert GIVEN_KEY.encode() not in pickle.dumps(config)


# Every class exported by the packages that handle keys is either built here with a key and
# checked, or listed as holding none: a new export must be put in one of the two.
_HOLDS_NO_SECRET = {
    "paperbench.llm": {
        "AssistantMessage", "BudgetCaps", "CostJournal", "CostLedger", "CostRecord", "CostReport",
        "CostTotal", "ModelOutput", "ModelPrice", "ModelRequest", "OutputSchema", "PriceTable",
        "ResponseCache", "SystemMessage", "ToolCall", "ToolDef", "ToolMessage",
        "TransientError", "Usage", "UserMessage",
        # the coordinator sees an endpoint's provider, host and a hash, never its base URL
        "Coordinator", "Grant", "GroupSpend", "LocalCoordinator", "RayCoordinator",
    },
    "paperbench.sandbox": {
        "Blacklist", "BlacklistHit", "DiskUsage", "DockerBackend", "DockerEgressGateway",
        "EgressProxy", "ExecResult", "ExtractReport", "GpuRequest", "HostService", "LeftOutFile",
        "LocalBackend",
        "LocalSandbox", "NetworkLogEntry", "NetworkPolicy", "Sandbox", "SandboxBackend",
        "SandboxConfig", "SandboxLimits", "SkippedMember",
        # an untrusted tree's entries (paths, kinds, sizes) and its caps
        "Entry", "TreeLimits",
    },
    # a GatewayCall keeps request bodies, never their headers (the key is a header)
    "paperbench.gateway": {"GatewayCall"},
    "paperbench.rubric": {
        "Check", "FinegrainedCategory", "GradedTaskNode", "Issue", "RubricStats",
        "TaskCategory", "TaskNode", "TreeSummary",
    },
}  # fmt: skip


def _with_key(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[object]]:
    from paperbench.llm._registry import resolve  # internal: Model.target is the public way
    from paperbench.sandbox import SandboxSpec

    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_KEY)
    config = ModelConfig(model="openai/gpt-4o", api_key=GIVEN_KEY)  # type: ignore[arg-type]
    model = Model(config)
    from_env = Model("anthropic/claude-haiku-4-5")
    _, target = resolve(config)
    spec = SandboxSpec(
        image="paperbench-agent",
        env={"OPENAI_API_KEY": GIVEN_KEY},
        proxy_env={"HTTPS_PROXY": f"http://user:{ENV_KEY}@proxy.local:3128"},
    )
    from paperbench.gateway import ModelGateway
    from paperbench.sandbox import EgressSettings

    egress = EgressSettings(upstream_proxy=f"http://user:{ENV_KEY}@proxy.local:3128")

    gateway = ModelGateway(openai=config, anthropic=from_env.config, log_dir="/nonexistent")
    return {
        "ModelGateway": [gateway],
        "ModelConfig": [config],
        "Target": [target, from_env.target],
        "Model": [model, from_env],
        "ModelAPI": [model.api, from_env.api],
        "SandboxSpec": [spec],
        "EgressSettings": [egress],
    }


@pytest.mark.parametrize("package", sorted(_HOLDS_NO_SECRET))
def test_no_exported_type_shows_a_key(package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import inspect

    module = importlib.import_module(package)
    built = _with_key(monkeypatch)
    exported = {n for n in module.__all__ if inspect.isclass(getattr(module, n))}
    unclassified = exported - _HOLDS_NO_SECRET[package] - set(built)
    assert not unclassified, f"decide whether these can hold a key: {sorted(unclassified)}"
    for name in sorted(exported & set(built)):
        for value in built[name]:
            assert isinstance(value, getattr(module, name))
            for text in (repr(value), str(value)):
                for key in (ENV_KEY, GIVEN_KEY, "ENVSECRET", "GIVENSECRET"):
                    assert key not in text, f"{name}: {text}"
