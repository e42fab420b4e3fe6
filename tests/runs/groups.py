"""Groups of runs for the executor tests: a replayed agent whose reproduce.sh sleeps, the
local sandbox backend, the bundled paper calibration-binning."""

from __future__ import annotations

import asyncio
import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from paperbench.runs._config import EvalConfig
from paperbench.runs._group import open_group, plan_group, resolve_sandbox
from paperbench.runs._pipeline import RunSpec
from paperbench.runs._store import run_keys

PAPER = "calibration-binning"
CATALOG = Path(str(resources.files("paperbench") / "_catalog" / "agents"))


def sleeper_agent(folder: Path, sleep_s: float) -> Path:
    """A replayed agent whose submission's reproduce.sh sleeps ``sleep_s`` seconds."""
    script = (
        "#!/usr/bin/env bash\nset -euo pipefail\n"
        f"sleep {sleep_s}\nmkdir -p results\necho '{{\"slept\": {sleep_s}}}' > results/out.json\n"
    )
    command = f"cd /home/submission && cat > reproduce.sh <<'EOF'\n{script}EOF\necho done"
    answers: list[tuple[str, dict[str, Any]]] = [
        ("bash", {"command": command}),
        ("submit", {"summary": "a reproduce.sh that sleeps"}),
    ]
    lines = [
        {
            "time": 0.0,
            "step": step,
            "type": "message",
            "message": {
                "role": "assistant",
                "content": f"step {step}",
                "tool_calls": [
                    {"id": f"call_{step}", "name": name, "arguments": args, "parse_error": None}
                ],
                "reasoning": None,
                "reasoning_items": [],
            },
        }
        for step, (name, args) in enumerate(answers, start=1)
    ]
    (folder / "replays").mkdir(parents=True)
    shutil.copytree(CATALOG / "prompts", folder / "prompts")
    (folder / "replays" / f"{PAPER}.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines)
    )
    path = folder / "sleeper.yaml"
    path.write_text(
        "type: replay\nname: sleeper\ntranscript: replays/{paper}.jsonl\n"
        "limits:\n  wall_time_s: 300\n"
        "tools:\n  enabled: [bash, submit]\n  timeout_s: 60\n"
    )
    return path


def make_group(root: Path, name: str, sleep_s: float, seeds: int, **options: Any) -> list[RunSpec]:
    """A new group under ``root/runs/<name>``: ``seeds`` runs of the sleeper agent, the
    dummy judge unless ``options`` (fields of :class:`EvalConfig`) say otherwise, the local
    sandbox."""
    eval_config = EvalConfig.model_validate(
        {
            "group": name,
            "papers": PAPER,
            "agents": [str(sleeper_agent(root / f"agent-{name}", sleep_s))],
            "seeds": seeds,
            "judge": {"config": "dummy"},
            "sandbox": {"backend": "local"},
            **options,
        }
    )
    sandbox, _ = asyncio.run(resolve_sandbox(eval_config.sandbox))
    config = plan_group(eval_config, sandbox)
    group_dir = root / "runs" / name
    open_group(group_dir, config)
    return [RunSpec(group_dir=str(group_dir), key=key, config=config) for key in run_keys(config)]
