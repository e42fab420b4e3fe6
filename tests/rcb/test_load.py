"""Loading a problem set: the fixture set's papers, snippets and counts (by hand), the
tags' edge cases, and every malformed input as one InputError line naming file and line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from paperbench.errors import InputError
from paperbench.rcb._load import is_code_line, load_problem_set, parse_snippets
from tests.rcb.broken import MALFORMED, PSET, copy_pset

# Counted by hand from tests/rcb/pset: (paper, snippet, code lines, depth, parent)
EXPECTED = [
    ("ema-smoothing", "ema recursion", 5, 0, None),
    ("ema-smoothing", "ema update", 1, 1, "ema recursion"),
    ("ema-smoothing", "bias correction", 1, 1, "ema recursion"),
    ("ema-smoothing", "ema variance", 3, 0, None),
    ("softmax-temperature", "tempered softmax", 4, 0, None),
    ("softmax-temperature", "scale logits", 1, 1, "tempered softmax"),
    ("softmax-temperature", "stable exponent", 2, 1, "tempered softmax"),
    ("softmax-temperature", "entropy", 2, 0, None),
]


def test_the_fixture_set_has_its_papers_snippets_and_code_lines() -> None:
    problem_set = load_problem_set(PSET.parent)
    assert problem_set.root == PSET.resolve()
    got = [(s.paper, s.name, s.code_lines, s.depth, s.parent) for s in problem_set.snippets]
    assert got == EXPECTED
    assert sum(s.code_lines for s in problem_set.snippets) == 19
    ema, softmax = problem_set.papers
    assert (ema.id, ema.annotated_files, ema.context_files) == (
        "ema-smoothing",
        ["ema.py"],
        ["series.py"],
    )
    assert ema.first_commit_date == "2025-01-01"
    assert ema.paper_file == PSET.resolve() / "ema-smoothing" / "paper2code_paper.tex"
    assert (softmax.annotated_files, softmax.context_files) == (["softmax.py"], [])
    assert ema.title == "Bias-Corrected Exponential Smoothing for Short Series"
    # tag lines, 0-based, as grep -n shows them minus one
    recursion = problem_set.snippets[0]
    assert (recursion.start, recursion.end, recursion.indent) == (9, 21, "    ")
    assert problem_set.snippets[1].indent == " " * 8


def test_the_pset_folder_itself_loads_the_same() -> None:
    assert load_problem_set(PSET) == load_problem_set(PSET.parent)


def test_papers_selects_and_a_broken_paper_not_selected_is_no_error(tmp_path: Path) -> None:
    root, _ = MALFORMED["a tag that never closes"].make(tmp_path)
    with pytest.raises(InputError):
        load_problem_set(root)
    chosen = load_problem_set(root, papers=["ema-smoothing"])
    assert [p.id for p in chosen.papers] == ["ema-smoothing"]
    assert {s.paper for s in chosen.snippets} == {"ema-smoothing"}
    with pytest.raises(InputError, match="no paper 'nope'"):
        load_problem_set(root, papers=["nope"])


def test_code_lines_are_non_blank_lines_not_starting_with_a_hash() -> None:
    assert is_code_line("    x = 1  # a comment")
    assert is_code_line('    """a docstring line"""')
    assert not is_code_line("    # a comment")
    assert not is_code_line("   \t ")
    assert not is_code_line("")


def test_tags_are_whole_lines_and_names_may_hold_spaces_and_punctuation() -> None:
    text = "\n".join(
        [
            "def f(x):",
            '\t#<paper2code  name="a, b: c/d.e">   ',
            "\tx = 1",
            '\t# <paper2code name="not a tag"> trailing text',
            '\t# </paper2code name="a, b: c/d.e">',
            "\treturn x",
        ]
    )
    (snippet,) = parse_snippets(text, paper="p", file="f.py", shown="f.py")
    assert (snippet.name, snippet.start, snippet.end, snippet.indent) == ("a, b: c/d.e", 1, 4, "\t")
    assert snippet.code_lines == 1  # the line with trailing text is a comment


@pytest.mark.parametrize("case", list(MALFORMED))
def test_every_malformed_input_is_one_line_naming_file_and_line(tmp_path: Path, case: str) -> None:
    bad = MALFORMED[case]
    root, culprit = bad.make(tmp_path)
    with pytest.raises(InputError) as caught:
        load_problem_set(root)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(culprit), (message, culprit)
    assert bad.words in message


def test_a_copy_of_the_fixture_set_loads(tmp_path: Path) -> None:
    root = copy_pset(tmp_path)
    assert len(load_problem_set(root).snippets) == len(EXPECTED)


def test_the_paper_text_is_the_tex_or_else_the_md(tmp_path: Path) -> None:
    root = copy_pset(tmp_path)
    folder = root / "pset" / "softmax-temperature"
    (folder / "paper2code_paper.md").write_text("# A note\n", encoding="utf-8")
    assert load_problem_set(root).paper("softmax-temperature").paper_file.suffix == ".tex"
    (folder / "paper2code_paper.tex").unlink()
    assert load_problem_set(root).paper("softmax-temperature").paper_file.suffix == ".md"


@pytest.mark.skipif(
    not os.environ.get("PAPERBENCH_RCB_DIR"), reason="set PAPERBENCH_RCB_DIR to a clone of RCB"
)
def test_the_real_problem_set_has_212_problems_and_1449_code_lines() -> None:
    """The totals RCB's own results files hold (every snippet, nested ones included)."""
    problem_set = load_problem_set(Path(os.environ["PAPERBENCH_RCB_DIR"]))
    assert len(problem_set.papers) == 20
    assert len(problem_set.snippets) == 212
    assert sum(s.code_lines for s in problem_set.snippets) == 1449
