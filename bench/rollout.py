"""The rollout stage's own cost per agent step, and what a snapshot of a big submission costs.

A rollout of the bundled paper calibration-binning with an instant fake model (the real
OpenAI SDK against paperbench's FakeLLMServer on 127.0.0.1) and an agent that, each step,
asks the model, runs the answered bash command in the sandbox and writes the step's events
to the transcript (appended, flushed and synced per event). In the same run, the same
command is also run bare (``sandbox.exec``, nothing else), so::

    overhead = (step time - model call) - bare exec

is what the stage adds around a tool call (dispatch, transcript writes). Then a 200 MB
submission (incompressible data) is snapshotted as the snapshot loop does. Goal: under 50 ms
of overhead per step at the median.

Prompt caching: the real ``basic`` agent runs ``--cache-steps`` steps against the fake server
(which caches prompts as the providers do: OpenAI prefixes of 1,024+ tokens per
``prompt_cache_key``, Anthropic up to its ``cache_control`` breakpoints) with the agent's
``prompt_cache`` on and off, for an OpenAI and an Anthropic model. Per step: input tokens,
the share read from the cache, and the billed-equivalent input tokens (cache reads and writes
weighted by their price relative to fresh input, from the bundled price table). Prints
tables; nothing is asserted.

    .venv/bin/python bench/rollout.py [--steps 40] [--backend local|docker|both] [--mb 200]
                                      [--cache-steps 60] [--only steps|cache]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from paperbench.agents import (
    Agent,
    AgentLimits,
    AgentOutcome,
    BasicAgent,
    MessageEvent,
    ModelCallEvent,
    RunContext,
    ToolEvent,
    load_agent,
    read_transcript,
    rollout,
)
from paperbench.llm import (
    Message,
    Model,
    ModelConfig,
    PriceTable,
    SystemMessage,
    ToolDef,
    ToolMessage,
    Usage,
    UserMessage,
)
from paperbench.papers import PaperSource
from paperbench.sandbox import NetworkPolicy, SandboxConfig
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall

REPO = Path(__file__).resolve().parents[1]
COMMAND = "echo step >> log.txt && wc -l log.txt"
BASH = ToolDef(
    name="bash",
    parameters={"type": "object", "properties": {"cmd": {"type": "string"}}},
)


class _BenchAgent(Agent):
    name = "bench"

    def __init__(self, steps: int, snapshot_mb: int) -> None:
        self.steps = steps
        self.snapshot_mb = snapshot_mb
        self.step_s: list[float] = []
        self.model_s: list[float] = []
        self.bare_s: list[float] = []
        self.snapshot_s = 0.0
        self.snapshot_bytes = 0

    async def run(self, ctx: RunContext) -> AgentOutcome:
        assert ctx.model is not None
        messages: list[Message] = [SystemMessage(content="bench"), UserMessage(content="go")]
        for _ in range(self.steps):
            t0 = time.perf_counter()
            ctx.limits.check()
            out = await ctx.model.generate(messages, tools=[BASH], label="agent_step")
            t_model = time.perf_counter() - t0
            ctx.limits.steps += 1
            step = ctx.limits.steps
            ctx.transcript.append(ModelCallEvent(model=out.model, usage=out.usage, step=step))
            assistant = out.assistant_message()
            ctx.transcript.append(MessageEvent(message=assistant, step=step))
            for call in out.tool_calls:
                result = await ctx.sandbox.exec(str(call.arguments["cmd"]), timeout=60)
                ctx.transcript.append(
                    ToolEvent(
                        tool_call_id=call.id,
                        name=call.name,
                        arguments=call.arguments,
                        output=result.stdout,
                        exit_code=result.exit_code,
                        step=step,
                    )
                )
                reply = ToolMessage(tool_call_id=call.id, content=result.stdout)
                ctx.transcript.append(MessageEvent(message=reply, step=step))
            self.step_s.append(time.perf_counter() - t0)
            self.model_s.append(t_model)
            messages = messages[:2]  # keep requests the same size from step to step
            t1 = time.perf_counter()
            await ctx.sandbox.exec(COMMAND, timeout=60)
            self.bare_s.append(time.perf_counter() - t1)
        await ctx.sandbox.exec(
            f"head -c {self.snapshot_mb}M /dev/urandom > /home/submission/big.bin", timeout=600
        )
        with tempfile.TemporaryDirectory() as tmp:
            dest = Path(tmp) / "snap.tar.gz"
            t2 = time.perf_counter()
            await ctx.sandbox.snapshot("/home/submission", dest)
            self.snapshot_s = time.perf_counter() - t2
            self.snapshot_bytes = dest.stat().st_size
        await ctx.sandbox.exec("rm -f /home/submission/big.bin", timeout=60)
        return AgentOutcome(status="submitted")


def _ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.1f}"


async def _one(backend: str, steps: int, mb: int, server: FakeLLMServer) -> _BenchAgent:
    server.handler = lambda request: FakeReply(
        tool_calls=(FakeToolCall(name="bash", arguments={"cmd": COMMAND}),)
    )
    agent = _BenchAgent(steps, mb)
    with tempfile.TemporaryDirectory(prefix="paperbench-bench-") as tmp:
        result = await rollout(
            PaperSource(repo_root=REPO).load("calibration-binning"),
            agent,
            out_dir=Path(tmp) / "run",
            model_config=ModelConfig(model="openai/gpt-4o", base_url=server.openai_url),
            sandbox=SandboxConfig(backend=backend),  # type: ignore[arg-type]
            network=NetworkPolicy.NONE,
            snapshot_every_s=None,
            limits=AgentLimits(wall_time_s=3600),
            instructions="bench",
            labels={"paperbench.run": "bench-rollout"},
        )
    if result.status.status != "submitted":
        raise SystemExit(f"{backend}: the rollout ended as {result.status.status}: "
                         f"{result.status.error}")  # fmt: skip
    return agent


CACHE_MODELS = (
    ("openai/gpt-4o", "openai_url", {"prompt_cache_key": True}),
    ("anthropic/claude-sonnet-4-5", "anthropic_url", {}),
)
CACHE_COMMANDS = (
    "seq -f 'epoch %g loss 0.%g' 1 120",
    "ls -la /usr/bin | head -60",
    "python3 -c 'import sys; print(sys.version); print(sorted(sys.modules)[:80])'",
)


async def _cached_run(model: str, url: str, options: dict[str, object], steps: int,
                      cache: bool, server: FakeLLMServer) -> list[Usage]:  # fmt: skip
    """Per-step usage of ``steps`` steps of the basic agent with ``prompt_cache`` = cache."""
    calls = {"n": 0}

    def answer(request: object) -> FakeReply:
        calls["n"] += 1
        if calls["n"] > steps:
            return FakeReply(tool_calls=(FakeToolCall("submit", {"summary": "done"}),))
        command = CACHE_COMMANDS[calls["n"] % len(CACHE_COMMANDS)]
        return FakeReply(
            text=f"Step {calls['n']}: checking the training loop output.",
            tool_calls=(FakeToolCall("bash", {"command": command}),),
        )

    server.handler = answer
    loaded = load_agent("basic")
    config = loaded.config.model_copy(update={"prompt_cache": cache})
    agent = BasicAgent(config, loaded.prompts, None)
    with tempfile.TemporaryDirectory(prefix="paperbench-bench-") as tmp:
        out = Path(tmp) / "run"
        model_config = ModelConfig(model=model, base_url=url, api_key="x", options=options)
        agent.model = Model(model_config)  # the rollout builds its own; this sets the name
        result = await rollout(
            PaperSource(repo_root=REPO).load("calibration-binning"),
            agent,
            out_dir=out,
            model_config=model_config,
            sandbox=SandboxConfig(backend="local"),
            network=NetworkPolicy.NONE,
            snapshot_every_s=None,
            limits=AgentLimits(wall_time_s=3600, steps=steps + 5),
            labels={"paperbench.run": "bench-rollout-cache"},
        )
        if result.status.status != "submitted":
            raise SystemExit(f"{model}: the rollout ended as {result.status.status}: "
                             f"{result.status.error}")  # fmt: skip
        events = read_transcript(out / "transcript.jsonl")
    await agent.model.aclose()
    return [e.usage for e in events if isinstance(e, ModelCallEvent)]


def _cache_tables(steps: int) -> list[Table]:
    prices = PriceTable.load()
    summary = Table(title=f"prompt caching: the basic agent, {steps} steps, fake server")
    for column in ["model", "prompt_cache", "input tok/step", "cached share",
                   "billed-equiv. input tok/step", "ratio"]:  # fmt: skip
        summary.add_column(column, justify="left" if column == "model" else "right")
    per_step = Table(title="per step (every 10th), prompt_cache on")
    for column in ["model", "step", "input", "cached", "written", "billed-equiv."]:
        per_step.add_column(column, justify="left" if column == "model" else "right")
    with FakeLLMServer() as server:
        for model, attr, options in CACHE_MODELS:
            price = prices.lookup(model)
            assert price is not None, model
            read = (price.cached_input or price.input) / price.input
            write = (price.cache_write or price.input) / price.input

            def billed(u: Usage, read: float = read, write: float = write) -> float:
                fresh = max(0, u.input_tokens - u.cached_input_tokens - u.cache_write_tokens)
                return fresh + u.cached_input_tokens * read + u.cache_write_tokens * write

            runs = {}
            for cache in (False, True):
                runs[cache] = asyncio.run(
                    _cached_run(model, getattr(server, attr), options, steps, cache, server)
                )
            base = sum(billed(u) for u in runs[False]) / len(runs[False])
            for cache, usages in runs.items():
                total_in = sum(u.input_tokens for u in usages)
                cached = sum(u.cached_input_tokens for u in usages)
                mean = sum(billed(u) for u in usages) / len(usages)
                summary.add_row(
                    model,
                    "on" if cache else "off",
                    f"{total_in / len(usages):,.0f}",
                    f"{cached / total_in:.0%}" if total_in else "-",
                    f"{mean:,.0f}",
                    f"{mean / base:.2f}",
                )
            for index, u in enumerate(runs[True], start=1):
                if index == 1 or index % 10 == 0:
                    per_step.add_row(
                        model,
                        str(index),
                        f"{u.input_tokens:,}",
                        f"{u.cached_input_tokens:,}",
                        f"{u.cache_write_tokens:,}",
                        f"{billed(u):,.0f}",
                    )
    return [summary, per_step]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--backend", choices=["local", "docker", "both"], default="both")
    parser.add_argument("--mb", type=int, default=200, help="size of the snapshotted submission")
    parser.add_argument("--cache-steps", type=int, default=60)
    parser.add_argument("--only", choices=["steps", "cache"], default=None)
    args = parser.parse_args()
    console = Console()
    if args.only != "steps":
        for table in _cache_tables(args.cache_steps):
            console.print(table)
    if args.only == "cache":
        return
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-fake-server")
    backends = ["local", "docker"] if args.backend == "both" else [args.backend]
    table = Table(title=f"rollout: {args.steps} steps, instant fake model; snapshot {args.mb} MB")
    for column in ["backend", "", "median ms", "p90 ms"]:
        table.add_column(column, justify="right" if "ms" in column else "left")
    snaps = Table(title="snapshot of /home/submission")
    for column in ["backend", "MiB in", "archive MiB", "seconds", "MiB/s"]:
        snaps.add_column(column, justify="right")
    with FakeLLMServer() as server:
        for backend in backends:
            agent = asyncio.run(_one(backend, args.steps, args.mb, server))
            around = [s - m for s, m in zip(agent.step_s, agent.model_s, strict=True)]
            overhead = [a - b for a, b in zip(around, agent.bare_s, strict=True)]
            rows = [
                ("model call (fake, instant)", agent.model_s),
                ("step without the model call", around),
                ("bare exec of the same command", agent.bare_s),
                ("overhead (goal < 50 ms)", overhead),
            ]
            for label, values in rows:
                table.add_row(backend, label, _ms(values, 0.5), _ms(values, 0.9))
            snaps.add_row(
                backend,
                str(args.mb),
                f"{agent.snapshot_bytes / 2**20:.0f}",
                f"{agent.snapshot_s:.2f}",
                f"{args.mb / agent.snapshot_s:.0f}" if agent.snapshot_s else "-",
            )
    console.print(table)
    console.print(snaps)


if __name__ == "__main__":
    main()
