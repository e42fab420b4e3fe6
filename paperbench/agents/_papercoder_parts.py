"""The PaperCoder pipeline's data: its prompts, what each planning answer must hold, how
answers are read (JSON objects, fenced code blocks, search/replace edits), and the artifact
folder a run keeps under ``<run>/papercoder/`` so that a resumed run repeats no paid call.

Every reader raises :class:`AnswerError` with one line saying what is wrong with an answer;
the pipeline sends that line back to the model when it re-asks.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import tempfile
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any, Literal, Protocol, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paperbench.errors import ConfigError
from paperbench.llm import count_tokens

_M = TypeVar("_M", bound=BaseModel)

RESERVED_FILES = ("reproduce.sh", "config.yaml")
"""Files the pipeline writes itself, after (config.yaml) or besides (reproduce.sh) the design."""


PROMPT_NAMES = (
    "system",
    "plan",
    "architecture",
    "logic",
    "config",
    "analysis",
    "coding",
    "reproduce",
    "repair",
)
"""The prompts of the pipeline; ``prompts`` in the config may replace any of them."""


class _PromptsConfig(Protocol):
    @property
    def prompts(self) -> dict[str, str]: ...


def catalog_dir() -> Path:
    """The ``agents/`` catalog: inside the installed package, or the repository's folder."""
    return Path(str(resources.files("paperbench") / "_catalog" / "agents"))


def load_prompts(config: _PromptsConfig, base: Path | None = None) -> dict[str, Template]:
    """Every prompt of the pipeline: the config's own files (relative to ``base``, the
    config's folder; default the catalog), else the bundled ones."""
    base = base or catalog_dir()
    for name in config.prompts:
        if name not in PROMPT_NAMES:
            raise ConfigError(
                f"unknown papercoder prompt {name!r} (known: {', '.join(PROMPT_NAMES)})",
                path=f"$.prompts.{name}",
            )
    templates: dict[str, Template] = {}
    for name in PROMPT_NAMES:
        given = config.prompts.get(name)
        if given:
            path = Path(given) if Path(given).is_absolute() else base / given
        else:
            path = catalog_dir() / "prompts" / f"papercoder_{name}.md"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot read prompt file {path} ({exc.strerror}); fix the path",
                path=f"$.prompts.{name}",
            ) from None
        template = Template(text)
        if not template.is_valid():
            raise ConfigError(
                "a '$' that is not a $name placeholder (write $$ for a literal $)", file=path
            )
        templates[name] = template
    return templates


class AnswerError(ValueError):
    """A model answer that cannot be used; the message says why, in one line."""


class _Answer(BaseModel):
    # Models often add a field or two; unknown fields are ignored, missing ones are errors.
    model_config = ConfigDict(extra="ignore")


class ArchitectureDesign(_Answer):
    """Step 2 of planning: the files, with mermaid class and sequence diagrams."""

    implementation_approach: str
    files: list[str] = Field(min_length=1)
    class_diagram: str
    sequence_diagram: str
    unclear: str = ""


class FileLogic(_Answer):
    file: str
    description: str
    depends_on: list[str] = Field(default_factory=list)


class LogicDesign(_Answer):
    """Step 3 of planning: the ordered task list with each file's logic and dependencies."""

    required_packages: list[str] = Field(default_factory=list)
    logic_analysis: list[FileLogic]
    task_list: list[str] = Field(min_length=1)
    shared_knowledge: str = ""
    unclear: str = ""

    def logic_of(self, file: str) -> FileLogic:
        for item in self.logic_analysis:
            if item.file == file:
                return item
        return FileLogic(file=file, description="(no description given)")


class Edit(_Answer):
    file: str
    search: str
    replace: str


class RepairAnswer(_Answer):
    """A repair round's answer: search/replace edits."""

    explanation: str = ""
    edits: list[Edit]


_FENCE = re.compile(r"```[^\n`]*\n(.*?)\n?```", re.DOTALL)


def fenced_blocks(text: str) -> list[str]:
    """The contents of the fenced code blocks in ``text``, in order."""
    return _FENCE.findall(text)


def parse_json_answer(text: str, cls: type[_M]) -> _M:
    """``cls`` from an answer that is a JSON object, bare or in a fenced block."""
    if "{" not in text:
        raise AnswerError("no JSON object found in the answer")
    candidates = [text.strip(), *(b.strip() for b in fenced_blocks(text))]
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start : end + 1])
    error = "no JSON object found in the answer"
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError as exc:
            error = f"not valid JSON ({exc.msg} at line {exc.lineno})"
            continue
        if not isinstance(value, dict):
            error = "the JSON is not an object"
            continue
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
            raise AnswerError(f"{where}: {err['msg']}") from None
    raise AnswerError(error)


def parse_code_answer(text: str) -> str:
    """The one file an answer holds: its only (or longest) fenced code block."""
    blocks = fenced_blocks(text)
    if not blocks:
        raise AnswerError("no fenced code block (```) in the answer")
    code = max(blocks, key=len)
    if not code.strip():
        raise AnswerError("the code block is empty")
    return code if code.endswith("\n") else code + "\n"


def parse_config_answer(text: str) -> str:
    """config.yaml from an answer: a fenced YAML block holding a mapping."""
    code = parse_code_answer(text)
    try:
        value = yaml.safe_load(code)
    except yaml.YAMLError as exc:
        raise AnswerError(f"config.yaml is not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(value, dict):
        raise AnswerError("config.yaml must be a YAML mapping of settings")
    return code


def check_path(path: str) -> str | None:
    """Why ``path`` cannot be a file of the submission, or None when it can."""
    if not path or path != path.strip():
        return f"{path!r} is not a file path"
    if path.startswith("/") or "\\" in path:
        return f"{path!r} must be a relative path with forward slashes"
    normal = posixpath.normpath(path)
    if normal != path or normal.startswith("..") or normal == ".":
        return f"{path!r} must be a plain relative path inside the repository"
    if path.split("/")[0] == ".git":
        return f"{path!r} is inside .git"
    return None


def check_architecture(design: ArchitectureDesign, max_files: int) -> None:
    """Raise :class:`AnswerError` when the design's file list cannot be coded."""
    files = design.files
    if len(files) > max_files:
        raise AnswerError(f"$.files: {len(files)} files, more than the {max_files} allowed")
    for path in files:
        if (why := check_path(path)) is not None:
            raise AnswerError(f"$.files: {why}")
        if path in RESERVED_FILES:
            raise AnswerError(f"$.files: {path} is written in a later step; leave it out")
    if len(set(files)) != len(files):
        raise AnswerError("$.files: a file is listed twice")


def check_logic(logic: LogicDesign, design: ArchitectureDesign) -> None:
    """Raise :class:`AnswerError` unless the task list holds exactly the design's files, each
    once. Its order and the dependencies are not checked here: :func:`order_tasks` mends
    them."""
    known = set(design.files)
    tasks = logic.task_list
    if len(set(tasks)) != len(tasks):
        raise AnswerError("$.task_list: a file is listed twice")
    if unknown := [f for f in tasks if f not in known]:
        raise AnswerError(f"$.task_list: {unknown[0]} is not a file of the architecture design")
    if missing := [f for f in design.files if f not in set(tasks)]:
        raise AnswerError(f"$.task_list: {missing[0]} of the architecture design is missing")


WRITTEN_BEFORE_CODING = ("config.yaml",)
"""Files a coded file may depend on besides the task list's: written before coding starts."""


class PlanNote(BaseModel):
    """Something :func:`order_tasks` changed in the logic design, for the transcript."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["logic_dropped", "dependency_dropped", "dependency_cycle", "task_order"]
    text: str
    data: dict[str, Any] = Field(default_factory=dict)


def order_tasks(logic: LogicDesign) -> tuple[LogicDesign, list[PlanNote]]:
    """The logic design as it is coded, and a note for each change made to it.

    A dependency on a file the task list does not hold (or on the file itself) is dropped, as
    is a logic analysis of such a file. The task list is then sorted topologically, keeping
    its own order wherever the dependencies allow (the earliest ready file comes next). A
    dependency cycle is broken deterministically: of the cycle reached by following, from the
    earliest file left, each file's earliest dependency left, the file earliest in the task
    list loses its dependency on the next file of the cycle."""
    tasks = list(logic.task_list)
    position = {f: i for i, f in enumerate(tasks)}
    notes: list[PlanNote] = []
    items: dict[str, FileLogic] = {}
    deps: dict[str, list[str]] = {f: [] for f in tasks}
    for item in logic.logic_analysis:
        if item.file not in position or item.file in items:
            why = "is not in the task list" if item.file not in position else "is given twice"
            notes.append(
                PlanNote(
                    kind="logic_dropped",
                    text=f"the logic analysis of {item.file} is left out: it {why}",
                    data={"file": item.file},
                )
            )
            continue
        kept: list[str] = []
        for dep in item.depends_on:
            if dep in kept:
                continue
            why = ""
            if dep == item.file:
                why = "a file cannot depend on itself"
            elif dep not in position and dep not in WRITTEN_BEFORE_CODING:
                why = "it is not a file of the design's task list"
            if why:
                notes.append(
                    PlanNote(
                        kind="dependency_dropped",
                        text=f"{item.file}: the dependency on {dep} is dropped: {why}",
                        data={"file": item.file, "dependency": dep, "reason": why},
                    )
                )
                continue
            kept.append(dep)
        items[item.file] = item.model_copy(update={"depends_on": kept})
        deps[item.file] = [d for d in kept if d in position]
    order: list[str] = []
    placed: set[str] = set()
    while len(order) < len(tasks):
        ready = next(
            (f for f in tasks if f not in placed and all(d in placed for d in deps[f])), None
        )
        if ready is not None:
            order.append(ready)
            placed.add(ready)
            continue
        cycle = _a_cycle(tasks, deps, placed, position)
        first = min(cycle, key=position.__getitem__)
        cut = cycle[(cycle.index(first) + 1) % len(cycle)]
        deps[first].remove(cut)
        items[first] = items[first].model_copy(
            update={"depends_on": [d for d in items[first].depends_on if d != cut]}
        )
        shown = " → ".join([*cycle, cycle[0]])
        notes.append(
            PlanNote(
                kind="dependency_cycle",
                text=f"the dependencies {shown} form a cycle: the dependency of {first} on "
                f"{cut} is dropped ({first} comes first in the task list)",
                data={"cycle": cycle, "file": first, "dependency": cut},
            )
        )
    if order != tasks:
        notes.append(
            PlanNote(
                kind="task_order",
                text="the task list does not put every file after its dependencies; coding "
                "order: " + ", ".join(order),
                data={"task_list": tasks, "order": order},
            )
        )
    ordered = logic.model_copy(
        update={"logic_analysis": [items[f] for f in order if f in items], "task_list": order}
    )
    return ordered, notes


def _a_cycle(
    tasks: list[str], deps: dict[str, list[str]], placed: set[str], position: dict[str, int]
) -> list[str]:
    """A dependency cycle among the files not placed yet (each of which has a dependency not
    placed), each file depending on the next and the last on the first."""
    path = [next(f for f in tasks if f not in placed)]
    while True:
        nxt = min((d for d in deps[path[-1]] if d not in placed), key=position.__getitem__)
        if nxt in path:
            return path[path.index(nxt) :]
        path.append(nxt)


def files_context(
    done: dict[str, str], first: list[str], budget_tokens: int, model: str
) -> tuple[str, list[str]]:
    """The files written so far as prompt text within ``budget_tokens``: the files in
    ``first`` (the current file's dependencies) before the others, the others newest first.
    Returns the text and the files left out for the budget (named in the text too)."""
    order = [f for f in first if f in done]
    order += [f for f in reversed(done) if f not in order]
    parts: list[str] = []
    left_out: list[str] = []
    used = 0
    for path in order:
        block = f"## `{path}`\n\n```\n{done[path]}```\n"
        size = count_tokens(block, model)
        if used + size > budget_tokens:
            left_out.append(path)
            continue
        parts.append(block)
        used += size
    if not parts and not left_out:
        return "(none yet)", []
    if left_out:
        parts.append(
            "Left out to keep this prompt short (they exist; keep to their interfaces in the "
            "design): " + ", ".join(f"`{p}`" for p in left_out)
        )
    return "\n".join(parts), left_out


def apply_edit(content: str | None, edit: Edit) -> str:
    """``content`` with ``edit`` applied; :class:`AnswerError` says why it cannot be."""
    if edit.search == "":
        return edit.replace
    if content is None:
        raise AnswerError(f"{edit.file}: no such file (use an empty search to create it)")
    count = content.count(edit.search)
    if count == 0:
        raise AnswerError(f"{edit.file}: the search text was not found in the file")
    if count > 1:
        raise AnswerError(
            f"{edit.file}: the search text occurs {count} times; include more lines to make "
            "it unique"
        )
    return content.replace(edit.search, edit.replace, 1)


PARTIAL = ".partial"
"""The suffix of an artifact being written (left behind only by a crash)."""


class Artifacts:
    """The folder ``<run>/papercoder``: every intermediate result, written atomically.

    plan.md, architecture.json, logic.json, config.yaml (the accepted planning answers, with
    their raw text as ``*.answer.md``); analyses/<file>.md; files/<file> (each file as last
    written to the submission); repair/round-NN.json; answers/NNNN-<label>.md (every raw
    model answer, accepted or not).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        return self.root / name

    def read(self, name: str) -> str | None:
        path = self.root / name
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def write_json(self, name: str, value: Any) -> Path:
        return self.write(name, json.dumps(value, indent=2, ensure_ascii=False) + "\n")

    def files(self, folder: str) -> list[str]:
        """The complete files under ``folder`` (relative, sorted); none being written."""
        root = self.root / folder
        if not root.is_dir():
            return []
        return sorted(
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if p.is_file() and not p.name.endswith(PARTIAL)
        )

    def next_answer_name(self, label: str) -> str:
        folder = self.root / "answers"
        count = len(list(folder.glob("*.md"))) if folder.is_dir() else 0
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:80]
        return f"answers/{count + 1:04d}-{safe}.md"
