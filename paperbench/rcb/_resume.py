"""``rcb run --resume OUT``: the run's own options (OUT/run.json); an option given on the
command line that differs from the run's is named, and nothing runs."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from paperbench._io import read_json
from paperbench.errors import InputError, UsageError
from paperbench.rcb._runner import RcbRunOptions

TAKEN_ON_RESUME = frozenset({"budget_dollars"})
"""Fields a resume takes from the command line (a higher budget continues a run the budget
stopped); every other field is the run's."""


def stored_options(out: Path) -> RcbRunOptions:
    """OUT/run.json.

    Raises:
        UsageError: OUT holds no RCB run.
        InputError: its run.json is not an RCB run's (naming the file).
    """
    path = out / "run.json"
    if not path.is_file():
        raise UsageError(f"--resume: {out} holds no RCB run (no run.json); drop --resume")
    try:
        return RcbRunOptions.model_validate(read_json(path))
    except ValidationError as exc:
        raise InputError(f"not an RCB run: {exc.errors()[0]['msg']}", file=path) from None


def _shown(field: str, value: object) -> str:
    if field == "with_paper":
        return "with the paper" if value else "without the paper"
    if value is None:
        return "not given"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def resumed_options(out: Path, given: dict[str, tuple[str, object]]) -> RcbRunOptions:
    """The options of the run in ``out``, with those a resume takes from ``given`` (field →
    (flag, value), the options given on the command line).

    Raises:
        UsageError: a given option differs from the run's (each named with both values), or
            ``out`` holds no run.
    """
    before = stored_options(out)
    stored = before.model_dump()
    differ = [
        f"{flag} {_shown(field, value)} (the run's: {_shown(field, stored[field])})"
        for field, (flag, value) in given.items()
        if field not in TAKEN_ON_RESUME and value != stored[field]
    ]
    if differ:
        raise UsageError(
            f"--resume takes the run's own options and {out} was run with others: "
            f"{'; '.join(differ)}; drop them to continue it, or start a new run with --out"
        )
    taken = {f: v for f, (_, v) in given.items() if f in TAKEN_ON_RESUME}
    return before.model_copy(update=taken)
