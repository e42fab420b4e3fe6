"""The ``papercoder`` agent: the PaperCoder pipeline (plan → analyse → code → repair).

1. Planning, one conversation of four turns: the overall plan; the architecture design (the
   file list, a mermaid class diagram and a sequence diagram, as JSON); the logic design (an
   ordered task list with each file's dependencies, as JSON); config.yaml. An answer that
   cannot be used is sent back with the reason, at most ``plan_retries`` times; then the run
   ends with status ``error`` and that reason.
   A dependency on a file the design does not name is dropped and the task list sorted
   topologically, a dependency cycle broken deterministically (:func:`order_tasks`); each
   change is a note in the transcript, never a failed run.
2. Analysis of each file, with the planning conversation as context.
3. Coding of each file in that order (every file after its dependencies), with the
   files written so far as context (its dependencies first, within a token budget; what was
   left out is said in the prompt and noted in the transcript); then reproduce.sh.
4. Optionally ``repair_rounds`` rounds: run ``bash reproduce.sh`` in the sandbox as the
   reproduction would (its timeout, ``repair_timeout_s``, and its log limit), send the
   end of its output back, apply the search/replace edits the model answers with. An edit
   whose search text is not in the file is reported back in the next round, never skipped
   silently.

Every model call carries the config's ``reasoning_effort`` and ``max_tokens``.

Files go into /home/submission with a git commit after each phase. Every intermediate result
and every raw answer is saved under ``<run>/papercoder/`` (see :class:`Artifacts`) and noted
in the transcript; a resumed run takes what is saved there and repeats no paid call.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from paperbench._console import plural
from paperbench.agents._base import (
    PAPER_DIR,
    SUBMISSION_DIR,
    Agent,
    AgentOutcome,
    LimitReached,
    RunContext,
    effort_for,
)
from paperbench.agents._config import PapercoderConfig
from paperbench.agents._papercoder_parts import (
    AnswerError,
    ArchitectureDesign,
    Artifacts,
    LogicDesign,
    RepairAnswer,
    apply_edit,
    check_architecture,
    check_logic,
    check_path,
    files_context,
    load_prompts,
    order_tasks,
    parse_code_answer,
    parse_config_answer,
    parse_json_answer,
)
from paperbench.agents._transcript import MessageEvent, ModelCallEvent, NoteEvent, ToolEvent
from paperbench.errors import OUTSIDE_MODEL_ERRORS, ModelError, SandboxError, SandboxLostError
from paperbench.llm import AssistantMessage, Message, Model, ModelOutput, SystemMessage, UserMessage

_T = TypeVar("_T")

ERROR_TAIL_CHARS = 4000
"""How much of a failing reproduce.sh's output is sent back in a repair round."""


class _Failed(Exception):
    """The pipeline cannot go on; the message is the run's error."""


class PapercoderAgent(Agent):
    """The PaperCoder pipeline as an agent."""

    name = "papercoder"

    def __init__(
        self,
        config: PapercoderConfig,
        model: Model,
        *,
        context_tokens: int = 60_000,
        config_dir: Path | None = None,
    ) -> None:
        """``config_dir``: the folder of the config's YAML, which relative prompt paths are
        read from (default: the bundled catalog)."""
        self.config = config
        self.model = model
        self.context_tokens = context_tokens
        """Token budget of the files-written-so-far context of a coding or repair prompt."""
        self.prompts = load_prompts(config, config_dir)

    async def run(self, ctx: RunContext) -> AgentOutcome:
        if ctx.run_dir is None:
            return AgentOutcome(
                status="error",
                error="papercoder saves its plan in the run folder and was given none: run it "
                "with paperbench rollout or paperbench run",
            )
        pipeline = _Pipeline(self, ctx, ctx.run_dir)
        try:
            summary = await pipeline.run()
        except LimitReached as exc:
            pipeline.note("limit", str(exc))
            return AgentOutcome(status="limit", limit=exc.kind, error=str(exc))
        except OUTSIDE_MODEL_ERRORS:
            raise  # the rollout pauses
        except SandboxLostError:
            raise  # the rollout goes on in a new sandbox
        except (_Failed, ModelError, SandboxError) as exc:
            if not await ctx.sandbox.alive():
                raise SandboxLostError(f"the sandbox is gone ({exc})") from exc
            pipeline.note("error", str(exc))
            return AgentOutcome(status="error", error=str(exc))
        return AgentOutcome(status="submitted", summary=summary)


class _Pipeline:
    """One run of the pipeline in one sandbox."""

    def __init__(self, agent: PapercoderAgent, ctx: RunContext, run_dir: Path) -> None:
        self.agent = agent
        self.config = agent.config
        self.ctx = ctx
        self.model = agent.model
        self.art = Artifacts(run_dir / "papercoder")
        self.paper = ""
        self.addendum = ""
        self.conversation: list[Message] = []
        """The planning conversation: the shared prefix of every later call."""

    # -- transcript ---------------------------------------------------------------------

    def note(self, kind: str, text: str = "", **data: Any) -> None:
        step = self.ctx.limits.steps
        self.ctx.transcript.append(NoteEvent(step=step, kind=kind, text=text, data=data))

    def saved(self, name: str, text: str) -> None:
        path = self.art.write(name, text)
        self.note(
            "artifact", f"papercoder/{name}", path=str(path.relative_to(self.art.root.parent))
        )

    # -- model calls --------------------------------------------------------------------

    def render(self, prompt: str, **values: object) -> str:
        try:
            return self.agent.prompts[prompt].substitute({k: str(v) for k, v in values.items()})
        except KeyError as exc:
            raise _Failed(
                f"the {prompt} prompt uses ${exc.args[0]}, which it is not given"
            ) from None

    async def call(self, messages: list[Message], label: str) -> ModelOutput:
        self.ctx.limits.check()
        limits = self.ctx.limits
        limits.steps += 1
        transcript = self.ctx.transcript
        transcript.append(MessageEvent(step=limits.steps, message=messages[-1]))
        out = await self.model.generate(
            messages,
            label="agent_step",
            max_tokens=self.config.max_tokens,
            reasoning_effort=effort_for(self.model.name, self.config.reasoning_effort),
        )
        transcript.append(MessageEvent(step=limits.steps, message=out.assistant_message()))
        transcript.append(ModelCallEvent.of(out, step=limits.steps, label=f"papercoder_{label}"))
        self.saved(self.art.next_answer_name(label), out.text)
        return out

    async def ask(
        self, messages: list[Message], label: str, parse: Callable[[str], _T]
    ) -> tuple[_T, str]:
        """The parsed answer and its text; an unusable answer is sent back with the reason,
        at most ``plan_retries`` times."""
        conversation = list(messages)
        attempts = self.config.plan_retries + 1
        error = ""
        for attempt in range(1, attempts + 1):
            out = await self.call(conversation, label)
            try:
                if not out.complete:
                    raise AnswerError(_incomplete(out, self.config.max_tokens))
                return parse(out.text), out.text
            except AnswerError as exc:
                error = str(exc)
            self.note("unusable_answer", error, label=label, attempt=attempt)
            conversation += [
                AssistantMessage(content=out.text or "(no answer)"),
                UserMessage(
                    content=f"Your answer could not be used: {error}. Answer again, in the "
                    "form asked for."
                ),
            ]
        raise _Failed(f"{label}: no usable answer after {plural(attempts, 'attempt')}: {error}")

    async def ask_value(
        self, messages: list[Message], label: str, parse: Callable[[str], _T]
    ) -> _T:
        return (await self.ask(messages, label, parse))[0]

    def saved_answer(self, name: str, text: str, parse: Callable[[str], _T]) -> _T:
        """A saved answer of an earlier attempt, read again (checked against this config)."""
        try:
            return parse(text)
        except AnswerError as exc:
            raise _Failed(
                f"{self.art.path(name)}: the saved answer does not fit this configuration "
                f"({exc}); delete it (and what follows it) to ask again"
            ) from None

    # -- sandbox ------------------------------------------------------------------------

    async def read_paper(self) -> None:
        try:
            self.paper = (
                await self.ctx.sandbox.read_file(f"{PAPER_DIR}/paper.md", max_bytes=1 << 25)
            ).decode("utf-8", errors="replace")
        except SandboxError as exc:
            raise _Failed(f"cannot read {PAPER_DIR}/paper.md in the sandbox: {exc}") from None
        addendum = f"{PAPER_DIR}/addendum.md"
        found = await self.ctx.sandbox.exec(["test", "-f", addendum], timeout=60)
        self.addendum = "(none)"
        if found.exit_code == 0:
            data = await self.ctx.sandbox.read_file(addendum, max_bytes=1 << 25)
            self.addendum = data.decode("utf-8", errors="replace")

    async def write(self, path: str, content: str) -> None:
        await self.ctx.sandbox.write_file(f"{SUBMISSION_DIR}/{path}", content.encode("utf-8"))
        self.art.write(f"files/{path}", content)

    async def restore(self) -> None:
        """After a restart: put back every file the pipeline wrote (the snapshot may be older
        than the last of them) and commit them."""
        restored = self.art.files("files")
        for path in restored:
            content = self.art.path(f"files/{path}").read_text(encoding="utf-8")
            await self.ctx.sandbox.write_file(f"{SUBMISSION_DIR}/{path}", content.encode("utf-8"))
        if restored:
            self.note(
                "restored",
                f"{plural(len(restored), 'file')} written by earlier attempts",
                files=restored,
            )
            await self.commit(restored, "papercoder: files of the earlier attempt")

    async def commit(self, files: list[str], message: str) -> None:
        quoted = " ".join(shlex.quote(f) for f in files)
        cmd = (
            f"git add -- {quoted} && (git diff --cached --quiet || git -c user.name=paperbench "
            f"-c user.email=papercoder@paperbench.invalid commit -q -m {shlex.quote(message)})"
        )
        result = await self.ctx.sandbox.exec(cmd, timeout=120, workdir=SUBMISSION_DIR)
        if result.exit_code != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["timed out"]
            raise _Failed(f"git commit in {SUBMISSION_DIR} failed: {tail[0]}")
        self.note("commit", message, files=files)

    # -- the pipeline -------------------------------------------------------------------

    async def run(self) -> str:
        if self.ctx.resumed:
            self.note(
                "resumed", "the environment was restarted: phases with saved results are skipped"
            )
            await self.restore()
        await self.read_paper()
        logic, config_yaml = await self.planning()
        await self.write("config.yaml", config_yaml)
        await self.commit(["config.yaml"], "papercoder: planning (config.yaml)")
        analyses = await self.analysis(logic)
        done = await self.coding(logic, analyses)
        await self.commit(logic.task_list, "papercoder: coding")
        done["reproduce.sh"] = await self.reproduce(done)
        await self.commit(["reproduce.sh"], "papercoder: reproduce.sh")
        summary = f"wrote {plural(len(done), 'file')}: {', '.join(done)}"
        if self.config.repair_rounds:
            summary += "; " + await self.repair([*done, "config.yaml"])
        return summary

    async def planning(self) -> tuple[LogicDesign, str]:
        """The four planning turns; leaves the conversation in ``self.conversation``, its
        paper and its last request marked as the shared prefix for prompt caching."""
        ctx = self.ctx
        conversation: list[Message] = [
            SystemMessage(content=self.render("system")),
            UserMessage(
                content=self.render(
                    "plan", instructions=ctx.instructions, paper=self.paper, addendum=self.addendum
                ),
                cache=True,
            ),
        ]
        plan = self.art.read("plan.md")
        if plan is None:
            plan = await self.ask_value(conversation, "plan", _nonempty)
            self.saved("plan.md", plan)
        conversation.append(AssistantMessage(content=plan))

        max_files = self.config.max_files

        def read_design(text: str) -> ArchitectureDesign:
            value = parse_json_answer(text, ArchitectureDesign)
            check_architecture(value, max_files)
            return value

        conversation.append(UserMessage(content=self.render("architecture", max_files=max_files)))
        design_text = self.art.read("architecture.answer.md")
        if design_text is None:
            design, design_text = await self.ask(conversation, "architecture", read_design)
            self.saved("architecture.json", design.model_dump_json(indent=2))
            self.saved("class_diagram.mmd", design.class_diagram)
            self.saved("sequence_diagram.mmd", design.sequence_diagram)
            self.saved("architecture.answer.md", design_text)
        else:
            design = self.saved_answer("architecture.answer.md", design_text, read_design)
        conversation.append(AssistantMessage(content=design_text))

        def read_logic(text: str) -> LogicDesign:
            value = parse_json_answer(text, LogicDesign)
            check_logic(value, design)
            return value

        conversation.append(UserMessage(content=self.render("logic")))
        logic_text = self.art.read("logic.answer.md")
        if logic_text is None:
            logic, logic_text = await self.ask(conversation, "logic", read_logic)
            self.saved("logic.json", logic.model_dump_json(indent=2))
            self.saved("logic.answer.md", logic_text)
        else:
            logic = self.saved_answer("logic.answer.md", logic_text, read_logic)
        conversation.append(AssistantMessage(content=logic_text))
        logic, changes = order_tasks(logic)
        for change in changes:
            self.note(change.kind, change.text, **change.data)
        if changes:
            self.saved("logic.ordered.json", logic.model_dump_json(indent=2))

        conversation.append(UserMessage(content=self.render("config"), cache=True))
        config_text = self.art.read("config.answer.md")
        if config_text is None:
            config_yaml, config_text = await self.ask(conversation, "config", parse_config_answer)
            self.saved("config.yaml", config_yaml)
            self.saved("config.answer.md", config_text)
        else:
            config_yaml = self.saved_answer("config.answer.md", config_text, parse_config_answer)
        conversation.append(AssistantMessage(content=config_text))
        self.conversation = conversation
        return logic, config_yaml

    async def analysis(self, logic: LogicDesign) -> dict[str, str]:
        analyses: dict[str, str] = {}
        for file in logic.task_list:
            name = f"analyses/{file}.md"
            text = self.art.read(name)
            if text is None:
                item = logic.logic_of(file)
                prompt = self.render(
                    "analysis",
                    file=file,
                    description=item.description,
                    depends_on=", ".join(item.depends_on) or "none",
                )
                text = await self.ask_value(
                    [*self.conversation, UserMessage(content=prompt)], f"analysis {file}", _nonempty
                )
                self.saved(name, text)
            analyses[file] = text
        return analyses

    async def coding(self, logic: LogicDesign, analyses: dict[str, str]) -> dict[str, str]:
        done: dict[str, str] = {}
        for file in logic.task_list:
            content = self.art.read(f"files/{file}")
            if content is None:
                deps = logic.logic_of(file).depends_on
                context, left_out = files_context(
                    done, deps, self.agent.context_tokens, self.model.name
                )
                if left_out:
                    self.note(
                        "context_trimmed", f"coding {file}: files left out", left_out=left_out
                    )
                prompt = self.render(
                    "coding", done_files=context, analysis=analyses[file], file=file
                )
                messages = [*self.conversation, UserMessage(content=prompt)]
                content = await self.ask_value(messages, f"coding {file}", parse_code_answer)
            await self.write(file, content)
            done[file] = content
        return done

    async def reproduce(self, done: dict[str, str]) -> str:
        content = self.art.read("files/reproduce.sh")
        if content is None:
            context, left_out = files_context(done, [], self.agent.context_tokens, self.model.name)
            if left_out:
                self.note("context_trimmed", "reproduce.sh: files left out", left_out=left_out)
            prompt = self.render("reproduce", files=context)
            messages = [*self.conversation, UserMessage(content=prompt)]
            content = await self.ask_value(messages, "reproduce.sh", parse_code_answer)
        await self.write("reproduce.sh", content)
        return content

    async def run_reproduce(self, attempt: int) -> tuple[bool, str, str]:
        """Run reproduce.sh; (passed, exit description, the end of its output)."""
        self.ctx.limits.check()
        timeout = self.config.repair_timeout_s
        remaining = self.ctx.limits.remaining_s()
        if remaining is not None and remaining < timeout:
            timeout = max(1.0, remaining)
            self.note(
                "repair_timeout_cut",
                f"reproduce.sh gets {timeout:.0f}s, the agent's time left, instead of the "
                f"{self.config.repair_timeout_s:g}s the reproduction would give it",
                timeout_s=timeout,
                repair_timeout_s=self.config.repair_timeout_s,
            )
        # as the reproduction runs it: stdout and stderr interleaved, its log limit
        command = "bash reproduce.sh 2>&1"
        result = await self.ctx.sandbox.exec(
            command,
            timeout=timeout,
            workdir=SUBMISSION_DIR,
            output_limit=self.config.repair_log_bytes,
        )
        output = result.stdout + ("\n" if result.stdout and result.stderr else "") + result.stderr
        tail = output[-ERROR_TAIL_CHARS:]
        status = f"timed out after {timeout:g}s" if result.timed_out else str(result.exit_code)
        self.ctx.transcript.append(
            ToolEvent(
                step=self.ctx.limits.steps,
                tool_call_id=f"papercoder-reproduce-{attempt}",
                name="reproduce",
                arguments={
                    "command": command,
                    "timeout_s": timeout,
                    "output_limit": self.config.repair_log_bytes,
                },
                output=tail,
                exit_code=result.exit_code,
                timed_out=result.timed_out,
                duration_s=result.duration_s,
            )
        )
        return result.exit_code == 0, status, tail

    async def repair(self, files: list[str]) -> str:
        unapplied: list[str] = []
        rounds = self.config.repair_rounds
        for number in range(1, rounds + 1):
            record_name = f"repair/round-{number:02d}.json"
            saved = self.art.read(record_name)
            if saved is not None:
                record = _RepairRecord.model_validate_json(saved)
                if record.passed:
                    return f"reproduce.sh passed in repair round {number}"
                unapplied = record.unapplied
                files = sorted(set(files) | set(record.applied))
                continue
            passed, status, tail = await self.run_reproduce(number)
            if passed:
                self.art.write_json(
                    record_name, _RepairRecord(round=number, passed=True).model_dump()
                )
                self.note("reproduce_passed", f"reproduce.sh passed (repair round {number})")
                return f"reproduce.sh passed in repair round {number}"
            answer = await self.ask_repair(files, status, tail, unapplied)
            applied, unapplied = await self.apply(answer)
            files = sorted(set(files) | set(applied))
            record = _RepairRecord(
                round=number,
                passed=False,
                exit=status,
                answer=answer,
                applied=applied,
                unapplied=unapplied,
            )
            self.saved(record_name, record.model_dump_json(indent=2))
            if applied:
                await self.commit(applied, f"papercoder: repair round {number}")
        passed, status, _ = await self.run_reproduce(rounds + 1)
        verdict = "passed" if passed else f"still fails (exit {status})"
        said = f"reproduce.sh {verdict} after {plural(rounds, 'repair round')}"
        self.note("reproduce_final", said)
        return said

    async def ask_repair(
        self, files: list[str], status: str, tail: str, unapplied: list[str]
    ) -> RepairAnswer:
        current: dict[str, str] = {}
        for path in files:
            content = self.art.read(f"files/{path}")
            if content is not None:
                current[path] = content
        context, left_out = files_context(current, [], self.agent.context_tokens, self.model.name)
        if left_out:
            self.note("context_trimmed", "repair: files left out", left_out=left_out)
        report = ""
        if unapplied:
            report = (
                "\nEdits of your previous answer that were NOT applied:\n"
                + "\n".join(f"- {line}" for line in unapplied)
                + "\n"
            )
        prompt = self.render(
            "repair",
            files=context,
            exit_code=status,
            error_tail=tail,
            unapplied=report,
        )
        messages = [*self.conversation, UserMessage(content=prompt)]
        answer = await self.ask_value(
            messages, "repair", lambda text: parse_json_answer(text, RepairAnswer)
        )
        return answer

    async def apply(self, answer: RepairAnswer) -> tuple[list[str], list[str]]:
        """Apply the edits in order; (files changed, one line per edit not applied)."""
        changed: dict[str, str] = {}
        unapplied: list[str] = []
        for index, edit in enumerate(answer.edits, start=1):
            if (why := check_path(edit.file)) is not None:
                unapplied.append(f"edit {index}: {why}")
                continue
            content = changed.get(edit.file)
            if content is None:
                target = f"{SUBMISSION_DIR}/{edit.file}"
                exists = await self.ctx.sandbox.exec(["test", "-e", target], timeout=60)
                if exists.exit_code == 0:
                    try:
                        data = await self.ctx.sandbox.read_file(target, max_bytes=1 << 24)
                    except SandboxError as exc:
                        unapplied.append(f"edit {index}: {edit.file}: cannot be read ({exc})")
                        continue
                    content = data.decode("utf-8", errors="replace")
            try:
                changed[edit.file] = apply_edit(content, edit)
            except AnswerError as exc:
                unapplied.append(f"edit {index}: {exc}")
        for path, content in changed.items():
            await self.write(path, content)
        if unapplied:
            self.note("edits_not_applied", "; ".join(unapplied), unapplied=unapplied)
        return sorted(changed), unapplied


class _RepairRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    round: int
    passed: bool
    exit: str = ""
    answer: RepairAnswer | None = None
    applied: list[str] = Field(default_factory=list)
    unapplied: list[str] = Field(default_factory=list)


def _incomplete(out: ModelOutput, max_tokens: int | None) -> str:
    if out.stop_reason == "max_tokens" and max_tokens is not None:
        return (
            f"the answer was cut off at the answer limit of {max_tokens} tokens (max_tokens in "
            "the agent config); answer more briefly"
        )
    return f"the answer is incomplete (stop reason {out.stop_reason})"


def _nonempty(text: str) -> str:
    if not text.strip():
        raise AnswerError("the answer is empty")
    return text
