"""``rcb run --mode agent``: an agent fills one snippet with tools, in a sandbox.

The sandbox (fresh per problem and sample, no network, the test's caps and image) holds the
paper's folder at ``/home/rcb/<paper>`` as the test sees it, less what would give the answer
away: the test (``paper2code_test.py``), the reference copies (``*_ref.py``,
``*_reference.py``), RCB's own ``paper2code*.yaml`` files, and the paper itself with
``--without-paper``. Every snippet tag is gone from the annotated files; in the file of the
problem, the snippet's place is a TODO between two marker lines (:func:`agent_masked`).

The agent is the project's tool loop (``basic``) with the catalog's RCB config
(``_catalog/rcb/agent.yaml``: its prompts, tools and default limits); its instructions say
where the gap is and what is graded. When it submits or reaches a limit, the file is read
back and only the lines between the markers are kept (:func:`take_answer`): they are graded
as a one-shot answer is, put in the snippet's place of the original file. A file whose
markers are gone, or with no code between them, is ``no_code``.

Its transcript (the project's format) and the raw calls' costs are kept in the problem's
folder, ``agent-<k>/transcript.jsonl``; the calls are also in the run's ``costs.jsonl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from paperbench._console import plural
from paperbench.agents import (
    Agent,
    AgentLimits,
    AgentOutcome,
    EndEvent,
    LimitTracker,
    LoadedAgent,
    NoteEvent,
    RunContext,
    StartEvent,
    TranscriptWriter,
    load_agent,
)
from paperbench.errors import InputError, ModelUnavailableError, SandboxError
from paperbench.llm import CostLedger, CostRecord, Model, ModelConfig
from paperbench.rcb._load import split_lines, tag
from paperbench.rcb._mask import body_indent, placeholder
from paperbench.rcb._models import TEST_ENTRY, ProblemSet, RcbPaper, Snippet
from paperbench.rcb._test import RCB_LIMITS, RCB_ROOT, RCB_USER, SKIPPED_NAMES
from paperbench.rcb._test import _stage as stage_folder
from paperbench.reproduce import resolve_image
from paperbench.sandbox import NetworkPolicy, SandboxBackend, SandboxSpec

AGENT_CONFIG = Path(__file__).resolve().parents[1] / "_catalog" / "rcb" / "agent.yaml"
"""The agent of ``--mode agent``: prompts, tools and default limits."""
AGENT_STAGE_LABEL = {"paperbench.stage": "rcb-agent"}
REFERENCE_SUFFIXES = ("_ref", "_reference")
"""A file whose stem ends so is a reference copy: never in the agent's sandbox."""


def begin_marker(snippet: Snippet) -> str:
    """The line above the snippet's place in the agent's file (without indentation)."""
    return f'# >>> BEGIN missing code "{snippet.name}" (keep this line)'


def end_marker(snippet: Snippet) -> str:
    """The line below the snippet's place in the agent's file (without indentation)."""
    return f'# <<< END missing code "{snippet.name}" (keep this line)'


def agent_masked(text: str, snippet: Snippet) -> str:
    """The annotated ``text`` as the agent gets it: every tag line removed, the snippet's
    whole tagged range replaced by the TODO (:func:`~paperbench.rcb._mask.placeholder`)
    between :func:`begin_marker` and :func:`end_marker`, at the snippet's indentation."""
    lines = split_lines(text)
    indent = body_indent(text, snippet)
    before = [line for line in lines[: snippet.start] if tag(line) is None]
    after = [line for line in lines[snippet.end + 1 :] if tag(line) is None]
    hole = [
        indent + begin_marker(snippet),
        *placeholder(snippet, indent),
        indent + end_marker(snippet),
    ]
    return "\n".join([*before, *hole, *after])


def untagged(text: str) -> str:
    """``text`` with every snippet tag line removed (the other annotated files)."""
    return "\n".join(line for line in split_lines(text) if tag(line) is None)


def take_answer(final: str, snippet: Snippet) -> tuple[str | None, str | None]:
    """(code, why none) from the agent's final file: the lines between the markers, or None
    and the reason (the markers are gone, or there is no code between them)."""
    lines = split_lines(final)
    stripped = [line.strip() for line in lines]
    begin, end = begin_marker(snippet), end_marker(snippet)
    if begin not in stripped:
        return None, "the agent's file has lost the BEGIN marker line of the snippet's place"
    start = stripped.index(begin)
    if end not in stripped[start + 1 :]:
        return None, "the agent's file has lost the END marker line of the snippet's place"
    stop = stripped.index(end, start + 1)
    body = lines[start + 1 : stop]
    if not any(line.strip() and not line.strip().startswith("#") for line in body):
        return None, "the agent wrote no code between the marker lines"
    return "\n".join(body), None


def hidden(paper: RcbPaper, *, with_paper: bool) -> list[str]:
    """Paths of the paper folder (relative) left out of the agent's sandbox."""
    out = [TEST_ENTRY]
    for path in sorted(paper.folder.rglob("*")):
        rel = path.relative_to(paper.folder)
        if any(part in SKIPPED_NAMES for part in rel.parts) or not path.is_file():
            continue
        reference = path.stem.endswith(REFERENCE_SUFFIXES) and path.suffix == ".py"
        rcb_own = rel.name.startswith("paper2code") and path.suffix in (".yaml", ".yml")
        if reference or rcb_own:
            out.append(rel.as_posix())
    if not with_paper:
        out.append(paper.paper_file.relative_to(paper.folder).as_posix())
    return sorted(set(out))


class AgentAnswer(BaseModel):
    """What an agent left for one sample (answer-<k>.json in agent mode)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str | None
    """The lines between the markers (None: see ``why_none``)."""
    why_none: str | None = None
    status: str
    """How the agent's run ended: ``submitted``, ``limit``, ``error``."""
    limit: str | None = None
    error: str | None = None
    steps: int = 0
    seconds: float = 0.0
    cost_usd: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0


class _ProblemLedger(CostLedger):
    """One sample's calls: counted here (its cost, its limits) and added to the run's
    ledger, whose budget caps apply first."""

    def __init__(self, run: CostLedger) -> None:
        super().__init__()
        self.run = run

    def add(self, record: CostRecord) -> None:
        super().add(record)
        self.run.add(record)

    def check_budget(self, model: str, stage: str | None) -> None:
        self.run.check_budget(model, stage)


def _stage(paper: RcbPaper, files: dict[str, str], hide: list[str], dest: Path) -> None:
    """The paper folder as the agent gets it, at ``dest``: staged as the tests stage it
    (``hide`` left out, files hard-linked), then ``files`` (relative path → text) written over
    it, each link removed first so that nothing is written through to the paper's own file."""
    stage_folder(paper.folder, tuple(hide), dest)
    for rel, text in files.items():
        target = dest / rel
        if not target.parent.resolve().is_relative_to(dest.resolve()):  # a linked folder
            raise InputError(f"{rel} lies under a symlinked folder", file=paper.folder)
        target.unlink(missing_ok=True)
        target.write_text(text, encoding="utf-8")


def instructions(
    loaded: LoadedAgent, paper: RcbPaper, snippet: Snippet, limits: AgentLimits, *, with_paper: bool
) -> str:
    """The agent's task for one problem (the config's instructions, filled in)."""
    repo = f"{RCB_ROOT}/{paper.folder.name}"
    note = (
        f"The paper is {repo}/{paper.paper_file.relative_to(paper.folder).as_posix()}."
        if with_paper
        else "The paper is not given: work from the code."
    )
    steps = plural(limits.steps, "step") if limits.steps is not None else "no step limit"
    minutes = limits.wall_time_s / 60 if limits.wall_time_s is not None else None
    when = f"{minutes:g} minutes" if minutes is not None else "no time limit"
    fills = {
        "{repo}": repo,
        "{paper_note}": note,
        "{file}": snippet.file,
        "{snippet}": snippet.name,
        "{lines}": plural(snippet.code_lines, "line"),
        "{begin}": begin_marker(snippet),
        "{end}": end_marker(snippet),
        "{steps}": steps,
        "{time}": when,
    }
    text = loaded.instructions.get("full", "")
    for key, value in fills.items():
        text = text.replace(key, value)
    return text


def _agent_files(paper: RcbPaper, snippet: Snippet) -> dict[str, str]:
    """The annotated files as the agent gets them (relative path → text): untagged, and the
    problem's file with the snippet's place masked."""
    original = (paper.folder / snippet.file).read_text(encoding="utf-8")
    files = {
        name: untagged((paper.folder / name).read_text(encoding="utf-8"))
        for name in paper.annotated_files
        if name != snippet.file
    }
    files[snippet.file] = agent_masked(original, snippet)
    return files


def _fresh_transcript(folder: Path) -> Path:
    """``folder/transcript.jsonl``, an earlier attempt's moved aside to
    ``transcript.<n>.jsonl``."""
    folder.mkdir(parents=True, exist_ok=True)
    transcript_path = folder / "transcript.jsonl"
    if transcript_path.exists():
        earlier = len(list(folder.glob("transcript.*.jsonl"))) + 1
        transcript_path.rename(folder / f"transcript.{earlier}.jsonl")
    return transcript_path


async def _sandbox_spec(backend: SandboxBackend, image: str | None, repo: str) -> SandboxSpec:
    """The agent's sandbox: the tests' image, caps and user, no network, at ``repo``."""
    return SandboxSpec(
        image=await resolve_image(backend, image),
        limits=RCB_LIMITS,
        network=NetworkPolicy.NONE,
        user=RCB_USER,
        workdir=repo,
        writable_dirs=(RCB_ROOT,),
        labels=AGENT_STAGE_LABEL,
    )


async def _run_to_end(agent: Agent, ctx: RunContext, file: str) -> tuple[AgentOutcome, str]:
    """Run ``agent`` in ``ctx`` and read back its ``file``; how the run ended goes to the
    transcript (a provider down past the retry budget: ``paused``, and raised)."""
    writer, tracker = ctx.transcript, ctx.limits
    tracker.started = time.monotonic()
    try:
        outcome = await agent.run(ctx)
    except ModelUnavailableError as exc:
        writer.append(EndEvent(status="paused", error=str(exc), step=tracker.steps))
        raise
    final = (await ctx.sandbox.read_file(file, max_bytes=4 * 1024 * 1024)).decode(
        "utf-8", errors="replace"
    )
    writer.append(
        EndEvent(
            status=outcome.status, limit=outcome.limit, error=outcome.error, step=tracker.steps
        )
    )
    return outcome, final


def _answer(
    final: str,
    snippet: Snippet,
    outcome: AgentOutcome,
    steps: int,
    own: CostLedger,
    started: float,
) -> AgentAnswer:
    """The sample's answer: the code the agent left between the markers of its ``final``
    file, how its run ended, and what it took."""
    code, why = take_answer(final, snippet)
    total = own.report().total
    return AgentAnswer(
        code=code,
        why_none=why,
        status=outcome.status,
        limit=outcome.limit,
        error=outcome.error,
        steps=steps,
        seconds=time.monotonic() - started,
        cost_usd=None if total.unpriced_calls else total.cost_usd,
        input_tokens=total.usage.input_tokens,
        output_tokens=total.usage.output_tokens,
    )


async def run_agent(
    problem_set: ProblemSet,
    snippet: Snippet,
    *,
    seed: int,
    folder: Path,
    backend: SandboxBackend,
    model_config: ModelConfig,
    ledger: CostLedger,
    limits: AgentLimits,
    image: str | None,
    with_paper: bool,
    loaded: LoadedAgent | None = None,
) -> AgentAnswer:
    """Run the agent on one problem in a fresh sandbox; its transcript goes to
    ``folder/transcript.jsonl`` (an earlier attempt's is kept as ``transcript.<n>.jsonl``).

    Raises:
        SandboxError: the sandbox could not be made or was lost (the sample is run again
            on a resume).
        ModelUnavailableError: the provider is down past the retry budget.
    """
    loaded = loaded or load_agent(AGENT_CONFIG)
    paper = problem_set.paper(snippet.paper)
    files = _agent_files(paper, snippet)
    hide = hidden(paper, with_paper=with_paper)
    transcript_path = _fresh_transcript(folder)
    own = _ProblemLedger(ledger)
    model = Model(model_config, ledger=own, stage="rcb-agent")
    agent = loaded.build(model)
    repo = f"{RCB_ROOT}/{paper.folder.name}"
    spec = await _sandbox_spec(backend, image, repo)
    writer = TranscriptWriter(transcript_path)
    tracker = LimitTracker(limits=limits, ledger=own)
    started = time.monotonic()
    sb = None
    try:
        with tempfile.TemporaryDirectory(prefix="paperbench-rcb-agent-") as tmp:
            staged = Path(tmp) / paper.folder.name
            await asyncio.to_thread(_stage, paper, files, hide, staged)
            sb = await backend.start(spec)
            await sb.upload(staged, repo)
        text = instructions(loaded, paper, snippet, limits, with_paper=with_paper)
        writer.append(
            StartEvent(
                agent=loaded.identity.name,
                model=model_config.model,
                paper_id=snippet.paper,
                seed=seed,
                config=loaded.config.model_dump(mode="json"),
            )
        )
        ctx = RunContext(
            sandbox=sb,
            model=model,
            instructions=text,
            transcript=writer,
            limits=tracker,
            paper_id=snippet.paper,
            seed=seed,
            run_dir=folder,
        )
        outcome, final = await _run_to_end(agent, ctx, f"{repo}/{snippet.file}")
    except SandboxError as exc:
        writer.append(NoteEvent(kind="sandbox_lost", text=str(exc), step=tracker.steps))
        writer.append(EndEvent(status="paused", error=str(exc), step=tracker.steps))
        raise
    finally:
        writer.close()
        await model.aclose()
        if sb is not None:
            with contextlib.suppress(SandboxError):
                await asyncio.shield(sb.stop())
    return _answer(final, snippet, outcome, tracker.steps, own, started)


def agent_limits(
    loaded: LoadedAgent, *, steps: int | None = None, wall_time_s: float | None = None
) -> AgentLimits:
    """The config's limits with ``--max-steps`` and ``--max-time`` over them."""
    update: dict[str, object] = {}
    if steps is not None:
        update["steps"] = steps
    if wall_time_s is not None:
        update["wall_time_s"] = wall_time_s
    return loaded.config.limits.model_copy(update=update)
