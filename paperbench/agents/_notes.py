"""The "additional notes" appended to the task instructions of the PaperBench-style agents:
the hardware, the time the agent has, and the API keys it is given.

:func:`additional_notes` fills the template (``{gpu}``, ``{time_limit}``, ``{api_keys}``;
by default the catalog's ``prompts/paperbench_additional_notes.md``). It is pure: the caller
says what the agent really has (the GPU model, its hours, the names of the key variables set
in its sandbox), so the notes never promise what the run does not give.
"""

from __future__ import annotations

from importlib import resources

NOTES_TEMPLATE = "paperbench_additional_notes.md"
"""The default template, in the catalog's ``agents/prompts/``."""

GPU_LINE = "You have a GPU ({gpu}) with its drivers installed."
NO_GPU_LINE = "You have no GPU: plan your experiments for CPUs."
TIME_LINE = (
    "You have {hours} hours for this task, and the time your programs run counts towards "
    "them. Develop your solution step by step within that time; a good solution to a task "
    "this hard is expected to need all of it."
)
NO_TIME_LINE = "Work until you have reproduced every core contribution of the paper."
KEYS_LINE = (
    "You are given API keys for the services this paper needs, as environment variables in "
    "your environment: {names}. The same variables are set when your reproduce.sh is run, so "
    "never write a key into your submission."
)
NO_KEYS_LINE = "You are given no API keys."


def default_template() -> str:
    """The catalog's additional-notes template."""
    path = resources.files("paperbench") / "_catalog" / "agents" / "prompts" / NOTES_TEMPLATE
    return path.read_text(encoding="utf-8")


def _hours(hours: float) -> str:
    return f"{hours:g}" if hours == round(hours, 3) else f"{round(hours, 3):g}"


def additional_notes(
    gpu: str | None,
    hours: float | None,
    key_names: list[str],
    *,
    template: str | None = None,
) -> str:
    """The notes for an agent with ``gpu`` (its model name, e.g. ``NVIDIA A10``; None: no
    GPU), ``hours`` of time (None: no time limit) and the environment variables ``key_names``
    holding its API keys (names only, never values), from ``template`` (default: the
    catalog's). Placeholders: ``{gpu}``, ``{time_limit}``, ``{api_keys}``.
    """
    text = default_template() if template is None else template
    names = ", ".join(f"`{name}`" for name in sorted(set(key_names)))
    fills = {
        "{gpu}": GPU_LINE.format(gpu=gpu) if gpu else NO_GPU_LINE,
        "{time_limit}": TIME_LINE.format(hours=_hours(hours)) if hours else NO_TIME_LINE,
        "{api_keys}": KEYS_LINE.format(names=names) if names else NO_KEYS_LINE,
    }
    for placeholder, value in fills.items():
        text = text.replace(placeholder, value)
    return text
