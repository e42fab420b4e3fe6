"""``paperbench grade``: grade a submission against its paper's rubric (thin)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import ValidationError
from rich.table import Table

from paperbench._console import console, print_table, warning
from paperbench._io import atomic_write_text
from paperbench.errors import UsageError
from paperbench.judge._config import DummyConfig, LoadedJudge, RandomConfig, load_judge_config
from paperbench.judge._ensemble import (
    AGREEMENT_FILE,
    ensemble_report,
    ensemble_tables,
    format_interval,
)
from paperbench.judge._grader import GradeResult, grade_submission
from paperbench.judge._job import GradeOptions, ModelSettings
from paperbench.judge._view import build_view
from paperbench.llm import ModelConfig
from paperbench.papers import PaperSource


def missing_keys(judge: LoadedJudge, settings: ModelSettings) -> list[str]:
    """The key variables the judge's models need and that are not set."""
    from paperbench.llm._registry import resolve

    missing: set[str] = set()
    for model in judge.identity.models.values():
        config = ModelConfig(model=settings.model or model, base_url=settings.base_url)
        try:
            _, target = resolve(config, require_key=False)
        except Exception:  # an unknown provider is reported when a call is made
            continue
        if target.missing_key is not None:
            missing.add(target.missing_key)
    return sorted(missing)


def _check_model_flags(model: str | None, base_url: str | None) -> None:
    """A malformed --model or --base-url is a usage error before any work."""
    for flag, values in (("--model", {"model": model}), ("--base-url", {"base_url": base_url})):
        if values[next(iter(values))] is None:
            continue
        try:
            ModelConfig.model_validate({"model": "openai/x", **values})
        except ValidationError as exc:
            message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise UsageError(f"{flag}: {message}") from None


def _table(result: GradeResult, out: Path) -> Table:
    table = Table(title=f"{result.paper_id}: judge {result.judge['name']} ({result.judge['mode']})")
    table.add_column("")
    table.add_column("value", justify="right")
    # the interval is the partial score's (invalid leaves count as 0), so it stands beside the
    # score when there is one and beside the partial score otherwise
    interval = format_interval(result.interval)
    beside = f"  95% interval {interval}" if interval else ""
    score = "unscored" if result.score is None else f"{result.score:.3f}{beside}"
    table.add_row("score", score)
    if result.score is None:
        table.add_row("partial score (not a result)", f"{result.partial_score:.3f}{beside}")
    for category, value in result.scores_by_category.items():
        table.add_row(f"  {category}", f"{value:.3f}")
    table.add_row("coverage", f"{result.coverage:.1%}")
    table.add_row("leaves", str(result.leaves))
    invalid = ", ".join(f"{n} {k}" for k, n in result.invalid_reasons.items())
    table.add_row(
        "invalid leaves", f"{result.invalid_leaves}" + (f" ({invalid})" if invalid else "")
    )
    addressed = {(f.file, f.line, f.text) for f in result.addressed_to_judge()}
    if addressed:
        table.add_row("text addressed to the judge", f"{len(addressed)} places (see grade.json)")
    cost = "unknown (unpriced model)" if result.cost_usd is None else f"${result.cost_usd:.4f}"
    table.add_row("cost", cost)
    table.add_row("requests", str(result.requests))
    table.add_row(
        "graded now / reused", f"{result.graded_leaves_this_run} / {result.reused_leaves}"
    )
    table.add_row("output", str(out / "grading"))
    return table


def grade(
    submission: Annotated[
        Path,
        typer.Argument(help="The submission: a folder or a .tar/.tar.gz file."),
    ],
    paper: Annotated[str, typer.Option("--paper", help="The paper's id.")],
    judge: Annotated[
        list[str] | None,
        typer.Option(
            help="A judge config: a catalog name (simple, simple-faithful, dummy, "
            "random) or a YAML file [default: simple]. Give it several times to grade with "
            "each config into OUT/<judge-name>/ and compare their verdicts (OUT/agreement.json)."
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="A PaperBench data directory (default: this repository's papers)."),
    ] = None,
    executed: Annotated[
        Path | None,
        typer.Option(help="The output folder of `paperbench reproduce` for this submission."),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(help="A reproduce.log to show (default: the one of --executed, if any)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Use this provider/model for every role of the judge."),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(help="An OpenAI-compatible server to send the judge's calls to."),
    ] = None,
    code_dev: Annotated[
        bool, typer.Option("--code-dev", help="Grade only Code Development leaves.")
    ] = False,
    resources_provided: Annotated[
        bool,
        typer.Option(
            "--resources-provided",
            help="Weight 0 for dataset and model acquisition leaves (they were provided).",
        ),
    ] = False,
    max_depth: Annotated[
        int | None,
        typer.Option(min=1, help="Grade subtrees below this depth as one unit (root: 1)."),
    ] = None,
    samples: Annotated[
        int | None,
        typer.Option(min=1, help="Verdicts per leaf, majority vote (default: the config's)."),
    ] = None,
    style: Annotated[
        Literal["rubric", "papercoder"],
        typer.Option(help="rubric: grade the rubric tree; papercoder: 1-5 repository scores."),
    ] = "rubric",
    reference: Annotated[
        Path | None,
        typer.Option(help="With --style papercoder: a reference implementation to compare."),
    ] = None,
    sandbox: Annotated[
        Literal["auto", "docker", "local"],
        typer.Option(help="Where check leaves run their commands."),
    ] = "auto",
    out: Annotated[
        Path | None,
        typer.Option(
            help="Output folder (default: grade-PAPER-JUDGE); rerun with the same folder to "
            "resume: leaves already graded are kept."
        ),
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Leaves (or batches) graded at once.")
    ] = 16,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Grade a submission against its paper's rubric with a judge; write grading/grade.json,
    grading/leaves.jsonl (one line per leaf as it is graded) and grading/costs.jsonl. With
    several --judge, each config writes those under OUT/<judge-name>/ and OUT/agreement.json
    compares them."""
    if reference is not None and style != "papercoder":
        raise UsageError("--reference: only with --style papercoder")
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder; give another --out")
    if not submission.exists() and executed is None:
        raise UsageError(f"SUBMISSION {submission}: not found; give a folder or a .tar.gz file")
    judges = [load_judge_config(name) for name in judge or ["simple"]]
    if len(judges) > 1:
        _check_ensemble(judges, style)
    source = PaperSource.resolve(data_dir)
    the_paper = source.load(paper)
    _check_model_flags(model, base_url)
    settings = ModelSettings(model=model, base_url=base_url, concurrency=concurrency)
    view = build_view(submission, executed, log=log)
    label = "+".join(j.identity.name for j in judges)
    out_dir = out or Path(f"grade-{the_paper.id}-{label}")
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: exists and is not a folder; give another --out")
    if style == "papercoder":
        loaded = judges[0]
        n = samples or loaded.config.samples
        _papercoder(view, the_paper, loaded, settings, reference, out_dir, as_json, n)
        return
    missing = sorted(
        {
            key
            for loaded in judges
            if not isinstance(loaded.config, DummyConfig | RandomConfig)
            for key in missing_keys(loaded, settings)
        }
    )
    for name in missing:
        warning(
            f"{name} is not set: the leaves that need a model will be invalid (not graded); "
            f"set {name} in the environment or a .env file, or pass --base-url for a local "
            "server (cached answers are still used)"
        )
    from paperbench.sandbox import SandboxConfig

    folders = [out_dir] if len(judges) == 1 else [out_dir / j.identity.name for j in judges]

    async def run_all() -> list[GradeResult]:
        # one config after the other: each keeps --concurrency to itself
        results: list[GradeResult] = []
        for loaded, folder in zip(judges, folders, strict=True):
            options = GradeOptions(
                code_dev=code_dev,
                resources_provided=resources_provided,
                max_depth=max_depth,
                samples=samples or loaded.config.samples,
            )
            results.append(
                await grade_submission(
                    view,
                    the_paper,
                    loaded,
                    out_dir=folder,
                    options=options,
                    settings=settings,
                    sandbox=SandboxConfig(backend=sandbox),
                )
            )
        return results

    results = asyncio.run(run_all())
    if len(results) == 1:
        result = results[0]
        if as_json:
            summary = result.model_dump(mode="json", exclude={"graded_task_tree"})
            summary["addressed_to_judge"] = [
                f.model_dump(mode="json") for f in result.addressed_to_judge()
            ]
            console.print_json(json.dumps(summary))
        else:
            print_table(_table(result, out_dir))
            if result.unscored_reason:
                warning(f"unscored: {result.unscored_reason}")
        return
    report = ensemble_report(the_paper.id, list(zip(results, folders, strict=True)))
    atomic_write_text(out_dir / AGREEMENT_FILE, report.model_dump_json(indent=2) + "\n")
    if as_json:
        console.print_json(report.model_dump_json())
        return
    for table in ensemble_tables(report):
        print_table(table)
    for result in results:
        if result.unscored_reason:
            warning(f"{result.judge['name']} unscored: {result.unscored_reason}")
    console.print(
        f"per-config gradings under {out_dir}/<judge>/grading, agreement in "
        f"{out_dir / AGREEMENT_FILE}"
    )


_FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _check_ensemble(judges: list[LoadedJudge], style: str) -> None:
    """Several configs: each needs its own plain folder name, and only rubric grading."""
    if style == "papercoder":
        raise UsageError("--judge: --style papercoder takes one judge config; give --judge once")
    seen: set[str] = set()
    for loaded in judges:
        name = loaded.identity.name
        if not _FOLDER_NAME.fullmatch(name):
            raise UsageError(
                f"--judge {loaded.path}: its name {name!r} is not a plain folder name (letters, "
                "digits, '.', '_', '-'); set `name:` in the config"
            )
        if name in seen:
            raise UsageError(
                f"--judge {name}: given twice; each config grades into OUT/<judge-name>/, so "
                "give each config once (or give a copy another `name:`)"
            )
        seen.add(name)


def _papercoder(
    view: Any,
    paper: Any,
    judge: LoadedJudge,
    settings: ModelSettings,
    reference: Path | None,
    out_dir: Path,
    as_json: bool,
    samples: int,
) -> None:
    from paperbench.judge._papercoder import papercoder_scores, render_repo_score
    from paperbench.llm import CostLedger, Model

    roles = getattr(judge.config, "roles", None)
    if roles is None:
        raise UsageError("--style papercoder: needs a judge with a grading model (not dummy)")
    config = ModelConfig(
        model=settings.model or roles.grading.model, base_url=settings.base_url, cache=True
    )
    ledger = CostLedger()
    ref_view = build_view(reference) if reference is not None else None

    async def run() -> Any:
        async with Model(config, ledger=ledger, stage="grading") as model:
            return await papercoder_scores(
                view, paper, model=model, reference=ref_view, samples=samples
            )

    score = asyncio.run(run())
    folder = out_dir / "grading"
    atomic_write_text(folder / "papercoder.json", score.model_dump_json(indent=2) + "\n")
    ledger.write(folder / "costs.json")
    if as_json:
        console.print_json(score.model_dump_json())
    else:
        console.print(render_repo_score(score))
