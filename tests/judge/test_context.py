from __future__ import annotations

from pathlib import Path

import pytest

from paperbench.judge import build_view
from paperbench.judge._context import SubmissionIndex, select_context
from paperbench.judge._view import ReproductionSummary, ViewFile
from paperbench.llm import count_tokens

from .conftest import example, write_executed

MODEL = "openai/gpt-4o"


def _shown(context) -> list[str]:  # type: ignore[no-untyped-def]
    return [f.path for f in context.files]


def _counted(context) -> int:  # type: ignore[no-untyped-def]
    """The tokens of every fenced text the context holds, counted afresh (+1 per block)."""
    texts = [f.text for f in context.files]
    texts += [t for t in (context.reproduce_sh, context.log.text if context.log else None) if t]
    return sum(count_tokens(t, MODEL) + 1 for t in texts)


@pytest.fixture(scope="module")
def partial():  # type: ignore[no-untyped-def]
    submission, log = example("calibration-binning", "partial")
    return build_view(submission, log=log)


def test_code_development_ranks_the_file_the_leaf_is_about_first(partial) -> None:  # type: ignore[no-untyped-def]
    leaf = "The expected calibration error uses 15 equal-width bins over the confidence."
    context = select_context(partial, "Code Development", 50_000, leaf)
    assert _shown(context)[0] == "calib/metrics.py"
    leaf = "fit_temperature returns the T minimising the NLL of the logits / T."
    context = select_context(partial, "Code Development", 50_000, leaf)
    assert _shown(context)[0] == "calib/methods.py"


def test_code_development_sees_code_docs_and_the_script_but_no_log(partial) -> None:  # type: ignore[no-untyped-def]
    context = select_context(partial, "Code Development", 50_000, "the data generator")
    assert set(_shown(context)) == {
        "README.md", "calib/__init__.py", "calib/data.py", "calib/methods.py",
        "calib/metrics.py", "calib/train.py", "main.py",
    }  # fmt: skip
    assert context.reproduce_sh is not None and "reproduce.sh" in context.reproduce_sh
    assert context.log is None and context.log_note is None


def test_code_execution_also_sees_the_log(partial) -> None:  # type: ignore[no-untyped-def]
    context = select_context(partial, "Code Execution", 50_000, "the main experiment runs")
    assert context.log is not None and "ECE uncal" in context.log.text
    assert context.reproduce_sh is not None


def test_code_dev_mode_shows_neither_script_nor_log(partial) -> None:  # type: ignore[no-untyped-def]
    context = select_context(partial, "Code Execution", 50_000, "runs", code_dev=True)
    assert context.reproduce_sh is None and context.log is None
    assert context.script_note == "not shown: Code-Dev grades code only"


@pytest.mark.parametrize("category", ["Code Development", "Code Execution", "Result Analysis"])
@pytest.mark.parametrize("budget", [0, 5, 40, 150, 400, 900, 2_000, 5_000])
def test_nothing_is_sent_that_the_budget_cannot_hold(partial, category, budget) -> None:  # type: ignore[no-untyped-def]
    leaf = "temperature scaling and the ECE on the test split, seeds 0 to 4"
    context = select_context(partial, category, budget, leaf)
    assert context.tokens <= budget
    assert _counted(context) == context.tokens


def test_a_file_too_big_for_the_budget_shows_its_best_chunks(make_submission) -> None:  # type: ignore[no-untyped-def]
    body = [f"def filler_{i}(x):\n    return x + {i}\n" for i in range(400)]
    body[300] = "def histogram_binning(probs, labels, n_bins):\n    return equal_mass_bins\n"
    root = make_submission({"big.py": "".join(body), "reproduce.sh": "python3 big.py\n"})
    view = build_view(root)
    context = select_context(view, "Code Development", 1_500, "histogram binning with n_bins")
    (shown,) = context.files
    assert shown.cut and shown.path == "big.py"
    assert "def histogram_binning" in shown.text
    assert "not shown ...]" in shown.text
    assert context.tokens <= 1_500


def test_max_files_and_the_reasons_files_are_left_out(make_submission) -> None:  # type: ignore[no-untyped-def]
    files: dict[str, str | bytes] = {f"m{i}.py": f"value_{i} = {i}\n" for i in range(5)}
    files["model.pt"] = b"\x00" * 64
    files["huge.md"] = "word " * 100_000
    view = build_view(make_submission(files))
    context = select_context(view, "Code Development", 50_000, "value", max_files=3)
    assert len(context.files) == 3
    reasons = {item.path: item.reason for item in context.left_out}
    # the oversized file's head is ranked with the rest (no word in common: last)
    assert list(reasons.values()).count("max_files") == 3
    assert reasons["huge.md"] == "max_files"
    assert "model.pt" not in reasons  # binary files are not candidates for Code Development


def test_result_analysis_sees_docs_and_changed_files_not_code(tmp_path: Path) -> None:
    executed = write_executed(
        tmp_path / "executed",
        {
            "reproduce.sh": "python3 run.py\n",
            "run.py": "print('ece')\n",
            "README.md": "# results\n",
            "results/table.md": "| ece | 0.019 |\n",
            "results/old.csv": "a,b\n",
            "data/input.csv": "1,2\n",
        },
        created=["results/table.md"],
        modified=["results/old.csv"],
        log="ece 0.019\n",
    )
    view = build_view(tmp_path / "unused", executed)
    context = select_context(view, "Result Analysis", 50_000, "ECE of temperature scaling")
    assert set(_shown(context)) == {"README.md", "results/table.md", "results/old.csv"}
    assert _shown(context)[-1] == "README.md"  # changed files come before docs at equal score
    assert context.log is not None and context.reproduce_sh is not None
    assert context.shortcut is None


def test_result_analysis_with_no_changed_files_is_a_shortcut(tmp_path: Path) -> None:
    executed = write_executed(
        tmp_path / "executed",
        {"reproduce.sh": "true\n", "README.md": "# nothing\n"},
        log="",
        status="failed",
    )
    view = build_view(tmp_path / "unused", executed)
    context = select_context(view, "Result Analysis", 50_000, "the table matches")
    assert context.shortcut == "no_changed_files"
    assert context.files == [] and context.tokens == 0
    # the other categories are graded as usual
    assert select_context(view, "Code Execution", 50_000, "x").shortcut is None


def test_result_analysis_without_reproduction_metadata_says_changes_are_unknown(partial) -> None:  # type: ignore[no-untyped-def]
    context = select_context(partial, "Result Analysis", 50_000, "ECE table")
    assert context.shortcut is None
    assert any("changed files are unknown" in note for note in context.notes)
    assert _shown(context) == ["README.md"]


def test_the_same_inputs_give_the_same_context(partial) -> None:  # type: ignore[no-untyped-def]
    index = SubmissionIndex(partial)
    first = select_context(partial, "Code Execution", 3_000, "Platt scaling", index=index)
    again = select_context(partial, "Code Execution", 3_000, "Platt scaling")
    assert first == again


def test_an_index_for_another_view_is_refused(partial) -> None:  # type: ignore[no-untyped-def]
    submission, log = example("calibration-binning", "buggy")
    other = SubmissionIndex(build_view(submission, log=log))
    with pytest.raises(ValueError, match="another view"):
        select_context(partial, "Code Development", 1_000, "x", index=other)


def test_a_binary_file_never_reaches_the_index_whatever_the_view_holds_of_it(
    make_submission,  # type: ignore[no-untyped-def]
) -> None:
    """The head of an oversized text file is shown; a binary file the run wrote is not, even
    when the view keeps its first bytes as ``head`` (for the faithful mode)."""
    view = build_view(make_submission({"notes.md": "secret_token = 1\n"}))
    binary = ViewFile(
        path="weights.bin",
        size=300_000,
        kind="binary",
        unread="binary",
        head="secret_token 2",
        changed="created",
    )
    oversized = ViewFile(
        path="big.md", size=300_000, kind="doc", unread="oversized", head="secret_token 3"
    )
    summary = ReproductionSummary(status="success", created=["weights.bin"])
    view = view.model_copy(
        update={"files": [*view.files, binary, oversized], "reproduction": summary}
    )
    context = select_context(view, "Result Analysis", 50_000, "secret token")
    assert sorted(_shown(context)) == ["big.md", "notes.md"]
    assert all("secret_token 2" not in f.text for f in context.files)
    assert [(x.path, x.reason) for x in context.left_out] == [("weights.bin", "binary")]
