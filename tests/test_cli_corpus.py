"""Every command over a corpus of bad files and bad flag values: exit 1 (bad input) or 2
(a command used wrongly), never a traceback, and the culprit (the file and its JSON path, or
the flag) named on the error line.

Nothing here starts a sandbox or reaches a network: ``reproduce`` gets bad flags and bad
submission paths (refused before any sandbox), ``models check`` only bad flags aimed at a
closed loopback port, ``images``/``sandbox`` only bad flags.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from paperbench.cli import app
from tests.rcb.broken import MALFORMED, PSET
from tests.report.group import group_config
from tests.rubric.trees import graded_leaf, graded_node, leaf, node

runner = CliRunner()


def _run(args: list[str], env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, args, env={"COLUMNS": "80", **(env or {})})


def _assert_refused(result: Result, codes: set[int], culprit: str) -> None:
    output = result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    assert "Traceback" not in output, output
    assert result.exit_code in codes, (result.exit_code, output)
    assert culprit in output, (culprit, output)


# --- the corpus of bad files -------------------------------------------------------------


def _rubric(**changes: object) -> dict:
    tree = node(leaf(1), node(leaf(2), leaf(3)))
    tree["sub_tasks"][0].update(changes)
    return tree


def _graded(**changes: object) -> dict:
    tree = graded_node(graded_leaf(1.0), graded_node(graded_leaf(0.0), graded_leaf(1.0)))
    tree["sub_tasks"][0].update(changes)
    return tree


def _chain(depth: int) -> dict:
    top = leaf(1)
    for _ in range(depth):
        top = node(top)
    return top


@dataclass(frozen=True)
class BadFile:
    """A file no command may accept: ``where`` is the JSON path its error names ("" when the
    problem is the file itself); ``kind`` the tree it pretends to be."""

    write: Callable[[Path], None]
    where: str = ""
    kind: str = "rubric"


def _text(text: str) -> Callable[[Path], None]:
    return lambda p: p.write_text(text, encoding="utf-8")


def _data(data: object) -> Callable[[Path], None]:
    return _text(json.dumps(data))


def _raw_weight(literal: str, *, graded: bool = False) -> Callable[[Path], None]:
    # json.dumps cannot write NaN-free huge literals; splice the literal into the text
    marker = 123456789
    data = _graded(weight=marker) if graded else _rubric(weight=marker)
    return _text(json.dumps(data).replace(str(marker), literal))


BAD_FILES: dict[str, BadFile] = {
    "missing": BadFile(lambda p: None),
    "folder": BadFile(lambda p: p.mkdir()),
    "empty": BadFile(_text("")),
    "invalid json": BadFile(_text('{"id": "x",, }'), "$"),
    "not utf-8": BadFile(lambda p: p.write_bytes(b'{"id": "\xff"}')),
    "array": BadFile(_data([1, 2]), "$"),
    "null": BadFile(_data(None), "$"),
    "negative weight": BadFile(_data(_rubric(weight=-1)), "$.sub_tasks[0].weight"),
    "string weight": BadFile(_data(_rubric(weight="1")), "$.sub_tasks[0].weight"),
    "boolean weight": BadFile(_data(_rubric(weight=True)), "$.sub_tasks[0].weight"),
    "NaN weight": BadFile(_raw_weight("NaN"), "$.sub_tasks[0].weight"),
    "Infinity weight": BadFile(_raw_weight("Infinity"), "$.sub_tasks[0].weight"),
    "1e400 weight": BadFile(_raw_weight("1e400"), "$.sub_tasks[0].weight"),
    "weight over the cap": BadFile(_raw_weight("1e16"), "$.sub_tasks[0].weight"),
    "500-digit weight": BadFile(_raw_weight("9" * 500), "$.sub_tasks[0].weight"),
    "5000-digit weight": BadFile(_raw_weight("9" * 5000), "$.sub_tasks[0].weight"),
    "sums past float range": BadFile(
        _text(json.dumps(node(leaf(1), leaf(1))).replace('"weight": 1', '"weight": ' + "9" * 308)),
        "$.sub_tasks[0].weight",
    ),
    "unknown field": BadFile(_data(_rubric(colour="red")), "$.sub_tasks[0].colour"),
    "unknown category": BadFile(
        _data(_rubric(task_category="Code Writing")), "$.sub_tasks[0].task_category"
    ),
    "leaf without category": BadFile(
        _data(_rubric(task_category=None)), "$.sub_tasks[0].task_category"
    ),
    "null check": BadFile(_data(_rubric(check=None)), "$.sub_tasks[0].check"),
    "sub_tasks not a list": BadFile(_data(_rubric(sub_tasks={})), "$.sub_tasks[0].sub_tasks"),
    "numeric id": BadFile(_data(_rubric(id=7)), "$.sub_tasks[0].id"),
    "markup and escapes in a bad value": BadFile(
        _data(_rubric(task_category="[bold]x[/bold]\x1b[31m")), "$.sub_tasks[0].task_category"
    ),
    "too deep": BadFile(_data(_chain(150)), "$" + ".sub_tasks[0]" * 100),
    "too deep to parse": BadFile(_text('{"sub_tasks": [' * 3000 + "]}" * 3000), "$"),
    "score above 1": BadFile(_data(_graded(score=1.5)), "$.sub_tasks[0].score", "graded"),
    "score NaN": BadFile(
        _text(json.dumps(_graded(score=0.25)).replace("0.25", "NaN")),
        "$.sub_tasks[0].score",
        "graded",
    ),
    "score as a string": BadFile(_data(_graded(score="1")), "$.sub_tasks[0].score", "graded"),
    "valid_score yes": BadFile(
        _data(_graded(valid_score="yes")), "$.sub_tasks[0].valid_score", "graded"
    ),
    "graded 500-digit weight": BadFile(
        _raw_weight("9" * 500, graded=True), "$.sub_tasks[0].weight", "graded"
    ),
}

GOOD_RUBRIC = node(leaf(1), node(leaf(2), leaf(3)))


def _file_commands(f: Path, good: Path) -> dict[str, list[str]]:
    return {
        "validate": ["rubric", "validate", str(f)],
        "stats": ["rubric", "stats", str(f)],
        "score": ["rubric", "score", str(f)],
        "show": ["rubric", "show", str(f)],
        "show --grades": ["rubric", "show", str(good), "--grades", str(f)],
        "score --resources-provided": ["rubric", "score", "--resources-provided", str(f)],
    }


_COMMANDS = list(_file_commands(Path("f"), Path("g")))


def _expects_kind(command: str) -> str:
    return "graded" if "score" in command or "--grades" in command else "rubric"


@pytest.mark.parametrize("command", _COMMANDS)
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_every_file_command_refuses_every_bad_file(tmp_path: Path, case: str, command: str) -> None:
    bad = BAD_FILES[case]
    f = tmp_path / "tree.json"
    bad.write(f)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(GOOD_RUBRIC))
    result = _run(_file_commands(f, good)[command])
    _assert_refused(result, {1}, f"{f}: ")
    if command == "validate" or (bad.where and _expects_kind(command) == bad.kind):
        assert f"{f}: {bad.where}" in result.output, result.output
    if command != "validate":
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, result.output
    assert "\x1b" not in result.output  # control characters from the file are escaped


def test_a_rubric_where_a_graded_tree_is_expected_says_so(tmp_path: Path) -> None:
    f = tmp_path / "rubric.json"
    f.write_text(json.dumps(GOOD_RUBRIC))
    _assert_refused(_run(["rubric", "score", str(f)]), {1}, f"{f}: $: expected a graded tree")
    g = tmp_path / "grade.json"
    g.write_text(json.dumps(_graded()))
    result = _run(["rubric", "show", str(g), "--grades", str(g)])
    _assert_refused(result, {1}, f"{g}: $: expected a rubric, found a graded tree")


def test_the_same_fault_has_the_same_words_in_every_command(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    BAD_FILES["1e400 weight"].write(f)
    lines = set()
    for command in ["validate", "stats", "show"]:
        out = _run(_file_commands(f, f)[command]).output
        lines.add(next(line for line in out.splitlines() if str(f) in line).removeprefix("error: "))
    assert lines == {f"{f}: $.sub_tasks[0].weight: expected a finite number, found 1e400"}


@pytest.mark.parametrize("command", ["validate", "stats", "score"])
def test_an_empty_folder_is_refused_by_every_command(tmp_path: Path, command: str) -> None:
    result = _run(["rubric", command, str(tmp_path)])
    wanted = "no .json files found" if command != "score" else "expected a file, found a directory"
    _assert_refused(result, {1}, f"{tmp_path}: {wanted}")


# --- paper folders -------------------------------------------------------------------------


def _data_dir(tmp_path: Path, broken: Callable[[Path], None] | None = None) -> Path:
    data = tmp_path / "data"
    for pid in ["good", "bad"]:
        folder = data / "papers" / pid
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text(f"id: {pid}\ntitle: Paper {pid}\n")
        (folder / "paper.md").write_text("# paper")
        (folder / "rubric.json").write_text(json.dumps(GOOD_RUBRIC))
        (folder / "blacklist.txt").write_text("none\n")
    if broken is not None:
        broken(data / "papers" / "bad")
    return data


BROKEN_PAPERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "bad config": (lambda d: (d / "config.yaml").write_text("id: [\n"), "config.yaml"),
    "config without title": (lambda d: (d / "config.yaml").write_text("id: x\n"), "config.yaml"),
    "no paper.md": (lambda d: (d / "paper.md").unlink(), "bad: paper directory has no paper.md"),
    "no rubric": (lambda d: (d / "rubric.json").unlink(), "bad: paper directory has no rubric"),
    "rubric without weight": (
        lambda d: (d / "rubric.json").write_text('{"id": "r", "requirements": "x"}'),
        "rubric.json: $",
    ),
    "blacklist with junk": (
        lambda d: (d / "blacklist.txt").write_text("github.com/a/b junk\n"),
        "blacklist.txt: line 1",
    ),
    "none beside urls": (
        lambda d: (d / "blacklist.txt").write_text("none\ngithub.com/a/b\n"),
        "blacklist.txt: line 1",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN_PAPERS))
def test_papers_list_shows_a_broken_paper_in_its_row(tmp_path: Path, case: str) -> None:
    broken, culprit = BROKEN_PAPERS[case]
    data = _data_dir(tmp_path, broken)
    result = _run(["papers", "list", "--data-dir", str(data)])
    _assert_refused(result, {1}, culprit)
    assert "Paper good" in result.output  # the other papers are still listed
    rows = json.loads(_run(["papers", "list", "--data-dir", str(data), "--json"]).stdout)
    assert [row["id"] for row in rows] == ["bad", "good"]
    assert culprit in rows[0]["error"] and rows[1]["error"] is None


@pytest.mark.parametrize("case", ["bad config", "no paper.md", "no rubric"])
def test_rubric_stats_reports_a_broken_paper_and_counts_the_rest(tmp_path: Path, case: str) -> None:
    broken, culprit = BROKEN_PAPERS[case]
    data = _data_dir(tmp_path, broken)
    result = _run(["rubric", "stats", "--data-dir", str(data), "--json"])
    _assert_refused(result, {1}, culprit)


def test_stats_says_an_lfs_pointer_once_with_the_count(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for i in range(5):
        folder = data / "papers" / f"p{i}"
        folder.mkdir(parents=True)
        (folder / "paper.md").write_text("version https://git-lfs.github.com/spec/v1\noid x\n")
        (folder / "rubric.json").write_text(json.dumps(GOOD_RUBRIC))
    result = _run(["rubric", "stats", "--data-dir", str(data), "--json"])
    assert result.exit_code == 0, result.output
    assert result.output.count("Git LFS pointer") == 1 and "(and 4 more papers)" in result.output


# --- bad flags and paths, every command ------------------------------------------------------


@dataclass(frozen=True)
class BadCall:
    args: list[str]
    culprit: str
    codes: frozenset[int] = frozenset({2})


@dataclass(frozen=True)
class _Paths:
    tmp: Path

    @property
    def good(self) -> Path:
        return self.tmp / "good.json"

    @property
    def not_archive(self) -> Path:
        return self.tmp / "notes.txt"

    @property
    def empty(self) -> Path:
        return self.tmp / "empty-data"

    @property
    def run(self) -> Path:
        """A run folder whose transcript has no start event (so no paper)."""
        return self.tmp / "run"

    @property
    def bad_run(self) -> Path:
        """A run folder whose transcript's first line is not an event."""
        return self.tmp / "bad-run"

    @property
    def binary_run(self) -> Path:
        """A run folder whose transcript is not text."""
        return self.tmp / "binary-run"

    @property
    def broken_group(self) -> Path:
        """A group folder whose group.json is not a group."""
        return self.tmp / "broken-group"

    @property
    def bad_resources(self) -> Path:
        """An agent config whose ``resources.gpus`` is negative."""
        return self.tmp / "agents" / "bad-resources.yaml"

    @property
    def missing_env(self) -> Path:
        """An agent config whose ``resources.env_file`` is missing."""
        return self.tmp / "agents" / "missing-env.yaml"

    @property
    def bad_env(self) -> Path:
        """An env file with a line that is not NAME=value."""
        return self.tmp / "agents" / "bad.env"

    def group(self, name: str) -> Path:
        """A run group folder: ``broken-json`` (group.json not JSON), ``seeds-0`` (a field
        out of range), ``dotdot-paper`` (a paper that is no folder name), ``broken-outcome``
        (a good group.json, one run's outcome.json not JSON)."""
        return self.tmp / "groups" / name

    def create(self) -> None:
        self.good.write_text(json.dumps(GOOD_RUBRIC))
        config = group_config().model_dump(mode="json")
        groups = {
            "broken-json": '{"group": "g",, }',
            "seeds-0": json.dumps({**config, "seeds": 0}),
            "dotdot-paper": json.dumps({**config, "papers": [".."]}),
            "broken-outcome": json.dumps(config),
        }
        for name, text in groups.items():
            self.group(name).mkdir(parents=True)
            (self.group(name) / "group.json").write_text(text)
        outcome = self.group("broken-outcome") / "p-alpha" / "agent-a" / "seed-0" / "outcome.json"
        outcome.parent.mkdir(parents=True)
        outcome.write_text('{"status": "scored",')
        self.broken_group.mkdir()
        (self.broken_group / "group.json").write_text('{"group": "g", "seeds": 0}')
        self.run.mkdir()
        (self.run / "transcript.jsonl").write_text('{"type": "note", "kind": "x"}\n')
        (self.run / "network.jsonl").write_text('{"ts": "t", "verdict": "maybe"}\n{"ts": "t"}\n')
        self.binary_run.mkdir()
        (self.binary_run / "transcript.jsonl").write_bytes(b"\xff\xfe\x00garbage\n")
        self.bad_run.mkdir()
        (self.bad_run / "transcript.jsonl").write_text(
            '{"type": "bogus"}\n{"type": "note", "kind": "x"}\n'
        )
        self.bad_resources.parent.mkdir()
        self.bad_resources.write_text("type: dummy\nresources:\n  gpus: -1\n")
        self.missing_env.write_text("type: dummy\nresources:\n  env_file: missing.env\n")
        self.bad_env.write_text("KEY=1\nnot a line\n")
        self.not_archive.write_text("not an archive")
        (self.empty / "papers").mkdir(parents=True)


CLOSED = "http://127.0.0.1:9"  # nothing listens: no call leaves the machine


def _bad_calls(tmp_path: Path) -> dict[str, BadCall]:
    paths = _Paths(tmp_path)
    good, not_archive, empty = paths.good, paths.not_archive, paths.empty
    out = str(tmp_path / "out")
    closed = CLOSED
    roll = ["rollout", "--paper", "calibration-binning", "--agent", "dummy"]
    grade_cb = ["grade", str(tmp_path), "--paper", "calibration-binning"]
    run = ["run", "--runs-dir", str(tmp_path / "runs"), "--no-report"]
    return {
        "papers list --data-dir missing": BadCall(
            ["papers", "list", "--data-dir", str(tmp_path / "nope")], "nope", frozenset({1})
        ),
        "papers list --split unknown": BadCall(
            ["papers", "list", "--data-dir", str(empty), "--split", "nosuch"], "'nosuch'"
        ),
        "papers list --bogus": BadCall(["papers", "list", "--bogus"], "--bogus"),
        "rubric validate without files": BadCall(
            ["rubric", "validate"], "Missing argument 'paths'"
        ),
        "rubric stats --data-dir missing": BadCall(
            ["rubric", "stats", "--data-dir", str(tmp_path / "nope")], "nope", frozenset({1})
        ),
        "rubric stats of an empty data dir": BadCall(
            ["rubric", "stats", "--data-dir", str(empty)], str(empty / "papers"), frozenset({1})
        ),
        "rubric stats --split unknown": BadCall(
            ["rubric", "stats", "--data-dir", str(empty), "--split", "nosuch"], "'nosuch'"
        ),
        "rubric score without files": BadCall(["rubric", "score"], "Missing argument 'graded'"),
        "rubric show --depth 0": BadCall(["rubric", "show", str(good), "--depth", "0"], "--depth"),
        "rubric show --depth x": BadCall(["rubric", "show", str(good), "--depth", "x"], "--depth"),
        "rubric show --grades missing": BadCall(
            ["rubric", "show", str(good), "--grades", str(tmp_path / "g.json")],
            f"{tmp_path / 'g.json'}: file not found",
            frozenset({1}),
        ),
        "reproduce --reproduce-timeout -5": BadCall(
            ["reproduce", str(not_archive), "--out", out, "--reproduce-timeout", "-5"],
            "--reproduce-timeout",
        ),
        "reproduce --reproduce-timeout 0": BadCall(
            ["reproduce", str(not_archive), "--out", out, "--reproduce-timeout", "0"],
            "--reproduce-timeout",
        ),
        "reproduce --reproduce-timeout nan": BadCall(
            ["reproduce", str(not_archive), "--out", out, "--reproduce-timeout", "nan"],
            "--reproduce-timeout",
        ),
        "reproduce --reproduce-timeout abc": BadCall(
            ["reproduce", str(not_archive), "--out", out, "--reproduce-timeout", "abc"],
            "--reproduce-timeout",
        ),
        "reproduce --retries -1": BadCall(
            ["reproduce", str(not_archive), "--out", out, "--retries", "-1"], "--retries"
        ),
        "reproduce --retries 1.5": BadCall(
            ["reproduce", str(not_archive), "--out", out, "--retries", "1.5"], "--retries"
        ),
        "reproduce --sandbox bogus": BadCall(
            ["reproduce", str(not_archive), "--out", out, "--sandbox", "bogus"], "--sandbox"
        ),
        "reproduce --sandbox-user bogus": BadCall(
            ["reproduce", str(not_archive), "--out", out, "--sandbox-user", "bogus"],
            "--sandbox-user",
        ),
        "reproduce a missing submission": BadCall(
            ["reproduce", str(tmp_path / "gone"), "--out", out],
            f"{tmp_path / 'gone'}: not found",
            frozenset({1}),
        ),
        "reproduce a file that is not an archive": BadCall(
            ["reproduce", str(not_archive), "--out", out], str(not_archive), frozenset({1})
        ),
        "models check without models": BadCall(["models", "check"], "Missing argument 'models'"),
        "models check --request-timeout abc": BadCall(
            ["models", "check", "openai/x", "--base-url", closed, "--request-timeout", "abc"],
            "--request-timeout",
        ),
        "models check --request-timeout -1": BadCall(
            ["models", "check", "openai/x", "--base-url", closed, "--request-timeout", "-1"],
            "--request-timeout",
        ),
        "models check --base-url notaurl": BadCall(
            ["models", "check", "openai/x", "--base-url", "notaurl"],
            "--base-url",
            frozenset({1, 2}),
        ),
        "models list --bogus": BadCall(["models", "list", "--bogus"], "--bogus"),
        "images build --ca-bundle missing": BadCall(
            ["images", "build", "--ca-bundle", str(tmp_path / "ca.pem")], "--ca-bundle"
        ),
        "images build --bogus": BadCall(["images", "build", "--bogus"], "--bogus"),
        "images build an unknown image": BadCall(
            ["images", "build", "paperbench-nosuch"], "paperbench-nosuch"
        ),
        "images build --force (now --rebuild)": BadCall(["images", "build", "--force"], "--force"),
        "images list --bogus": BadCall(["images", "list", "--bogus"], "--bogus"),
        "sandbox gc --bogus": BadCall(["sandbox", "gc", "--bogus"], "--bogus"),
        "sandbox gc extra argument": BadCall(["sandbox", "gc", "extra"], "extra"),
        "judge-eval --concurrency of an unknown stage": BadCall(
            ["judge-eval", "--judge", "dummy", "--concurrency", "rollout=2"], "--concurrency"
        ),
        "grade --concurrency of an unknown stage": BadCall(
            ["grade", str(tmp_path), "--paper", "calibration-binning", "--concurrency", "x=1"],
            "--concurrency",
        ),
        "judge-eval --judge unknown": BadCall(
            ["judge-eval", "--judge", "nosuch"], "'nosuch'", frozenset({1})
        ),
        "judge-eval --gold missing": BadCall(
            ["judge-eval", "--judge", "dummy", "--gold", str(tmp_path / "nope")], "--gold"
        ),
        "judge-eval --gold without gold submissions": BadCall(
            ["judge-eval", "--judge", "dummy", "--gold", str(empty)], "--gold"
        ),
        "judge-eval --data-dir missing": BadCall(
            ["judge-eval", "--judge", "dummy", "--data-dir", str(tmp_path / "nope")],
            "nope",
            frozenset({1}),
        ),
        "judge-eval --concurrency 0": BadCall(
            ["judge-eval", "--judge", "dummy", "--concurrency", "0"], "--concurrency"
        ),
        "judge-eval --out a file": BadCall(
            ["judge-eval", "--judge", "dummy", "--out", str(not_archive)], "--out"
        ),
        "monitor a missing run folder": BadCall(
            ["monitor", str(tmp_path / "gone")],
            f"{tmp_path / 'gone'}: not a folder",
            frozenset({1}),
        ),
        "monitor a folder without a transcript": BadCall(
            ["monitor", str(empty)], f"{empty}: no transcript.jsonl", frozenset({1})
        ),
        "monitor a bad transcript line": BadCall(
            ["monitor", str(paths.bad_run), "--paper", "calibration-binning"],
            f"{paths.bad_run / 'transcript.jsonl'}: line 1: not a transcript event",
            frozenset({1}),
        ),
        "monitor a transcript that is not UTF-8": BadCall(
            ["monitor", str(paths.binary_run), "--paper", "calibration-binning"],
            f"{paths.binary_run / 'transcript.jsonl'}: not UTF-8 text",
            frozenset({1}),
        ),
        "monitor a run without a start event": BadCall(
            ["monitor", str(paths.run)], "--paper ID or --blacklist FILE"
        ),
        "monitor a bad network log line": BadCall(
            ["monitor", str(paths.run), "--paper", "calibration-binning"],
            f"{paths.run / 'network.jsonl'}: line 1: not a log entry",
            frozenset({1}),
        ),
        "monitor --blacklist missing": BadCall(
            ["monitor", str(paths.run), "--blacklist", str(tmp_path / "bl.txt")],
            f"{tmp_path / 'bl.txt'}: cannot read blacklist",
            frozenset({1}),
        ),
        "monitor --blacklist not a blacklist": BadCall(
            ["monitor", str(paths.run), "--blacklist", str(good)],
            f"{good}: line 1: expected one URL per line",
            frozenset({1}),
        ),
        "monitor --blacklist and --paper": BadCall(
            ["monitor", str(paths.run), "--blacklist", str(good), "--paper", "x"], "not both"
        ),
        "monitor --paper unknown": BadCall(
            ["monitor", str(paths.run), "--paper", "nosuch"], "nosuch", frozenset({1})
        ),
        "monitor --data-dir missing": BadCall(
            ["monitor", str(paths.run), "--paper", "x", "--data-dir", str(tmp_path / "nope")],
            "nope",
            frozenset({1}),
        ),
        "monitor --policy bogus": BadCall(
            ["monitor", str(paths.run), "--policy", "ban"], "--policy"
        ),
        "rollout without --paper": BadCall(["rollout", "--agent", "dummy"], "--paper"),
        "rollout --paper unknown": BadCall(
            ["rollout", "--paper", "nosuch", "--agent", "dummy", "--out", out],
            "'nosuch'",
            frozenset({1}),
        ),
        "rollout --agent unknown": BadCall(
            ["rollout", "--paper", "calibration-binning", "--agent", "nosuch", "--out", out],
            "nosuch",
            frozenset({1, 2}),
        ),
        **{
            f"rollout {flag} {value}": BadCall(
                [*roll, "--out", out, flag, value],
                flag,
            )
            for flag, value in [
                ("--max-steps", "0"),
                ("--max-tokens", "x"),
                ("--max-time", "-1"),
                ("--max-time", "soon"),
                ("--max-dollars", "nan"),
                ("--snapshot-every", "0"),
                ("--seed", "-1"),
                ("--sandbox", "bogus"),
                ("--network", "bogus"),
                ("--base-url", "http://127.0.0.1:9"),
            ]
        },
        "rollout --base-url notaurl": BadCall(
            [*roll, "--out", out, "--model", "openai/x", "--base-url", "notaurl"],
            "--base-url",
            frozenset({1, 2}),
        ),
        **{
            f"rollout {flag} {value}": BadCall([*roll, "--out", out, flag, value], flag)
            for flag, value in [
                ("--gpus", "-1"),
                ("--cpus", "0"),
                ("--memory", "1"),
                ("--disk", "x"),
            ]
        },
        "rollout --agent-env missing": BadCall(
            [*roll, "--out", out, "--agent-env", str(tmp_path / "missing.env")], "--agent-env"
        ),
        "rollout --agent-env a bad line": BadCall(
            [*roll, "--out", out, "--agent-env", str(paths.bad_env)],
            f"--agent-env {paths.bad_env}: line 2",
        ),
        "rollout --agent bad resources": BadCall(
            [*roll[:3], "--out", out, "--agent", str(paths.bad_resources)],
            f"{paths.bad_resources}: $.resources.gpus",
            frozenset({1}),
        ),
        "rollout --agent a missing env file": BadCall(
            [*roll[:3], "--out", out, "--agent", str(paths.missing_env)],
            f"{paths.missing_env}: $.resources.env_file",
            frozenset({1}),
        ),
        "rollout --resume without a run": BadCall(
            [*roll, "--resume", out],
            "--resume",
        ),
        "rollout --out not empty": BadCall(
            [*roll, "--out", str(tmp_path)],
            "--out",
        ),
        "unknown command": BadCall(["nosuchcommand"], "nosuchcommand"),
        "grade without --paper": BadCall(["grade", str(good)], "--paper"),
        "grade an unknown paper": BadCall(
            ["grade", str(tmp_path), "--paper", "nosuch", "--out", out], "nosuch", frozenset({1})
        ),
        "grade a missing submission": BadCall(
            ["grade", str(tmp_path / "gone"), "--paper", "calibration-binning", "--out", out],
            "gone",
        ),
        "grade --judge unknown": BadCall(
            ["grade", str(tmp_path), "--paper", "calibration-binning", "--judge", "nosuch"],
            "--judge",
            frozenset({1}),
        ),
        "grade --judge a broken file": BadCall(
            ["grade", str(tmp_path), "--paper", "calibration-binning", "--judge", str(good)],
            "good.json",
            frozenset({1}),
        ),
        "grade --samples 0": BadCall(
            ["grade", str(tmp_path), "--paper", "calibration-binning", "--samples", "0"],
            "--samples",
        ),
        "grade --max-depth x": BadCall(
            ["grade", str(tmp_path), "--paper", "calibration-binning", "--max-depth", "x"],
            "--max-depth",
        ),
        "grade --style bogus": BadCall(
            ["grade", str(tmp_path), "--paper", "calibration-binning", "--style", "bogus"],
            "--style",
        ),
        "grade --reference without papercoder": BadCall(
            [
                "grade",
                str(tmp_path),
                "--paper",
                "calibration-binning",
                "--reference",
                str(tmp_path),
            ],
            "--reference",
        ),
        "grade --executed without metadata": BadCall(
            ["grade", str(tmp_path), "--paper", "calibration-binning", "--executed", str(empty)],
            "metadata.json",
            frozenset({1}),
        ),
        "grade --model malformed": BadCall(
            ["grade", str(tmp_path), "--paper", "calibration-binning", "--model", "nomodel"],
            "--model",
        ),
        "grade --out a file": BadCall(
            ["grade", str(tmp_path), "--paper", "calibration-binning", "--out", str(good)],
            "--out",
        ),
        "grade --base-url notaurl": BadCall(
            ["grade", str(tmp_path), "--paper", "calibration-binning", "--base-url", "notaurl"],
            "--base-url",
        ),
        "grade --judge twice the same": BadCall(
            [*grade_cb, "--judge", "dummy", "--judge", "dummy", "--out", out],
            "--judge dummy: given twice",
        ),
        "run --papers unknown": BadCall([*run, "--papers", "a,b"], "--papers: unknown paper"),
        "run --papers nosuchsplit": BadCall([*run, "--papers", "nosuch"], "--papers nosuch"),
        "run --seeds 0": BadCall([*run, "--seeds", "0"], "--seeds"),
        "run --concurrency bad": BadCall([*run, "--concurrency", "gpu=1"], "--concurrency gpu=1"),
        "run --concurrency zero": BadCall([*run, "--concurrency", "grading=0"], "--concurrency"),
        "run --agent missing": BadCall(
            [*run, "--agent", str(tmp_path / "no.yaml")], "no.yaml", frozenset({1, 2})
        ),
        "run --agent broken": BadCall([*run, "--agent", str(good)], str(good), frozenset({1})),
        "run --judge missing": BadCall([*run, "--judge", "nosuch"], "--judge", frozenset({1, 2})),
        "run --group with a slash": BadCall([*run, "--group", "a/b"], "--group"),
        "run --max-time -1": BadCall([*run, "--max-time", "-1"], "--max-time"),
        "run --max-time 3 days": BadCall([*run, "--max-time", "3d"], "--max-time"),
        "run --snapshot-every 0": BadCall([*run, "--snapshot-every", "0"], "--snapshot-every"),
        "run --reproduce-timeout x": BadCall(
            [*run, "--reproduce-timeout", "x"], "--reproduce-timeout"
        ),
        "run --gpus -1": BadCall([*run, "--gpus", "-1"], "--gpus"),
        "run --memory 1": BadCall([*run, "--memory", "1"], "--memory"),
        "run --agent-env missing": BadCall(
            [*run, "--agent-env", str(tmp_path / "missing.env")], "--agent-env", frozenset({1, 2})
        ),
        "run --agent bad resources": BadCall(
            [*run, "--agent", str(paths.bad_resources)],
            f"{paths.bad_resources}: $.resources.gpus",
            frozenset({1}),
        ),
        "run --agent a missing env file": BadCall(
            [*run, "--agent", str(paths.missing_env)],
            f"{paths.missing_env}: $.resources.env_file",
            frozenset({1}),
        ),
        "run --budget-dollars nan": BadCall([*run, "--budget-dollars", "nan"], "--budget-dollars"),
        "run --resume with a config flag": BadCall(
            [*run, "--resume", "nowhere", "--seeds", "2"], "drop --seeds"
        ),
        "run --resume nowhere": BadCall([*run, "--resume", "nowhere"], "--resume nowhere"),
        "run --resume a broken group": BadCall(
            [*run, "--resume", str(paths.broken_group)], "group.json", frozenset({1})
        ),
        "run --ray-address without ray": BadCall(
            [*run, "--ray-address", "127.0.0.1:1", "--papers", "nosuchpaper,x"], "--papers"
        ),
        "report a missing group folder": BadCall(
            ["report", str(tmp_path / "gone")], f"{tmp_path / 'gone'}: not found", frozenset({1})
        ),
        "report a file, not a group folder": BadCall(
            ["report", str(good)], f"{good}: not a folder", frozenset({1})
        ),
        "report a folder without group.json": BadCall(
            ["report", str(empty)], f"{empty}: no group.json", frozenset({1})
        ),
        "report a group.json that is not JSON": BadCall(
            ["report", str(paths.group("broken-json"))],
            f"{paths.group('broken-json') / 'group.json'}: invalid JSON at line 1",
            frozenset({1}),
        ),
        "report a group.json with seeds 0": BadCall(
            ["report", str(paths.group("seeds-0"))],
            f"{paths.group('seeds-0') / 'group.json'}: $.seeds",
            frozenset({1}),
        ),
        "report a group.json naming the paper ..": BadCall(
            ["report", str(paths.group("dotdot-paper"))],
            f"{paths.group('dotdot-paper') / 'group.json'}: $.papers[0]",
            frozenset({1}),
        ),
        "report a group with a broken outcome.json": BadCall(
            ["report", str(paths.group("broken-outcome")), "--no-html"],
            f"{paths.group('broken-outcome') / 'p-alpha/agent-a/seed-0/outcome.json'}: "
            "invalid JSON",
            frozenset({1}),
        ),
        "report --out a file": BadCall(
            ["report", str(paths.group("broken-outcome")), "--out", str(good)], "--out"
        ),
        "report --open": BadCall(["report", str(empty), "--open"], "--open"),
        "grade several --judge with papercoder": BadCall(
            [*grade_cb, "--judge", "dummy", "--judge", "random", "--style", "papercoder"],
            "--judge: --style papercoder takes one judge config",
        ),
    }


_CALL_NAMES = list(_bad_calls(Path("/nonexistent")))
_NO_KEYS = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "OPENAI_BASE_URL": ""}


@pytest.mark.parametrize("name", _CALL_NAMES)
def test_every_command_refuses_bad_flags_and_paths(tmp_path: Path, name: str) -> None:
    _Paths(tmp_path).create()
    call = _bad_calls(tmp_path)[name]
    result = _run(call.args, env=_NO_KEYS)
    _assert_refused(result, set(call.codes), call.culprit)
    assert not (tmp_path / "out" / "metadata.json").exists()  # nothing was reproduced
    assert not list((tmp_path / "runs").glob("*/group.json"))  # no group was started


@pytest.mark.parametrize(
    "args",
    [[], ["rubric"], ["papers"], ["models"], ["images"], ["sandbox"], ["reproduce"], ["grade"]]
    + [["rollout"], ["monitor"], ["judge-eval"], ["run"]]
    + [["rollout"], ["monitor"], ["judge-eval"], ["report"]]
    + [["rubric", c] for c in ["validate", "stats", "score", "show"]]
    + [["papers", "list"], ["models", "check"], ["models", "list"], ["sandbox", "gc"]]
    + [["images", "build"], ["images", "list"]],
)
def test_help_is_plain_text(args: list[str]) -> None:
    result = _run([*args, "--help"])
    assert result.exit_code == 0, result.output
    assert "`" not in result.output and "<bool>" not in result.output


# --- a property: any mutation of a valid file --------------------------------------------------

_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**400), 10**400), st.floats(allow_nan=True),
    st.text(max_size=5), st.sampled_from(["Code Development", "Subtree", ""]),
    st.just([]), st.just({}), st.just([{}]),
)  # fmt: skip
_FIELDS = st.sampled_from(
    ["id", "requirements", "weight", "sub_tasks", "task_category", "check", "score",
     "valid_score", "explanation", "judge_metadata", "finegrained_task_category", "x"]
)  # fmt: skip


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.booleans(), st.integers(0, 5), _FIELDS, _VALUES, st.booleans())
def test_any_one_field_changed_is_accepted_or_named(
    tmp_path: Path, graded: bool, which: int, field: str, value: object, drop: bool
) -> None:
    data = _graded() if graded else node(leaf(1), node(leaf(2), leaf(3)))
    nodes = [data]
    for n in nodes:
        nodes.extend(n["sub_tasks"])
    target = nodes[which % len(nodes)]
    if drop:
        target.pop(field, None)
    else:
        target[field] = value
    f = tmp_path / "mutated.json"
    f.write_text(json.dumps(data))
    for args in (["rubric", "validate", str(f)], ["rubric", "show", str(f)],
                 ["rubric", "score" if graded else "stats", str(f)]):  # fmt: skip
        result = _run(args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            args,
            result.output,
        )
        assert result.exit_code in {0, 1}, (args, result.output)
        if result.exit_code == 1:
            assert f"{f}: $" in result.output, (args, result.output)


# --- ResearchCodeBench problem sets --------------------------------------------------------

RCB_COMMANDS: list[list[str]] = [
    ["rcb", "list"],
    ["rcb", "validate", "--sandbox", "local"],
    ["rcb", "run", "--model", "openai/gpt-4o", "--sandbox", "local"],
]
"""Every ``rcb`` command that reads a problem set, with the flags it needs besides
``--rcb-dir`` (each must refuse a malformed set before it starts anything)."""


@pytest.mark.parametrize("command", RCB_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("case", list(MALFORMED))
def test_every_rcb_command_refuses_every_malformed_problem_set(
    tmp_path: Path, case: str, command: list[str]
) -> None:
    root, culprit = MALFORMED[case].make(tmp_path)
    result = _run([*command, "--rcb-dir", str(root)])
    _assert_refused(result, {1}, culprit)
    assert MALFORMED[case].words in result.output


RCB_BAD_FLAGS: dict[str, tuple[list[str], str]] = {
    "rcb run --samples 0": (["--samples", "0"], "--samples"),
    "rcb run --timeout forever": (["--timeout", "forever"], "--timeout"),
    "rcb run --concurrency tests=0": (["--concurrency", "tests=0"], "--concurrency"),
    "rcb run --concurrency gpus=1": (["--concurrency", "gpus=1"], "--concurrency gpus=1"),
    "rcb run --papers unknown": (["--papers", "nosuch"], "--papers: unknown paper nosuch"),
    "rcb run --max-steps without agent": (["--max-steps", "3"], "--max-steps"),
    "rcb run --max-time without agent": (["--max-time", "1m"], "--max-time"),
    "rcb run --max-steps 0": (["--mode", "agent", "--max-steps", "0"], "--max-steps"),
    "rcb run --max-time never": (["--mode", "agent", "--max-time", "never"], "--max-time"),
    "rcb run --concurrency agents=0": (["--concurrency", "agents=0"], "--concurrency"),
    "rcb run --mode bogus": (["--mode", "bogus"], "--mode"),
    "rcb run --resume nothing": (["--resume", "nowhere"], "--resume"),
    "rcb run --budget-dollars nan": (["--budget-dollars", "nan"], "--budget-dollars"),
}


@pytest.mark.parametrize("case", list(RCB_BAD_FLAGS))
def test_rcb_run_refuses_a_bad_flag_in_one_line(tmp_path: Path, case: str) -> None:
    flags, culprit = RCB_BAD_FLAGS[case]
    args = ["rcb", "run", "--rcb-dir", str(PSET.parent), "--model", "openai/gpt-4o"]
    args += ["--sandbox", "local", "--out", str(tmp_path / "out"), *flags]
    result = _run(args)
    _assert_refused(result, {1, 2}, culprit)
    assert not (tmp_path / "out" / "problems").exists()


# --- model and URL flags on every command ------------------------------------------------

_BAD_MODEL_VALUES = ["gpt-4o-mini", "nosuchprovider/x", "/x"]
_BAD_URL_VALUES = ["localhost:8000", "ftp://host/v1", "http://"]


def _model_and_url_flags() -> list[tuple[list[str], str, str]]:
    """(command path, flag, bad value) for every option of every command that names a model
    (``--model``, ``--agent-model``, ...) or a server URL (``--base-url``, ...)."""
    found: list[tuple[list[str], str, str]] = []
    stack: list[tuple[list[str], Any]] = [([], typer.main.get_command(app))]
    while stack:
        path, command = stack.pop()
        subs = getattr(command, "commands", None)
        if subs:
            stack.extend(([*path, n], c) for n, c in subs.items())
            continue
        for param in command.params:
            for flag in param.opts:
                if flag.endswith("-model") or flag == "--model":
                    found += [(path, flag, v) for v in _BAD_MODEL_VALUES]
                elif flag.endswith("base-url"):
                    found += [(path, flag, v) for v in _BAD_URL_VALUES]
    return sorted(found)


_MODEL_FLAGS = _model_and_url_flags()


def test_the_model_and_url_flags_are_found() -> None:
    commands = {(" ".join(path), flag) for path, flag, _ in _MODEL_FLAGS}
    for expected in [
        ("run", "--agent-model"),
        ("run", "--agent-base-url"),
        ("run", "--judge-model"),
        ("run", "--judge-base-url"),
        ("grade", "--model"),
        ("grade", "--base-url"),
        ("judge-eval", "--model"),
        ("rollout", "--base-url"),
        ("rcb run", "--model"),
        ("models check", "--base-url"),
    ]:
        assert expected in commands, (expected, sorted(commands))


@pytest.mark.parametrize(("path", "flag", "value"), _MODEL_FLAGS, ids=lambda v: str(v))
def test_every_model_and_url_flag_refuses_a_value_that_cannot_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: list[str], flag: str, value: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = _run([*path, flag, value], env=_NO_KEYS)
    _assert_refused(result, {2}, f"error: {flag}: ")
    assert result.output.strip().count("\n") == 0, result.output  # one line
    assert repr(value) in result.output, result.output
    assert list(tmp_path.iterdir()) == []  # no folder, no file
