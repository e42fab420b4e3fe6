"""Prices, the cost ledger and costs.json, the mock provider, token counts, the public API."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from paperbench.errors import ConfigError
from paperbench.llm import (
    BudgetCaps,
    CostLedger,
    CostRecord,
    Model,
    ModelConfig,
    PriceTable,
    SystemMessage,
    ToolDef,
    Usage,
    UserMessage,
    count_message_tokens,
    count_tokens,
)
from tests.llm.helpers import gen


def test_price_lookup() -> None:
    table = PriceTable.load()
    assert table.lookup("openai/gpt-4o") is not None
    assert table.lookup("openai/gpt-4o-2024-08-06") == table.lookup("openai/gpt-4o")
    assert table.lookup("anthropic/claude-haiku-4-5-20251001") is not None
    assert table.lookup("ollama/llama3.2") is not None  # a glob entry
    assert table.lookup("openai/gpt-4o-mini") != table.lookup("openai/gpt-4o")
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=0, output_tokens=1_000_000)
    assert table.cost("openai/gpt-4o", usage) == pytest.approx(12.5)


def test_unknown_model_costs_null_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    table = PriceTable.load()
    with caplog.at_level(logging.WARNING, logger="paperbench.llm"):
        assert table.cost("openai/my-finetune", Usage(input_tokens=10)) is None
        assert table.cost("openai/my-finetune", Usage(input_tokens=10)) is None
    warnings = [r for r in caplog.records if "my-finetune" in r.getMessage()]
    assert len(warnings) == 1
    assert "PAPERBENCH_PRICES" in warnings[0].getMessage()


def test_user_price_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  openai/my-finetune: {input: 1, output: 2}\n")
    monkeypatch.setenv("PAPERBENCH_PRICES", str(prices))
    table = PriceTable.load()
    assert table.cost("openai/my-finetune", Usage(input_tokens=10**6)) == pytest.approx(1.0)
    assert table.lookup("openai/gpt-4o") is not None  # merged over the bundled table


def test_bad_price_file_is_one_line(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  openai/x: {input: -1, output: 2}\n")
    with pytest.raises(ConfigError) as info:
        PriceTable.load(prices)
    # a key that is not a plain name is quoted, as every JSON path in error messages is
    assert str(info.value).startswith(f'{prices}: $.models["openai/x"].input: ')
    assert "\n" not in str(info.value)


def test_ledger_rolls_up_and_round_trips(tmp_path: Path) -> None:
    ledger = CostLedger()
    ledger.add(CostRecord(model="m/a", label="agent_step", stage="rollout", cost_usd=1.0))
    ledger.add(CostRecord(model="m/a", label="agent_step", stage="rollout", cost_usd=None))
    ledger.add(CostRecord(model="m/b", label="judge_grading", stage="grading", cost_usd=0.5))
    ledger.add(
        CostRecord(
            model="m/b",
            label="judge_grading",
            stage="grading",
            outcome="cache_hit",
            cost_usd=0.0,
            saved_usd=0.5,
        )
    )
    ledger.add(CostRecord(model="m/b", label="judge_ranking", stage="grading", outcome="failed"))
    report = ledger.report()
    assert report.total.calls == 5
    assert report.total.cost_usd == pytest.approx(1.5)
    assert report.total.unpriced_calls == 2  # the null cost and the failure
    assert report.by_stage["grading"].cost_usd == pytest.approx(0.5)
    assert report.by_stage["grading"].saved_usd == pytest.approx(0.5)
    assert report.by_label["judge_grading"].cache_hits == 1
    assert report.by_model["m/a"].calls == 2
    assert ledger.spent("rollout") == pytest.approx(1.0)

    path = tmp_path / "run" / "costs.json"
    ledger.write(path)
    data = json.loads(path.read_text())
    assert data["version"] == 1 and data["total"]["calls"] == 5
    again = CostLedger.load(path, caps=BudgetCaps(run_usd=1.0))
    assert again.report().total == report.total
    assert again.spent() == pytest.approx(1.5)
    assert not list(path.parent.glob(".*.tmp"))


def test_mock_provider_default_and_scripted() -> None:
    class Plan(BaseModel):
        steps: list[str]
        done: bool
        score: int

    model = Model("mockllm/echo")
    out = gen(model, [SystemMessage(content="s"), UserMessage(content="hello")])
    assert out.text == "echo: hello" and out.cost_usd == 0.0
    assert out.usage.input_tokens > 0
    plan = gen(model, "plan", output=Plan)
    assert plan.parsed == Plan(steps=[], done=False, score=0)

    scripted = ModelConfig(
        model="mockllm/agent",
        options={
            "outputs": [
                {"tool_calls": [{"name": "bash", "arguments": {"cmd": "ls"}}]},
                {"json": {"steps": ["a"], "done": True, "score": 3}},
                {"text": "bye"},
            ]
        },
    )
    agent = Model(scripted)
    first = gen(agent, "go", tools=[ToolDef(name="bash")], label="agent_step")
    assert first.stop_reason == "tool_calls" and first.tool_calls[0].arguments == {"cmd": "ls"}
    assert gen(agent, "plan", output=Plan).parsed == Plan(steps=["a"], done=True, score=3)
    assert gen(agent, "x").text == "bye"
    assert gen(agent, "y").text == "echo: y"


def test_mock_options_reject_typos() -> None:
    with pytest.raises(ConfigError, match=r"options\.outptus"):
        gen(Model(ModelConfig(model="mockllm/x", options={"outptus": []})), "hi")


def test_token_counts_offline() -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 100
    openai_count = count_tokens(text, "openai/gpt-4o")
    claude_count = count_tokens(text, "anthropic/claude-haiku-4-5")
    assert 800 <= openai_count <= 1500  # ~1000 real o200k tokens
    assert claude_count > openai_count
    assert count_tokens("", "openai/gpt-4o") == 0
    messages = [SystemMessage(content="a"), UserMessage(content="b")]
    assert count_message_tokens(messages, "mockllm/x") == 2 * 4 + 2


def test_sdks_are_imported_lazily() -> None:
    import subprocess

    code = (
        "import sys, paperbench.llm, paperbench.testing; "
        "print(sorted(m for m in ('openai', 'anthropic', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_missing_sdk_gives_an_install_hint() -> None:
    import subprocess

    code = (
        "import sys; sys.modules['anthropic'] = None\n"  # as if it were not installed
        "import asyncio\n"
        "from paperbench.llm import Model\n"
        "from paperbench.errors import ProviderNotInstalledError\n"
        "try:\n"
        "    asyncio.run(Model('anthropic/claude-haiku-4-5').generate('hi'))\n"
        "except ProviderNotInstalledError as exc:\n"
        "    print(exc)\n"
        "print(asyncio.run(Model('mockllm/x').generate('still fine')).text)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines() == [
        "anthropic/claude-haiku-4-5: the anthropic provider needs the anthropic package: "
        "pip install 'anthropic>=2,<3'",
        "echo: still fine",
    ], out.stderr


def _generate_in_child(config: ModelConfig) -> str:
    import asyncio

    return asyncio.run(Model(config).generate("from the child")).text


def test_model_builds_in_another_process_from_its_config() -> None:
    import multiprocessing

    config = ModelConfig(model="mockllm/child", api_key="sk-never-sent", max_connections=2)  # type: ignore[arg-type]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_generate_in_child, (config,)) == "echo: from the child"


def test_calls_refused_before_sending_are_not_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    from paperbench.errors import BudgetExhaustedError, MissingKeyError

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.chdir(Path(__file__).parent)  # no .env here
    ledger = CostLedger()
    for _ in range(2):
        with pytest.raises(MissingKeyError):
            gen(Model(ModelConfig(model="openai/gpt-4o"), ledger=ledger), "hi")
    capped = CostLedger(caps=BudgetCaps(run_usd=0.0))
    with pytest.raises(BudgetExhaustedError):
        gen(Model(ModelConfig(model="mockllm/model"), ledger=capped), "hi")
    gen(Model(ModelConfig(model="mockllm/model"), ledger=ledger), "hi")
    total = ledger.report().total
    assert (total.calls, total.sent, total.refused) == (3, 1, 2)
    assert capped.report().total.refused == 1 and capped.report().total.sent == 0
    # records written before the field existed: a budget refusal was never sent either
    old = CostRecord(model="m", label="x", outcome="budget_exhausted")
    assert CostLedger([old]).report().total.refused == 1


def test_billed_input_counts_cached_tokens_at_their_rate_and_a_batch_at_its_discount() -> None:
    """gpt-4o: cached input at half the input price; Anthropic's cache writes at 1.25×;
    a batched request at the provider's batch discount (half)."""
    table = PriceTable.load()
    usage = Usage(input_tokens=10_000, cached_input_tokens=6_000)
    assert table.billed_input("openai/gpt-4o", usage) == 4_000 + 3_000
    assert table.billed_input("openai/gpt-4o", usage, batched=True) == 3_500
    written = Usage(input_tokens=10_000, cache_write_tokens=4_000)
    assert table.billed_input("anthropic/claude-sonnet-4-5", written) == 6_000 + 5_000
    assert table.billed_input("nobody/unknown", usage) is None


def test_a_batchs_worst_case_for_an_estimated_model_is_bounded_by_the_bytes_it_sends() -> None:
    """Anthropic has no offline tokenizer, so its batch worst case is the body's UTF-8 bytes
    (no token stands for less than a byte): dense text an estimate would undercount still
    cannot pass a cap the worst case was held against."""
    from paperbench.llm._batch import _worst_usd
    from paperbench.llm._types import ModelRequest

    model = Model(ModelConfig(model="anthropic/claude-sonnet-4-5", api_key="sk-ant-test"))
    text = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(3000))  # 3 bytes each
    request = ModelRequest(messages=(UserMessage(content=text),), max_tokens=100)
    _, body = model.api.request_params(request)
    sent = len(json.dumps(body, ensure_ascii=False).encode())
    assert sent > 9000
    bound = PriceTable.load().batch_cost(
        "anthropic/claude-sonnet-4-5", Usage(input_tokens=sent, output_tokens=100)
    )
    assert bound is not None and _worst_usd(model, request, body) >= bound
