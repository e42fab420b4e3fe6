"""Every problem in a rubric or graded-tree file, one line each with its JSON path.

The JSON Schemas are generated from the models (``paperbench.rubric._schema``) and
published in ``rubrics/schema/``. A file is checked against its schema first (every problem
at once); the pydantic model then builds the tree. Loading (``load_rubric``/``load_graded``)
falls back to the same checks when a file does not load, so every command words the same
fault the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

from paperbench._io import json_path, read_text
from paperbench.errors import InputError
from paperbench.rubric._model import GradedTaskNode, TaskNode, iter_leaves
from paperbench.rubric._schema import TreeKind, build_schema

MAX_DEPTH = 100
"""Deepest tree paperbench accepts. PaperBench's rubrics are at most ~9 levels deep."""


class Issue(BaseModel):
    """One problem in one file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    path: str
    """The JSON path, or "" for a problem with the file itself (missing, not UTF-8)."""
    message: str

    def line(self) -> str:
        return ": ".join(part for part in (self.file, self.path, self.message) if part)


def schema(kind: TreeKind) -> dict[str, Any]:
    return build_schema(kind)


class _SchemaError(NamedTuple):
    """A schema violation, the same whichever validator found it."""

    where: list[str | int]
    schema_path: list[str | int]
    """From the schema's root, through $defs (to tell then/else branches apart)."""
    keyword: str
    keyword_value: Any
    subschema: dict[str, Any]
    """The (sub)schema holding the failing keyword."""
    instance: Any
    text: str

    @property
    def properties(self) -> set[str]:
        return set(self.subschema.get("properties", {}))


def _schema_at(kind: TreeKind, path: list[str | int]) -> Any:
    value: Any = schema(kind)
    for part in path:
        value = value[part]
    return value


@cache
def _validator(kind: TreeKind) -> Any:
    try:
        import jsonschema_rs
    except ImportError:  # no wheel for this platform: the pure-Python validator, slower
        import jsonschema

        return jsonschema.validators.validator_for(schema(kind))(schema(kind))
    return jsonschema_rs.validator_for(schema(kind))


def _errors(data: Any, kind: TreeKind) -> list[_SchemaError]:
    out = []
    for err in _validator(kind).iter_errors(data):
        if hasattr(err, "instance_path"):  # jsonschema_rs
            spath = list(err.schema_path)
            keyword = str(spath[-1]) if spath else ""
            value, subschema = _schema_at(kind, spath), _schema_at(kind, spath[:-1])
            found = _SchemaError(
                list(err.instance_path), spath, keyword, value, subschema, err.instance, err.message
            )
        else:  # jsonschema
            found = _SchemaError(
                list(err.absolute_path),
                list(err.absolute_schema_path),
                str(err.validator),
                err.validator_value,
                err.schema if isinstance(err.schema, dict) else {},
                err.instance,
                str(err.message),
            )
        out.append(found)
    return sorted(out, key=lambda e: [str(p) for p in e.where])


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    names = {bool: "a boolean", str: "a string", list: "an array", dict: "an object"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else "a value")


def _show_number(value: Any) -> str:
    """A number as found, an integer of hundreds of digits by its length."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**24:
        digits = int(abs(value).bit_length() * math.log10(2)) + 1  # str() fails past 4,300
        return f"an integer of about {digits} digits"
    return repr(value)


def _message(err: _SchemaError, kind: TreeKind) -> tuple[list[str | int], str] | None:
    """The JSON path and a one-line message, or None when another error says it already."""
    where, inst, keyword = err.where, err.instance, err.keyword
    in_then = "then" in err.schema_path
    in_else = "else" in err.schema_path
    if keyword in {"if", "$ref", "anyOf"} and not (where and where[-1] == "valid_score"):
        return None  # a wrapper: its branch reports the problem
    if keyword == "required":
        missing = sorted(set(err.keyword_value) - set(inst))
        if in_else and missing == ["task_category"]:
            return [*where, "task_category"], "a leaf (no sub_tasks) needs a task_category"
        return [*where, missing[0]], "required field is missing"
    if keyword == "additionalProperties":
        extra = sorted(set(inst) - err.properties)
        return [*where, extra[0]] if extra else where, "unknown field (not part of the format)"
    if keyword == "not" and in_then:
        return [*where, "check"], "a check belongs on a leaf, not on a node with sub_tasks"
    if keyword == "const" and in_then:
        return where, (
            f"an internal node (one with sub_tasks) must have task_category null, found {inst!r}"
        )
    if keyword == "enum" and in_else:
        if inst is not None:
            return None  # an unknown category: the property's own enum reports it
        allowed = ", ".join(repr(x) for x in err.keyword_value)
        return where, f"a leaf (no sub_tasks) needs a task_category, one of {allowed}; found null"
    if keyword == "enum":
        allowed = ", ".join(json.dumps(x) for x in err.keyword_value)
        return where, f"unknown value {json.dumps(inst)}; expected one of {allowed}"
    if keyword == "type":
        return where, f"expected {err.keyword_value}, found {_json_type(inst)}"
    if keyword in {"minimum", "maximum", "exclusiveMinimum"}:
        op = {"minimum": "≥", "maximum": "≤", "exclusiveMinimum": ">"}[keyword]
        return where, f"must be {op} {err.keyword_value}, found {_show_number(inst)}"
    if where and where[-1] == "valid_score":
        return where, f"expected a boolean, found {json.dumps(inst)}"
    return where, err.text


def _schema_issues(data: Any, kind: TreeKind, file: str) -> Iterator[Issue]:
    seen: set[tuple[str, str]] = set()
    for err in _errors(data, kind):
        found = _message(err, kind)
        if found is None:
            continue
        where, message = found
        key = (json_path(where), message)
        if key not in seen:
            seen.add(key)
            yield Issue(file=file, path=key[0], message=message)


class _BadNumber:
    """A JSON number no tree field can hold (NaN, Infinity, 1e400, a 500-digit integer)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def describe(self) -> str:
        text = self.text
        if text.lstrip("-").isdigit() and len(text) > 24:
            return f"number out of range: found an integer of {len(text.lstrip('-'))} digits"
        if len(text) > 24:
            text = text[:20] + "…"
        return f"expected a finite number, found {text}"


def parse_tree_json(text: str, *, file: str | Path) -> Any:
    """Parse JSON text; numbers no tree can hold become markers that ``_number_issues``
    reports (Python's json module would give NaN, inf, or fail on a 5,000-digit integer)."""
    return _parse(text, file)[0]


def _parse(text: str, file: str | Path) -> tuple[Any, bool]:
    """(data, whether it holds a bad-number marker). Integers are parsed by the C scanner;
    only floats and the rare NaN/Infinity constants go through a hook."""
    markers: list[_BadNumber] = []

    def bad(literal: str) -> _BadNumber:
        markers.append(_BadNumber(literal))
        return markers[-1]

    def parse_float(literal: str) -> float | _BadNumber:
        value = float(literal)
        return value if math.isfinite(value) else bad(literal)

    def parse_int(literal: str) -> int | _BadNumber:
        return bad(literal) if len(literal.lstrip("-")) > 300 else int(literal)

    try:
        try:
            data = json.loads(text, parse_float=parse_float, parse_constant=bad)
        except json.JSONDecodeError:
            raise
        except ValueError:  # an integer past Python's conversion limit (4,300 digits)
            data = json.loads(
                text, parse_float=parse_float, parse_constant=bad, parse_int=parse_int
            )
    except json.JSONDecodeError as exc:
        raise InputError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", file=file
        ) from None
    except RecursionError:
        raise InputError(
            f"the tree is nested too deeply to parse; paperbench refuses trees deeper than "
            f"{MAX_DEPTH} levels",
            file=file,
        ) from None
    return data, bool(markers)


def _bad_number(value: Any) -> _BadNumber | None:
    if isinstance(value, _BadNumber):
        return value
    if isinstance(value, float) and not math.isfinite(value):  # data parsed elsewhere
        return _BadNumber(repr(value).replace("nan", "NaN").replace("inf", "Infinity"))
    return None


def _number_issues(data: Any, file: str) -> tuple[list[Issue], set[str]]:
    """Report and neutralise bad numbers (replaced by 0 so the schema checks the rest)."""
    issues: list[Issue] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, where = stack.pop()
        items: Iterable[tuple[Any, Any]]
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        else:
            continue
        for key, item in list(items):
            bad = _bad_number(item)
            if bad is not None:
                issues.append(
                    Issue(file=file, path=json_path([*where, key]), message=bad.describe())
                )
                value[key] = 0
            elif isinstance(item, dict | list):
                stack.append((item, (*where, key)))
    issues.sort(key=lambda i: i.path)
    return issues, {i.path for i in issues}


def depth_error(data: Any) -> str | None:
    """The JSON path of a node deeper than MAX_DEPTH, found without recursion (or None)."""
    stack: list[tuple[Any, str, int]] = [(data, "$", 1)]
    while stack:
        node, where, depth = stack.pop()
        if not isinstance(node, dict):
            continue
        subs = node.get("sub_tasks")
        if isinstance(subs, list) and subs:
            if depth == MAX_DEPTH:
                return f"{where}.sub_tasks[0]"
            stack.extend((sub, f"{where}.sub_tasks[{i}]", depth + 1) for i, sub in enumerate(subs))
    return None


def _pydantic_message(err: ErrorDetails) -> str:
    kind = err["type"]
    msg = str(err["msg"])
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    return msg[:1].lower() + msg[1:]


def model_issues(exc: ValidationError, file: str) -> list[Issue]:
    """What the model found beyond the schema (the schema and model agree, so rarely any)."""
    out: list[Issue] = []
    for err in exc.errors(include_url=False):
        loc = [part for part in err["loc"] if isinstance(part, int) or "[" not in part]
        issue = Issue(file=file, path=json_path(loc), message=_pydantic_message(err))
        if issue not in out:
            out.append(issue)
    return out


def detect_kind(data: Any) -> TreeKind:
    return (
        "graded"
        if isinstance(data, dict) and ("score" in data or "graded_task_tree" in data)
        else "rubric"
    )


_KIND_NAMES = {"rubric": "a rubric", "graded": "a graded tree"}


def _wrong_kind(found: TreeKind, expected: TreeKind, file: str) -> Issue:
    if expected == "graded":
        hint = "it has no score; pass a grade file such as grade.json or expected_result.json"
    else:
        hint = "it has scores; pass the rubric file, or `rubric show` the graded tree itself"
    return Issue(
        file=file,
        path="$",
        message=f"expected {_KIND_NAMES[expected]}, found {_KIND_NAMES[found]} ({hint})",
    )


def inspect_data(
    data: Any, *, file: str, kind: TreeKind | None = None, scan_numbers: bool = True
) -> tuple[TaskNode | None, list[Issue]]:
    """Validate parsed JSON against the schema, then build the tree: (tree or None, issues).

    ``kind`` is what the caller expects; without it the kind is detected (a ``score`` at the
    root makes a graded tree).
    """
    found = detect_kind(data)
    if kind is not None and found != kind:
        return None, [_wrong_kind(found, kind, file)]
    kind = found
    if (
        kind == "graded"
        and isinstance(data, dict)
        and "graded_task_tree" in data
        and "id" not in data
    ):
        data = data["graded_task_tree"]  # PaperBench's grade files may wrap the tree
    too_deep = depth_error(data)
    if too_deep is not None:
        msg = f"the tree is deeper than {MAX_DEPTH} levels; paperbench refuses deeper trees"
        return None, [Issue(file=file, path=too_deep, message=msg)]
    issues: list[Issue] = []
    neutralised: set[str] = set()
    if scan_numbers:
        issues, neutralised = _number_issues(data, file)
    issues += [i for i in _schema_issues(data, kind, file) if i.path not in neutralised]
    if issues:
        return None, issues
    model = GradedTaskNode if kind == "graded" else TaskNode
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, model_issues(exc, file)


def validate_data(data: Any, *, file: str, kind: TreeKind | None = None) -> list[Issue]:
    """Every problem of a tree's JSON data, each with its JSON path (empty: valid)."""
    return inspect_data(data, file=file, kind=kind)[1]


def check_file_issues(tree: TaskNode, *, file: str | Path) -> list[Issue]:
    """Every ``check.files`` source must exist and stay inside the rubric file's folder."""
    root = Path(file).parent.resolve()
    out: list[Issue] = []
    for path, leaf in iter_leaves(tree):
        if leaf.check is None:
            continue
        for target, source in leaf.check.files.items():
            where = json_path([*_node_loc(path), "check", "files", target])
            resolved = (root / source).resolve()
            if not resolved.is_relative_to(root):
                message = (
                    f"{source!r} is outside the rubric's folder {root}; check files must "
                    "sit beside the rubric (e.g. checks/<paper>/...)"
                )
            elif not resolved.is_file():
                message = f"{source!r} not found (looked for {resolved})"
            else:
                continue
            out.append(Issue(file=str(file), path=where, message=message))
    return out


def _node_loc(path: tuple[int, ...]) -> list[str | int]:
    loc: list[str | int] = []
    for index in path:
        loc += ["sub_tasks", index]
    return loc


def inspect_text(
    text: str, *, file: str | Path, kind: TreeKind | None = None
) -> tuple[TaskNode | None, list[Issue]]:
    try:
        data, has_markers = _parse(text, file)
    except InputError as exc:
        return None, [Issue(file=str(file), path="$", message=exc.message)]
    return inspect_data(data, file=str(file), kind=kind, scan_numbers=has_markers)


def inspect_file(
    path: str | Path, kind: TreeKind | None = None
) -> tuple[TaskNode | None, list[Issue]]:
    """Read, validate against the schema and load one file in a single pass; a rubric's
    check files are checked too (a graded tree's are relative to its rubric, not to it)."""
    try:
        text = read_text(path)
    except InputError as exc:
        return None, [Issue(file=str(path), path="", message=exc.message)]
    tree, issues = inspect_text(text, file=path, kind=kind)
    if tree is not None and not isinstance(tree, GradedTaskNode):
        issues = check_file_issues(tree, file=path)
    return tree, issues


def validate_file(path: str | Path, kind: TreeKind | None = None) -> list[Issue]:
    """Every problem in one rubric or graded-tree file (empty when it is valid)."""
    return inspect_file(path, kind)[1]


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; folders searched for ``*.json`` (published ``*.schema.json`` skipped).

    Raises:
        InputError: nothing to read (no path, or only folders without ``.json`` files).
    """
    given = [Path(p) for p in paths]
    out: list[Path] = []
    for p in given:
        if p.is_dir():
            out.extend(f for f in sorted(p.rglob("*.json")) if not f.name.endswith(".schema.json"))
        else:
            out.append(p)
    if not out:
        raise InputError(
            "no .json files found; pass rubric or graded-tree files, or folders holding them",
            file=", ".join(map(str, given)) or None,
        )
    return out
