"""The default mode's shortlist: which files each leaf's grader needs, named by the model.

One structured call per group of about ``shortlist_batch`` leaves of one category (in the
rubric's order, groups of even sizes): the submission map (:mod:`paperbench.judge._map`) as
a prefix that every shortlist call of a paper shares, then the group's criteria; the answer
names up to ``shortlist_files`` paths per criterion. The paths are the model's word, not the view's:
only paths the view holds count (the rest are dropped, and counted in ``ignored``). A call
that fails (refused, invalid after the client's retries) gives each of its leaves no
shortlist and a note saying so; those leaves' files are chosen by the lexical index alone.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from paperbench.errors import ModelError
from paperbench.judge._config import SimpleConfig
from paperbench.judge._job import Job, Leaf, add_cost
from paperbench.judge._map import SubmissionMap, build_map
from paperbench.judge._prompts import render
from paperbench.judge._types import CallCost
from paperbench.llm import UserMessage
from paperbench.rubric import iter_leaves

_T = TypeVar("_T")


class Pick(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="The criterion's key, as given in brackets.")
    paths: list[str] = Field(description="Paths from the map, the most useful first.")


class Picks(BaseModel):
    model_config = ConfigDict(extra="forbid")

    picks: list[Pick]


@dataclass(frozen=True)
class Shortlist:
    """One leaf's shortlist: the paths (all in the view), and a note when there is none."""

    paths: list[str] = field(default_factory=list)
    note: str | None = None
    ignored: int = 0
    """Paths the answer named that the view does not hold."""
    cost: CallCost = field(default_factory=CallCost)
    """This leaf's share of the shortlist call."""


def submission_map(job: Job, model: str) -> SubmissionMap:
    key = f"map:{model}"
    if key not in job.cache:
        config = job.judge.config
        assert isinstance(config, SimpleConfig)
        job.cache[key] = build_map(job.view, model, config.budgets.map_tokens)
    found: SubmissionMap = job.cache[key]
    return found


def _even(members: list[_T], size: int) -> list[list[_T]]:
    """``members`` in order, in as many groups as ``size`` goes into their count (rounded to
    the nearest, at least one), of even sizes: a short remainder joins the others rather than
    carrying the map on a call of its own (a group holds at most 1.5 × ``size``)."""
    calls = max(1, (len(members) + size // 2) // size)
    base, more = divmod(len(members), calls)
    out: list[list[_T]] = []
    start = 0
    for k in range(calls):
        end = start + base + (1 if k < more else 0)
        out.append(members[start:end])
        start = end
    return out


def _groups(job: Job, size: int) -> dict[tuple[int, ...], tuple[int, list[tuple[str, str]]]]:
    """Leaf path → (group number, the group's (path key, requirements) in rubric order); a
    leaf whose check is run is in no group."""
    key = "shortlist-groups"
    if key not in job.cache:
        config = job.judge.config
        assert isinstance(config, SimpleConfig)
        by_category: dict[str, list[tuple[tuple[int, ...], str]]] = {}
        for path, node in iter_leaves(job.rubric):
            if node.check is not None and config.checks == "run":
                continue  # graded by running its command, not by a model
            category = node.task_category.value if node.task_category is not None else ""
            by_category.setdefault(category, []).append((tuple(path), node.requirements))
        out: dict[tuple[int, ...], tuple[int, list[tuple[str, str]]]] = {}
        number = 0
        for members in by_category.values():
            for group in _even(members, size):
                items = [(".".join(map(str, p)), text) for p, text in group]
                for p, _ in group:
                    out[p] = (number, items)
                number += 1
        job.cache[key] = out
    groups: dict[tuple[int, ...], tuple[int, list[tuple[str, str]]]] = job.cache[key]
    return groups


async def shortlist(job: Job, leaf: Leaf, model: str) -> Shortlist | None:
    """The leaf's shortlist (None when the config asks for none)."""
    config = job.judge.config
    assert isinstance(config, SimpleConfig)
    if config.shortlist_batch == 0 or "shortlist" not in job.judge.prompts:
        return None
    groups = _groups(job, config.shortlist_batch)
    found = groups.get(tuple(leaf.path))
    if found is None:
        return None
    number, items = found
    key = f"shortlist:{model}:{number}"
    if key not in job.cache:
        job.cache[key] = asyncio.ensure_future(_ask(job, leaf.category, items, model))
    answers: dict[str, Shortlist] = await job.cache[key]
    return answers[".".join(map(str, leaf.path))]


async def _ask(
    job: Job, category: str, items: list[tuple[str, str]], model_name: str
) -> dict[str, Shortlist]:
    config = job.judge.config
    assert isinstance(config, SimpleConfig)
    the_map = submission_map(job, model_name)
    template = job.judge.prompts["shortlist"]
    prefix = render(template, map=the_map.text, notes=the_map.notes, category=category)
    criteria = [{"key": str(i + 1), "text": text} for i, (_, text) in enumerate(items)]
    question = render(
        template,
        map=None,
        notes=[],
        category=category,
        criteria=criteria,
        max_files=config.shortlist_files,
    )
    model = job.model(config.roles.grading)
    try:
        out = await model.generate(
            [UserMessage(content=prefix, cache=True), UserMessage(content=question)],
            output=Picks,
            label="judge_shortlist",
            max_tokens=config.roles.grading.max_output_tokens or config.budgets.answer_tokens,
        )
    except ModelError as exc:
        note = f"the file shortlist call failed ({exc}): files chosen by the lexical index alone"
        return {path: Shortlist(note=note) for path, _ in items}
    parsed: Picks = out.parsed
    named: dict[int, list[str]] = {}
    for pick in parsed.picks:
        k = pick.key.strip().strip("[]")
        if k.isdigit() and 0 < int(k) <= len(items) and int(k) - 1 not in named:
            named[int(k) - 1] = pick.paths
    answers: dict[str, Shortlist] = {}
    for i, (path, _) in enumerate(items):
        cost = add_cost(CallCost(), out, share=len(items), first=i == 0)
        if i not in named:
            answers[path] = Shortlist(
                note="the file shortlist answer had no entry for this criterion: files chosen "
                "by the lexical index alone",
                cost=cost,
            )
            continue
        paths: list[str] = []
        ignored = 0
        for raw in named[i]:
            p = raw.strip().removeprefix("./")
            if p in the_map.paths and p not in paths:
                paths.append(p)
            elif p not in the_map.paths:
                ignored += 1
        answers[path] = Shortlist(paths=paths[: config.shortlist_files], ignored=ignored, cost=cost)
    return answers
