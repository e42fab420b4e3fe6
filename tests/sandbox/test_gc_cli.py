"""``paperbench sandbox gc`` through the command line, and what it takes for an orphan."""

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.sandbox import _docker_labels as L
from paperbench.sandbox._gc import find_orphans

runner = CliRunner()


@pytest.mark.docker
def test_gc_dry_run_lists_as_json() -> None:
    result = runner.invoke(app, ["sandbox", "gc", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert isinstance(rows, list)
    assert all({"kind", "name", "owner", "reason", "removed"} <= set(r) for r in rows)
    assert not any(r["removed"] for r in rows)


def test_gc_without_an_engine_still_checks_local_sandboxes(tmp_path: Path) -> None:
    missing = tmp_path / "no-docker.sock"
    result = runner.invoke(
        app, ["sandbox", "gc", "--dry-run"], env={"DOCKER_HOST": f"unix://{missing}"}
    )
    assert result.exit_code == 0, result.output
    assert "only local sandboxes were checked" in result.output
    assert "Traceback" not in result.output


class _Api:
    """An engine holding one sandbox whose owner is gone and one container that only inherited
    an image's labels (a build step)."""

    def __init__(self) -> None:
        managed = {L.MANAGED: "true", L.BACKEND: "docker"}
        self.listed = [
            {
                "Id": "a" * 64,
                "Names": ["/orphan"],
                "State": "running",
                "Labels": {**managed, L.KIND: "sandbox", L.OWNER: "elsewhere:1:1"},
            },
            {
                "Id": "b" * 64,
                "Names": ["/build-step"],
                "State": "exited",
                "Labels": {**managed, L.KIND: "image"},
            },
        ]

    def containers(self, **_: Any) -> list[dict[str, Any]]:
        return self.listed

    def networks(self, **_: Any) -> list[dict[str, Any]]:
        return []

    def volumes(self, **_: Any) -> dict[str, Any]:
        return {"Volumes": []}


class _Client:
    def __init__(self) -> None:
        self.api = _Api()


def test_gc_leaves_containers_that_only_inherited_an_images_labels() -> None:
    client: Any = _Client()
    client.api.listed[0]["Labels"][L.OWNER] = f"{socket.gethostname()}:999999999:1"
    assert [o.name for o in find_orphans(client)] == ["orphan"]
    assert [o.name for o in find_orphans(client, everything=True)] == ["orphan"]
