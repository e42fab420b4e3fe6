from __future__ import annotations

from paperbench.judge._log import cut_log, fold_log
from paperbench.llm import count_tokens

MODEL = "openai/gpt-4o"


def test_identical_lines_fold_to_one_with_a_count() -> None:
    folded = fold_log("start\n" + "retrying download\n" * 50 + "end\n")
    assert folded.split("\n") == [
        "start",
        "retrying download",
        "[... the line above repeated 49 more times ...]",
        "end",
    ]


def test_a_long_run_of_similar_lines_keeps_its_head_and_last_lines() -> None:
    lines = [f"epoch {i} loss {1 / (i + 1):.4f} at 12:00:{i % 60:02d}" for i in range(200)]
    folded = fold_log("\n".join(lines)).split("\n")
    assert folded[:2] == lines[:2]
    assert folded[-3:] == lines[-3:]
    assert folded[2] == "[... 195 similar lines folded ...]"


def test_a_short_table_of_similar_lines_is_kept_whole() -> None:
    lines = [f"seed {s}: ECE = 0.{s}1" for s in range(5)]
    assert fold_log("\n".join(lines)) == "\n".join(lines)


def test_progress_bars_redrawn_with_carriage_returns_fold() -> None:
    bar = "".join(f"\r{p}%|{'#' * (p // 10)}| {p}/100 [00:01, 50.0it/s]" for p in range(100))
    folded = fold_log("downloading" + bar + "\ndone")
    assert len(folded.split("\n")) <= 8
    assert folded.endswith("done")


def test_cut_keeps_head_and_tail_within_the_budget_and_says_so() -> None:
    text = "\n".join(f"line {i} of the reproduction log with some words" for i in range(2000))
    excerpt = cut_log(text, 300, MODEL)
    assert excerpt.tokens <= 300
    assert excerpt.tokens == count_tokens(excerpt.text, MODEL)
    shown = excerpt.text.split("\n")
    assert shown[0] == "line 0 of the reproduction log with some words"
    assert shown[-1] == "line 1999 of the reproduction log with some words"
    marker = next(line for line in shown if line.startswith("[..."))
    assert f"{excerpt.lines_cut} lines" in marker
    assert excerpt.lines_cut == 2000 - (len(shown) - 1)


def test_a_log_within_budget_is_unchanged() -> None:
    excerpt = cut_log("a\nb\nc", 100, MODEL)
    assert (excerpt.text, excerpt.lines_cut) == ("a\nb\nc", 0)


def test_a_budget_too_small_for_the_marker_shows_nothing() -> None:
    excerpt = cut_log("x" * 10_000, 3, MODEL)
    assert excerpt.text == "" and excerpt.tokens == 0
