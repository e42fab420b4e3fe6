"""``paperbench sandbox gc`` after a run killed with a Docker sandbox on a network: the dry run
lists exactly what gc then removes, the host firewall rules of the sandbox's network included
(they used to be missed, as their bridge still existed until gc removed the network)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.sandbox._docker_firewall import COMMENT_PREFIX, firewall_problem, our_rules

from .docker_fixtures import *  # noqa: F403  (the fixtures)
from .docker_fixtures import TEST_LABELS, sweep

runner = CliRunner()

# A run that starts a sandbox with a routed network, says its id, then waits to be killed.
_KILLED_RUN = """
import asyncio, json, sys
from paperbench.sandbox._base import NetworkPolicy, SandboxSpec
from paperbench.sandbox._docker import DockerBackend

async def main():
    labels = json.loads(sys.argv[2])
    spec = SandboxSpec(image=sys.argv[1], network=NetworkPolicy.FULL, labels=labels)
    sb = await DockerBackend().start(spec)
    print(sb.id, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def _rows_of(sandbox_id: str, *flags: str) -> list[dict[str, Any]]:
    result = runner.invoke(app, ["sandbox", "gc", "--json", *flags])
    assert "Traceback" not in result.output, result.output
    return [row for row in json.loads(result.stdout) if sandbox_id in row["name"]]


@pytest.mark.docker
@pytest.mark.skipif(firewall_problem() is not None, reason=str(firewall_problem()))
def test_the_dry_run_lists_every_firewall_rule_gc_removes(
    docker_client: Any, reproducer_image: str
) -> None:
    run = subprocess.Popen(
        [sys.executable, "-c", _KILLED_RUN, reproducer_image, json.dumps(TEST_LABELS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    sandbox_id = ""
    try:
        assert run.stdout is not None
        sandbox_id = run.stdout.readline().strip()
        assert sandbox_id, "the run did not start its sandbox"
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
        comment = f"{COMMENT_PREFIX}{sandbox_id}-net"
        assert len([r for r in our_rules() if comment in r]) == 2  # INPUT and FORWARD

        planned = _rows_of(sandbox_id, "--dry-run")
        kinds = sorted(row["kind"] for row in planned)
        assert kinds == ["container", "firewall-rule", "firewall-rule", "network"], planned
        assert not any(row["removed"] or row["error"] for row in planned)

        reaped = _rows_of(sandbox_id)
        assert all(row["removed"] and not row["error"] for row in reaped), reaped
        assert sorted((r["kind"], r["name"]) for r in reaped) == sorted(
            (r["kind"], r["name"]) for r in planned
        )
        assert not [r for r in our_rules() if comment in r]
        assert _rows_of(sandbox_id, "--dry-run") == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            run.kill()
        run.wait(timeout=30)
        if run.stdout is not None:
            run.stdout.close()
        sweep(docker_client)
        if sandbox_id:  # what a failing gc left: never leave rules on the host
            for rule in our_rules():
                if f"{sandbox_id}-net" in rule:
                    words = shlex.split(rule)
                    subprocess.run(["iptables", "-w", "10", "-D", *words[1:]], check=False)
