"""The default mode's shortlist: the model names each leaf's files over a map of the
submission, so evidence reaches the grader whatever its words (issue 28)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import yaml

from paperbench.judge import LeafGrade, build_view, load_judge_config
from paperbench.judge._config import catalog_dir
from paperbench.judge._grader import grade_submission
from paperbench.judge._job import GradeOptions, ModelSettings
from paperbench.papers import Paper, PaperSource
from paperbench.rubric import TaskNode
from paperbench.testing import FakeLLMServer, FakeReply, Fault, RecordedRequest

from .scripted import ScriptedJudge, batch_criteria, is_shortlist, last_user_text

QUOKKA = "The quokka estimator is implemented as the paper describes."
WOMBAT = "The wombat step is configured with a learning rate as the paper gives it."
SHORTLIST = {
    QUOKKA: ["src/pkg/zeta.py"],
    WOMBAT: ["src/wombat.py", "src/settings_zz.py"],
}


CHECKED = "The numbat test passes."


def _rubric() -> TaskNode:
    leaves: list[dict[str, object]] = [
        {
            "id": f"l{i}",
            "requirements": text,
            "weight": 1,
            "sub_tasks": [],
            "task_category": "Code Development",
            "finegrained_task_category": None,
        }
        for i, text in enumerate((QUOKKA, WOMBAT))
    ]
    leaves.append(  # graded by running its command: no file to shortlist
        {
            "id": "checked",
            "requirements": CHECKED,
            "weight": 1,
            "sub_tasks": [],
            "task_category": "Code Development",
            "check": {"command": "true"},
        }
    )
    return TaskNode.model_validate(
        {
            "id": "root",
            "requirements": "Replicate the paper",
            "weight": 1,
            "sub_tasks": [{"id": "m", "requirements": "Method", "weight": 1, "sub_tasks": leaves}],
        }
    )


def _submission(root: Path) -> Path:
    """24 decoys in the criteria's words (more than the 20 files a call of two leaves shows,
    ten per leaf), the quokka leaf's evidence in words of its own (importing a helper), and
    the wombat leaf's split between a file in its words and a settings file in none of them."""
    files = {
        "README.md": "# Replication\n",
        "src/pkg/zeta.py": "from .helpers import blend_core\n\n"
        "def lerp_blend(x):\n    return blend_core(x)  # MARK_B\n",
        "src/pkg/helpers.py": "def blend_core(x):\n    return x  # MARK_H\n",
        "src/wombat.py": "def wombat_step(x, cfg):\n    return x * cfg.alpha  # MARK_C1\n",
        "src/settings_zz.py": "ALPHA_SCHEDULE = 0.3  # MARK_C2\n",
    }
    for i in range(24):
        files[f"src/decoy_{i}.py"] = (
            f"# quokka estimator and wombat step: learning rate configured later ({i})\n"
            "def todo(x):\n    return x\n"
        )
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _leaves(count: int) -> TaskNode:
    """The rubric with only its first ``count`` leaves."""
    rubric = _rubric().to_dict()
    rubric["sub_tasks"][0]["sub_tasks"] = rubric["sub_tasks"][0]["sub_tasks"][:count]
    return TaskNode.model_validate(rubric)


def _grade_with(
    server: FakeLLMServer,
    root: Path,
    out: Path,
    *,
    judge: str | Path = "simple",
    rubric: TaskNode | None = None,
) -> dict[str, LeafGrade]:
    """``root`` graded on ``rubric`` (default: the whole one) against ``server``; the
    grades by leaf id."""
    paper: Paper = PaperSource.resolve(None).load("calibration-binning")
    asyncio.run(
        grade_submission(
            build_view(root),
            paper,
            load_judge_config(judge),
            out_dir=out,
            rubric=rubric or _rubric(),
            options=GradeOptions(samples=1),
            settings=ModelSettings(base_url=server.openai_url, model="openai/gpt-4o"),
        )
    )
    lines = (out / "grading" / "leaves.jsonl").read_text().splitlines()
    grades = [LeafGrade.model_validate_json(line) for line in lines]
    return {g.leaf_id: g for g in grades}


def _grade(server: FakeLLMServer, tmp_path: Path) -> dict[str, LeafGrade]:
    return _grade_with(server, _submission(tmp_path / "submission"), tmp_path / "out")


def _grading_text(server: FakeLLMServer, requirements: str) -> str:
    """The request that grades the criterion (the last one that asks for its verdict)."""
    asked = [r for r in server.requests if requirements in dict(batch_criteria(r)).values()]
    return last_user_text(asked[-1])


def test_evidence_in_other_words_and_split_evidence_reach_the_grader(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """(b) The quokka leaf's evidence shares no word with it: the shortlist names it, and it
    (and the helper it imports) is in the request that grades the leaf. (c) Both files of the
    wombat leaf's split evidence are in its grading request. Each shown file records why."""
    fake_llm.handler = ScriptedJudge(lambda _: 1.0, shortlist=lambda r: SHORTLIST.get(r, []))
    grades = _grade(fake_llm, tmp_path)
    [asked] = [r for r in fake_llm.requests if is_shortlist(r)]  # one call for the group
    assert QUOKKA in last_user_text(asked) and CHECKED not in last_user_text(asked)
    quokka = _grading_text(fake_llm, QUOKKA)
    assert "MARK_B" in quokka and "MARK_H" in quokka
    wombat = _grading_text(fake_llm, WOMBAT)
    assert "MARK_C1" in wombat and "MARK_C2" in wombat
    why = grades["l0"].files_why
    assert why["src/pkg/zeta.py"] == "shortlist" and why["src/pkg/helpers.py"] == "import hop"
    assert grades["l1"].files_why["src/settings_zz.py"] == "shortlist"
    assert "lexical" in why.values()  # the rest of the room: the BM25 ranking
    assert not grades["l0"].selection_notes and not grades["l1"].selection_notes


def test_a_path_the_shortlist_invents_is_ignored(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    """The answer's paths are the model's word: one not in the view is not shown (nor
    recorded), the real one beside it is."""
    invented = {QUOKKA: ["src/ghost_module.py", "../../etc/passwd", "src/pkg/zeta.py"]}
    fake_llm.handler = ScriptedJudge(lambda _: 1.0, shortlist=lambda r: invented.get(r, []))
    grades = _grade(fake_llm, tmp_path)
    quokka = _grading_text(fake_llm, QUOKKA)
    assert "MARK_B" in quokka
    assert "ghost_module" not in quokka and "passwd" not in quokka
    assert grades["l0"].files_why["src/pkg/zeta.py"] == "shortlist"
    assert not {"src/ghost_module.py", "../../etc/passwd"} & set(grades["l0"].files_why)


def test_a_failed_shortlist_call_leaves_a_note_and_the_lexical_choice(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """The shortlist call is refused: the leaves are graded on the BM25 choice alone, and
    each says so in its notes (never a silent fallback)."""
    judge = ScriptedJudge(lambda _: 1.0)

    def handler(request: RecordedRequest) -> FakeReply | Fault:
        return Fault.http(400, "refused") if is_shortlist(request) else judge(request)

    fake_llm.handler = handler
    grades = _grade(fake_llm, tmp_path)
    assert grades["l0"].valid and grades["l1"].valid
    for grade in (grades["l0"], grades["l1"]):
        assert len(grade.selection_notes) == 1
        assert "shortlist call failed" in grade.selection_notes[0]
        assert "lexical index alone" in grade.selection_notes[0]
        assert set(grade.files_why.values()) == {"lexical"}
    assert "MARK_B" not in _grading_text(fake_llm, QUOKKA)
    # and the grading as a whole says so in grade.json (what `grade` prints a warning from)
    result = json.loads((tmp_path / "out" / "grading" / "grade.json").read_text())
    assert list(result["selection_notes"].values()) == [2], result["selection_notes"]


def _capped_judge(tmp_path: Path, submission_tokens: int) -> Path:
    """The catalog's simple judge with its submission room capped at ``submission_tokens``."""
    folder = tmp_path / "judges"
    shutil.copytree(catalog_dir(), folder, dirs_exist_ok=True)
    config = yaml.safe_load((folder / "simple.yaml").read_text())
    config["budgets"]["submission_tokens"] = submission_tokens
    (folder / "capped.yaml").write_text(yaml.safe_dump(config))
    return folder / "capped.yaml"


def _grade_two_big_files(fake_llm: FakeLLMServer, root: Path, judge: Path, out: Path) -> None:
    """The quokka and wombat leaves graded with ``judge``, each shortlisted to its big file
    (``src/big_a.py``, ``src/big_b.py``)."""
    picks = {QUOKKA: ["src/big_a.py"], WOMBAT: ["src/big_b.py"]}
    fake_llm.handler = ScriptedJudge(lambda _: 1.0, shortlist=lambda r: picks.get(r, []))
    _grade_with(fake_llm, root, out, judge=judge, rubric=_leaves(2))


def test_a_batch_gets_room_for_its_must_have_files_before_it_is_split(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """Two leaves whose shortlisted files (~590 tokens each, a single 40-line chunk) do not
    both fit the submission cap (700 tokens): the call's room is raised by what the left-out
    one takes, and one call grades both, each shown its file (rather than a call each)."""
    judge = _capped_judge(tmp_path, 700)
    root = tmp_path / "submission"
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("# Replication\n")
    for name, mark in (("big_a", "MARK_A"), ("big_b", "MARK_B")):
        body = "".join(f"value_{name}_{j} = compute_{j}(table, {j})\n" for j in range(39))
        (root / "src" / f"{name}.py").write_text(body + f"# {mark}")  # 40 lines: one chunk
    _grade_two_big_files(fake_llm, root, judge, tmp_path / "out")
    [grading] = [r for r in fake_llm.requests if batch_criteria(r)]
    text = last_user_text(grading)
    assert "MARK_A" in text and "MARK_B" in text


def _one_leaf_request(fake_llm: FakeLLMServer, tmp_path: Path, room_to_need: bool) -> str:
    """The request that grades the quokka leaf alone, under the catalog's simple judge with
    ``room_to_need`` set as given."""
    folder = tmp_path / f"judges-{room_to_need}"
    shutil.copytree(catalog_dir(), folder, dirs_exist_ok=True)
    config = yaml.safe_load((folder / "simple.yaml").read_text())
    config["room_to_need"] = room_to_need
    (folder / "sized.yaml").write_text(yaml.safe_dump(config))
    fake_llm.handler = ScriptedJudge(lambda _: 1.0, shortlist=lambda r: SHORTLIST.get(r, []))
    before = len(fake_llm.requests)
    root = _submission(tmp_path / f"submission-{room_to_need}")
    out = tmp_path / f"out-{room_to_need}"
    _grade_with(fake_llm, root, out, judge=folder / "sized.yaml", rubric=_leaves(1))
    [grading] = [r for r in fake_llm.requests[before:] if batch_criteria(r)]
    return last_user_text(grading)


def test_a_one_leaf_call_is_given_the_room_its_must_have_files_take(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """The catalog's simple judge sizes a call's submission room to its must-have files: a
    lone leaf is shown its shortlisted file and what it imports, without the decoys in its
    words that the full room (``submission_tokens``) is filled with."""
    assert load_judge_config("simple").config.room_to_need  # type: ignore[union-attr]
    sized = _one_leaf_request(fake_llm, tmp_path, room_to_need=True)
    full = _one_leaf_request(fake_llm, tmp_path, room_to_need=False)
    assert all(mark in sized and mark in full for mark in ("MARK_B", "MARK_H"))
    assert full.count("src/decoy_") >= 6  # the full room: decoys up to max_files
    assert sized.count("src/decoy_") <= 2  # at most its own top lexical file
    assert len(sized) < len(full)


def test_a_short_last_shortlist_group_joins_the_others(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """17 leaves of one category with ``shortlist_batch`` 16: one shortlist call (the map is
    not sent again for a single leaf), which names every leaf's files."""
    texts = [f"The quokka variant {i} is implemented." for i in range(17)]
    fake_llm.handler = ScriptedJudge(lambda _: 1.0, shortlist=lambda r: ["src/pkg/zeta.py"])
    rubric = _rubric().to_dict()
    rubric["sub_tasks"][0]["sub_tasks"] = [
        {**rubric["sub_tasks"][0]["sub_tasks"][0], "id": f"q{i}", "requirements": text}
        for i, text in enumerate(texts)
    ]
    root = _submission(tmp_path / "submission")
    _grade_with(fake_llm, root, tmp_path / "out", rubric=TaskNode.model_validate(rubric))
    shortlists = [r for r in fake_llm.requests if is_shortlist(r)]
    assert len(shortlists) == 1
    assert all(t in last_user_text(shortlists[0]) for t in texts)
    graded = [r for r in fake_llm.requests if batch_criteria(r)]
    assert all("MARK_B" in last_user_text(r) for r in graded)


def _lone_leaf_shown(fake_llm: FakeLLMServer, tmp_path: Path, named: list[str]) -> LeafGrade:
    """The quokka leaf graded alone (catalog's simple judge), its shortlist naming ``named``,
    over a submission whose top lexical file for it is a helper that only mentions it."""
    root = tmp_path / "submission"
    files = {
        "README.md": f"# Replication ({tmp_path.name})\n",  # not the other's cached answer
        "src/quokka_estimator.py": "def quokka_estimator(x):\n    return x / 2  # MARK_Q\n",
        "src/pkg/zeta.py": "def lerp_blend(x):\n    return x  # MARK_Z\n",
        "src/uses.py": "from .quokka_estimator import quokka_estimator  # MARK_U\n"
        "# the quokka estimator: implemented, the quokka estimator as the paper describes\n"
        "def quokka_estimator_implemented_paper(x):\n    return quokka_estimator(x)\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    fake_llm.handler = ScriptedJudge(lambda _: 1.0, shortlist=lambda r: named)
    [grade] = _grade_with(fake_llm, root, tmp_path / "out", rubric=_leaves(1)).values()
    return grade


def test_the_top_lexical_file_is_a_must_have_only_when_the_shortlist_shares_few_words(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """A shortlist that names a file in the criterion's words has the words' vote already:
    the call's room is what that file takes, and the helper the lexical index ranks first
    is not shown. A shortlist naming a file in none of its words may be wrong: the top
    lexical file stays a must-have and is shown beside it."""
    agree = _lone_leaf_shown(fake_llm, tmp_path / "agree", ["src/quokka_estimator.py"])
    assert agree.files_why == {"src/quokka_estimator.py": "shortlist"}
    text = _grading_text(fake_llm, QUOKKA)
    assert "MARK_Q" in text and "MARK_U" not in text
    other = _lone_leaf_shown(fake_llm, tmp_path / "other", ["src/pkg/zeta.py"])
    assert other.files_why.get("src/uses.py") == "lexical", other.files_why
    assert other.files_why["src/pkg/zeta.py"] == "shortlist"
    text = _grading_text(fake_llm, QUOKKA)
    assert "MARK_Z" in text and "MARK_U" in text


def test_an_excerpt_of_a_must_have_file_is_not_counted_as_shown(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """Two leaves whose shortlisted files (two 40-line chunks each: the criterion's words in
    the first, the evidence in the second) do not both fit whole in the submission cap: an
    excerpt of one would show its words and miss its evidence. The call is given room for
    both whole, and each leaf's grading request holds its evidence."""
    judge = _capped_judge(tmp_path, 1500)
    root = tmp_path / "submission"
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("# Replication\n")
    for name, words, mark in (
        ("big_a", "quokka estimator implemented paper", "MARK_A"),
        ("big_b", "wombat step configured learning rate", "MARK_B"),
    ):
        head = "".join(f"# {words} ({j})\nvalue_{j} = compute_{j}(table)\n" for j in range(20))
        body = "".join(f"other_{j} = reduce_{j}(frame, {j})\n" for j in range(39))
        (root / "src" / f"{name}.py").write_text(head + body + f"# {mark}\n")
    _grade_two_big_files(fake_llm, root, judge, tmp_path / "out")
    assert "MARK_A" in _grading_text(fake_llm, QUOKKA)
    assert "MARK_B" in _grading_text(fake_llm, WOMBAT)
    lines = (tmp_path / "out" / "grading" / "leaves.jsonl").read_text().splitlines()
    for grade in (LeafGrade.model_validate_json(line) for line in lines):
        assert not grade.file_lines_shown, grade.file_lines_shown  # whole files, no excerpt
