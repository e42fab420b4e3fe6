"""``paperbench rubric ...``: validate, stats, score and show rubric and graded trees."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.table import Table
from rich.text import Text

from paperbench._console import (
    console,
    error,
    plural,
    print_table,
    print_wide,
    printable,
    warning,
)
from paperbench._options import CodeDev, Json, ResourcesProvided
from paperbench.errors import InputError, PaperbenchError
from paperbench.rubric._aggregate import TreeSummary, aggregate, summarize
from paperbench.rubric._load import load_graded, load_rubric, load_tree
from paperbench.rubric._model import (
    LEAF_CATEGORIES,
    GradedTaskNode,
    TaskNode,
    iter_nodes,
    path_to_json_path,
)
from paperbench.rubric._render import render_tree, score_style
from paperbench.rubric._stats import RubricStats, rubric_stats, total_stats
from paperbench.rubric._transforms import code_dev, resources_provided
from paperbench.rubric._validate import expand_paths, validate_file


def make_app(stats: Callable[..., None]) -> typer.Typer:
    """The ``rubric`` sub-app: validate, stats, score, show. ``stats`` is given by the
    caller (:mod:`paperbench.papers._cli`), because by default it reads the papers' rubrics
    and this package never imports :mod:`paperbench.papers`; it prints with
    :func:`print_stats`."""
    app = typer.Typer(help="Validate, inspect and score rubric trees and graded trees.")
    app.command()(validate)
    app.command("stats")(stats)
    app.command()(score)
    app.command()(show)
    return app


N = TypeVar("N", bound=TaskNode)


def _transform(*, resources: bool, code_only: bool = False) -> Callable[[N], N]:
    """The scoring options as one transform, applied in PaperBench's order."""

    def apply(tree: N) -> N:
        if code_only:
            tree = code_dev(tree)
        if resources:
            tree = resources_provided(tree)
        return tree

    return apply


def validate(
    paths: Annotated[list[Path], typer.Argument(help="Rubric or graded-tree files, or folders.")],
    as_json: Json = False,
) -> None:
    """Check files against the published JSON Schemas: every problem, one line each."""
    files = expand_paths(paths)
    issues = [issue for f in files for issue in validate_file(f)]
    if as_json:
        console.print_json(data={"files": len(files), "issues": [i.model_dump() for i in issues]})
    else:
        for issue in issues:
            console.print(printable(issue.line()), markup=False)
        bad = len({i.file for i in issues})
        console.print(
            f"{plural(len(files), 'file')} checked, {bad} with problems, "
            f"{plural(len(issues), 'problem')}"
        )
    if issues:
        raise typer.Exit(1)


def rubric_files(paths: list[Path]) -> list[tuple[str, Path]]:
    """(paper id, rubric file) pairs of files and folders given on the command line: a
    ``rubric.json`` is named by its folder, another file by its stem."""
    out = []
    for f in expand_paths(paths):
        paper_id = f.parent.name if f.name == "rubric.json" else f.stem
        out.append((paper_id, f))
    return out


def _stats_row(table: Table, name: str, s: RubricStats, style: str = "") -> None:
    cats = " · ".join(str(s.leaves_by_category.get(c.value, 0)) for c in LEAF_CATEGORIES)
    shares = " · ".join(
        f"{s.weight_share_by_category.get(c.value, 0.0):.0%}" for c in LEAF_CATEGORIES
    )
    table.add_row(
        Text(name), str(s.nodes), str(s.leaves), str(s.max_depth), cats, shares, style=style
    )


def print_stats(
    targets: list[tuple[str, Path]], *, resources: bool = False, as_json: bool = False
) -> bool:
    """``rubric stats`` over (paper id, rubric file) pairs: the table (or JSON) on stdout,
    a rubric that cannot be read as an error line. True when one could not be read."""
    papers: list[tuple[str, RubricStats]] = []
    failed = False
    transform = _transform(resources=resources)
    for paper_id, rubric_file in targets:
        try:
            papers.append((paper_id, rubric_stats(transform(load_rubric(rubric_file)))))
        except PaperbenchError as exc:
            error(str(exc))
            failed = True
    total = total_stats([s for _, s in papers])
    if as_json:
        console.print_json(
            data={
                "papers": [{"id": pid, **s.model_dump()} for pid, s in papers],
                "total": total.model_dump(),
                "resources_provided": resources,
            }
        )
    elif papers:
        table = Table(
            title="Rubric statistics" + (" (resources provided)" if resources else ""),
            caption="CD Code Development · CE Code Execution · RA Result Analysis; "
            "weight = effective share of the root",
        )
        table.add_column("paper", overflow="fold", min_width=_name_width(p for p, _ in papers))
        for column in ["nodes", "leaves", "depth", "leaves CD·CE·RA", "weight CD·CE·RA"]:
            table.add_column(column, justify="right", no_wrap=True)
        for pid, s in papers:
            _stats_row(table, pid, s)
        _stats_row(table, "total", total, style="bold")
        print_table(table)
        fine = Table(title="Leaves by finegrained category")
        fine.add_column("finegrained category")
        fine.add_column("leaves", justify="right")
        for name, count in total.leaves_by_finegrained_category.items():
            fine.add_row(name, str(count))
        print_table(fine)
    return failed


def _warn_about(f: Path, s: TreeSummary) -> None:
    if s.disqualified is not None:
        warning(f"{f}: disqualified ({s.disqualified}); it scores 0")
    if s.invalid_leaves_scored:
        n = len(s.invalid_leaves_scored)
        warning(
            f"{f}: {s.invalid_leaves_scored[0]}: an invalid leaf stores a score above 0"
            + (f" (and {n - 1} more)" if n > 1 else "")
            + "; invalid leaves count as 0"
        )


def score(
    graded: Annotated[list[Path], typer.Argument(help="Graded-tree files (grade.json, ...).")],
    resources: ResourcesProvided = False,
    code_only: CodeDev = False,
    as_json: Json = False,
) -> None:
    """Re-aggregate graded trees from their leaves: root score, coverage, consistency.

    An invalid leaf counts as 0 in the score, whatever it stores; coverage is the share of
    the root's weight that was validly graded. With --code-dev a tree without a Code
    Development leaf becomes its root as one Code Development leaf."""
    rows: list[tuple[Path, TreeSummary]] = []
    failed = False
    transform = _transform(resources=resources, code_only=code_only)
    for f in graded:
        try:
            rows.append((f, summarize(transform(load_graded(f)))))
        except PaperbenchError as exc:
            error(str(exc))
            failed = True
    for f, s in rows:
        _warn_about(f, s)
    if as_json:
        console.print_json(
            data=[{"file": str(f), **s.model_dump(exclude={"inconsistent_paths"})} for f, s in rows]
        )
    elif rows:
        _score_table(rows)
    if failed:
        raise typer.Exit(1)


def _score_table(rows: list[tuple[Path, TreeSummary]]) -> None:
    labels, common = _short_labels([f for f, _ in rows])
    table = Table(title=f"Graded trees{common}")
    table.add_column("file", overflow="fold", min_width=_name_width(labels))
    for column in ["score", "stored", "coverage", "invalid", "leaves", "consistent"]:
        table.add_column(column, justify="right", no_wrap=column != "consistent")
    for (_, s), label in zip(rows, labels, strict=True):
        consistent = Text("yes")
        if not s.consistent:
            consistent = Text.assemble(("no", "red"), f" ({', '.join(s.inconsistent_paths[:3])})")
        table.add_row(
            Text(printable(label)),
            Text(f"{s.root_score:.4f}", style=score_style(s.root_score)),
            f"{s.stored_root_score:.4f}",
            f"{s.coverage:.1%}",
            str(s.invalid_leaves),
            str(s.leaves),
            consistent,
        )
    print_table(table)


def _name_width(names: Iterable[str], cap: int = 14) -> int:
    """A name column's minimum width: the longest name, up to ``cap`` (then it folds)."""
    return min(max((len(n) for n in names), default=4), cap)


def _short_labels(files: list[Path]) -> tuple[list[str], str]:
    """Labels without what every file shares: ``examples/p/a/expected_result.json`` and
    ``examples/p/b/expected_result.json`` become ``p/a`` and ``p/b``, and the title says
    `` under examples/ (expected_result.json)``."""
    names = {f.name for f in files}
    if len(files) < 2 or len(names) != 1:
        return [str(f) for f in files], ""
    parents = [f.parent for f in files]
    try:
        common = Path(os.path.commonpath(parents))
    except ValueError:
        return [str(f) for f in files], ""
    labels = [str(p.relative_to(common)) for p in parents]
    if any(label == "." for label in labels):
        return [str(f) for f in files], ""
    return labels, f" under {printable(str(common))}/ ({printable(names.pop())})"


def _same_shape(rubric: TaskNode, graded: TaskNode) -> str | None:
    pairs = zip(iter_nodes(rubric), iter_nodes(graded), strict=False)
    for (path, a), (gpath, b) in pairs:
        if path != gpath or a.id != b.id:
            return path_to_json_path(path)
    return None


def show(
    file: Annotated[Path, typer.Argument(help="A rubric or graded-tree file.")],
    depth: Annotated[int | None, typer.Option(min=1, help="Show at most N levels.")] = None,
    grades: Annotated[
        Path | None, typer.Option(help="A graded tree of this rubric: show its scores.")
    ] = None,
    resources: ResourcesProvided = False,
) -> None:
    """Print a tree with weights and categories; graded trees with their scores as
    recomputed from the leaves, invalid leaves and the nodes above them marked."""
    transform = _transform(resources=resources)
    tree: TaskNode
    if grades is not None:
        rubric = load_rubric(file)
        tree = load_graded(grades)
        mismatch = _same_shape(rubric, tree)
        if mismatch is not None:
            raise InputError(f"does not grade {file} (nodes differ)", file=grades, path=mismatch)
    else:
        tree = load_tree(file)
    tree = transform(tree)
    if isinstance(tree, GradedTaskNode):
        tree = aggregate(tree)
    print_wide(render_tree(tree, max_depth=depth))
