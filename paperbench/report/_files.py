"""Reading a run group's files for the report, whatever state they are in.

A run may be unfinished, killed or failing: any of its files may be missing. A file that is
there but cannot be read (bad JSON, a field that does not validate, a bad line in a log of
records) becomes a :class:`Problem` naming its path; the report says so and goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from paperbench._io import json_path, read_json
from paperbench.agents import MonitorReport, RolloutStatus, TranscriptEvent
from paperbench.errors import InputError
from paperbench.judge import ADDRESSED_KEY, AddressedFinding, GradeResult, LeafGrade
from paperbench.llm import CostRecord
from paperbench.reproduce import ReproductionMetadata
from paperbench.rubric import validate_data
from paperbench.runs import GroupConfig, RunKey, RunOutcome, RunState, read_group, run_keys
from paperbench.runs._store import (
    GRADING_DIR,
    MONITOR_FILE,
    OUTCOME_FILE,
    REPRODUCTION_DIR,
    RUN_FILE,
    RUN_LOG,
    safe_name,
)

M = TypeVar("M", bound=BaseModel)

STATUS_FILE = "status.json"
TRANSCRIPT_FILE = "transcript.jsonl"
ROLLOUT_COSTS_FILE = "costs.jsonl"
GRADE_FILE = f"{GRADING_DIR}/grade.json"
LEAVES_FILE = f"{GRADING_DIR}/leaves.jsonl"
GRADING_COSTS_FILE = f"{GRADING_DIR}/costs.jsonl"
REPRO_METADATA_FILE = f"{REPRODUCTION_DIR}/metadata.json"
REPRO_LOG_FILE = f"{REPRODUCTION_DIR}/reproduce.log"

_EVENTS: TypeAdapter[TranscriptEvent] = TypeAdapter(TranscriptEvent)


class Problem(BaseModel):
    """A file of the group that is there but could not be read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"


@dataclass(frozen=True)
class GradeSummary:
    """What the metrics need of grade.json (the graded tree itself is read again by the run
    page: a group's trees are not all held in memory)."""

    judge: dict[str, Any]
    scores_by_category: dict[str, float]


@dataclass
class RunFiles:
    """What one planned run left on disk; ``None`` (or empty) where a file is absent or
    unreadable (then a :class:`Problem` names it)."""

    key: RunKey
    folder: Path
    outcome: RunOutcome | None = None
    state: RunState | None = None
    rollout: RolloutStatus | None = None
    monitor: MonitorReport | None = None
    reproduction: ReproductionMetadata | None = None
    grade: GradeSummary | None = None
    rollout_costs: list[CostRecord] = field(default_factory=list)
    grading_costs: list[CostRecord] = field(default_factory=list)
    addressed_to_judge: list[AddressedFinding] = field(default_factory=list)
    """Text addressed to the judge that the grading found (:func:`addressed_of`)."""
    problems: list[Problem] = field(default_factory=list)

    @property
    def outcome_unreadable(self) -> bool:
        outcome_path = str(self.folder / OUTCOME_FILE)
        return any(problem.file == outcome_path for problem in self.problems)


def _problem_of(exc: InputError, path: Path) -> Problem:
    message = exc.message
    if exc.path:
        message = f"{exc.path}: {message}"
    return Problem(file=str(exc.file or path), message=message)


def read_model(path: Path, model: type[M], problems: list[Problem]) -> M | None:
    """``path`` as ``model``; None when absent, or unreadable (a problem added)."""
    if not path.exists():
        return None
    try:
        return model.model_validate(read_json(path))
    except InputError as exc:
        problems.append(_problem_of(exc, path))
    except ValidationError as exc:
        first = exc.errors()[0]
        problems.append(
            Problem(file=str(path), message=f"{json_path(first['loc'])}: {first['msg']}")
        )
    return None


def _lines(path: Path, problems: list[Problem]) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        problems.append(Problem(file=str(path), message=f"not UTF-8 text (byte {exc.start})"))
        return []
    except OSError as exc:
        problems.append(Problem(file=str(path), message=f"cannot read ({exc.strerror})"))
        return []
    return text.split("\n")


def read_records(path: Path, model: type[M], problems: list[Problem]) -> list[M]:
    """The records of a JSON-lines file. A last line cut short (a killed writer) is
    dropped silently, as every reader of the store does; any other bad line is a problem
    naming its number, and the good lines are kept."""
    if not path.exists():
        return []
    lines = _lines(path, problems)
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    records: list[M] = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(model.model_validate_json(line))
        except ValidationError as exc:
            if index == last and not line.rstrip().endswith("}"):
                break  # the record in flight when the writer died
            first = exc.errors()[0]
            where = json_path(first["loc"]) if first["type"] != "json_invalid" else "$"
            problems.append(
                Problem(
                    file=str(path),
                    message=f"line {index + 1}: {where}: {first['msg']}",
                )
            )
    return records


def read_transcript_events(
    path: Path, problems: list[Problem]
) -> tuple[list[TranscriptEvent], bool]:
    """The events of transcript.jsonl (bad lines are problems, the rest is kept) and
    whether its last line was cut short."""
    if not path.exists():
        return [], False
    lines = _lines(path, problems)
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    events: list[TranscriptEvent] = []
    torn = False
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            events.append(_EVENTS.validate_json(line))
        except ValidationError as exc:
            if index == last and not line.rstrip().endswith("}"):
                torn = True
                break
            first = exc.errors()[0]
            problems.append(
                Problem(
                    file=str(path),
                    message=f"line {index + 1}: not a transcript event "
                    f"({json_path(first['loc'])}: {first['msg']})",
                )
            )
    return events, torn


def read_capped_text(path: Path, limit: int) -> tuple[str | None, int]:
    """Head and tail of a text file, at most ``limit`` characters (undecodable bytes
    replaced), and its size in bytes; None when absent."""
    if not path.is_file():
        return None, 0
    size = path.stat().st_size
    head_bytes = limit // 4
    tail_bytes = limit - head_bytes
    with path.open("rb") as handle:
        if size <= limit:
            return handle.read().decode("utf-8", errors="replace"), size
        head = handle.read(head_bytes)
        handle.seek(size - tail_bytes)
        tail = handle.read()
    cut = size - head_bytes - tail_bytes
    middle = f"\n… {cut:,} bytes not shown (the whole log is {size:,} bytes) …\n"
    return (
        head.decode("utf-8", errors="replace") + middle + tail.decode("utf-8", errors="replace"),
        size,
    )


def read_run(key: RunKey, group_dir: Path) -> RunFiles:
    """Every small file of one run; its transcript is checked, not kept, and its logs are
    left to the run page."""
    folder = key.folder(group_dir)
    run = RunFiles(key=key, folder=folder)
    if not folder.is_dir():
        return run
    problems = run.problems
    run.outcome = read_model(folder / OUTCOME_FILE, RunOutcome, problems)
    run.state = read_model(folder / RUN_FILE, RunState, problems)
    run.rollout = read_model(folder / STATUS_FILE, RolloutStatus, problems)
    run.monitor = read_model(folder / MONITOR_FILE, MonitorReport, problems)
    run.reproduction = read_model(folder / REPRO_METADATA_FILE, ReproductionMetadata, problems)
    grade, leaves = read_grade(folder, problems)
    if grade is not None:
        run.grade = GradeSummary(judge=grade.judge, scores_by_category=grade.scores_by_category)
    run.addressed_to_judge = addressed_of(grade, leaves, folder / GRADE_FILE, problems)
    # Checked here so that a bad line is reported with or without the HTML report; the run
    # page reads the events again (a group's transcripts are not all held in memory).
    read_transcript_events(folder / TRANSCRIPT_FILE, problems)
    run.rollout_costs = _with_stage(
        read_records(folder / ROLLOUT_COSTS_FILE, CostRecord, problems), "rollout"
    )
    run.grading_costs = _with_stage(
        read_records(folder / GRADING_COSTS_FILE, CostRecord, problems), "grading"
    )
    if run.outcome is not None and run.outcome.key != key:
        problems.append(
            Problem(
                file=str(folder / OUTCOME_FILE),
                message=f"$.key: the outcome of {run.outcome.key.label}, not of {key.label}",
            )
        )
        run.outcome = None
    return run


def read_grade(
    folder: Path, problems: list[Problem], *, check_tree: bool = True
) -> tuple[GradeResult | None, list[LeafGrade]]:
    """grade.json (its graded tree checked, unless the caller builds the tree itself) and
    the graded leaves of leaves.jsonl."""
    grade = read_model(folder / GRADE_FILE, GradeResult, problems)
    if grade is not None and check_tree:
        _check_tree(grade, folder / GRADE_FILE, problems)
    return grade, read_records(folder / LEAVES_FILE, LeafGrade, problems)


def addressed_of(
    grade: GradeResult | None, leaves: list[LeafGrade], path: Path, problems: list[Problem]
) -> list[AddressedFinding]:
    """The text addressed to the judge that a grading found: the root's
    ``judge_metadata["addressed_to_judge"]`` of grade.json, or, before grade.json is written,
    the records of leaves.jsonl. An entry that does not validate is a problem."""
    if grade is None:
        return [
            AddressedFinding(leaf_path=list(leaf.path), leaf_id=leaf.leaf_id, **a.model_dump())
            for leaf in leaves
            for a in leaf.addressed_to_judge
        ]
    metadata = grade.graded_task_tree.get("judge_metadata")
    entries = metadata.get(ADDRESSED_KEY) if isinstance(metadata, dict) else None
    if not entries:
        return []
    where = f"$.graded_task_tree.judge_metadata.{ADDRESSED_KEY}"
    if not isinstance(entries, list):
        problems.append(Problem(file=str(path), message=f"{where}: not a list"))
        return []
    found: list[AddressedFinding] = []
    for index, entry in enumerate(entries):
        try:
            found.append(AddressedFinding.model_validate(entry))
        except ValidationError as exc:
            first = exc.errors()[0]
            message = f"{where}[{index}]{json_path(first['loc']).removeprefix('$')}: {first['msg']}"
            problems.append(Problem(file=str(path), message=message))
    return found


def _check_tree(grade: GradeResult, path: Path, problems: list[Problem]) -> None:
    """A problem when grade.json's graded tree does not validate, worded as ``rubric
    validate`` words it."""
    try:
        grade.tree()
    except ValidationError as exc:
        issues = validate_data(grade.graded_task_tree, file=str(path), kind="graded")
        if issues:
            where, message = issues[0].path, issues[0].message
        else:
            first = exc.errors()[0]
            where, message = json_path(first["loc"]), first["msg"]
        where = "$.graded_task_tree" + where.removeprefix("$")
        problems.append(Problem(file=str(path), message=f"{where}: {message}"))


def _with_stage(records: list[CostRecord], stage: str) -> list[CostRecord]:
    """Records with no stage get the stage of the file they were read from."""
    return [r if r.stage else r.model_copy(update={"stage": stage}) for r in records]


@dataclass
class GroupFiles:
    """A group's group.json and every planned run's files, as read."""

    folder: Path
    config: GroupConfig
    runs: list[RunFiles]

    @property
    def problems(self) -> list[Problem]:
        return [problem for run in self.runs for problem in run.problems]


def read_group_files(group_dir: Path) -> GroupFiles:
    """group.json and every planned run's files.

    Raises:
        InputError: ``group_dir`` is not a folder, has no readable group.json, or names a
            paper or agent that is not a plain folder name.
    """
    if not group_dir.is_dir():
        what = "not found" if not group_dir.exists() else "not a folder"
        raise InputError(
            f"{what}; give a run group folder that `paperbench run` wrote (runs/<group>)",
            file=group_dir,
        )
    config = read_group(group_dir)
    names = [("paper", f"$.papers[{i}]", p) for i, p in enumerate(config.papers)]
    names += [("agent", f"$.agents[{i}].name", a.name) for i, a in enumerate(config.agents)]
    for what, where, name in names:
        try:
            safe_name(name, what)
        except ValueError as exc:
            raise InputError(str(exc), file=group_dir / "group.json", path=where) from None
    return GroupFiles(
        folder=group_dir,
        config=config,
        runs=[read_run(key, group_dir) for key in run_keys(config)],
    )


def run_log_path(run: RunFiles) -> Path:
    return run.folder / RUN_LOG
