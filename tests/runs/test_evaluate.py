"""``paperbench.evaluate()`` and ``paperbench.resume()`` from Python, and ``paperbench run``
as a mapping onto the same config: every config field is an option with its default."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import typer

import paperbench
from paperbench._model_options import flag_of, model_flags
from paperbench.agents import RolloutSettings
from paperbench.cli import app
from paperbench.errors import UsageError
from paperbench.judge import GradeSettings, JudgeEvalSettings
from paperbench.rcb import RcbSettings
from paperbench.reproduce import ReproduceSettings
from paperbench.runs import (
    EvalConfig,
    ExecutorSettings,
    JudgeSettings,
    ReproductionSettings,
    RunState,
    SandboxSettings,
)

PAPER = "calibration-binning"


def _leaves(model: type[typing.Any], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if (
            flag_of(field.metadata) is None
            and isinstance(kind, type)
            and hasattr(kind, "model_fields")
        ):
            found += _leaves(kind, (*path, name))
        else:
            found.append((*path, name))
    return found


@pytest.mark.parametrize(
    ("config", "name"),
    [
        (EvalConfig, "run"),
        (RolloutSettings, "rollout"),
        (ReproduceSettings, "reproduce"),
        (RcbSettings, "rcb run"),
        (GradeSettings, "grade"),
        (JudgeEvalSettings, "judge-eval"),
    ],
    ids=["run", "rollout", "reproduce", "rcb run", "grade", "judge-eval"],
)
def test_every_config_field_is_a_run_option_with_the_same_default(
    config: type[typing.Any], name: str
) -> None:
    flagged = {path: (field, flag) for path, field, flag in model_flags(config)}
    assert set(flagged) == set(_leaves(config)), "a config field without an option"
    command = typer.main.get_command(app)
    for word in name.split():
        command = command.commands[word]  # type: ignore[attr-defined]
    params = {p.opts[0]: p for p in command.params}  # options and arguments
    for path, (field, flag) in flagged.items():
        option = flag.name.split("/")[0]
        assert option in params, f"{'.'.join(path)}: no {option} on `paperbench {name}`"
        assert field.description, f"{'.'.join(path)}: no description (the option's help)"
        if field.is_required():
            assert params[option].required, f"{option}: optional, but the config requires it"
        elif flag.convert is None:
            default = field.get_default(call_default_factory=True)
            assert params[option].default == default, f"{option}: default differs from config"


def test_a_flag_converted_from_its_option_reaches_the_config() -> None:
    (path, _, flag) = next(
        item for item in model_flags(EvalConfig) if item[2].name == "--concurrency"
    )
    assert path == ("executor", "concurrency") and flag.convert is not None
    assert flag.convert(["reproduction=1"])["reproduction"] == 1
    assert flag.convert(None) == EvalConfig().executor.concurrency
    with pytest.raises(UsageError, match="--concurrency gpu=1"):
        flag.convert(["gpu=1"])


def test_evaluate_and_resume_from_python(tmp_path: Path) -> None:
    config = EvalConfig(
        group="py",
        runs_dir=tmp_path / "runs",
        papers=PAPER,
        seeds=2,
        judge=JudgeSettings(config="dummy"),
        sandbox=SandboxSettings(backend="local"),
        reproduction=ReproductionSettings(skip=True),
        report=False,
    )
    result = paperbench.evaluate(config)
    assert result.group_dir == tmp_path / "runs" / "py"
    assert [o.key.label for o in result.outcomes] == [
        f"{PAPER}/replay/seed-0",
        f"{PAPER}/replay/seed-1",
    ]
    assert all(o.status == "scored" and o.score == 1.0 for o in result.outcomes), result.outcomes
    assert not result.failed and not (result.group_dir / "summary.json").exists()
    assert [a.agent for a in result.summary.agents] == ["replay"]
    folder = result.outcomes[0].key.folder(result.group_dir)
    attempts = RunState.model_validate_json((folder / "run.json").read_bytes()).stages

    again = paperbench.resume("py", runs_dir=tmp_path / "runs", executor=ExecutorSettings())
    assert [o.score for o in again.outcomes] == [o.score for o in result.outcomes]
    after = RunState.model_validate_json((folder / "run.json").read_bytes()).stages
    assert after == attempts  # nothing was run again
    assert (result.group_dir / "summary.json").is_file()  # resume writes the report


def test_a_bad_value_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    config = EvalConfig(group="bad", runs_dir=tmp_path / "runs", papers="nosuch,paper")
    with pytest.raises(UsageError, match="--papers: unknown paper"):
        paperbench.evaluate(config)
    assert not (tmp_path / "runs").exists()
    with pytest.raises(UsageError, match="--resume elsewhere: no group there"):
        paperbench.resume("elsewhere", runs_dir=tmp_path / "runs")
