from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from paperbench.errors import ConfigError
from paperbench.judge import FaithfulConfig, SimpleConfig, catalog_names, load_judge_config
from paperbench.judge._config import catalog_dir

from .conftest import ROOT


@pytest.mark.parametrize("name", catalog_names())
def test_every_catalog_config_loads_and_validates(name: str) -> None:
    loaded = load_judge_config(name)
    assert loaded.config.name == name
    assert loaded.identity.name == name
    assert len(loaded.identity.sha256) == 64
    for role, text in loaded.prompts.items():
        assert text.strip(), role


def test_the_catalog_holds_the_four_modes() -> None:
    modes = {load_judge_config(n).config.mode for n in catalog_names()}
    assert modes == {"simple", "simple-faithful", "dummy", "random"}
    assert "simple" in catalog_names()


def test_the_catalog_ships_as_package_data_from_the_top_level_folder() -> None:
    assert catalog_dir().resolve() == (ROOT / "judge").resolve()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "_catalog/**/*" in pyproject["tool"]["setuptools"]["package-data"]["paperbench"]


def test_faithful_roles_and_identity_models() -> None:
    loaded = load_judge_config("simple-faithful")
    assert isinstance(loaded.config, FaithfulConfig)
    assert loaded.identity.models == {
        "ranking": "openai/o3-mini-2025-01-31",
        "grading": "openai/o3-mini-2025-01-31",
        "parsing": "openai/gpt-4o-2024-08-06",
    }
    assert set(loaded.prompts) == {"system", "paper", "leaf", "ranking", "parsing"}


def _copy_catalog(tmp_path: Path) -> Path:
    folder = tmp_path / "judges"
    shutil.copytree(ROOT / "judge", folder)
    return folder


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_judge_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path) + ": ")
    return message


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        (
            "mode: simple\nroles: {grading: openai/o3-mini}\nbudgets: {max_filez: 3}\n",
            "$.budgets.max_filez: unknown key",
        ),
        ("mode: simple\nroles: {grading: openai/o3-mini}\ncolour: red\n", "$.colour: unknown key"),
        ("mode: clever\n", "$.mode: expected one of simple, simple-faithful, dummy, random"),
        ("roles: {grading: openai/o3-mini}\n", "$.mode: missing"),
        ("mode: simple\nroles: {grading: gpt-4o}\n", "$.roles.grading.model:"),
        (
            "mode: simple-faithful\nroles: {ranking: openai/a, grading: openai/b}\n",
            "$.roles.parsing: the simple-faithful mode needs a model here",
        ),
        (
            "mode: simple\nroles: {grading: openai/a, ranking: openai/b}\n",
            "$.roles.ranking: the simple mode ranks files without a model",
        ),
        ("mode: random\nseed: many\n", "$.seed:"),
        ("mode: dummy\nsamples: 0\n", "$.samples:"),
        ("mode: simple\nroles: {grading: openai/a}\n  bad: [\n", "line "),
        ("- just\n- a list\n", "$: expected a mapping"),
    ],
)
def test_a_bad_config_is_one_line_naming_the_file_and_key_path(
    tmp_path: Path, yaml_text: str, expected: str
) -> None:
    path = _copy_catalog(tmp_path) / "mine.yaml"
    path.write_text(yaml_text)
    assert expected in _error(path)


def test_a_yaml_anywhere_uses_the_built_in_prompts_it_does_not_override(tmp_path: Path) -> None:
    path = tmp_path / "alone.yaml"
    path.write_text(
        "mode: simple-faithful\nroles: {ranking: openai/o3-mini, grading: openai/o3-mini, "
        "parsing: openai/gpt-4o-mini}\nprompts: {leaf: mine.md}\n"
    )
    (tmp_path / "mine.md").write_text("Grade {{ criterion }} strictly.\n")
    loaded = load_judge_config(path)
    builtin = load_judge_config("simple-faithful")
    assert loaded.prompts["leaf"] == "Grade {{ criterion }} strictly.\n"
    for role in ("system", "paper", "ranking", "parsing"):
        assert loaded.prompts[role] == builtin.prompts[role], role
    plain = tmp_path / "plain.yaml"
    plain.write_text("mode: simple\nroles: {grading: openai/o3-mini}\n")
    assert load_judge_config(plain).prompts == load_judge_config("simple").prompts


def test_a_missing_prompt_file_names_the_prompts_key(tmp_path: Path) -> None:
    path = tmp_path / "alone.yaml"
    path.write_text(
        "mode: simple\nroles: {grading: openai/o3-mini}\nprompts: {system: nowhere.md}\n"
    )
    message = _error(path)
    assert "$.prompts.system" in message and "relative to the config's folder" in message


def test_an_unknown_catalog_name_lists_the_catalog() -> None:
    with pytest.raises(ConfigError) as info:
        load_judge_config("no-such-judge")
    assert str(info.value).startswith("--judge: no judge config named 'no-such-judge'")
    assert "simple-faithful" in str(info.value)


def test_a_config_outside_the_catalog_uses_its_own_prompts(tmp_path: Path) -> None:
    folder = _copy_catalog(tmp_path)
    (folder / "prompts" / "mine.md").write_text("Grade {{ criterion }} strictly.\n")
    path = folder / "strict.yaml"
    path.write_text(
        "mode: simple\nroles: {grading: anthropic/claude-sonnet-4-5}\n"
        "prompts: {leaf: prompts/mine.md}\n"
    )
    loaded = load_judge_config(path)
    assert isinstance(loaded.config, SimpleConfig)
    assert loaded.prompts["leaf"] == "Grade {{ criterion }} strictly.\n"
    assert loaded.identity.name == "strict"
    assert loaded.identity.models == {"grading": "anthropic/claude-sonnet-4-5"}


def test_the_identity_changes_with_the_config_and_with_any_prompt_byte(tmp_path: Path) -> None:
    folder = _copy_catalog(tmp_path)
    path = folder / "simple.yaml"
    first = load_judge_config(path).identity
    assert load_judge_config(path).identity == first
    assert first == load_judge_config("simple").identity  # same bytes, same identity
    prompt = folder / "prompts" / "grade_leaf.md"
    prompt.write_bytes(prompt.read_bytes() + b" ")
    changed_prompt = load_judge_config(path).identity
    assert changed_prompt.sha256 != first.sha256
    path.write_text(path.read_text().replace("samples: 1", "samples: 3"))
    assert load_judge_config(path).identity.sha256 != changed_prompt.sha256
    # a prompt file the config does not use does not change its identity
    before = load_judge_config(folder / "dummy.yaml").identity
    (folder / "prompts" / "rank_files.md").write_text("changed\n")
    assert load_judge_config(folder / "dummy.yaml").identity == before


def test_the_submission_budget_is_what_the_window_leaves_capped_by_the_config() -> None:
    from paperbench.judge._config import Budgets

    budgets = Budgets(context_window=128_000, answer_tokens=10_000)
    assert budgets.submission_budget(30_000) == 88_000
    capped = Budgets(context_window=128_000, answer_tokens=10_000, submission_tokens=12_000)
    assert capped.submission_budget(30_000) == 12_000
    assert capped.submission_budget(110_000) == 8_000
    assert capped.submission_budget(200_000) == 0
