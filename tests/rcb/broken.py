"""The fixture problem set (``tests/rcb/pset``) and malformed copies of it, for error tests.

A malformed case edits a copy of the set; ``where`` is what its error line must name (the
file and line, relative to the copy's ``pset/``; "" for the clone's folder itself), ``words``
what it must say.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from paperbench.rcb._load import load_problem_set

PSET = Path(__file__).parent / "pset"
"""The fixture problem set: 2 papers, 8 snippets, 19 code lines."""


def reference_bodies() -> dict[str, str]:
    """Each snippet's reference code (tags of nested snippets removed), by name."""
    problems = load_problem_set(PSET.parent)
    bodies = {}
    for s in problems.snippets:
        lines = (problems.paper(s.paper).folder / s.file).read_text().splitlines()
        inner = [line for line in lines[s.start + 1 : s.end] if "paper2code" not in line]
        bodies[s.name] = "\n".join(inner)
    return bodies


def copy_pset(tmp_path: Path) -> Path:
    """A copy of the fixture set as a clone would hold it: ``<tmp>/rcb/pset``; returns
    ``<tmp>/rcb``."""
    root = tmp_path / "rcb"
    shutil.copytree(PSET, root / "pset", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _edit(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(pset: Path) -> None:
        path = pset / rel
        text = path.read_text(encoding="utf-8")
        assert old in text, (rel, old)
        path.write_text(text.replace(old, new, 1), encoding="utf-8")

    return edit


def _remove(rel: str) -> Callable[[Path], None]:
    def remove(pset: Path) -> None:
        path = pset / rel
        shutil.rmtree(path) if path.is_dir() else path.unlink()

    return remove


SOFTMAX = "softmax-temperature/softmax.py"
CLOSE_ENTROPY = '    # </paper2code name="entropy">\n'
CLOSE_SCALE = '    # </paper2code name="scale logits">\n'
OPEN_STABLE = '    # <paper2code name="stable exponent">\n'


@dataclass(frozen=True)
class Malformed:
    edit: Callable[[Path], None]
    where: str
    words: str

    def make(self, tmp_path: Path) -> tuple[Path, str]:
        """A broken copy: its clone folder and the culprit its error line must name."""
        root = copy_pset(tmp_path)
        self.edit(root / "pset")
        return root, f"{root / 'pset'}/{self.where}" if self.where else str(root)


MALFORMED: dict[str, Malformed] = {
    "a tag that never closes": Malformed(
        _edit(SOFTMAX, CLOSE_ENTROPY, ""), f"{SOFTMAX}:22", '"entropy" is never closed'
    ),
    "a closing tag with nothing open": Malformed(
        _edit(SOFTMAX, CLOSE_ENTROPY, CLOSE_ENTROPY + '# </paper2code name="stray">\n'),
        f"{SOFTMAX}:26",
        "no snippet is open",
    ),
    "crossed tags": Malformed(
        _edit(
            SOFTMAX,
            CLOSE_SCALE + OPEN_STABLE,
            OPEN_STABLE + CLOSE_SCALE,
        ),
        f"{SOFTMAX}:12",
        'innermost open snippet is "stable exponent" (opened at line 11)',
    ),
    "a name used twice in a file": Malformed(
        _edit(SOFTMAX, 'name="entropy"', 'name="scale logits"'),
        f"{SOFTMAX}:22",
        "opened a second time (first at line 9)",
    ),
    "a name used twice in a paper": Malformed(
        lambda pset: (
            _edit(
                "papers.yaml",
                "annotated_file_paths: ema.py",
                "annotated_file_paths: [ema.py, ema2.py]",
            )(pset),
            (pset / "ema-smoothing/ema2.py").write_text(
                'def f():\n    # <paper2code name="ema variance">\n    return 1\n'
                '    # </paper2code name="ema variance">\n',
                encoding="utf-8",
            ),
        ),
        "ema-smoothing/ema2.py:2",
        '"ema variance" is used twice in paper "ema-smoothing" (first in ema.py)',
    ),
    "a closing tag indented differently": Malformed(
        _edit(SOFTMAX, CLOSE_ENTROPY, CLOSE_ENTROPY.lstrip()),
        f"{SOFTMAX}:25",
        "indented 0 characters, its opening tag (line 22) 4",
    ),
    "a snippet of zero code lines": Malformed(
        _edit(
            SOFTMAX,
            "    p = np.clip(p, 1e-12, 1.0)\n    return -np.sum(p * np.log(p), axis=axis)\n",
            "    # nothing but a comment\n\n",
        ),
        f"{SOFTMAX}:22",
        '"entropy" has no code line',
    ),
    "no test file": Malformed(
        _remove("softmax-temperature/paper2code_test.py"), "papers.yaml:11", "its test"
    ),
    "no paper text": Malformed(
        _remove("softmax-temperature/paper2code_paper.tex"),
        "papers.yaml:11",
        "no paper2code_paper.tex or paper2code_paper.md",
    ),
    "a listed paper without its folder": Malformed(
        _remove("softmax-temperature"), "papers.yaml:11", "does not exist"
    ),
    "no annotated file": Malformed(_remove(SOFTMAX), "papers.yaml:11", "annotated file"),
    "no context file": Malformed(
        _remove("ema-smoothing/series.py"), "papers.yaml:3", "context file"
    ),
    "an entry without annotated_file_paths": Malformed(
        _edit("papers.yaml", "  annotated_file_paths:\n    - softmax.py\n", ""),
        "papers.yaml:11: $[1].annotated_file_paths",
        "Field required",
    ),
    "a paper listed twice": Malformed(
        _edit("papers.yaml", "- id: softmax-temperature", "- id: ema-smoothing"),
        "papers.yaml:11",
        "listed twice (first at line 3)",
    ),
    "invalid YAML": Malformed(
        _edit("papers.yaml", "  venue: fixture\n", "  venue: [fixture\n"),
        "papers.yaml:",
        "invalid YAML",
    ),
    "no papers.yaml": Malformed(_remove("papers.yaml"), "", "no pset/papers.yaml"),
}
