"""``paperbench.rollout(RolloutSettings)``: the rollout command from Python, and the one place
where a model and limits given over an agent config's are applied (for ``rollout`` and
``run`` alike)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import paperbench
from paperbench.agents import AgentLimits, RolloutSettings, load_agent
from paperbench.agents._rollout_settings import agent_overrides
from paperbench.errors import UsageError

PAPER = "calibration-binning"


def test_rollout_from_python_takes_the_settings_of_the_command(tmp_path: Path) -> None:
    out = tmp_path / "run"
    settings = RolloutSettings(
        paper=PAPER, agent="dummy", sandbox="local", network="none", out=out, max_steps=7
    )
    result = paperbench.rollout(settings)
    assert result.status.status == "submitted" and result.out_dir == out
    recorded = json.loads((out / "config.json").read_text())
    assert recorded["limits"]["steps"] == 7 and recorded["network"] == "none"
    again = paperbench.rollout(settings.model_copy(update={"out": None, "resume": str(out)}))
    assert again.already_finished


def test_rollout_settings_are_refused_before_any_work(tmp_path: Path) -> None:
    both = RolloutSettings(paper=PAPER, out=tmp_path / "a", resume=str(tmp_path))
    with pytest.raises(UsageError, match="--out FOLDER for a new run or --resume"):
        paperbench.rollout(both)
    assert not (tmp_path / "a").exists()
    with pytest.raises(ValueError, match="model"):
        RolloutSettings(paper=PAPER, model="no-provider")


def test_a_model_and_limits_given_win_over_the_agent_config() -> None:
    config = load_agent("basic").config
    model, limits = agent_overrides(
        config, model=None, base_url="http://127.0.0.1:9/v1", limits={"steps": 3, "tokens": None}
    )
    assert model is not None and model.model == config.model
    assert model.base_url == "http://127.0.0.1:9/v1"
    assert limits == config.limits.model_copy(update={"steps": 3}) != config.limits
    model, limits = agent_overrides(
        config, model="openai/gpt-4o", base_url=None, limits={}, max_connections=2
    )
    assert model is not None and (model.model, model.max_connections) == ("openai/gpt-4o", 2)
    assert isinstance(limits, AgentLimits) and limits == config.limits
