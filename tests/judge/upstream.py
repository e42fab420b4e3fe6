"""PaperBench's own behaviour, for the faithful mode's tests.

Where the reference repository (openai/preparedness) is at hand, as a git directory named by
``PAPERBENCH_UPSTREAM_GIT``, :func:`upstream_definitions` loads PaperBench's pure functions,
constants and schemas from its source (only their definitions are executed, so its package and
its other dependencies are not imported). Without it, the transcriptions below stand for
PaperBench; a test compares the two whenever the reference is at hand.
"""

from __future__ import annotations

import ast
import itertools
import os
import random
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drain3 import TemplateMiner

UPSTREAM_ENV = "PAPERBENCH_UPSTREAM_GIT"
UTILS = "project/paperbench/paperbench/judge/utils.py"


def upstream_git() -> Path | None:
    value = os.environ.get(UPSTREAM_ENV)
    return Path(value) if value and Path(value).is_dir() else None


def upstream_definitions(source: str, names: list[str], **namespace: Any) -> dict[str, Any]:
    """The named top-level definitions (functions, classes, assigned names) of ``source`` (a
    path at HEAD of the reference), executed alone in a namespace holding ``namespace`` (its
    package and other dependencies are not imported)."""
    git = upstream_git()
    assert git is not None
    text = subprocess.run(
        ["git", "--git-dir", str(git), "show", f"HEAD:{source}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout

    def defined(node: ast.stmt) -> set[str]:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            return {node.name}
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return {t.id for t in targets if isinstance(t, ast.Name)}
        return set()

    body = [node for node in ast.parse(text).body if defined(node) & set(names)]
    found = set().union(*(defined(node) for node in body))
    assert set(names) <= found, f"not all of {names} in {source}"
    scope: dict[str, Any] = dict(namespace)
    exec(compile(ast.Module(body=body, type_ignores=[]), source, "exec"), scope)
    return {name: scope[name] for name in names}


def _sanitize(line: str) -> str:
    """PaperBench's ``sanitize_line``: the same masks in the same order."""
    line = re.sub(r"\d{4}-\d{2}-\d{2}T[0-9:.]+Z", "<TIMESTAMP>", line)
    line = re.sub(r"\b\d{4}-\d{2}-\d{2}\b", "<DATE>", line)
    line = re.sub(r"\b\d{2}:\d{2}:\d{2}\b", "<TIME>", line)
    bars = (r"\d+%?\|[█=]+", r"[KMG]?B/s", r"\d+%\s*\|", r"[▏▎▍▌▋▊▉]{2,}")
    if any(re.search(bar, line) for bar in bars):
        line = "<PROGRESS_BAR>"
    line = re.sub(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", "<IP>", line)
    return re.sub(r"\b[0-9a-fA-F]{8,}\b", "<HEX>", line)


def reduce_log(text: str) -> str:
    """PaperBench's ``reduce_log``: a fresh ``TemplateMiner()``, one ``add_log_message`` per
    sanitized line, runs of one ``cluster_id`` folded into their first line."""
    miner = TemplateMiner()
    out: list[str] = []
    runs: list[tuple[int, str, int]] = []
    for line in text.splitlines():
        cluster = miner.add_log_message(_sanitize(line))["cluster_id"]
        if runs and runs[-1][0] == cluster:
            runs[-1] = (cluster, runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((cluster, line, 1))
    for _, first, count in runs:
        out.append(first)
        if count > 1:
            out.append(f"  (repeated {count} times)")
    return "\n".join(out)


def upstream_reduce_log() -> Callable[[str], str]:
    """PaperBench's own ``reduce_log`` from the reference repository."""
    found = upstream_definitions(
        UTILS, ["sanitize_line", "reduce_log"], re=re, TemplateMiner=TemplateMiner
    )
    fn: Callable[[str], str] = found["reduce_log"]
    return fn


def _words(rng: random.Random, n: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 8))) for _ in range(n)]


def generated_logs() -> dict[str, str]:
    """Logs of the shapes reproductions print, and the shapes where drain3's tree matters."""
    rng = random.Random(28)
    logs: dict[str, str] = {}
    # a first word never seen before falls into the wildcard child of a first word with digits
    logs["new first word, wildcard child"] = "\n".join(
        ["run1 finished ok", "final finished ok", "run2 finished ok", "summary finished ok"] * 3
    )
    # more than 100 distinct first words: the 101st onward share the wildcard child
    firsts = sorted(set(_words(rng, 160)))
    logs["over 100 first words"] = (
        "\n".join(f"{w} step started" for w in firsts)
        + "\n"
        + "\n".join(f"{w} step done" for w in firsts[::-1])
    )
    # two-token lines, numbers and words, some identical in a row
    two = ["loss 0.51", "loss 0.49", "acc 0.90", "acc high", "Epoch 3", "done", "done", "x y"]
    logs["two-token lines"] = "\n".join(rng.choice(two) for _ in range(300))
    stamps = [f"2026-01-0{d}T10:{m:02d}:00.5Z" for d in range(1, 4) for m in range(10)]
    training = [f"{s} epoch {i} loss {1 / (i + 1):.4f}" for i, s in enumerate(stamps)]
    training += [f"{p}%|{'█' * (p // 10)}| {p}/100 [00:01, 3.1MB/s]" for p in range(0, 101, 5)]
    training += [f"connect 10.0.0.{i} ok, image {i:08x}deadbeef" for i in range(12)]
    training += ["Traceback (most recent call last):", '  File "train.py", line 3', "ValueError"]
    logs["training"] = "\n".join(training)
    for k in range(6):
        vocab = _words(rng, 40)
        lines = []
        for _ in range(400):
            size = rng.randint(1, 6)
            tokens = [
                rng.choice(vocab) if rng.random() < 0.7 else str(rng.randint(0, 999))
                for _ in range(size)
            ]
            lines.extend([" ".join(tokens)] * rng.choice([1, 1, 2, 5]))
        logs[f"random {k}"] = "\n".join(lines)
    return logs


def walked_files(root: Path) -> list[str]:
    """Every file under ``root`` in the order PaperBench's walk meets them (``os.walk``,
    top-down), each folder's listing sorted by name; paths relative to ``root``."""
    out: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        rel = Path(folder).relative_to(root)
        out.extend((rel / name).as_posix() for name in sorted(files))
    return out


def paperbench_reads(answer: str, root: Path, max_files: int) -> list[tuple[str, str]]:
    """What PaperBench's ``_prepare_relevant_files`` reads of a ranking answer, on a local
    submission folder (its ``computer=None`` path): each of the first ``max_files`` lines,
    stripped of white space then of ``/``, joined to ``root`` and read (the first 200,000
    characters as UTF-8, else as Latin-1), labelled by the stripped line relative to ``root``;
    a line whose read or label fails is skipped. (label, content) in order, repeats kept."""
    out: list[tuple[str, str]] = []
    for line in answer.split("\n")[:max_files]:
        target = root / line.strip().strip("/")
        try:
            try:
                with target.open(encoding="utf-8") as handle:
                    content = handle.read(200_000)
            except UnicodeDecodeError:
                with target.open(encoding="latin1") as handle:
                    content = handle.read(200_000)
            label = (root / line.strip()).relative_to(root).as_posix()
        except (OSError, ValueError):
            continue
        out.append((label, content))
    return out


def subtree_requirements(node: dict[str, Any], depth: int = 0) -> str:
    """PaperBench's text for a subtree graded as one unit (``build_requirements_string`` in
    ``SimpleJudge.grade_subtree``), on rubric JSON."""
    text = f"{'| ' * depth}{node['requirements']} (weight: {node['weight']})\n"
    for sub in node["sub_tasks"]:
        text += subtree_requirements(sub, depth + 1)
    return text


def prior_requirements(root: dict[str, Any], target_id: str) -> list[str]:
    """PaperBench's ``TaskNode.get_prior_nodes`` (no cap), on rubric JSON: the root, then on
    the way down to the target every earlier sibling and the ancestor; their requirements."""

    def find(node: dict[str, Any]) -> list[dict[str, Any]] | None:
        if node["id"] == target_id:
            return [node]
        for sub in node["sub_tasks"]:
            below = find(sub)
            if below:
                return [node, *below]
        return None

    path = find(root)
    assert path is not None
    nodes = [root]
    for parent, node in itertools.pairwise(path):
        ids = [sub["id"] for sub in parent["sub_tasks"]]
        nodes += parent["sub_tasks"][: ids.index(node["id"]) + 1]
    return [n["requirements"] for n in nodes[:-1]]
