"""Paper bundles: this repository's layout and a PaperBench data directory.

This repository::

    papers/<id>/paper.md, addendum.md, judge.addendum.md (optional), config.yaml, assets/
    rubrics/<id>.json          the rubric (check files under rubrics/checks/<id>/)
    blacklists/<id>.txt        one URL per line; '#' comments; the word 'none' means empty
    splits/<name>.txt          optional named lists of paper ids

A PaperBench data directory (``--data-dir DIR`` or ``PAPERBENCH_DATA_DIR``)::

    DIR/papers/<id>/config.yaml, paper.md, paper.pdf, addendum.md, judge.addendum.md,
                    blacklist.txt, assets/, rubric.json
    DIR/splits/<name>.txt or DIR/../experiments/splits/<name>.txt

A paper is named by its folder or by its config.yaml's ``id`` (PaperBench's
``stochastic-interpolants`` folder holds ``stochastic-interpolant``). A clone without Git LFS
content holds pointer files instead of the texts, the pdf and the assets:
:meth:`Paper.require_usable` refuses them, and a rubric that does not load, before any work.
"""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.papers._bundle import (
        DATA_DIR_ENV,
        HOME_ENV,
        LFS_POINTER_MESSAGE,
        LFS_POINTER_PREFIX,
        Layout,
        Paper,
        PaperConfig,
        PaperSource,
        find_repo_root,
        is_lfs_pointer,
        load_data_dir_paper,
        load_repo_paper,
        parse_blacklist,
        read_paper_text,
    )

__all__ = [
    "DATA_DIR_ENV",
    "HOME_ENV",
    "LFS_POINTER_MESSAGE",
    "LFS_POINTER_PREFIX",
    "Layout",
    "Paper",
    "PaperConfig",
    "PaperSource",
    "find_repo_root",
    "is_lfs_pointer",
    "load_data_dir_paper",
    "load_repo_paper",
    "parse_blacklist",
    "read_paper_text",
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
