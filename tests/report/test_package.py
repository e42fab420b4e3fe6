"""The report package's public names and the templates shipped in the wheel."""

from __future__ import annotations

import glob
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_package_data_ships_every_template() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["paperbench"]
    shipped = {
        Path(path)
        for pattern in patterns
        for path in glob.glob(pattern, root_dir=ROOT / "paperbench", recursive=True)
    }
    templates = {
        path.relative_to(ROOT / "paperbench")
        for path in (ROOT / "paperbench" / "report" / "templates").iterdir()
    }
    assert templates and templates <= shipped
