"""Device workers as Ray actors, for a cluster (`peak-mcp serve --ray ADDRESS|auto`; Ray is the optional `ray` extra).

Ray is the cluster layer, not something built here: it places each device's actor on a node with a free GPU
(`num_gpus=1`, so Ray sets the actor's CUDA_VISIBLE_DEVICES) and reports a lost actor or node as an error. Each actor
hosts the embedded DevicePool the single-host server uses, for its one GPU: the same worker subprocess with the same
hang and crash handling, so a job's result and its failures read the same on both paths. Compile-only jobs (device
-1) run as Ray tasks on any node's CPUs, each in a fresh worker subprocess.

The server keeps one queue per device (a lock, as DevicePool does), so placement, queue lengths and the tuning
fan-out work unchanged; a lost actor is a `worker_died` job failure (the fan-out hands its chunk to another
device) and the next job on that device starts a new actor. Worker progress lines stay inside the actor (its pool's
hang detector reads them); the server sees a job start and end.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import structlog
from pydantic import BaseModel, TypeAdapter

from peak_mcp.core.errors import Unavailable
from peak_mcp.runner.messages import JOB, Job
from peak_mcp.runner.pool import CANCEL, POLL_S, DevicePool, DeviceQueues, JobFailed, Progress
from peak_mcp.runner.replies import JobResult

log = structlog.get_logger("peak_mcp.ray")
RESULT: TypeAdapter[JobResult] = TypeAdapter(JobResult)
# Backends whose runtime honours the visible-devices variable Ray sets: inside the actor its one GPU is device 0.
VISIBLE_DEVICES_BACKENDS = ("cuda", "hip")


class ActorReply(BaseModel):
    """What an actor or compile task sends back: the job's result, or the JobFailed it raised (stage included, so
    the tuning fan-out can tell which configuration killed the worker)."""

    ok: bool
    result: dict[str, Any] | None = None
    kind: str = ""
    message: str = ""
    hint: str | None = None
    stage: str = ""

    def unwrap(self) -> JobResult:
        if self.ok and self.result is not None:
            return RESULT.validate_python(self.result)
        failed = JobFailed(self.kind or "internal", self.message, self.hint)
        failed.stage = self.stage
        raise failed


def run_in_pool(pool: DevicePool, backend: str, index: int, job: dict[str, Any], inactivity_s: float,
                total_s: float) -> dict[str, Any]:
    """One job on an embedded pool, as an ActorReply's JSON (what crosses Ray)."""
    try:
        result = pool.run(backend, index, JOB.validate_python(job), inactivity_s=inactivity_s, total_s=total_s)
    except JobFailed as exc:
        return ActorReply(ok=False, kind=exc.kind, message=exc.message, hint=exc.hint,
                          stage=exc.stage).model_dump()
    return ActorReply(ok=True, result=result.model_dump(mode="json")).model_dump()


class DeviceHost:
    """The body of a device actor: an embedded pool for the one GPU Ray gave it."""

    def __init__(self, backend: str, index: int, python: str | None, options: dict[str, Any]) -> None:
        import ray

        gpus = ray.get_gpu_ids()
        self.backend = backend
        self.local = 0 if backend in VISIBLE_DEVICES_BACKENDS or not gpus else int(gpus[0])
        env = {**os.environ, "PEAK_MCP_RAY_DEVICE": str(index)}  # the server's index, for logs
        self.pool = DevicePool(python=python or sys.executable, env=env, options=lambda _b, _i: options)

    def run(self, job: dict[str, Any], inactivity_s: float, total_s: float) -> dict[str, Any]:
        return run_in_pool(self.pool, self.backend, self.local, job, inactivity_s, total_s)

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


def compile_task(backend: str, python: str | None, options: dict[str, Any], job: dict[str, Any],
                 inactivity_s: float, total_s: float) -> dict[str, Any]:
    """A compile-only job (no device) as a Ray task: a fresh worker subprocess, then gone."""
    pool = DevicePool(python=python or sys.executable, options=lambda _b, _i: options)
    try:
        return run_in_pool(pool, backend, -1, job, inactivity_s, total_s)
    finally:
        pool.close()


def connect(address: str, runtime_env: dict[str, Any] | None = None) -> None:
    """Join the Ray cluster at `address` (`auto`: the one this node belongs to, as `ray start` left it)."""
    try:
        import ray
    except ImportError:
        raise Unavailable("--ray needs Ray, which is not installed",
                          'install it with `pip install "peak-mcp[ray]"` on this node and every node of the '
                          "cluster.") from None
    if not ray.is_initialized():
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)


class RayDevicePool:
    """DevicePool's interface over Ray: `run` a job on a device's actor (or a compile task), `queue_length`,
    `restarts`, `close`."""

    def __init__(self, *, python: str | None = None,
                 options: Callable[[str, int], dict[str, Any]] | None = None) -> None:
        import ray

        self._ray = ray
        self.python = python  # None: the actor's own interpreter (the one Ray runs on that node)
        self.options = options or (lambda _backend, _index: {})
        self._actors: dict[tuple[str, int], Any] = {}
        self.queues = DeviceQueues()
        self._actor_class = ray.remote(num_gpus=1, num_cpus=1, max_restarts=0)(DeviceHost)
        self._compile = ray.remote(num_cpus=1, max_retries=0)(compile_task)
        self.restarts = 0

    def queue_length(self, backend: str, index: int) -> int:
        return self.queues.length((backend, index))

    def warm(self, backend: str, index: int) -> None:
        """A device's actor starts with its first job (DevicePool.warm starts a worker ahead of it)."""

    def run(self, backend: str, index: int, job: Job, *, inactivity_s: float, total_s: float,
            progress: Progress | None = None, cancel: threading.Event | None = None) -> JobResult:
        key = (backend, index)
        cancel = cancel if cancel is not None else CANCEL.get()
        with self.queues.turn(key, cancel, getattr(job, "type", ""), progress):
            return self._run(key, job, inactivity_s, total_s, progress, cancel)

    def _run(self, key: tuple[str, int], job: Job, inactivity_s: float, total_s: float,
             progress: Progress | None, cancel: threading.Event | None) -> JobResult:
        backend, index = key
        payload = job.model_dump(mode="json")
        if progress:
            progress(f"sent to Ray ({'a compile task' if index < 0 else f'device {index} actor'})")
        if index < 0:
            ref = self._compile.remote(backend, self.python, self.options(backend, index), payload, inactivity_s,
                                       total_s)
            actor = None
        else:
            actor = self._actor(key)
            ref = actor.run.remote(payload, inactivity_s, total_s)
        try:
            while True:
                done, _ = self._ray.wait([ref], timeout=POLL_S)
                if done:
                    break
                if cancel is not None and cancel.is_set():
                    if actor is not None:
                        self._drop(key, actor)
                    else:
                        self._ray.cancel(ref, force=True)
                    raise JobFailed("cancelled", "the request was cancelled; the job was stopped and its Ray "
                                    "worker restarted.")
            reply = ActorReply.model_validate(self._ray.get(ref))
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.WorkerCrashedError,
                self._ray.exceptions.ActorDiedError) as exc:
            self._drop(key, actor)
            raise JobFailed("worker_died", f"the Ray worker for {backend} device {index} was lost "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})",
                            "submit again: a new actor starts on a node with a free GPU.") from None
        except self._ray.exceptions.RayError as exc:  # the task itself failed (an import error on a node, ...)
            raise JobFailed("internal", f"internal error: Ray could not run the job on {backend} device {index} "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0][:300]})",
                            "check that every node has the same peak-mcp and Ray (`ray status`).") from None
        return reply.unwrap()

    def _actor(self, key: tuple[str, int]) -> Any:
        actor = self._actors.get(key)
        if actor is None:
            backend, index = key
            actor = self._actor_class.remote(backend, index, self.python, self.options(backend, index))
            self._actors[key] = actor
            log.info("ray actor started", backend=backend, device=index)
        return actor

    def _drop(self, key: tuple[str, int], actor: Any) -> None:
        if actor is not None and self._actors.get(key) is actor:
            del self._actors[key]
            self.restarts += 1
            try:
                self._ray.kill(actor)
            except Exception:  # already gone with its node
                log.info("ray actor already gone", device=key[1])

    def close(self) -> None:
        for actor in list(self._actors.values()):
            try:
                self._ray.kill(actor)
            except Exception:
                log.info("ray actor already gone")
        self._actors.clear()


def cluster_probe(probe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The devices of the cluster: `probe` run in a Ray task holding one GPU (it sees that GPU as device 0), its
    device listed once per GPU the cluster has. Assumes one GPU model across the cluster: a mixed cluster would need
    a probe per node (not done yet). Backends without devices there are reported as the task found them."""
    import ray

    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus == 0:
        return probe()
    report = ray.get(ray.remote(num_gpus=1, num_cpus=1)(probe).remote())
    for backend in report.values():
        found = backend.get("devices") or []
        if found:
            backend["devices"] = [{**found[0], "index": i} for i in range(gpus)]
    return report
