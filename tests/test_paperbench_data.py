"""PaperBench's data as distributed: a paper folder laid out as in its data directory (a
folder name that differs from its config.yaml id, files left as Git LFS pointers, a
judge_eval/ folder with other papers' gold submissions missing or not pulled), through the
real CLI."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

from typer.testing import CliRunner, Result

from paperbench.cli import app
from paperbench.testing import FakeLLMServer
from tests.fixtures import clean_env, fake_llm  # noqa: F401
from tests.judge.scripted import ScriptedJudge

ROOT = Path(__file__).resolve().parents[1]
PAPER = "calibration-binning"
FOLDER = "calibration-binnings"
"""The folder's name differs from the id in its config.yaml, as PaperBench's
``stochastic-interpolants`` folder holds the paper ``stochastic-interpolant``."""
POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize 1234\n"

runner = CliRunner()


def _run(args: list[str]) -> Result:
    return runner.invoke(app, args, env={"COLUMNS": "200"})


def _data_dir(tmp_path: Path) -> Path:
    """A copy of a bundled paper laid out as a PaperBench data directory."""
    data = tmp_path / "data"
    folder = data / "papers" / FOLDER
    shutil.copytree(ROOT / "papers" / PAPER, folder)
    shutil.copy(ROOT / "rubrics" / f"{PAPER}.json", folder / "rubric.json")
    shutil.copy(ROOT / "blacklists" / f"{PAPER}.txt", folder / "blacklist.txt")
    (folder / "assets").mkdir()
    (folder / "assets" / "figure_1.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return data


def _pointer(path: Path) -> None:
    path.write_text(POINTER.format(path.name.encode().hex().ljust(64, "0")))


def _error_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_every_lfs_pointer_and_a_bad_rubric_are_refused_before_any_folder(
    tmp_path: Path,
) -> None:
    data = _data_dir(tmp_path)
    folder = data / "papers" / FOLDER
    for name in ["addendum.md", "judge.addendum.md", "assets/figure_1.png"]:
        _pointer(folder / name)

    listed = _run(["papers", "list", "--data-dir", str(data), "--json"])
    assert listed.exit_code == 1, listed.output
    [row] = json.loads(listed.stdout)
    assert row["id"] == PAPER and row["paper_md"] == "ok"  # the id config.yaml gives
    assert row["lfs_pointers"] == ["addendum.md", "judge.addendum.md", "assets/figure_1.png"]
    table = _run(["papers", "list", "--data-dir", str(data)])
    assert table.exit_code == 1 and table.stdout.count("LFS pointer") == 2  # the addenda
    [line] = _error_lines(table)
    assert f"{folder}: addendum.md, judge.addendum.md, assets/figure_1.png: is a Git LFS" in line

    runs = tmp_path / "runs"
    out = tmp_path / "rollout"
    # the paper named by its id and by its folder: both found, both refused
    rollout = ["rollout", "--data-dir", str(data), "--paper", PAPER, "--agent", "dummy"]
    run = ["run", "--data-dir", str(data), "--papers", FOLDER, "--agent", "dummy"]
    run += ["--judge", "dummy", "--runs-dir", str(runs), "--sandbox", "local"]
    for args in [[*rollout, "--out", str(out)], run]:
        result = _run(args)
        assert result.exit_code == 1, result.output
        [line] = _error_lines(result)
        assert f"{folder / 'addendum.md'}: is a Git LFS pointer" in line
        assert "(and 2 more files of" in line and "Traceback" not in result.output
    assert not out.exists() and not runs.exists()
    # the judge reads the addenda too (not the assets)
    submission = ROOT / "examples" / PAPER / "partial" / "submission"
    grade = ["grade", str(submission), "--paper", FOLDER, "--data-dir", str(data)]
    graded = _run([*grade, "--judge", "dummy", "--out", str(out)])
    assert graded.exit_code == 1, graded.output
    [line] = _error_lines(graded)
    assert f"{folder / 'addendum.md'}: is a Git LFS pointer" in line
    assert "(and 1 more file of" in line and not out.exists()

    # the files pulled, the rubric broken: refused before the rollout, not at grading
    shutil.copytree(ROOT / "papers" / PAPER, folder, dirs_exist_ok=True)
    (folder / "assets" / "figure_1.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    rubric = json.loads((folder / "rubric.json").read_text())
    rubric["sub_tasks"][0]["weight"] = "heavy"
    (folder / "rubric.json").write_text(json.dumps(rubric))
    for args in [[*rollout, "--out", str(out)], run]:
        result = _run(args)
        assert result.exit_code == 1, result.output
        [line] = _error_lines(result)
        assert f"{folder / 'rubric.json'}: $.sub_tasks[0].weight" in line, line
    assert not out.exists() and not runs.exists()
    listed = _run(["papers", "list", "--data-dir", str(data), "--json"])
    assert listed.exit_code == 1
    assert "rubric.json: $.sub_tasks[0].weight" in json.loads(listed.stdout)[0]["error"]


def _gold(judge_eval: Path, paper: str, example: str) -> Path:
    """``judge_eval/<paper>/<example>/`` as PaperBench ships it: grading/expected_result.json
    and submission.tar (a ``submission/`` folder inside)."""
    source = ROOT / "examples" / PAPER / example
    gold = judge_eval / paper / "0"
    (gold / "grading").mkdir(parents=True)
    shutil.copy(source / "expected_result.json", gold / "grading" / "expected_result.json")
    with tarfile.open(gold / "submission.tar", "w") as tar:
        tar.add(source / "submission", arcname="submission")
    return gold


def test_judge_eval_reads_only_the_paper_asked_for_and_counts_the_requests_sent(
    tmp_path: Path,
    fake_llm: FakeLLMServer,  # noqa: F811
) -> None:
    data = _data_dir(tmp_path)
    judge_eval = data / "judge_eval"
    _gold(judge_eval, FOLDER, "partial")
    # other papers' gold submissions as a clone without 'git lfs pull' leaves them
    _pointer(_gold(judge_eval, "pinn", "buggy") / "submission.tar")
    (judge_eval / "rice" / "0" / "grading").mkdir(parents=True)  # not redistributable
    (judge_eval / ".gitattributes").write_text("**/*.tar filter=lfs diff=lfs merge=lfs -text\n")

    everything = _run(["judge-eval", "--gold", str(data), "--judge", "dummy"])
    assert everything.exit_code == 1
    [line] = _error_lines(everything)
    assert "pinn/0/submission.tar: is a Git LFS pointer" in line

    fake_llm.handler = ScriptedJudge(lambda text: 1.0)
    out = tmp_path / "eval"
    args = ["judge-eval", "--gold", str(data), "--paper", PAPER, "--out", str(out)]
    args += ["--base-url", fake_llm.openai_url, "--model", "openai/gpt-4o"]
    result = _run(args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert [g["name"] for g in report["golds"]] == [f"{FOLDER}/0"]
    [config] = report["configs"]
    # requests: what the server received, from the ledger of calls (a batched call once)
    assert len(fake_llm.requests) > 0
    assert config["cost"]["requests"] == len(fake_llm.requests)
    assert config["overall"]["leaves"] > len(fake_llm.requests)  # leaves share calls
