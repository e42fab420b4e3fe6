"""Judge configs as data: YAML files in the ``judge/`` catalog (shipped in the wheel) or anywhere.

``load_judge_config("simple")`` loads ``judge/simple.yaml`` from the catalog;
``load_judge_config("path/to/mine.yaml")`` loads any file. Unknown keys and bad values are
one :class:`~paperbench.errors.ConfigError` line naming the file and the key path. Prompt
files are named relative to the YAML's folder, so a config outside the catalog can bring its
own prompts; a prompt file not found there is the catalog's (a YAML anywhere uses the built-in
prompts it does not override).

The :class:`JudgeIdentity` (config name, mode, SHA-256 over the resolved config and the bytes
of every prompt file it uses, the model of each role) is stored with every graded tree: two
scores are comparable only when their identities match.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from paperbench._config_io import (
    catalog_entries,
    read_yaml_mapping,
    resolve_catalog_ref,
    validation_error_line,
)
from paperbench.errors import ConfigError

DEFAULT_LEAVES_AT_ONCE = 16
"""Leaves (or batches of leaves) one grading sends at once."""


def catalog_dir() -> Path:
    """The ``judge/`` catalog: inside the installed package, or the repository's folder."""
    return Path(str(resources.files("paperbench") / "_catalog" / "judge"))


class RoleModel(BaseModel):
    """The model one role calls; a plain ``provider/model`` string in YAML is the same."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(pattern=r"^[^/\s]+/\S+$")
    """``provider/model``, e.g. ``openai/o3-mini``."""
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"model": value} if isinstance(value, str) else value


class Budgets(BaseModel):
    """Token budgets per call. PaperBench keeps 10k tokens free in the window and 2k more
    below its file budget, gives the log up to half the window and shows at most 10 files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context_window: int = Field(default=128_000, ge=4_096)
    """The grading model's window in tokens (nothing is sent that it cannot hold)."""
    answer_tokens: int = Field(default=10_000, ge=256)
    """Room kept for the answer (reasoning included)."""
    answer_tokens_per_criterion: int = Field(default=1_500, ge=0)
    """The default mode's answer room grows by this much for every criterion of a batch past
    the first (each has a verdict of its own); the context's budget shrinks to match."""

    def answer_room(self, criteria: int) -> int:
        """Room for the answer of a call that grades ``criteria`` criteria."""
        return self.answer_tokens + self.answer_tokens_per_criterion * max(criteria - 1, 0)

    submission_tokens: int | None = Field(default=None, ge=0)
    """Cap on the submission content (files, script, log) of one call; None: what the window
    leaves. The default mode's savings come from a small cap."""
    max_files: int | None = Field(default=10, ge=1)
    map_tokens: int = Field(default=20_000, ge=100)
    """The default mode's submission map (the prefix of its shortlist calls) is capped at
    this: past it, fewer symbols per file, then paths left out with a note."""
    script_share: float = Field(default=0.15, ge=0, le=1)
    log_share: float = Field(default=0.4, ge=0, le=1)
    max_usd: float | None = Field(default=None, gt=0)
    """Stop starting calls once the grading has cost this much (leaves left are invalid)."""

    def submission_budget(self, fixed_tokens: int, extra: int = 0) -> int:
        """Tokens left for submission content in one call whose other parts (instructions,
        paper, addenda, criteria) take ``fixed_tokens``: the window less those and the
        answer's room, capped at ``submission_tokens`` (plus ``extra``); 0 when nothing is
        left."""
        room = self.context_window - self.answer_tokens - fixed_tokens
        if self.submission_tokens is not None:
            room = min(room, self.submission_tokens + extra)
        return max(room, 0)


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    """Defaults to the file's stem."""
    description: str = ""
    coverage_threshold: float = Field(default=0.9, ge=0, le=1)
    """Below this share of validly graded weight the paper is reported unscored."""
    samples: int = Field(default=1, ge=1)
    """Verdicts per leaf (majority vote when more than one)."""
    checks: Literal["run", "llm"] = "run"
    """Leaves with a ``check``: run the command in a sandbox, or grade them like any leaf."""
    batch: bool = False
    """Send the model calls through the providers' batch APIs, at half price (one batch per
    step across the leaves); slower (a batch may take up to 24 h). Not part of the judge's
    identity: it changes where the calls are sent, not what they ask."""


class PromptFiles(BaseModel):
    """Prompt templates (Markdown with Jinja2), relative to the config file's folder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str = "prompts/grade_system.md"
    paper: str = "prompts/paper.md"
    leaf: str = "prompts/grade_leaf.md"
    ranking: str | None = None
    parsing: str | None = None
    batch: str | None = None
    """The simple mode's grading call: one or several sibling leaves, a verdict each."""
    shortlist: str | None = None
    """The simple mode's shortlist call: the submission map, then criteria; paths for each."""


class Roles(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ranking: RoleModel | None = None
    grading: RoleModel
    parsing: RoleModel | None = None


class SimpleConfig(_Common):
    """The default: lexical file choice, verdict and score in one structured call."""

    mode: Literal["simple"]
    roles: Roles
    budgets: Budgets = Field(default_factory=lambda: Budgets(submission_tokens=12_000))
    prompts: PromptFiles = Field(
        default_factory=lambda: PromptFiles(
            batch="prompts/grade_batch.md", shortlist="prompts/shortlist.md"
        )
    )
    batch_leaves: int = Field(default=8, ge=1)
    """Sibling leaves of one category graded in one call, a verdict each."""
    shortlist_batch: int = Field(default=16, ge=0)
    """Leaves of one category whose files one shortlist call names (0: no shortlist call,
    files by the lexical index alone)."""
    shortlist_files: int = Field(default=6, ge=1)
    """Paths the shortlist call names per criterion, at most."""
    must_have_shortlisted: int = Field(default=2, ge=0)
    """A leaf's first this-many shortlisted files must be in the context of the call that
    grades it (with its top lexical file, unless one of them scores at least half as high on
    the criterion's words): a batch that cannot hold them all is split."""
    room_to_need: bool = False
    """A call's submission room is what its leaves' must-have files take whole (with, for
    Result Analysis, the files the run wrote) plus the script's and the log's shares, never
    past ``budgets.submission_tokens``: a small batch is not filled up with lexical extras.
    False: every call is given ``budgets.submission_tokens``."""

    @model_validator(mode="before")
    @classmethod
    def _batch_template(cls, data: Any) -> Any:
        """The simple mode grades one or several leaves per call with ``grade_batch.md`` and
        shortlists files with ``shortlist.md``."""
        if isinstance(data, dict) and isinstance(data.get("prompts"), dict):
            defaults = {"batch": "prompts/grade_batch.md", "shortlist": "prompts/shortlist.md"}
            data = {**data, "prompts": {**defaults, **data["prompts"]}}
        return data

    @model_validator(mode="after")
    def _roles(self) -> SimpleConfig:
        if self.roles.ranking is not None:
            raise ValueError("roles.ranking: the simple mode ranks files without a model")
        return self


class FaithfulConfig(_Common):
    """PaperBench's SimpleJudge: rank, grade and parse, three calls per leaf."""

    mode: Literal["simple-faithful"]
    roles: Roles
    budgets: Budgets = Field(default_factory=Budgets)
    prompts: PromptFiles = Field(
        default_factory=lambda: PromptFiles(
            ranking="prompts/rank_files.md", parsing="prompts/parse_verdict.md"
        )
    )

    @model_validator(mode="before")
    @classmethod
    def _default_templates(cls, data: Any) -> Any:
        """A ``prompts:`` block overrides only the prompts it names (ranking and parsing
        keep theirs)."""
        if isinstance(data, dict) and isinstance(data.get("prompts"), dict):
            defaults = {"ranking": "prompts/rank_files.md", "parsing": "prompts/parse_verdict.md"}
            data = {**data, "prompts": {**defaults, **data["prompts"]}}
        return data

    @model_validator(mode="after")
    def _roles(self) -> FaithfulConfig:
        missing = [r for r in ("ranking", "parsing") if getattr(self.roles, r) is None]
        if missing:
            raise ValueError(f"roles.{missing[0]}: the simple-faithful mode needs a model here")
        if self.prompts.ranking is None or self.prompts.parsing is None:
            raise ValueError("prompts: the simple-faithful mode needs ranking and parsing")
        return self


class DummyConfig(_Common):
    """Every leaf scores 1, without a model: for smoke tests."""

    mode: Literal["dummy"]


class RandomConfig(_Common):
    """Every leaf scores 0 or 1 at random (seeded), without a model: for smoke tests."""

    mode: Literal["random"]
    seed: int = 0


JudgeConfig = Annotated[
    SimpleConfig | FaithfulConfig | DummyConfig | RandomConfig, Field(discriminator="mode")
]
"""A judge config of any mode, chosen by its ``mode`` key."""
_ADAPTER: TypeAdapter[SimpleConfig | FaithfulConfig | DummyConfig | RandomConfig] = TypeAdapter(
    JudgeConfig
)


class JudgeIdentity(BaseModel):
    """What makes two scores comparable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    mode: str
    sha256: str
    """Over the resolved config (canonical JSON) and every prompt file's name and bytes."""
    models: dict[str, str] = Field(default_factory=dict)
    """role → ``provider/model``."""


class LoadedJudge(BaseModel):
    """A validated config, where it came from, its prompts' text and its identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: SimpleConfig | FaithfulConfig | DummyConfig | RandomConfig
    path: Path
    prompts: dict[str, str] = Field(default_factory=dict)
    """role → template text (system, leaf, ranking, parsing)."""
    identity: JudgeIdentity


_MODES = ("simple", "simple-faithful", "dummy", "random")


def _error_line(exc: ValidationError) -> tuple[str, str]:
    where, message = validation_error_line(exc, tag="mode", tags=_MODES, readme="judge/README.md")
    if message.startswith(("roles.", "prompts")) and ":" in message:
        field, _, rest = message.partition(":")
        return where + "".join(f".{part}" for part in field.split(".")), rest.strip()
    return where, message


def resolve_config_path(ref: str | Path) -> Path:
    """A catalog name or a path to a YAML file (:func:`resolve_catalog_ref`)."""
    return resolve_catalog_ref(ref, catalog_dir(), kind="judge", flag="--judge")


def catalog_names() -> list[str]:
    """The names of the catalog's judge configs (``simple``, ``simple-faithful``, ...)."""
    return catalog_entries(catalog_dir())


def load_judge_config(ref: str | Path) -> LoadedJudge:
    """Load, validate and identify a judge config.

    Raises:
        ConfigError: the file is missing, is not YAML, has an unknown key or a bad value, or
            names a prompt file that does not exist (one line: file, key path, what to do).
    """
    path = resolve_config_path(ref)
    data = read_yaml_mapping(path, expected="mode, roles, ...")
    try:
        config = _ADAPTER.validate_python(data)
    except ValidationError as exc:
        where, message = _error_line(exc)
        raise ConfigError(message, file=path, path=where) from exc
    if config.name is None:
        config = config.model_copy(update={"name": path.stem})
    prompts = _read_prompts(config, path)
    return LoadedJudge(
        config=config, path=path, prompts=prompts, identity=_identity(config, path, prompts)
    )


def _prompt_files(
    config: SimpleConfig | FaithfulConfig | DummyConfig | RandomConfig,
) -> dict[str, str]:
    if isinstance(config, SimpleConfig | FaithfulConfig):
        named = config.prompts.model_dump()
        return {role: name for role, name in named.items() if name is not None}
    return {}


def _read_prompts(
    config: SimpleConfig | FaithfulConfig | DummyConfig | RandomConfig, path: Path
) -> dict[str, str]:
    out: dict[str, str] = {}
    for role, name in _prompt_files(config).items():
        file = _prompt_path(path, name)
        try:
            out[role] = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"prompt file {name} cannot be read ({exc.__class__.__name__}; looked in "
                f"{path.parent} and in the built-in prompts); paths are relative to the "
                "config's folder",
                file=path,
                path=f"$.prompts.{role}",
            ) from exc
    return out


def _prompt_path(config_path: Path, name: str) -> Path:
    """A prompt file beside the config (relative to its folder), else the catalog's own."""
    mine = config_path.parent / name
    if mine.is_file():
        return mine
    builtin = catalog_dir() / name
    return builtin if builtin.is_file() else mine


def _identity(
    config: SimpleConfig | FaithfulConfig | DummyConfig | RandomConfig,
    path: Path,
    prompts: dict[str, str],
) -> JudgeIdentity:
    digest = hashlib.sha256()
    plain = config.model_dump(mode="json", exclude={"batch"})
    digest.update(json.dumps(plain, sort_keys=True).encode())
    for role, name in sorted(_prompt_files(config).items()):
        digest.update(f"\x00{role}\x00{name}\x00".encode())
        digest.update(_prompt_path(path, name).read_bytes())
    models: dict[str, str] = {}
    if isinstance(config, SimpleConfig | FaithfulConfig):
        for role in ("ranking", "grading", "parsing"):
            chosen: RoleModel | None = getattr(config.roles, role)
            if chosen is not None:
                models[role] = chosen.model
    return JudgeIdentity(
        name=config.name or path.stem, mode=config.mode, sha256=digest.hexdigest(), models=models
    )
