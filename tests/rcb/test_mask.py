"""Masking a snippet, filling its place, taking code out of an answer; and the fixture set's
own sanity check: every test passes with the reference and fails with any one snippet
emptied (run here as a plain subprocess; the sandboxed runner is tested elsewhere)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paperbench.rcb._load import load_problem_set, split_lines, tag
from paperbench.rcb._mask import extract_code, fill, mask, reference_code, reindent
from paperbench.rcb._models import TEST_ENTRY, Snippet
from tests.rcb.broken import PSET

PROBLEMS = load_problem_set(PSET)


def _snippet(name: str) -> Snippet:
    return next(s for s in PROBLEMS.snippets if s.name == name)


def _text(snippet: Snippet) -> str:
    return (PROBLEMS.paper(snippet.paper).folder / snippet.file).read_text(encoding="utf-8")


def _untagged(text: str) -> list[str]:
    return [line for line in split_lines(text) if tag(line) is None]


# --- mask ----------------------------------------------------------------------------------


def test_mask_hides_the_snippet_and_the_ones_nested_in_it_and_shows_no_tag() -> None:
    snippet = _snippet("ema recursion")
    masked = mask(_text(snippet), snippet)
    assert "paper2code" not in masked
    for hidden in ["np.zeros_like(x)", "for t, value", "avg = beta", "out[t] = avg"]:
        assert hidden not in masked
    assert (
        '    # TODO: write the code of "ema recursion" here\n    # (about 5 lines of code)\n'
        in (masked)
    )
    # the rest of the file: every other line as it was, other snippets' code included
    assert "    squared = (as_series(x) - mean) ** 2" in masked
    lines = split_lines(_text(snippet))
    assert masked.startswith("\n".join(lines[: snippet.start]) + "\n")
    assert masked.endswith("\n".join(_untagged("\n".join(lines[snippet.end + 1 :]))))
    assert masked.endswith("    return ema(squared, beta)\n")


def test_mask_of_a_nested_snippet_keeps_its_parent_code_and_indentation() -> None:
    snippet = _snippet("ema update")
    masked = mask(_text(snippet), snippet)
    assert '        # TODO: write the code of "ema update" here\n' in masked
    assert "        # (about 1 line of code)\n" in masked
    assert "avg = beta" not in masked
    assert "out[t] = avg / (1.0 - beta ** (t + 1))" in masked
    assert "paper2code" not in masked


def test_mask_refuses_a_text_that_is_not_the_snippet_file() -> None:
    snippet = _snippet("entropy")
    with pytest.raises(ValueError, match='no snippet "entropy"'):
        mask(_text(_snippet("ema update")), snippet)


# --- fill ----------------------------------------------------------------------------------


def test_fill_replaces_only_the_snippet_lines_and_keeps_the_rest_byte_for_byte() -> None:
    snippet = _snippet("bias correction")
    text = _text(snippet)
    filled = fill(text, snippet, "out[t] = avg\n")
    lines = split_lines(text)
    before = [line for line in lines[: snippet.start] if tag(line) is None]
    after = [line for line in lines[snippet.end + 1 :] if tag(line) is None]
    assert filled == "\n".join([*before, "        out[t] = avg", *after])
    assert filled.endswith("\n")  # the file's last newline stays
    assert "paper2code" not in filled


def test_fill_reindents_an_answer_at_any_indentation() -> None:
    snippet = _snippet("ema update")  # 8 spaces deep
    text = _text(snippet)
    expected = fill(text, snippet, "avg = beta * avg\nif avg:\n    avg += 1")
    for answer in [
        "            avg = beta * avg\n            if avg:\n                avg += 1\n",
        "\n\navg = beta * avg\nif avg:\n    avg += 1\n\n",
        "  avg = beta * avg\r\n  if avg:\r\n      avg += 1",
    ]:
        assert fill(text, snippet, answer) == expected
    assert "        avg = beta * avg\n        if avg:\n            avg += 1\n" in expected


def test_reindent_keeps_blank_lines_empty_and_inner_indentation() -> None:
    assert reindent("    a\n\n      b\n   \n    c", "\t") == ["\ta", "", "\t  b", "", "\tc"]
    assert reindent("", "    ") == []


def test_an_answer_repeating_the_whole_file_only_fills_the_snippet_place() -> None:
    """An answer that is the whole file with the other code deleted is taken as the
    snippet's code, all of it: the file's other lines never change (the test then fails)."""
    snippet = _snippet("entropy")
    text = _text(snippet)
    answer = "import numpy as np\n\ndef entropy(p, axis=-1):\n    return 0\n"
    filled = fill(text, snippet, answer)
    lines = split_lines(text)
    keep_before = _untagged("\n".join(lines[: snippet.start]))
    keep_after = _untagged("\n".join(lines[snippet.end + 1 :]))
    assert filled == "\n".join([*keep_before, *reindent(answer, snippet.indent), *keep_after])
    # the softmax the answer left out is still there, untouched
    assert "    return e / np.sum(e, axis=axis, keepdims=True)" in filled


@pytest.mark.parametrize("name", [s.name for s in PROBLEMS.snippets])
def test_filling_the_reference_code_gives_the_file_back_without_tags(name: str) -> None:
    snippet = _snippet(name)
    text = _text(snippet)
    reference = reference_code(text, snippet)
    assert "paper2code" not in reference
    assert fill(text, snippet, reference) == "\n".join(_untagged(text))


def test_reference_code_of_a_parent_holds_its_children_code() -> None:
    snippet = _snippet("tempered softmax")
    reference = reference_code(_text(snippet), snippet).splitlines()
    assert reference[0] == "    z = np.asarray(logits, dtype=float) / temperature"
    assert reference[-1] == "    return e / np.sum(e, axis=axis, keepdims=True)"
    assert len(reference) == 4


def test_fill_drops_tag_lines_in_the_answer() -> None:
    snippet = _snippet("tempered softmax")
    text = _text(snippet)
    body = "\n".join(split_lines(text)[snippet.start + 1 : snippet.end])
    assert "paper2code" in body
    assert fill(text, snippet, body) == "\n".join(_untagged(text))


# --- extract_code --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (
            "Here:\n```python\nx = 1\n    y = 2\n```\nthen\n```python\nz = 3\n```",
            "x = 1\n    y = 2",
        ),
        ("```py\nx = 1\n```", "x = 1"),
        ("```\nx = 1\n```", "x = 1"),
        ("```Python \nx = 1\n```", "x = 1"),
        ("```bash\nls\n```\nand\n```python\nx = 1\n```", "x = 1"),
        ("```bash\nls\n```\ntext\n```\nx = 1\n```", "x = 1"),
        ("````python\nprint('```')\n````", "print('```')"),
        ("```python\r\nx = 1\r\n```", "x = 1"),
        ("```python\nx = 1\n", "x = 1\n"),  # cut off: runs to the end
        ("```python\n```", ""),
        ("no code at all: x = 1", None),
        ("```bash\nls\n```", None),
        ("", None),
    ],
)
def test_extract_code_takes_the_first_python_or_bare_block(answer: str, code: str | None) -> None:
    assert extract_code(answer) == code


# --- the fixture set's own sanity check ----------------------------------------------------


def _run_test(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, TEST_ENTRY],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("paper", [p.id for p in PROBLEMS.papers])
def test_each_fixture_test_passes_with_the_reference_and_fails_with_any_snippet_emptied(
    tmp_path: Path, paper: str
) -> None:
    source = PROBLEMS.paper(paper).folder
    work = tmp_path / paper
    shutil.copytree(source, work)
    reference = _run_test(work)
    assert reference.returncode == 0, reference.stderr
    snippets = [s for s in PROBLEMS.snippets if s.paper == paper]
    assert snippets
    for snippet in snippets:
        original = (source / snippet.file).read_text(encoding="utf-8")
        for empty in ["pass", ""]:
            shutil.rmtree(work)
            shutil.copytree(source, work)
            (work / snippet.file).write_text(fill(original, snippet, empty), encoding="utf-8")
            result = _run_test(work)
            assert result.returncode != 0, (snippet.id, repr(empty), result.stderr[-500:])
        # and the reference put back through fill passes: the fill itself breaks nothing
        shutil.rmtree(work)
        shutil.copytree(source, work)
        body = "\n".join(split_lines(original)[snippet.start + 1 : snippet.end])
        (work / snippet.file).write_text(fill(original, snippet, body), encoding="utf-8")
        result = _run_test(work)
        assert result.returncode == 0, (snippet.id, result.stderr[-500:])
