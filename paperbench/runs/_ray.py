"""The Ray executor: each run's stages as Ray tasks spread over a cluster.

    ray start --head                      # on one machine; `ray start --address ...` on others
    paperbench run ... --executor ray --ray-address HOST:PORT

For each run, three tasks one after the other, each taking the run as far as its stages and
writing into the run store on the shared path (every node must see the group's folder at
the same path, and have paperbench installed):

    rollout + monitor    num_cpus=1
    reproduction         num_cpus=1, num_gpus from the run's reproduction GPU request
    grading              num_cpus=1

A task that returns the run's outcome (the run ended: failed, disqualified) ends the chain.
A task whose worker or node dies is run again elsewhere (``max_retries``); since every stage
resumes from the store, nothing done is done again (the rollout goes on from its snapshots, a
reproduction cut short starts afresh). A task lost more often than that ends its run as
``failed`` (said in run.json, run.log and outcome.json), and a resume runs it again; the
other runs go on. A stage's own failure is recorded data, not an error, and is never retried
(``retry_exceptions=False``).

Each worker builds the sandbox backend the group recorded (``docker`` or ``local``); a
worker without it fails that stage with the reason, never falling back to another backend.
A reproduction GPU request that no node can meet is refused before any task is sent (Ray
would wait for such a node forever). Each task installs the group's
:class:`~paperbench.llm.RayCoordinator` (a named actor on the driver's node), so every
worker shares the group's budget, connection limit and rate-limit pauses, and records its
node in run.json's ``host`` (``<hostname>/<node id>``).

The driver only awaits the tasks; the progress display reads the store. A driver that is
cancelled (Ctrl-C) cancels its tasks: each stage records the cancellation and a resume goes
on from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import AuthenticationError, RayError, RayTaskError, TaskCancelledError

from paperbench.errors import ConfigError, ExecutorUnavailableError
from paperbench.llm import RayCoordinator, set_coordinator
from paperbench.llm._shared import NAMESPACE, actor_name
from paperbench.runs._pipeline import RunSpec, execute, load_state, reproduce_config
from paperbench.runs._spend import group_spent
from paperbench.runs._store import (
    OUTCOME_FILE,
    RUN_FILE,
    RUN_LOG,
    RunOutcome,
    StageName,
    now,
    write_model,
)

NODE_ENV = "PAPERBENCH_NODE"
"""Read by the pipeline for run.json's ``host``; set by each task to its node."""

STAGE_TASKS: tuple[tuple[StageName, ...], ...] = (
    ("rollout", "monitor"),
    ("reproduction",),
    ("grading",),
)


@contextlib.contextmanager
def _stderr_kept() -> Iterator[Callable[[], str]]:
    """Keep what is written to file descriptor 2 (Ray's C++ core logs a line a second while
    it retries a cluster) instead of showing it; shown after all when no error follows."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as kept:
        os.dup2(kept.fileno(), 2)
        failed = False

        def said() -> str:
            kept.seek(0)
            return kept.read().decode("utf-8", "replace")

        try:
            yield said
        except BaseException:
            failed = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if not failed:
                sys.stderr.write(said())


def _why_not(address: str, exc: BaseException, said: str) -> str:
    """One line for a cluster that cannot be joined, with the reason Ray logged."""
    reasons = [
        line.split("RPC error: ", 1)[-1] for line in said.splitlines() if "RPC error" in line
    ]
    reason = reasons[-1].strip() if reasons else _first_line(exc)
    where = f"--ray-address {address}: cannot join the Ray cluster ({reason})"
    if "InvalidAuthToken" in said or isinstance(exc, AuthenticationError):
        return (
            f"{where}; it uses token authentication: run with RAY_AUTH_MODE=token and the "
            "cluster's token in ~/.ray/auth_token (or RAY_AUTH_TOKEN)"
        )
    return (
        f"{where}; check that `ray start --head` runs there and the address is HOST:PORT of "
        "its head"
    )


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


def node_label() -> str:
    """``<hostname>/<first 12 characters of the Ray node id>`` of this worker."""
    node = ray.get_runtime_context().get_node_id()
    return f"{platform.node()}/{node[:12]}"


def run_stage_task(
    spec: RunSpec,
    stages: Sequence[StageName],
    coordinator: str,
    namespace: str,
    submitted_at: float | None = None,
) -> RunOutcome | None:
    """The body of every task: install the group's coordinator, note the node, and take
    the run through ``stages`` (:func:`paperbench.runs._pipeline.execute`). The time since
    ``submitted_at`` (the driver's clock, as a Unix time) is recorded as the first stage's
    wait for a slot: the task's time in Ray's queue (for a retried task, since the first
    submission)."""
    os.environ[NODE_ENV] = node_label()
    waited = max(0.0, time.time() - submitted_at) if submitted_at is not None else 0.0
    previous = set_coordinator(RayCoordinator.lookup(coordinator, namespace))
    try:
        return execute(spec, stages, waited_s=waited)
    finally:
        set_coordinator(previous)


def gpus_of(reproduction: dict[str, Any], where: str = "group.json") -> float:
    """The GPUs one reproduction asks for (``reproduction.gpu`` of the group).

    Raises:
        ConfigError: ``count: -1`` (all of a node's GPUs), which Ray cannot schedule.
    """
    gpu = reproduction.get("gpu")
    if not gpu:
        return 0.0
    if gpu.get("device_ids") is not None:
        return float(len(gpu["device_ids"]))
    count = int(gpu.get("count") or 0)
    if count < 0:
        raise ConfigError(
            "a reproduction asking for every GPU (count -1) cannot be scheduled on Ray; "
            "give the number of GPUs one reproduction needs",
            file=where,
            path="$.reproduction.gpu.count",
        )
    return float(count)


def check_gpus(gpus: float, where: str) -> None:
    """Refuse a GPU request no node of the cluster can meet (Ray would wait forever).

    Raises:
        ConfigError: every node has fewer GPUs than one reproduction asks for.
    """
    if not gpus:
        return
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    most = max((float(n["Resources"].get("GPU", 0)) for n in nodes if n.get("Alive")), default=0.0)
    if most < gpus:
        raise ConfigError(
            f"a reproduction asks for {gpus:g} GPU(s) and no node of the Ray cluster has "
            f"more than {most:g}; add GPU nodes (`ray start --num-gpus N`) or lower the request",
            file=where,
            path="$.reproduction.gpu",
        )


def record_lost(
    spec: RunSpec, stages: Sequence[StageName], exc: BaseException, retries: int
) -> RunOutcome:
    """The run's outcome when the task for ``stages`` was lost (its worker or node died
    more than ``retries`` times): the running stage marked failed in run.json and a failed
    outcome.json, which a resume of the group runs again from that stage."""
    folder = spec.folder
    state = load_state(folder, spec.key)
    stage = next((s for s in stages if state.stages[s].status == "running"), stages[0])
    why = " ".join(str(exc).split())[:300] or type(exc).__name__
    reason = (
        f"the Ray task of {'+'.join(stages)} was lost after {retries} retries "
        f"({type(exc).__name__}: {why}); resume the group to run it again"
    )
    record = state.stages[stage]
    record.status, record.detail, record.finished_at = "failed", reason, now()
    state.updated_at = now()
    write_model(folder / RUN_FILE, state)
    with (folder / RUN_LOG).open("a", encoding="utf-8") as log:
        log.write(f"{now().strftime('%Y-%m-%dT%H:%M:%S')} {stage}: failed ({reason})\n")
    outcome = RunOutcome(key=spec.key, status="failed", failed_stage=stage, reason=reason)
    write_model(folder / OUTCOME_FILE, outcome)
    return outcome


class RayExecutor:
    """Runs a group's stages as Ray tasks.

    Args:
        address: a running cluster (``HOST:PORT`` of its head, or ``auto``); ``None``
            starts a new Ray runtime on this machine for the group (and stops it after).
            Either way, a Ray connection this process already has is used as it is.
        max_retries: times a task is run again when its worker or node dies.
        namespace: the Ray namespace of the group's coordinator actor.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        max_retries: int = 3,
        namespace: str = NAMESPACE,
    ) -> None:
        self.address = address
        self.max_retries = max_retries
        self.namespace = namespace
        self._started = False

    def connect(self) -> None:
        """Join the cluster (or start a runtime on this machine) now, so that a cluster that
        cannot be joined is said before the group is written.

        Raises:
            ExecutorUnavailableError: Ray refused or could not reach the cluster.
        """
        if ray.is_initialized():
            return
        # "local": a new runtime, never one found on the machine or in RAY_ADDRESS
        address = self.address or "local"
        with _stderr_kept() as said:
            try:
                ray.init(address=address, namespace=self.namespace, log_to_driver=False)
            except Exception as exc:  # ray.init raises plain ConnectionError, RuntimeError...
                raise ExecutorUnavailableError(_why_not(address, exc, said())) from None
        self._started = True

    def close(self) -> None:
        """Stop the Ray runtime this executor started (a connection found is kept)."""
        if self._started:
            ray.shutdown()
            self._started = False

    async def run(self, specs: list[RunSpec]) -> list[RunOutcome]:
        if not specs:
            return []
        config = specs[0].config
        group_dir = Path(specs[0].group_dir)
        where = str(group_dir / "group.json")
        gpus_per_run = {
            spec.key: gpus_of(reproduce_config(spec).model_dump(mode="json"), where)
            for spec in specs
        }
        gpus = max(gpus_per_run.values())
        started = not ray.is_initialized()
        self.connect()
        try:
            check_gpus(gpus, where)
            key = hashlib.sha256(str(group_dir.resolve()).encode()).hexdigest()[:8]
            name = actor_name(config.group, key)
            spent = await asyncio.to_thread(group_spent, (spec.folder for spec in specs))
            coordinator = await asyncio.to_thread(
                RayCoordinator.create,
                name,
                budget_usd=config.budget_usd,
                spent_usd=spent,
                namespace=self.namespace,
            )
            try:
                remote: Any = ray.remote(run_stage_task)
                options: dict[str, Any] = {
                    "num_cpus": 1,
                    "max_retries": self.max_retries,
                    "retry_exceptions": False,
                }
                task = remote.options(**options)

                async def one(spec: RunSpec) -> RunOutcome:
                    outcome: RunOutcome | None = None
                    for stages in STAGE_TASKS:
                        if stages == ("reproduction",) and (
                            config.mode == "code-dev" or config.skip_reproduction
                        ):
                            continue  # recorded as skipped by the grading task
                        submit = task
                        if stages == ("reproduction",):
                            submit = remote.options(**options, num_gpus=gpus_per_run[spec.key])
                        ref = submit.remote(spec, stages, name, self.namespace, time.time())
                        try:
                            outcome = await ref
                        except asyncio.CancelledError:
                            # the task stops too: its stage records the cancellation and
                            # resumes from the store next time
                            ray.cancel(ref)
                            raise
                        except (RayTaskError, TaskCancelledError):
                            raise  # a bug in the stage's code, or a cancellation
                        except RayError as exc:  # the task's worker or node was lost
                            return await asyncio.to_thread(
                                record_lost, spec, stages, exc, self.max_retries
                            )
                        if outcome is not None:
                            return outcome
                    raise RuntimeError(f"{spec.key.label}: every stage ran and no outcome")

                return list(await asyncio.gather(*(one(spec) for spec in specs)))
            finally:
                with contextlib.suppress(RayError):  # the cluster may be gone
                    coordinator.kill()
        finally:
            if started:
                self.close()
