"""``paperbench.run_reproduction(ReproduceSettings)``: ``paperbench reproduce`` from Python, on
the settings the command is made from."""

from __future__ import annotations

from pathlib import Path

import pytest

import paperbench
from paperbench.errors import UsageError
from paperbench.reproduce import ReproduceSettings


def test_run_reproduction_from_python_takes_the_settings_of_the_command(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "reproduce.sh").write_text("echo hi > made.txt\n")
    settings = ReproduceSettings(submission=sub, sandbox="local", retries=0, timeout_s=30)
    meta = paperbench.run_reproduction(settings)
    assert meta.status == "success" and meta.changed_files.created == ["made.txt"]
    assert meta.config.timeout_s == 30 and meta.config.salvage_retries == 0
    assert (tmp_path / "sub.reproduction" / "metadata.json").is_file()  # the command's default
    with pytest.raises(UsageError, match="is not empty; pass --force"):
        paperbench.run_reproduction(settings)
    with pytest.raises(UsageError, match="--allow-network: the sandbox has no network"):
        paperbench.run_reproduction(
            ReproduceSettings(
                submission=sub, out=tmp_path / "o", network="none", allow_networks=["10.0.0.0/8"]
            )
        )
