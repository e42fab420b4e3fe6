"""``paperbench report GROUP``: tables, summary.json, the HTML report, and a group with
broken files (the report still comes out, the file is named, exit 1)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from paperbench.cli import app
from paperbench.report import Summary
from tests.report.group import FLAGGED_REASON, build_group, corrupt, judge_model_override

runner = CliRunner()


def _run(*args: str) -> Result:
    return runner.invoke(app, ["report", *args], env={"COLUMNS": "200"})


def test_report_prints_tables_and_writes_summary_and_html(tmp_path: Path) -> None:
    group = build_group(tmp_path)
    result = _run(str(group))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "judge simple (sha256 5e1f00000000;" in out and "mode full" in out
    assert "36.7% ± 8.8" in out and "28.3% ± 6.0" in out  # agent-a: score, failures as 0
    assert "5/6 (1 seed incomplete)" in out
    assert "p-beta/agent-a/seed-2" in out and "unfinished: rollout running" in out
    assert "$0.47 + 1 unpriced" in out
    assert "scores not comparable: p-beta/agent-b/seed-2" in result.output
    summary = Summary.model_validate_json((group / "summary.json").read_text())
    assert summary.agents[0].score.mean is not None
    assert abs(summary.agents[0].score.mean - 11 / 30) < 1e-12
    assert (group / "report" / "index.html").is_file()
    assert len(list((group / "report" / "runs").glob("*.html"))) == 12


def test_json_prints_the_summary_that_is_written(tmp_path: Path) -> None:
    group = build_group(tmp_path)
    result = _run(str(group), "--json", "--no-html")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    written = json.loads((group / "summary.json").read_text())
    assert printed == written
    assert [a["agent"] for a in printed["agents"]] == ["agent-a", "agent-b"]
    assert not (group / "report").exists()


def test_out_puts_the_html_elsewhere(tmp_path: Path) -> None:
    group = build_group(tmp_path)
    result = _run(str(group), "--out", str(tmp_path / "site"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "runs" / "p-beta--agent-b--seed-2.html").is_file()
    assert not (group / "report").exists()


def test_a_broken_outcome_is_named_and_the_report_still_comes_out(tmp_path: Path) -> None:
    group = build_group(tmp_path)
    bad = corrupt(group / "p-beta" / "agent-b" / "seed-1" / "outcome.json")
    result = _run(str(group))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert f"error: {bad}: invalid JSON at line 1" in result.output
    assert (group / "summary.json").is_file()
    page = (group / "report" / "runs" / "p-beta--agent-b--seed-1.html").read_text()
    assert str(bad) in page and "outcome.json is unreadable" in page
    assert str(bad) in (group / "report" / "index.html").read_text()


def test_a_group_whose_runs_never_started_reports_them_missing(tmp_path: Path) -> None:
    group = tmp_path / "fresh"
    group.mkdir()
    (group / "group.json").write_text((build_group(tmp_path) / "group.json").read_text())
    result = _run(str(group), "--json")
    assert result.exit_code == 0, result.output
    summary = Summary.model_validate_json(result.stdout)
    assert {r.status for r in summary.runs} == {"missing"}
    assert len(summary.not_scored) == 12
    assert (group / "report" / "runs" / "p-alpha--agent-a--seed-0.html").is_file()


def test_a_transcript_line_that_is_not_an_event_is_a_problem_and_the_page_keeps_the_rest(
    tmp_path: Path,
) -> None:
    group = build_group(tmp_path)
    transcript = group / "p-alpha" / "agent-a" / "seed-1" / "transcript.jsonl"
    lines = transcript.read_text().splitlines()
    transcript.write_text("\n".join([lines[0], '{"type": "bogus"}', *lines[1:]]) + "\n")
    result = _run(str(group))
    assert result.exit_code == 1, result.output
    assert f"error: {transcript}: line 2: not a transcript event" in result.output
    page = (group / "report" / "runs" / "p-alpha--agent-a--seed-1.html").read_text()
    assert f"{transcript}: line 2: not a transcript event" in page
    assert "I will start by reading the paper" in page


def test_the_html_escapes_transcript_markup(tmp_path: Path) -> None:
    group = build_group(tmp_path)
    assert _run(str(group)).exit_code == 0
    page = (group / "report" / "runs" / "p-alpha--agent-a--seed-0.html").read_text()
    assert "&lt;script&gt;document.title=" in page
    assert "<script>document.title" not in page
    assert "<script" not in page  # no script at all: the page needs none
    assert "http://" not in page and "https://" not in page


def test_a_graded_tree_that_does_not_validate_is_named_and_the_page_says_not_graded(
    tmp_path: Path,
) -> None:
    group = build_group(tmp_path)
    grade = group / "p-alpha" / "agent-b" / "seed-0" / "grading" / "grade.json"
    data = json.loads(grade.read_text())
    data["graded_task_tree"]["sub_tasks"][0]["score"] = 7
    grade.write_text(json.dumps(data))
    result = _run(str(group))
    assert result.exit_code == 1, result.output
    assert f"error: {grade}: $.graded_task_tree.sub_tasks[0].score:" in result.output
    page = (group / "report" / "runs" / "p-alpha--agent-b--seed-0.html").read_text()
    assert "Not graded." in page and str(grade) in page


def test_a_run_page_warns_of_another_judge_only_on_that_run(tmp_path: Path) -> None:
    group = build_group(tmp_path)
    assert _run(str(group)).exit_code == 0
    runs = group / "report" / "runs"
    assert "Scores not comparable" in (runs / "p-beta--agent-b--seed-2.html").read_text()
    assert "Scores not comparable" not in (runs / "p-beta--agent-b--seed-1.html").read_text()
    assert "Scores not comparable" in (group / "report" / "index.html").read_text()


RUN_FILES = [
    "outcome.json",
    "run.json",
    "status.json",
    "transcript.jsonl",
    "costs.jsonl",
    "reproduction/metadata.json",
    "grading/grade.json",
    "grading/leaves.jsonl",
    "grading/costs.jsonl",
]


@pytest.mark.parametrize("damage", ["garbage", "folder", "not utf-8"])
@pytest.mark.parametrize("name", RUN_FILES)
def test_every_run_file_damaged_is_named_and_the_report_still_comes_out(
    tmp_path: Path, name: str, damage: str
) -> None:
    group = build_group(tmp_path)
    path = group / "p-alpha" / "agent-a" / "seed-0" / name
    assert path.is_file()
    path.unlink()
    if damage == "folder":
        path.mkdir()
    elif damage == "not utf-8":
        path.write_bytes(b"\xff\xfe{}\n{}\n")
    else:
        path.write_text("garbage\n{}\n")
    result = _run(str(group))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert f"error: {path}: " in result.output
    assert (group / "summary.json").is_file()
    page = (group / "report" / "runs" / "p-alpha--agent-a--seed-0.html").read_text()
    assert str(path) in page


def test_a_reproduce_log_that_is_not_text_is_shown_with_replacement_characters(
    tmp_path: Path,
) -> None:
    group = build_group(tmp_path)
    log = group / "p-alpha" / "agent-a" / "seed-0" / "reproduction" / "reproduce.log"
    log.write_bytes(b"ok \xff\xfe done\n" + b"y" * 200_000)
    result = _run(str(group))
    assert result.exit_code == 0, result.output
    page = (group / "report" / "runs" / "p-alpha--agent-a--seed-0.html").read_text()
    assert "ok \ufffd\ufffd done" in page
    assert "bytes not shown (the whole log is 200,011 bytes)" in page


def test_a_summary_that_cannot_be_written_is_one_line_naming_it(tmp_path: Path) -> None:
    group = build_group(tmp_path)
    (group / "summary.json").mkdir()
    (group / "summary.json" / "keep").write_text("x")
    result = _run(str(group))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert f"error: {group / 'summary.json'}: cannot write" in result.output


def test_a_check_that_could_not_judge_shows_as_an_invalid_leaf_with_its_reason(
    tmp_path: Path,
) -> None:
    group = build_group(tmp_path)
    grading = group / "p-alpha" / "agent-a" / "seed-0" / "grading"
    error = "command not found (exit 127)"
    grade = json.loads((grading / "grade.json").read_text())
    leaf = grade["graded_task_tree"]["sub_tasks"][0]["sub_tasks"][0]
    leaf.update(score=0.0, valid_score=False, explanation=f"check_error: {error}")
    leaf["judge_metadata"] = {"source": "check", "reason": "check_error", "error": error}
    (grading / "grade.json").write_text(json.dumps(grade))
    lines = (grading / "leaves.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert first["path"] == [0, 0]
    first.update(score=0.0, valid=False, source="check", reason="check_error", error=error)
    (grading / "leaves.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert _run(str(group)).exit_code == 0
    page = (group / "report" / "runs" / "p-alpha--agent-a--seed-0.html").read_text()
    assert '<div class="leaf invalid"' in page
    assert "valid no · check · check_error" in page and error in page
    (grading / "leaves.jsonl").unlink()  # the tree's own metadata says why
    assert _run(str(group)).exit_code == 0
    page = (group / "report" / "runs" / "p-alpha--agent-a--seed-0.html").read_text()
    assert "valid no · check_error" in page


ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize("env", [{}, {"FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "1"}])
def test_piped_tables_keep_whole_names_even_where_colours_are_forced(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """CliRunner's output is a pipe: every table comes out at its natural width, whatever
    COLUMNS says, also when FORCE_COLOR makes rich take the pipe for a terminal."""
    group = build_group(tmp_path)
    result = runner.invoke(app, ["report", str(group), "--no-html"], env={"COLUMNS": "40", **env})
    assert result.exit_code == 0, result.output
    out = ANSI.sub("", result.stdout)
    lines = out.splitlines()
    for whole in [
        "│ anthropic/claude-sonnet-4-5 │",
        "│ agent agent-b │",
        "│ p-beta/agent-a/seed-2  │ failed   │ reproduction: sandbox error: the engine stopped",
        "5/6 (1 seed incomplete)",
    ]:
        assert any(whole in line for line in lines), (whole, out)
    assert "…" not in out


def test_flagged_and_disqualified_runs_are_marked_with_why(tmp_path: Path) -> None:
    """A run flagged under --monitor-policy flag keeps its score and is marked; a
    disqualified run says why, in the tables, summary.json and the HTML."""
    group = build_group(tmp_path)
    result = _run(str(group))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "runs the monitor flagged (2)" in line)
    table = "\n".join(lines[start : start + 8])
    assert "p-beta/agent-a/seed-1" in table and "disqualified" in table
    assert "blacklisted URL github.com/x/y in step 3" in table
    assert "p-alpha/agent-b/seed-0" in table and "scored (flagged)" in table
    assert f"flagged (score kept): {FLAGGED_REASON}" in table
    board = next(line for line in lines if line.startswith("│ agent-a"))
    assert board.split("│")[7].strip() == "1"  # the flagged column
    summary = Summary.model_validate_json((group / "summary.json").read_text())
    flagged = {r.label: r.monitor for r in summary.runs if r.monitor is not None}
    assert flagged == {"p-beta/agent-a/seed-1": "flagged", "p-alpha/agent-b/seed-0": "flagged"}
    assert [a.flagged_runs for a in summary.agents] == [1, 1]
    index = (group / "report" / "index.html").read_text()
    assert 'id="flagged"' in index and FLAGGED_REASON in index
    page = (group / "report" / "runs" / "p-alpha--agent-b--seed-0.html").read_text()
    assert 'id="flagged"' in page and FLAGGED_REASON in page
    clean = (group / "report" / "runs" / "p-alpha--agent-b--seed-2.html").read_text()
    assert 'id="flagged"' not in clean


def test_the_judge_models_line_is_true_per_role_under_judge_model(tmp_path: Path) -> None:
    group = build_group(tmp_path)
    judge_model_override(group, "openai/gpt-4o")
    result = _run(str(group))
    assert result.exit_code == 0, result.output
    identity = result.stdout.splitlines()[0]
    assert "every role on openai/gpt-4o" in identity
    assert "grading openai/gpt-4o" not in identity or "instead of" in identity
    assert identity.index("openai/o3-mini") > identity.index("instead of the config's")


def test_the_costs_table_shows_requests_apart_from_calls_refused_and_unanswered(
    tmp_path: Path,
) -> None:
    from paperbench.llm import CostRecord

    group = build_group(tmp_path)
    # a grading with no key: three calls refused before anything was sent
    folder = next(group.rglob("grading/costs.jsonl"))
    refused = CostRecord(
        model="openai/o3-mini",
        label="judge_grading",
        stage="grading",
        outcome="failed",
        cost_usd=0.0,
        error="set OPENAI_API_KEY",
        sent=False,
    )
    # and an attempt whose connection was reset: sent, but no HTTP answer, so no request
    reset = CostRecord(
        model="openai/o3-mini",
        label="judge_grading",
        stage="grading",
        outcome="retried",
        cost_usd=None,
        error="cannot reach http://127.0.0.1:9/v1: Connection reset by peer",
        answered=False,
    )
    with folder.open("a", encoding="utf-8") as handle:
        handle.write((refused.model_dump_json() + "\n") * 3 + reset.model_dump_json() + "\n")
    result = _run(str(group))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "requests sent" in line)
    assert "refused unsent" in header
    summary = Summary.model_validate_json((group / "summary.json").read_text())
    total = summary.costs.total
    assert total.refused == 3 and total.sent == total.calls - 3 + 1
    assert (total.unanswered, total.requests) == (1, total.sent - 1)
    cells = [line.replace("│", " ").split() for line in lines]
    assert ["all", "total", str(total.requests), "(+1", "unanswered)", "3"] in [
        c[:6] for c in cells
    ]
    said = " ".join(result.stdout.split())
    assert "total: 1 attempt got no HTTP answer" in said
    page = " ".join((group / "report" / "index.html").read_text().split())
    assert f"{total.requests} (+1 unanswered)" in page
    assert "1 attempt got no HTTP answer" in page


def test_one_agent_config_whose_runs_ran_two_models_is_two_rows(tmp_path: Path) -> None:
    """A leaderboard row is (agent config, model that ran): the model comes from each run's
    status.json, not from the agent config."""
    group = build_group(tmp_path)
    status_file = group / "p-alpha" / "agent-a" / "seed-1" / "status.json"
    status = json.loads(status_file.read_text())
    status["model"] = "openai/gpt-4o-mini"
    status_file.write_text(json.dumps(status))
    result = _run(str(group))
    assert result.exit_code == 0, result.output
    summary = Summary.model_validate_json((group / "summary.json").read_text())
    rows = [(a.agent, a.model, a.label, a.runs) for a in summary.agents]
    assert rows == [
        ("agent-a", "openai/gpt-4o", "agent-a (openai/gpt-4o)", 5),
        ("agent-a", "openai/gpt-4o-mini", "agent-a (openai/gpt-4o-mini)", 1),
        ("agent-b", "anthropic/claude-sonnet-4-5", "agent-b", 6),
    ]
    mini = summary.agents[1]
    assert (mini.score.mean, mini.counted) == (0.4, 1)  # that run's own score
    boards = [line for line in result.stdout.splitlines() if line.startswith("│ agent-a ")]
    assert [b.split("│")[2].strip() for b in boards[:2]] == ["openai/gpt-4o", "openai/gpt-4o-mini"]
    index = (group / "report" / "index.html").read_text()
    board = index[index.index('id="leaderboard"') : index.index("</table>")]
    assert board.count('<td class="mono id">agent-a</td>') == 2 and "openai/gpt-4o-mini" in board
    assert '<th class="num">agent-a (openai/gpt-4o-mini)</th>' in index


def test_the_judge_models_are_those_its_grading_calls_named(tmp_path: Path) -> None:
    """A role's model comes from the grading cost records (here two models graded), not
    from the judge config (o3-mini)."""
    group = build_group(tmp_path)
    result = _run(str(group), "--no-html")
    assert result.exit_code == 0, result.output
    summary = Summary.model_validate_json((group / "summary.json").read_text())
    assert summary.judge.called == {"grading": ["local/x", "openai/o3-mini"]}
    identity = result.stdout.splitlines()[0]
    assert "grading local/x, openai/o3-mini" in identity
