"""The rollout stage's own cost per agent step, and what a snapshot of a big submission costs.

A rollout of the bundled paper calibration-binning with an instant fake model (the real
OpenAI SDK against paperbench's FakeLLMServer on 127.0.0.1) and an agent that, each step,
asks the model, runs the answered bash command in the sandbox and writes the step's events
to the transcript (appended, flushed and synced per event). In the same run, the same
command is also run bare (``sandbox.exec``, nothing else), so::

    overhead = (step time - model call) - bare exec

is what the stage adds around a tool call (dispatch, transcript writes). Then a 200 MB
submission (incompressible data) is snapshotted as the snapshot loop does. Prints a table;
nothing is asserted. Goal: under 50 ms of overhead per step at the median.

    .venv/bin/python bench/rollout.py [--steps 40] [--backend local|docker|both] [--mb 200]
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
    MessageEvent,
    ModelCallEvent,
    RunContext,
    ToolEvent,
    rollout,
)
from paperbench.llm import Message, ModelConfig, SystemMessage, ToolDef, ToolMessage, UserMessage
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--backend", choices=["local", "docker", "both"], default="both")
    parser.add_argument("--mb", type=int, default=200, help="size of the snapshotted submission")
    args = parser.parse_args()
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
    console = Console()
    console.print(table)
    console.print(snaps)


if __name__ == "__main__":
    main()
