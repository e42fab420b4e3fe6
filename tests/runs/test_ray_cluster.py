"""The Ray executor on a real two-node Ray cluster started by the test (`ray start --head`
and `ray start --address`, one CPU each, on this machine): runs spread over both nodes, and
a node killed (SIGKILL to every process of it) in the middle of a reproduction loses nothing:
the task runs again on the other node, the stages already done are not done again, and every
run ends with its outcome.json. Runs use a replayed agent whose reproduce.sh sleeps, the
dummy judge and the local sandbox backend (bubblewrap)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from paperbench.runs import RunOutcome, RunState
from paperbench.runs._pipeline import RunSpec
from tests.runs.groups import make_group

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow

RAY = str(Path(sys.executable).with_name("ray"))
ENV = {
    # a dead node is noticed in ~3 s instead of ~30 s
    "RAY_health_check_initial_delay_ms": "0",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _procs() -> Iterator[tuple[int, list[str]]]:
    """Each process of this machine and the fields of its /proc stat after its name."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        yield int(entry.name), stat[stat.rfind(")") + 2 :].split()


def _session_pids(sid: int) -> list[int]:
    """Every process of session ``sid`` (a node started with ``ray start --block`` in its
    own session: its raylet, agents and workers; the workers have their own process
    groups, so a process-group kill would miss them)."""
    return [pid for pid, fields in _procs() if int(fields[3]) == sid]  # state ppid pgrp session


def _sleeping_under(roots: list[int]) -> bool:
    """Whether a process below ``roots`` runs ``sleep`` (reproduce.sh sleeping in its
    sandbox: the sandbox's processes are descendants of the task that runs it)."""
    children: dict[int, list[int]] = {}
    for pid, fields in _procs():
        children.setdefault(int(fields[1]), []).append(pid)
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), []):
            try:
                if Path(f"/proc/{child}/cmdline").read_bytes().startswith(b"sleep\0"):
                    return True
            except OSError:
                continue
            stack.append(child)
    return False


def _kill_session(proc: subprocess.Popen[bytes], sig: int) -> None:
    for pid in _session_pids(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the node's processes, SIGKILL to whatever is left after 2 s (a throwaway
    node: Ray's own shutdown takes longer than it is worth here)."""
    _kill_session(proc, signal.SIGTERM)
    deadline = time.monotonic() + 2
    while _session_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    _kill_session(proc, signal.SIGKILL)
    proc.wait(timeout=10)


def _wait(what: str, condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


@dataclass
class Cluster:
    address: str
    temp: Path
    head: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]
    labels: dict[str, str] = field(default_factory=dict)
    """``head`` / ``worker`` → the node label the runs record as their host."""


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    # The nodes use the authentication mode this process connects with: a driver connecting
    # to a cluster does not turn token authentication on by itself (a ray.init() that
    # starts a local runtime does, for the whole process, as an earlier test may have).
    auth = {"RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    with log.open("wb") as out:
        return subprocess.Popen(
            [RAY, "start", *args, "--block"],
            env={**os.environ, **ENV, **auth},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    temp = Path(tempfile.mkdtemp(prefix="pbc", dir="/tmp"))  # short: Ray's socket paths
    port = _free_port()
    address = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
        head = _start(
            [
                "--head",
                f"--port={port}",
                *common,
                '--resources={"head": 1}',
                f"--temp-dir={temp}",
                "--include-dashboard=false",
            ],
            temp / "head.out",
        )
        procs.append(head)
        _wait("the head node", lambda: b"--block" in (temp / "head.out").read_bytes(), 60)
        worker = _start(
            [f"--address={address}", *common, '--resources={"worker": 1}'], temp / "worker.out"
        )
        procs.append(worker)
        ray.init(address=address, log_to_driver=False)
        _wait("both nodes", lambda: len([n for n in ray.nodes() if n["Alive"]]) == 2, 60)
        found = Cluster(address=address, temp=temp, head=head, worker=worker)
        for node in ray.nodes():
            role = "head" if "head" in node["Resources"] else "worker"
            found.labels[role] = f"{platform.node()}/{node['NodeID'][:12]}"
        assert ray.get_runtime_context().get_node_id()[:12] == found.labels["head"][-12:]
        yield found
    finally:
        ray.shutdown()
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(temp, ignore_errors=True)


class Driver:
    """The executor in a thread, as `paperbench run` would run it."""

    def __init__(self, address: str, specs: list[RunSpec], max_retries: int = 3) -> None:
        from paperbench.runs._ray import RayExecutor

        self.executor = RayExecutor(address=address, max_retries=max_retries)
        self.specs = specs
        self.outcomes: list[RunOutcome] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            self.outcomes = asyncio.run(self.executor.run(self.specs))
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float) -> list[RunOutcome]:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the group did not finish in {timeout:g} s"
        assert self.error is None, repr(self.error)
        return self.outcomes


def _state(spec: RunSpec) -> RunState | None:
    try:
        return RunState.model_validate_json((spec.folder / "run.json").read_bytes())
    except (OSError, ValueError):
        return None


def test_runs_spread_over_both_nodes(cluster: Cluster, tmp_path: Path) -> None:
    specs = make_group(tmp_path, "spread", sleep_s=2, seeds=2)
    driver = Driver(cluster.address, specs)
    hosts: set[str] = set()
    while driver.thread.is_alive():
        for spec in specs:
            state = _state(spec)
            if state is not None and state.host is not None:
                hosts.add(state.host)
        time.sleep(0.1)
    outcomes = driver.join(0)
    assert [o.key for o in outcomes] == [s.key for s in specs]
    assert all(o.status == "scored" for o in outcomes), outcomes
    assert hosts == {cluster.labels["head"], cluster.labels["worker"]}
    for spec in specs:
        assert (spec.folder / "outcome.json").is_file()
        state = _state(spec)
        assert state is not None and state.host in hosts
        assert all(record.attempts == 1 for record in state.stages.values()), state
    assert ray.util.list_named_actors(all_namespaces=True) == []  # the coordinator is gone


def test_a_node_killed_mid_reproduction_loses_nothing(cluster: Cluster, tmp_path: Path) -> None:
    specs = make_group(tmp_path, "killed", sleep_s=8, seeds=2)
    driver = Driver(cluster.address, specs)
    worker = cluster.labels["worker"]

    victim: list[RunSpec] = []

    def reproducing_on_the_worker() -> bool:
        for spec in specs:
            state = _state(spec)
            if (
                state is not None
                and state.host == worker
                and state.stages["reproduction"].status == "running"
            ):
                victim.append(spec)
                return True
        return False

    _wait("a reproduction on the worker node", reproducing_on_the_worker, 60)
    killed = victim[0]
    rollout_done = (killed.folder / "status.json").stat().st_mtime_ns
    _wait("reproduce.sh sleeping", lambda: _sleeping_under(_session_pids(cluster.worker.pid)), 60)
    _kill_session(cluster.worker, signal.SIGKILL)

    outcomes = driver.join(120)
    assert all(o.status == "scored" for o in outcomes), outcomes
    for spec in specs:
        assert (spec.folder / "outcome.json").is_file()
    state = _state(killed)
    assert state is not None
    assert state.host == cluster.labels["head"]  # finished on the node that is left
    stages = state.stages
    assert stages["rollout"].attempts == 1 and stages["monitor"].attempts == 1
    assert stages["reproduction"].attempts == 2 and stages["reproduction"].status == "done"
    assert stages["grading"].attempts == 1 and stages["grading"].status == "done"
    assert (killed.folder / "status.json").stat().st_mtime_ns == rollout_done  # not redone
    metadata = json.loads((killed.folder / "reproduction" / "metadata.json").read_text())
    assert metadata["status"] == "success" and metadata["exit_code"] == 0, metadata


def _task_pids(cluster: Cluster) -> list[int]:
    """The Ray workers of either node running a stage task now (Ray names the process
    after the task it runs)."""
    pids = []
    for node in (cluster.head, cluster.worker):
        for pid in _session_pids(node.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(b"ray::run_stage_task"):
                pids.append(pid)
    return pids


def test_a_task_lost_more_often_than_retried_fails_its_run_until_resumed(
    cluster: Cluster, tmp_path: Path
) -> None:
    specs = make_group(tmp_path, "lost", sleep_s=6, seeds=1)
    spec = specs[0]
    driver = Driver(cluster.address, specs, max_retries=0)

    def reproducing() -> bool:
        state = _state(spec)
        return state is not None and state.stages["reproduction"].status == "running"

    _wait("the reproduction", reproducing, 60)
    _wait("reproduce.sh sleeping", lambda: _sleeping_under(_task_pids(cluster)), 60)
    pids = _task_pids(cluster)
    assert len(pids) == 1
    os.kill(pids[0], signal.SIGKILL)

    (outcome,) = driver.join(60)
    assert outcome.status == "failed" and outcome.failed_stage == "reproduction"
    assert outcome.reason is not None and "resume the group" in outcome.reason
    stored = RunOutcome.model_validate_json((spec.folder / "outcome.json").read_bytes())
    assert stored.status == "failed"
    state = _state(spec)
    assert state is not None and state.stages["reproduction"].status == "failed"
    assert "reproduction: failed (the Ray task" in (spec.folder / "run.log").read_text()

    rollout_done = (spec.folder / "status.json").stat().st_mtime_ns
    resumed = Driver(cluster.address, specs)
    (outcome,) = resumed.join(90)
    assert outcome.status == "scored"
    state = _state(spec)
    assert state is not None
    assert state.stages["rollout"].attempts == 1
    assert state.stages["reproduction"].attempts == 2
    assert (spec.folder / "status.json").stat().st_mtime_ns == rollout_done


def test_a_gpu_request_no_node_can_meet_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    from paperbench.errors import ConfigError
    from paperbench.runs._ray import RayExecutor

    specs = make_group(tmp_path, "gpu", sleep_s=0, seeds=1, agent={"gpus": 1})
    with pytest.raises(ConfigError, match=r"asks for 1 GPU\(s\) and no node .* more than 0"):
        asyncio.run(RayExecutor(address=cluster.address).run(specs))
    assert not (specs[0].folder / "run.json").exists()


def test_the_agents_gpus_are_the_reproduction_tasks_resource(
    cluster: Cluster, tmp_path: Path
) -> None:
    """``--gpus`` (or an agent config's ``resources.gpus``) reaches the reproduction's task."""
    from paperbench.errors import ConfigError
    from paperbench.runs._ray import RayExecutor

    specs = make_group(tmp_path, "agent-gpu", sleep_s=0, seeds=1, agent={"gpus": 1})
    with pytest.raises(ConfigError, match=r"asks for 1 GPU\(s\) and no node"):
        asyncio.run(RayExecutor(address=cluster.address).run(specs))
    assert not (specs[0].folder / "run.json").exists()


def test_gpus_of_a_reproduction() -> None:
    from paperbench.errors import ConfigError
    from paperbench.runs._ray import gpus_of

    assert gpus_of({}) == 0
    assert gpus_of({"gpu": {"count": 2}}) == 2
    assert gpus_of({"gpu": {"device_ids": ["0", "3"]}}) == 2
    with pytest.raises(ConfigError, match=r"group.json: \$.reproduction.gpu.count: .*every GPU"):
        gpus_of({"gpu": {"count": -1}})


def test_a_cancelled_driver_cancels_its_tasks(cluster: Cluster, tmp_path: Path) -> None:
    """Ctrl-C in `paperbench run`: the stage running on the cluster stops, says so in the
    run's log, and no task is left running."""
    from paperbench.runs._ray import RayExecutor

    specs = make_group(tmp_path, "cancelled", sleep_s=300, seeds=1)
    spec = specs[0]

    async def drive() -> None:
        work = asyncio.create_task(RayExecutor(address=cluster.address).run(specs))
        deadline = time.monotonic() + 180
        while not ((s := _state(spec)) and s.stages["reproduction"].status == "running"):
            assert time.monotonic() < deadline and not work.done()
            await asyncio.sleep(0.2)
        while not _sleeping_under(_task_pids(cluster)):  # reproduce.sh in its sandbox
            assert time.monotonic() < deadline and not work.done()
            await asyncio.sleep(0.1)
        work.cancel()
        with pytest.raises(asyncio.CancelledError):
            await work

    asyncio.run(drive())
    log = spec.folder / "run.log"
    # generous for 2 loaded cores, yet far under the stage's 300 s: the stage stops when
    # cancelled, not when its reproduction ends
    _wait("the stage to record its cancellation", lambda: "cancelled" in log.read_text(), 60)
    _wait("no task left running", lambda: not _task_pids(cluster), 60)
    assert not (spec.folder / "outcome.json").exists()
