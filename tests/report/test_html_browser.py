"""The static HTML report opened from disk in headless Chromium: what matters is on the
page, collapsed rubric subtrees open on a click, nothing is fetched from a network, and a
transcript's markup stays text. Screenshots go to the test's tmp folder (paths printed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from paperbench.report import read_group_files, summarize_group
from paperbench.report._html import write_html
from tests.report.group import (
    DEEP_LEAF_TEXT,
    HOSTILE,
    LEAF_EXPLANATION,
    REPRO_LOG_TEXT,
    TRANSCRIPT_TEXT,
    build_group,
    judge_model_override,
)


@pytest.fixture
def report(tmp_path: Path) -> Path:
    files = read_group_files(build_group(tmp_path))
    return write_html(summarize_group(files), files, tmp_path / "html").parent


class Page:
    """A page with every request and dialog it made recorded."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1200, "height": 900})
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("dialog", self._dialog)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def open(self, path: Path) -> Any:
        self.page.goto(path.as_uri())
        return self.page

    def shot(self, path: Path) -> None:
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")

    def off_disk(self) -> list[str]:
        return [url for url in self.requests if not url.startswith("file://")]


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    recorder = Page(browser)
    yield recorder
    recorder.context.close()


def test_index_shows_the_leaderboard_judge_and_links_and_fetches_nothing(
    report: Path, page: Page, tmp_path: Path
) -> None:
    p = page.open(report / "index.html")
    board = p.inner_text("#leaderboard")
    assert "36.7% ± 8.8%" in board and "28.3% ± 6.0%" in board  # agent-a: score, lower bound
    assert "78.3% ± 7.3%" in board and "5 / 6" in board
    assert "$0.17 + 1 unpriced" in board
    identity = p.inner_text("#identity")
    assert "simple" in identity and "5e1f000000000000" in identity
    assert "parsing: openai/gpt-4o-mini" in identity and "mode full" in identity
    assert "p-beta/agent-b/seed-2" in p.inner_text("#judge-mismatch")
    not_scored = p.inner_text("#not-scored")
    assert "unfinished: rollout running" in not_scored
    assert "sandbox error: the engine stopped answering" in not_scored
    assert p.locator("#chart rect.bar").count() == 2
    assert p.locator("#chart line.errbar").count() == 2
    assert p.locator("#chart line.lower").count() == 2
    page.shot(tmp_path / "index.png")
    p.click("text=p-alpha/agent-a/seed-0 >> nth=0")
    p.wait_for_load_state()
    assert p.url.endswith("runs/p-alpha--agent-a--seed-0.html")
    assert len(page.requests) >= 2
    assert page.off_disk() == []


def test_run_page_shows_tree_transcript_and_log_and_a_collapsed_subtree_opens(
    report: Path, page: Page, tmp_path: Path
) -> None:
    p = page.open(report / "runs" / "p-alpha--agent-a--seed-0.html")
    assert "60.0%" in p.inner_text("#status")
    assert p.get_by_text(LEAF_EXPLANATION).is_visible()
    assert p.get_by_text("train.py, calibrate.py").first.is_visible()  # files the judge saw
    assert p.get_by_text(TRANSCRIPT_TEXT).is_visible()
    assert REPRO_LOG_TEXT in p.inner_text("#repro-log")
    assert "more characters not shown" in p.inner_text("#transcript")  # a capped item
    assert "1800.0" in p.inner_text("#stages")
    deep = p.get_by_text(DEEP_LEAF_TEXT)
    collapsed = p.locator("details[data-depth='2']")
    assert collapsed.count() == 1
    assert collapsed.evaluate("node => node.open") is False
    assert not deep.is_visible()
    page.shot(tmp_path / "run-collapsed.png")
    collapsed.locator("summary").click()
    assert collapsed.evaluate("node => node.open") is True
    assert deep.is_visible()
    page.shot(tmp_path / "run-opened.png")
    assert page.requests == [(report / "runs" / "p-alpha--agent-a--seed-0.html").as_uri()]


def test_a_transcript_holding_markup_shows_it_as_text(report: Path, page: Page) -> None:
    p = page.open(report / "runs" / "p-alpha--agent-a--seed-0.html")
    assert HOSTILE in p.inner_text("#transcript")
    assert p.locator("#transcript script, #transcript img").count() == 0
    assert p.title() == "p-alpha/agent-a/seed-0: g1"
    assert page.dialogs == []
    assert page.off_disk() == []


def test_pages_of_unfinished_and_disqualified_runs_say_what_is_missing(
    report: Path, page: Page
) -> None:
    p = page.open(report / "runs" / "p-alpha--agent-b--seed-1.html")
    body = p.inner_text("body")
    assert "missing" in p.inner_text("#status")
    assert "unfinished: rollout running" in body
    assert "Not graded." in body and "No transcript." in body
    assert "No reproduction/metadata.json." in body
    p = page.open(report / "runs" / "p-beta--agent-a--seed-1.html")
    assert "disqualified" in p.inner_text("#status")
    assert "git clone https://github.com/x/y" in p.inner_text("#monitor-hits")
    assert page.off_disk() == []


def test_at_1400px_the_index_uses_the_width_and_no_score_wraps(
    report: Path, browser: Any, tmp_path: Path
) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        p = context.new_page()
        p.goto((report / "index.html").as_uri())
        p.screenshot(path=str(tmp_path / "index-1400.png"), full_page=True)
        assert p.evaluate("document.body.getBoundingClientRect().width") > 1300
        wrapped = p.evaluate(
            """() => [...document.querySelectorAll('#leaderboard td.num, #runs td.num')]
                .filter(td => td.textContent.trim())
                .filter(td => {
                    // a wrapped cell has text on two lines: line boxes a line height apart
                    const range = document.createRange();
                    range.selectNodeContents(td);
                    const tops = [...range.getClientRects()].map(r => r.top);
                    return Math.max(...tops) - Math.min(...tops) > 10;
                })
                .map(td => td.textContent.trim())"""
        )
        assert wrapped == []
        overflowing = p.evaluate(
            """() => [...document.querySelectorAll('table')]
                .filter(t => t.getBoundingClientRect().right > document.body.clientWidth)
                .map(t => t.id)"""
        )
        assert overflowing == []
    finally:
        context.close()


def test_stages_are_named_in_full_and_flagged_runs_are_marked(report: Path, page: Page) -> None:
    p = page.open(report / "index.html")
    row = p.locator("#runs tr", has_text="p-beta/agent-a/seed-2")
    stages = row.locator("td.stages").inner_text()
    assert "rollout done" in stages and "reproduction failed" in stages
    assert "grading done" in stages and "rollo:" not in p.inner_text("#runs")
    done = p.locator("#runs tr", has_text="p-beta/agent-a/seed-0").locator("td.stages")
    assert done.inner_text() == "all 4 done"
    flagged = p.locator("#runs tr", has_text="p-alpha/agent-b/seed-0")
    assert flagged.locator(".flag").is_visible()
    assert "flagged (score kept)" in flagged.inner_text()
    disqualified = p.locator("#runs tr", has_text="p-beta/agent-a/seed-1")
    assert "blacklisted URL github.com/x/y in step 3" in disqualified.inner_text()
    table = p.inner_text("#flagged")
    assert "p-alpha/agent-b/seed-0" in table and "p-beta/agent-a/seed-1" in table
    board = p.locator("#leaderboard tr", has_text="agent-a")
    assert board.locator(".flag").inner_text() == "1"
    p = page.open(report / "runs" / "p-alpha--agent-b--seed-0.html")
    assert "flagged" in p.inner_text("#flagged") and "policy flag" in p.inner_text("#flagged")
    legend = p.inner_text("#timeline-legend")
    assert all(stage in legend for stage in ["rollout", "monitor", "reproduction", "grading"])


def test_the_models_line_says_what_each_role_ran_on_under_a_judge_model(
    tmp_path: Path, page: Page
) -> None:
    group = build_group(tmp_path)
    judge_model_override(group, "openai/gpt-4o")
    files = read_group_files(group)
    index = write_html(summarize_group(files), files, tmp_path / "html")
    p = page.open(index)
    identity = p.inner_text("#identity")
    assert "every role on openai/gpt-4o" in identity
    models = p.inner_text("#judge-models")
    for role, config_model in [("grading", "o3-mini"), ("parsing", "gpt-4o-mini")]:
        assert f"{role}: openai/gpt-4o (config: openai/{config_model})" in models
    assert "grading: openai/o3-mini" not in identity
