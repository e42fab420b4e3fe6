"""The tools and the replay agent in a Docker sandbox (the agent image)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from paperbench.agents import AgentOutcome, ToolSet, ToolSettings, load_agent, run_tool
from paperbench.llm import ToolCall
from paperbench.sandbox import DockerBackend
from tests.sandbox.docker_fixtures import sweep

from .conftest import Rig, run, wait_for_file, with_context

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.docker
def test_replay_and_a_background_job_in_docker(
    tmp_path: Path, docker_client: Any, docker_images: dict[str, str]
) -> None:
    paper = "momentum-conditioning"
    agent = load_agent(f"replay-{paper}").build(None)
    reference = ROOT / "examples" / paper / "reference" / "submission"

    async def body(rig: Rig) -> tuple[AgentOutcome, dict[str, bytes], str]:
        outcome = await agent.run(rig.ctx)
        got = {
            f.relative_to(reference).as_posix(): await rig.sandbox.read_file(
                f"/home/submission/{f.relative_to(reference).as_posix()}"
            )
            for f in reference.rglob("*")
            if f.is_file()
        }
        tools = ToolSet.for_sandbox(ToolSettings(), rig.sandbox)
        try:
            start = ToolCall(
                id="j", name="bash", arguments={"command": "sleep 1; echo hi", "background": True}
            )
            await run_tool(rig.ctx, start, tools)
            await wait_for_file(rig.sandbox, "/tmp/jobs/1.exit")
            check = ToolCall(
                id="k", name="bash", arguments={"command": "cat /tmp/jobs/1.log /tmp/jobs/1.exit"}
            )
            later = (await run_tool(rig.ctx, check, tools)).output
        finally:
            await tools.aclose()
        return outcome, got, later

    try:
        outcome, got, later = run(
            with_context(
                tmp_path,
                body,
                backend=DockerBackend(client=docker_client),
                image=docker_images["paperbench-agent"],
            ),
            timeout=300,
        )
    finally:
        sweep(docker_client)
    assert outcome.status == "submitted"
    expected = {
        f.relative_to(reference).as_posix(): f.read_bytes()
        for f in reference.rglob("*")
        if f.is_file()
    }
    assert got == expected
    assert later.split() == ["hi", "0"]
