"""Where a group's papers come from is decided once, when it is planned, and recorded in
group.json: a resume or a Ray worker reads the same papers whatever its environment or
working directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paperbench.runs._config import EvalConfig
from paperbench.runs._group import plan_group
from paperbench.runs._pipeline import paper_source
from paperbench.runs._store import GroupConfig
from paperbench.sandbox import SandboxConfig

RUBRIC = {
    "id": "root",
    "requirements": "Replicate it.",
    "weight": 1,
    "sub_tasks": [
        {
            "id": "leaf",
            "requirements": "Code for it.",
            "weight": 1,
            "sub_tasks": [],
            "task_category": "Code Development",
            "finegrained_task_category": None,
        }
    ],
    "task_category": None,
    "finegrained_task_category": None,
}


def _data_dir(root: Path) -> Path:
    folder = root / "papers" / "elsewhere"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("id: elsewhere\ntitle: A paper from elsewhere\n")
    (folder / "paper.md").write_text("# A paper from elsewhere\n")
    (folder / "rubric.json").write_text(json.dumps(RUBRIC))
    (folder / "blacklist.txt").write_text("none\n")
    return root


def _plan() -> GroupConfig:
    config = EvalConfig.model_validate(
        {"group": "g", "agents": ["dummy"], "judge": {"config": "dummy"}}
    )
    return plan_group(config, SandboxConfig(backend="local"))


def test_the_data_dir_from_the_environment_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data_dir(tmp_path / "data")
    monkeypatch.setenv("PAPERBENCH_DATA_DIR", str(data))
    config = _plan()
    assert config.data_dir == str(data.resolve()) and config.papers_root is None
    assert config.papers == ["elsewhere"] and config.paper_set == "all"
    # later, without the variable and from another folder, the same paper
    monkeypatch.delenv("PAPERBENCH_DATA_DIR")
    monkeypatch.chdir(tmp_path)
    paper = paper_source(GroupConfig.model_validate_json(config.model_dump_json())).load(
        "elsewhere"
    )
    assert paper.title == "A paper from elsewhere"


def test_the_bundled_papers_folder_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PAPERBENCH_DATA_DIR", raising=False)
    config = _plan()
    assert config.data_dir is None and config.paper_set == "bundled"
    assert config.papers_root is not None and "calibration-binning" in config.papers
    # a data directory set later does not change where this group's papers come from
    monkeypatch.setenv("PAPERBENCH_DATA_DIR", str(_data_dir(tmp_path / "data")))
    monkeypatch.chdir(tmp_path)
    assert paper_source(config).load("calibration-binning").id == "calibration-binning"


def test_a_paper_is_named_by_its_folder_or_its_id_and_recorded_by_its_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data_dir(tmp_path / "data")
    # as PaperBench's stochastic-interpolants folder holds the paper stochastic-interpolant
    (data / "papers" / "elsewhere").rename(data / "papers" / "elsewheres")
    monkeypatch.setenv("PAPERBENCH_DATA_DIR", str(data))
    config = plan_group(
        EvalConfig.model_validate(
            {
                "group": "g",
                "agents": ["dummy"],
                "judge": {"config": "dummy"},
                "papers": "elsewheres,elsewhere",
            }
        ),
        SandboxConfig(backend="local"),
    )
    assert config.papers == ["elsewhere"]  # one paper, by the id `papers list` prints
    assert paper_source(config).load("elsewhere").folder.name == "elsewheres"
