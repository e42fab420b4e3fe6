"""Tools (background jobs, output caps, web_fetch only with a network), agent configs and the
catalog, and the replay agent rebuilding the bundled papers' reference submissions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from paperbench.agents import (
    ReplayAgent,
    ToolSet,
    ToolSettings,
    instructions_text,
    load_agent,
    run_tool,
    tool_defs,
)
from paperbench.agents._config import catalog_names
from paperbench.errors import ConfigError
from paperbench.llm import ToolCall
from paperbench.sandbox import NetworkPolicy

from .conftest import Rig, run, wait_for_file, with_context

ROOT = Path(__file__).resolve().parents[2]


def test_a_background_job_outlives_its_call_and_can_be_checked_later(tmp_path: Path) -> None:
    async def body(rig: Rig) -> tuple[str, str]:
        tools = ToolSet.for_sandbox(ToolSettings(), rig.sandbox)
        try:
            start = ToolCall(
                id="c1",
                name="bash",
                arguments={"command": "sleep 1; echo finished", "background": True},
            )
            started = await run_tool(rig.ctx, start, tools)
            assert "job 1" in started.output and not started.is_error
            check = ToolCall(
                id="c2", name="bash", arguments={"command": "cat /tmp/jobs/1.exit || echo running"}
            )
            early = (await run_tool(rig.ctx, check, tools)).output
            await wait_for_file(rig.sandbox, "/tmp/jobs/1.exit")
            later = ToolCall(
                id="c3",
                name="bash",
                arguments={"command": "cat /tmp/jobs/1.log; echo code=$(cat /tmp/jobs/1.exit)"},
            )
            return early, (await run_tool(rig.ctx, later, tools)).output
        finally:
            await tools.aclose()

    early, later = run(with_context(tmp_path, body))
    assert "running" in early
    assert "finished" in later and "code=0" in later


def test_output_is_capped_with_the_cut_said_and_timeouts_are_errors(tmp_path: Path) -> None:
    async def body(rig: Rig) -> tuple[str, bool, str]:
        tools = ToolSet.for_sandbox(ToolSettings(output_chars=1000), rig.sandbox)
        long = ToolCall(id="c1", name="bash", arguments={"command": "seq 1 5000"})
        slow = ToolCall(id="c2", name="bash", arguments={"command": "sleep 5", "timeout": 0.5})
        out = (await run_tool(rig.ctx, long, tools)).output
        timed = await run_tool(rig.ctx, slow, tools)
        return out, timed.is_error and timed.timed_out, timed.output

    out, timed_out, message = run(with_context(tmp_path, body))
    assert out.startswith("1\n2\n") and out.rstrip().endswith("5000")
    assert "characters cut from the middle" in out and len(out) < 1200
    assert timed_out and "background: true" in message


def test_python_search_and_read_tools(tmp_path: Path) -> None:
    async def body(rig: Rig) -> list[str]:
        tools = ToolSet.for_sandbox(ToolSettings(search_max_matches=2), rig.sandbox)
        calls = [
            ToolCall(id="p", name="python", arguments={"code": "print(sum(range(10)))"}),
            ToolCall(
                id="s",
                name="search_file",
                arguments={"pattern": "line|paper", "path": "/home/paper"},
            ),
            ToolCall(
                id="r",
                name="read_file_chunk",
                arguments={"path": "/home/paper/paper.md", "start_line": 3, "n_lines": 1},
            ),
        ]
        return [(await run_tool(rig.ctx, c, tools)).output for c in calls]

    py, search, chunk = run(
        with_context(tmp_path, body, files={"/home/paper/more.md": "line\nline\n"})
    )
    assert py.strip() == "45"
    assert "matches; the first 2 shown" in search
    assert chunk.splitlines()[0] == "     3\tline two" and "[3 lines in file]" in chunk


def test_web_fetch_is_offered_only_when_the_sandbox_has_a_network(tmp_path: Path) -> None:
    async def names(network: NetworkPolicy) -> list[str]:
        async def body(rig: Rig) -> list[str]:
            return [d.name for d in tool_defs(ToolSet.for_sandbox(ToolSettings(), rig.sandbox))]

        return await with_context(tmp_path / network.value, body, network=network)

    assert "web_fetch" not in run(names(NetworkPolicy.NONE))
    assert "web_fetch" in run(names(NetworkPolicy.FULL))


def test_every_catalog_config_loads() -> None:
    names = catalog_names()
    assert {"basic", "iterative", "dummy", "papercoder"} <= set(names)
    assert {"replay-calibration-binning", "replay-momentum-conditioning"} <= set(names)
    for name in names:
        loaded = load_agent(name)
        assert loaded.config.name == name and len(loaded.identity.sha256) == 64
    # root only where the agent installs system packages, as PaperBench's do
    roots = {n for n in names if load_agent(n).config.sandbox_user == "root"}
    assert roots == {
        "basic",
        "iterative",
        "paperbench-basic",
        "paperbench-iterative",
        "papercoder",  # its repair rounds run reproduce.sh as the reproduction does
    }
    assert "reproduce.sh" in instructions_text(False)
    assert "Code-Dev" in instructions_text(True)


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        ("type: basic\nmodle: openai/gpt-4o\n", "$.modle", "unknown key"),
        ("type: basic\nlimits: {stepz: 3}\n", "$.limits.stepz", "unknown key"),
        ("type: basic\ntools: {enabled: [bash, shell]}\n", "$.tools.enabled[1]", "Input should be"),
        ("type: clever\n", "$.type", "expected one of basic"),
        ("model: openai/gpt-4o\n", "$.type", "missing"),
        ("type: basic\nprompts: {system: nope.md}\n", "$.prompts.system", "cannot be read"),
        ("- a list\n", "$", "expected a mapping"),
        ("type: dummy\nsandbox_user: admin\n", "$.sandbox_user", "Input should be"),
    ],
)
def test_config_errors_are_one_line_naming_file_and_key(
    tmp_path: Path, text: str, where: str, says: str
) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_agent(path)
    line = str(info.value)
    assert "\n" not in line and line.startswith(f"{path}: {where}: ") and says in line


def test_a_model_agent_without_a_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"\$\.model: the basic agent needs a model"):
        load_agent("basic").build(None)


def test_unknown_catalog_name_lists_the_catalog() -> None:
    with pytest.raises(ConfigError, match=r"no agent config named 'bsic'.*basic"):
        load_agent("bsic")


@pytest.mark.parametrize("paper", ["calibration-binning", "momentum-conditioning"])
def test_replay_rebuilds_the_reference_submission(tmp_path: Path, paper: str) -> None:
    agent = load_agent(f"replay-{paper}").build(None)
    assert isinstance(agent, ReplayAgent)
    reference = ROOT / "examples" / paper / "reference" / "submission"

    async def body(rig: Rig) -> tuple[str, dict[str, bytes], str]:
        outcome = await agent.run(rig.ctx)
        got = {}
        for file in reference.rglob("*"):
            if file.is_file():
                rel = file.relative_to(reference).as_posix()
                got[rel] = await rig.sandbox.read_file(f"/home/submission/{rel}")
        log = await rig.sandbox.exec(
            "cd /home/submission && git status --short && git log --oneline", timeout=30
        )
        return outcome.status, got, log.stdout

    status, got, log = run(with_context(tmp_path, body))
    assert status == "submitted"
    expected = {
        f.relative_to(reference).as_posix(): f.read_bytes()
        for f in reference.rglob("*")
        if f.is_file()
    }
    assert got == expected
    assert log.strip().endswith("reference submission")  # committed, nothing left over


def test_background_jobs_end_with_the_run(tmp_path: Path) -> None:
    async def body(rig: Rig) -> str:
        tools = ToolSet.for_sandbox(ToolSettings(), rig.sandbox)
        start = ToolCall(
            id="j",
            name="bash",
            arguments={"command": "sleep 1.5; touch /tmp/late", "background": True},
        )
        await run_tool(rig.ctx, start, tools)
        await asyncio.sleep(0.3)
        await tools.aclose()
        await asyncio.sleep(2.5)
        check = await rig.sandbox.exec("ls /tmp/late /tmp/jobs/1.exit 2>&1; true", timeout=30)
        return check.stdout

    out = run(with_context(tmp_path, body))
    assert "No such file" in out and "/tmp/late\n" not in out
