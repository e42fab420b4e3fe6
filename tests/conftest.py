"""How the suite shares the machine when ``./dev test`` runs it on several workers.

``./dev test`` runs the tests on pytest-xdist workers (``--dist loadgroup``, with the
scheduler made here), then the ``serial`` ones alone. Most tests own everything they touch:
their own ``tmp_path``, servers on port 0, Docker objects labelled with their worker's
session. The ones listed here touch state of the whole machine, and this table is the one
place that says so:

- ``GROUPS``: tests that must not overlap with each other run on one worker, one after the
  other. A ``sandbox gc`` reaps every orphan on the machine, so a test that kills an owner
  and then checks what gc removed would lose its orphan to another test's gc; the network
  escape tests give a host interface fixed addresses; Ray clusters started side by side
  compete for the same node ports and the two cores. Tests that share a costly module
  fixture are grouped too, so that one worker builds it once instead of every worker.
- ``SERIAL``: tests that need the machine to themselves. They measure the free space of the
  temporary folder's disk, which any other test writing there changes.

An entry that matches no collected test is an error: the table cannot go stale unseen.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

# pytest-xdist's workers start with COLUMNS=80 (and LINES) in their environment. rich fixes a
# console's width for good when COLUMNS is set as the console is made, so the width a test
# gives its command (CliRunner's env) would be ignored on a worker and not in a plain run.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

GROUPS: dict[str, tuple[str, ...]] = {
    "machine-wide": (
        "tests/sandbox/test_gc_firewall.py",
        "tests/sandbox/test_gc_cli.py",
        "tests/sandbox/test_docker_lifetime.py",
        "tests/sandbox/test_escape_network.py",
        "tests/sandbox/test_docker.py::test_crashed_owner_leaves_an_orphan_that_gc_reaps",
        "tests/sandbox/test_docker.py::test_gc_leaves_live_sandboxes_alone",
        "tests/agents/test_external.py::test_a_killed_run_resumes_in_the_agents_own_session_to_the_end",
    ),
    # the module fixture runs every bundled example's reproduce.sh (about a minute)
    "checks-executed": (
        "tests/judge/test_checks.py::test_bundled_checks_agree_with_the_gold_grades_locally",
        "tests/judge/test_checks.py::test_executed_archive_and_plain_folder_are_accepted",
        "tests/judge/test_checks.py::test_bundled_checks_agree_with_the_gold_grades_in_docker",
    ),
    # the module fixture is a whole uninterrupted run to compare with
    "pipeline-killed": (
        "tests/runs/test_pipeline.py::test_kill_9_during_a_stage_then_resume_ends_as_an_uninterrupted_run",
    ),
    "ray": (
        "tests/runs/test_ray_cluster.py",
        "tests/runs/test_ray_local.py",
        "tests/runs/test_ray_auth.py",
        "tests/llm/test_shared_ray.py",
    ),
}

SERIAL: tuple[str, ...] = (
    "tests/sandbox/test_docker.py::test_disk_fill_is_capped",
    "tests/test_reproduce.py::test_endless_writer_in_docker_ends_as_disk_full",
)


def _matches(nodeid: str, entry: str) -> bool:
    """A module path matches its tests; a test's id matches it and its parametrisations."""
    return nodeid == entry or nodeid.startswith((entry + "::", entry + "["))


def group_of(nodeid: str) -> str | None:
    """The ``GROUPS`` name a test belongs to, if any."""
    return next((g for g, es in GROUPS.items() if any(_matches(nodeid, e) for e in es)), None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    used = {e for i in items for es in GROUPS.values() for e in es if _matches(i.nodeid, e)}
    for item in items:
        for entry in SERIAL:
            if _matches(item.nodeid, entry):
                item.add_marker(pytest.mark.serial)  # before -m selects on it
                used.add(entry)
    if config.args_source is not pytest.Config.ArgsSource.TESTPATHS:
        return  # files or folders named: entries outside them are not collected, not stale
    stale = [e for e in (*SERIAL, *(e for es in GROUPS.values() for e in es)) if e not in used]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py: no test matches {', '.join(stale)}")


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: the suite also runs without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with ``GROUPS`` as its groups: each test is its own unit of work,
    except that a group's tests are one unit, run by one worker in order. (xdist's own
    loadgroup reads ``xdist_group`` marks through a node id suffix that pytest 9.2 no longer
    keeps, so its groups would silently spread over every worker.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    return GroupScheduling(config, log)
