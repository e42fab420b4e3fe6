"""A small tool-using agent for the rollout tests: it asks the model, runs the bash calls it
answers with, and stops when an answer has no tool call. On resume it rebuilds the
conversation from the transcript, so no answered model call is sent again.

Run as a script (``python -m tests.agents.step_agent OUT BASE_URL [--resume]``), it does one
rollout of the bundled paper calibration-binning on the local backend: the subprocess that
the kill-and-resume test kills.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from paperbench.agents import (
    Agent,
    AgentLimits,
    AgentOutcome,
    MessageEvent,
    ModelCallEvent,
    RunContext,
    ToolEvent,
)
from paperbench.agents._rollout import rollout
from paperbench.agents._rollout_files import RolloutResult
from paperbench.agents._rollout_plan import RolloutOptions
from paperbench.llm import (
    AssistantMessage,
    Message,
    ModelConfig,
    SystemMessage,
    ToolDef,
    ToolMessage,
    UserMessage,
)
from paperbench.papers import PaperSource
from paperbench.sandbox import NetworkPolicy, SandboxConfig

REPO = Path(__file__).resolve().parents[2]
INSTRUCTIONS = "Reproduce the paper in /home/paper; leave your work in /home/submission."
BASH = ToolDef(
    name="bash",
    description="Run a bash command in /home/submission.",
    parameters={
        "type": "object",
        "properties": {"cmd": {"type": "string"}},
        "required": ["cmd"],
    },
)
RESTARTED = "The environment was restarted from the last snapshot of /home/submission."


class StepAgent(Agent):
    name = "step-agent"

    async def run(self, ctx: RunContext) -> AgentOutcome:
        assert ctx.model is not None
        messages: list[Message] = [e.message for e in ctx.history if isinstance(e, MessageEvent)]

        def say(message: Message) -> None:
            messages.append(message)
            ctx.transcript.append(MessageEvent(message=message, step=ctx.limits.steps))

        if not messages:
            say(SystemMessage(content="You are a careful engineer."))
            say(UserMessage(content=ctx.instructions))
        if ctx.resumed:
            last = messages[-1]
            if isinstance(last, AssistantMessage):  # its tools never ran to the end
                for call in last.tool_calls:
                    say(ToolMessage(tool_call_id=call.id, content="interrupted", is_error=True))
            say(UserMessage(content=RESTARTED))
        while True:
            ctx.limits.check()
            out = await ctx.model.generate(messages, tools=[BASH], label="agent_step")
            ctx.limits.steps += 1
            step = ctx.limits.steps
            ctx.transcript.append(
                ModelCallEvent(
                    model=out.model,
                    usage=out.usage,
                    cost_usd=out.cost_usd,
                    latency_s=out.latency_s,
                    step=step,
                )
            )
            say(out.assistant_message())
            if not out.tool_calls:
                return AgentOutcome(status="submitted", summary=out.text)
            for call in out.tool_calls:
                t0 = time.monotonic()
                result = await ctx.sandbox.exec(
                    str(call.arguments.get("cmd", "")), timeout=120, workdir="/home/submission"
                )
                text = result.stdout + result.stderr
                ctx.transcript.append(
                    ToolEvent(
                        tool_call_id=call.id,
                        name=call.name,
                        arguments=call.arguments,
                        output=text,
                        exit_code=result.exit_code,
                        duration_s=time.monotonic() - t0,
                        step=step,
                    )
                )
                say(ToolMessage(tool_call_id=call.id, content=text or "(no output)"))


class CrashingAgent(Agent):
    name = "crashing-agent"

    async def run(self, ctx: RunContext) -> AgentOutcome:
        await ctx.sandbox.exec("echo partial > partial.txt", timeout=30)
        raise RuntimeError("the agent broke")


def run_once(out: Path, base_url: str, *, resume: bool) -> RolloutResult:
    (out.parent / "sandboxes").mkdir(parents=True, exist_ok=True)
    paper = PaperSource(repo_root=REPO).load("calibration-binning")
    return asyncio.run(
        rollout(
            paper,
            StepAgent(),
            options=RolloutOptions(
                model_config=ModelConfig(model="openai/gpt-4o", base_url=base_url),
                sandbox=SandboxConfig(backend="local", local_root=out.parent / "sandboxes"),
                network=NetworkPolicy.NONE,
                snapshot_every_s=0.2,
                limits=AgentLimits(wall_time_s=300, steps=20),
                instructions=INSTRUCTIONS,
            ),
            out_dir=out,
            resume=resume,
        )
    )


if __name__ == "__main__":
    result = run_once(Path(sys.argv[1]), sys.argv[2], resume="--resume" in sys.argv[3:])
    print(result.status.status)
