"""Paper bundles and where they come from (see the package's docstring for the layouts)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from paperbench._io import json_path, read_text
from paperbench.errors import LfsPointerError, PaperbenchError, PaperError, UsageError
from paperbench.rubric import TaskNode, load_rubric
from paperbench.sandbox import Blacklist

DATA_DIR_ENV = "PAPERBENCH_DATA_DIR"
"""The environment variable naming a PaperBench data directory (as ``--data-dir``)."""
HOME_ENV = "PAPERBENCH_HOME"
"""The environment variable naming the folder that holds this repository's papers/."""
LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/v1"
"""How a Git LFS pointer file begins."""
LFS_POINTER_MESSAGE = (
    "is a Git LFS pointer, not the file's content: run 'git lfs pull' in the data "
    "directory's repository"
)
"""The one wording of this fault, in every command."""

Layout = Literal["repo", "data-dir"]
"""Which layout a paper was read from: this repository's or a PaperBench data directory."""


class PaperConfig(BaseModel):
    """config.yaml of a paper. Other keys found in PaperBench's files are kept but unused."""

    model_config = ConfigDict(extra="allow")

    id: str
    title: str


def is_lfs_pointer(path: Path) -> bool:
    """Whether ``path`` is a Git LFS pointer file (not the content it points to)."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(LFS_POINTER_PREFIX)) == LFS_POINTER_PREFIX
    except OSError:
        return False


def read_paper_text(path: Path) -> str:
    """Read a text file of a paper, refusing a Git LFS pointer with how to fix it."""
    if is_lfs_pointer(path):
        raise LfsPointerError(LFS_POINTER_MESSAGE, file=path)
    return read_text(path)


def parse_blacklist(text: str, *, file: str | Path | None = None) -> list[str]:
    """URLs of a blacklist file, read by the sandbox's parser (the one the egress proxy
    enforces): one a line, '#' comments, the single word 'none' for an empty list.

    Raises:
        PaperError: a line is not one URL with a host, or 'none' beside URLs.
    """
    try:
        return Blacklist.parse(text).urls
    except ValueError as exc:
        raise PaperError(str(exc), file=file) from None


class Paper(BaseModel):
    """Where one paper's files are. Texts are read on demand."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    title: str
    layout: Layout
    folder: Path
    paper_md: Path
    paper_pdf: Path | None = None
    assets: Path | None = None
    addendum: Path | None = None
    judge_addendum: Path | None = None
    blacklist_file: Path | None = None
    rubric_file: Path

    @property
    def checks_root(self) -> Path:
        """Check leaves' ``files`` are relative to the folder holding the rubric file."""
        return self.rubric_file.parent

    def paper_text(self) -> str:
        return read_paper_text(self.paper_md)

    def addendum_text(self) -> str:
        return read_paper_text(self.addendum) if self.addendum else ""

    def judge_addendum_text(self) -> str:
        return read_paper_text(self.judge_addendum) if self.judge_addendum else ""

    def blacklist(self) -> list[str]:
        if self.blacklist_file is None:
            return []
        return parse_blacklist(read_text(self.blacklist_file), file=self.blacklist_file)

    def rubric(self) -> TaskNode:
        return load_rubric(self.rubric_file)

    @property
    def paper_md_is_lfs_pointer(self) -> bool:
        return is_lfs_pointer(self.paper_md)

    def lfs_pointers(self, *, texts_only: bool = False) -> list[Path]:
        """The bundle's files that are Git LFS pointers, not their content: the texts the
        agent and the judge read (paper.md, the addenda), and unless ``texts_only`` every
        other file (paper.pdf, config.yaml, the rubric, the blacklist, the assets)."""
        files = [self.paper_md, self.addendum, self.judge_addendum]
        if not texts_only:
            files += [self.paper_pdf, self.folder / "config.yaml"]
            files += [self.rubric_file, self.blacklist_file]
            if self.assets is not None and self.assets.is_dir():
                files += sorted(p for p in self.assets.rglob("*") if p.is_file())
        return [f for f in files if f is not None and is_lfs_pointer(f)]

    def require_usable(self, *, texts_only: bool = False) -> None:
        """Refuse, before any work, a bundle an agent or a judge cannot use: a file that is
        a Git LFS pointer (see :meth:`lfs_pointers`), or unless ``texts_only`` a rubric
        that does not load.

        Raises:
            LfsPointerError: the first pointer, with how many more there are.
            RubricError: the rubric's file, JSON path and problem.
        """
        pointers = self.lfs_pointers(texts_only=texts_only)
        if pointers:
            more = len(pointers) - 1
            also = f" (and {more} more file{'s' if more > 1 else ''} of {self.folder})"
            raise LfsPointerError(LFS_POINTER_MESSAGE + (also if more else ""), file=pointers[0])
        if not texts_only:
            self.rubric()


def _existing(path: Path) -> Path | None:
    return path if path.exists() else None


def _read_config(folder: Path) -> PaperConfig | None:
    config_file = folder / "config.yaml"
    if not config_file.exists():
        return None
    try:
        data = yaml.safe_load(read_paper_text(config_file))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise PaperError(f"invalid YAML{where}", file=config_file) from None
    if not isinstance(data, dict):
        raise PaperError("expected a mapping with 'id' and 'title'", file=config_file)
    try:
        return PaperConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        raise PaperError(
            str(err["msg"]).lower(), file=config_file, path=json_path(err["loc"])
        ) from None


def _require_paper_md(folder: Path) -> Path:
    paper_md = folder / "paper.md"
    if not paper_md.is_file():
        raise PaperError("paper directory has no paper.md", file=folder)
    return paper_md


def _bundle(folder: Path, layout: Layout, rubric_file: Path, blacklist_file: Path) -> Paper:
    config = _read_config(folder)
    return Paper(
        id=config.id if config else folder.name,
        title=config.title if config else folder.name,
        layout=layout,
        folder=folder,
        paper_md=_require_paper_md(folder),
        paper_pdf=_existing(folder / "paper.pdf"),
        assets=_existing(folder / "assets"),
        addendum=_existing(folder / "addendum.md"),
        judge_addendum=_existing(folder / "judge.addendum.md"),
        blacklist_file=_existing(blacklist_file),
        rubric_file=rubric_file,
    )


def _config_id(folder: Path) -> str | None:
    """The ``id`` of a folder's config.yaml; None when it has none or it does not load."""
    try:
        config = _read_config(folder)
    except PaperbenchError:
        return None
    return config.id if config else None


def folder_of(papers: Path, name: str) -> str | None:
    """The folder under ``papers`` of the paper named ``name``: its folder name or the
    ``id`` of its config.yaml (PaperBench's ``stochastic-interpolants`` folder holds the
    paper ``stochastic-interpolant``); None when no paper has that name."""
    if not name or "/" in name or name in (".", ".."):
        return None
    if (papers / name).is_dir():
        return name
    if not papers.is_dir():
        return None
    for folder in sorted(p for p in papers.iterdir() if p.is_dir()):
        if _config_id(folder) == name:
            return folder.name
    return None


def _paper_folder(papers: Path, paper_id: str) -> Path:
    found = folder_of(papers, paper_id)
    if found is None:
        raise PaperError(
            f"no paper {paper_id!r} (no folder of that name, nor a config.yaml with that id)",
            file=papers / paper_id,
        )
    return papers / found


def load_repo_paper(root: Path, paper_id: str) -> Paper:
    """A paper in this repository's layout (``root`` holds papers/, rubrics/, blacklists/)."""
    folder = _paper_folder(root / "papers", paper_id)
    rubric_file = root / "rubrics" / f"{folder.name}.json"
    if not rubric_file.is_file():
        raise PaperError(f"paper {paper_id!r} has no rubric", file=rubric_file)
    return _bundle(folder, "repo", rubric_file, root / "blacklists" / f"{folder.name}.txt")


def load_data_dir_paper(data_dir: Path, paper_id: str) -> Paper:
    """A paper in a PaperBench data directory (``data_dir/papers/<id>/``)."""
    folder = _paper_folder(data_dir / "papers", paper_id)
    rubric_file = folder / "rubric.json"
    if not rubric_file.is_file():
        raise PaperError("paper directory has no rubric.json", file=folder)
    return _bundle(folder, "data-dir", rubric_file, folder / "blacklist.txt")


def find_repo_root(start: Path | None = None) -> Path | None:
    """The folder holding this repository's papers/ and rubrics/: ``PAPERBENCH_HOME``, the
    nearest ancestor of the working directory that has both, or the source checkout."""
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env)
    here = (start or Path.cwd()).resolve()
    source = Path(__file__).resolve().parents[2]
    for candidate in [here, *here.parents, source]:
        if (candidate / "papers").is_dir() and (candidate / "rubrics").is_dir():
            return candidate
    return None


class PaperSource(BaseModel):
    """Where papers come from: a PaperBench data directory, or this repository's layout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_dir: Path | None = None
    repo_root: Path | None = None

    @classmethod
    def resolve(cls, data_dir: Path | None = None) -> PaperSource:
        """``--data-dir``, else ``PAPERBENCH_DATA_DIR``, else this repository's bundled papers."""
        chosen = data_dir or (
            Path(os.environ[DATA_DIR_ENV]) if os.environ.get(DATA_DIR_ENV) else None
        )
        if chosen is not None:
            if not (chosen / "papers").is_dir():
                raise PaperError(
                    "not a PaperBench data directory (expected a papers/ folder inside)",
                    file=chosen,
                )
            return cls(data_dir=chosen)
        root = find_repo_root()
        if root is None:
            raise UsageError(
                "no papers found: pass --data-dir DIR (a PaperBench data directory), set "
                f"{DATA_DIR_ENV}, or run from a paperbench checkout"
            )
        return cls(repo_root=root)

    @property
    def papers_folder(self) -> Path:
        base = self.data_dir if self.data_dir is not None else self.repo_root
        assert base is not None
        return base / "papers"

    def paper_ids(self) -> list[str]:
        """The paper folders' names."""
        return sorted(p.name for p in self.papers_folder.iterdir() if p.is_dir())

    def folder_of(self, name: str) -> str | None:
        """The folder of the paper named ``name`` (its folder name or its config.yaml's
        ``id``); None when no paper has that name."""
        return folder_of(self.papers_folder, name)

    def split_files(self, name: str) -> list[Path]:
        if self.data_dir is not None:
            return [
                self.data_dir / "splits" / f"{name}.txt",
                self.data_dir.parent / "experiments" / "splits" / f"{name}.txt",
            ]
        assert self.repo_root is not None
        return [self.repo_root / "splits" / f"{name}.txt"]

    def split(self, name: str) -> list[str]:
        """Paper ids of a named split; ``all`` without a file means every paper folder."""
        for candidate in self.split_files(name):
            if candidate.is_file():
                return [
                    line.strip()
                    for line in read_text(candidate).splitlines()
                    if line.strip() and not line.strip().startswith("#")
                ]
        if name == "all":
            return self.paper_ids()
        looked = ", ".join(str(p) for p in self.split_files(name))
        raise UsageError(f"no split {name!r}: looked for {looked}")

    def load(self, paper_id: str) -> Paper:
        if self.data_dir is not None:
            return load_data_dir_paper(self.data_dir, paper_id)
        assert self.repo_root is not None
        return load_repo_paper(self.repo_root, paper_id)

    def papers(self, split: str | None = None, ids: Sequence[str] | None = None) -> list[Paper]:
        chosen = list(ids) if ids else (self.split(split) if split else self.paper_ids())
        return [self.load(paper_id) for paper_id in chosen]
