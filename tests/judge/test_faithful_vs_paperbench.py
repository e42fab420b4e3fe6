"""The faithful mode against PaperBench's own functions, on the same inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from paperbench.judge._faithful_log import fold_like_paperbench

from .upstream import UPSTREAM_ENV, generated_logs, reduce_log, upstream_git, upstream_reduce_log

LOGS = generated_logs()
needs_upstream = pytest.mark.skipif(
    upstream_git() is None, reason=f"set {UPSTREAM_ENV} to a git directory of openai/preparedness"
)


@pytest.mark.parametrize("name", list(LOGS))
def test_the_log_folds_as_paperbench_folds_it(name: str) -> None:
    assert fold_like_paperbench(LOGS[name]) == reduce_log(LOGS[name])


def test_a_drain3_ini_in_the_working_folder_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = LOGS["two-token lines"]
    before = fold_like_paperbench(log)
    (tmp_path / "drain3.ini").write_text("[DRAIN]\nsim_th = 0.99\ndepth = 3\n")
    monkeypatch.chdir(tmp_path)
    assert fold_like_paperbench(log) == before


@needs_upstream
def test_the_reference_fold_is_paperbench_s_own_code() -> None:
    theirs = upstream_reduce_log()
    for name, log in LOGS.items():
        assert reduce_log(log) == theirs(log), name
