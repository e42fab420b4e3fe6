from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from paperbench.testing import FakeLLMServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def example(paper: str, quality: str) -> tuple[Path, Path]:
    """(submission folder, reproduce.log) of a bundled example."""
    folder = EXAMPLES / paper / quality
    return folder / "submission", folder / "reproduce.log"


def write_executed(
    out: Path,
    files: dict[str, str | bytes],
    *,
    created: list[str] | None = None,
    modified: list[str] | None = None,
    log: str = "",
    status: str = "success",
) -> Path:
    """An executed submission folder as `paperbench reproduce` writes it."""
    out.mkdir(parents=True, exist_ok=True)
    staged = out / "_staged"
    for rel, content in files.items():
        target = staged / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    with tarfile.open(out / "executed.tar.gz", "w:gz") as tar:
        for path in sorted(staged.rglob("*")):
            tar.add(path, arcname=path.relative_to(staged).as_posix(), recursive=False)
    (out / "reproduce.log").write_text(log)
    metadata = {
        "schema_version": 1,
        "status": status,
        "exit_code": 0,
        "changed_files": {"created": created or [], "modified": modified or [], "deleted": []},
        "submission": "sub",
        "started_at": "2026-01-01T00:00:00Z",
        "config": {},
    }
    (out / "metadata.json").write_text(json.dumps(metadata))
    return out


@pytest.fixture
def make_submission(tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(files: dict[str, str | bytes], name: str = "submission") -> Path:
        root = tmp_path / name
        for rel, content in files.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
        return root

    return make


_ENV = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "PAPERBENCH_PRICES",
    "PAPERBENCH_ENDPOINTS",
)


@pytest.fixture
def llm_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No keys, no base URLs, a private response cache, a working directory with no .env."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def fake_llm(llm_env: Path) -> Iterator[FakeLLMServer]:
    """A fake OpenAI/Anthropic server on 127.0.0.1, stopped after the test."""
    with FakeLLMServer() as server:
        yield server
