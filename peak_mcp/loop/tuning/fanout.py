"""Tuning fan-out: the batches of one `tune` call measured at once on every idle device of the session's model.

Only one model per ranking: times from two kinds of GPU do not compare, so a configuration measured on another
model could win or lose for the wrong reason. The session's own device always takes part (it may be busy: its
chunk then waits in its queue); other devices only while nothing is queued on them, so a tune never delays another
session's jobs by more than the chunk it started. A device whose worker dies mid-chunk is reaped by the pool; its
unfinished configurations go again on another device, so no configuration asked for is lost.
"""

from __future__ import annotations

import contextvars
import math
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from peak_mcp.core.devices import Device
from peak_mcp.evaluation.configs import Config, ConfigResult
from peak_mcp.loop.tuning.search import crashed_config
from peak_mcp.runner.pool import JobFailed

Progress = Callable[[str], None]
# Measure one chunk on one device with so many compile threads (a worker's tune job); JobFailed when the worker
# dies or fails the job.
RunChunk = Callable[[int, list[Config], int | None, Progress], list[ConfigResult]]
RELAY_S = 0.2  # how often the calling thread relays the device threads' progress


def same_model(a: Device, b: Device) -> bool:
    return a.backend == b.backend and a.name == b.name and a.arch == b.arch


def tuning_devices(own: Device, own_index: int, devices: Sequence[tuple[int, Device]],
                   queued: Callable[[int], int]) -> list[int]:
    """The session's device first, then every other device of its model with nothing queued, by index."""
    helpers = sorted(i for i, d in devices if i != own_index and same_model(d, own) and queued(i) == 0)
    return [own_index, *helpers]


class FanOut:
    """`plan()` picks the devices for the next batch and says how large it may be; `measure(batch)` splits the batch
    over them and measures the chunks concurrently (run_tuning's `batch_size` and `measure`)."""

    def __init__(self, run: RunChunk, devices: Callable[[], list[int]], *, per_device: Callable[[int], int],
                 cores: int, progress: Progress = lambda _: None) -> None:
        """`per_device(lanes)`: configurations per device when `lanes` devices measure at once (tuning.batch_size);
        `cores`: the cores their compiles share."""
        self.run, self.devices, self.per_device = run, devices, per_device
        self.cores, self.progress = max(1, cores), progress
        self._lanes: list[int] = []

    def compile_workers(self, lanes: int) -> int | None:
        """Compile threads per job: the cores shared when several devices' jobs compile at once; None (the worker's
        own core count) for one."""
        return max(1, self.cores // lanes) if lanes > 1 else None

    def plan(self) -> int:
        self._lanes = self.devices()
        return self.per_device(len(self._lanes)) * len(self._lanes)

    def plan_all(self, remaining: int) -> int:
        """A batch of everything left (a strategy that learns nothing between batches): the devices pull chunks
        of it as they finish, so none waits at a batch's end for the slowest (a worker starting, another session's
        job) and each job's first compile is paid once per chunk, not once per small batch."""
        self._lanes = self.devices()
        return remaining

    def chunk_size(self, count: int, lanes: int) -> int:
        """Configurations per job: the plan's per-device share, or for a larger batch (plan_all) an even split into
        rounds of at most MAX_CHUNK per device."""
        share = self.per_device(lanes)
        if count <= share * lanes:
            return max(1, min(share, math.ceil(count / lanes)))
        rounds = math.ceil(count / (lanes * MAX_CHUNK))
        return math.ceil(count / (lanes * rounds))

    def measure(self, batch: list[Config]) -> list[ConfigResult]:
        """The batch in chunks on the planned devices, each device taking the next chunk when it is done. A chunk
        whose configuration killed its worker goes on without it; one whose device failed goes to another."""
        lanes = self._lanes or self.devices()
        self._lanes = []  # a plan serves one batch
        size = self.chunk_size(len(batch), len(lanes))
        work = _Work([batch[i:i + size] for i in range(0, len(batch), size)], lanes)
        notes: queue.SimpleQueue[str] = queue.SimpleQueue()

        def on_device(device: int) -> None:
            note = (lambda m: notes.put(f"device {device}: {m}")) if len(lanes) > 1 else notes.put
            while (chunk := work.take(device)) is not None:
                try:
                    outcome: list[ConfigResult] | JobFailed = self.run(device, chunk, self.compile_workers(len(lanes)),
                                                                       note)
                except JobFailed as exc:
                    outcome = exc
                except BaseException as exc:  # the server's own fault: the other threads must not wait for it
                    work.abort(exc)
                    raise
                work.done(device, chunk, outcome)

        with ThreadPoolExecutor(max_workers=len(lanes), thread_name_prefix="tune-device") as threads:
            # each thread runs in a copy of this context: the request's cancel token reaches the pool
            futures: list[Future[Any]] = [threads.submit(contextvars.copy_context().run, on_device, d)
                                          for d in lanes]
            remaining = set(futures)
            while remaining:
                _, remaining = wait(remaining, timeout=RELAY_S, return_when=FIRST_COMPLETED)
                self._relay(notes)
            self._relay(notes)
            for future in futures:
                future.result()
        return work.outcome()

    def _relay(self, notes: queue.SimpleQueue[str]) -> None:
        while True:
            try:
                self.progress(notes.get_nowait())
            except queue.Empty:
                return


MAX_CHUNK = 32  # configurations per job at most: a job is bounded in time as a whole


class _Work:
    """The chunks of one batch, taken by the device threads as they come free. A chunk that failed on a device goes
    to another where one is live; a device whose worker failed (not a configuration that crashed it) takes no more.
    Threads wait while chunks are out on other devices (a failed one may come back), and leave when nothing is."""

    def __init__(self, chunks: list[list[Config]], lanes: list[int]) -> None:
        self.pending: list[tuple[list[Config], int | None]] = [(c, None) for c in chunks if c]
        self.live, self.active, self.out = set(lanes), set(lanes), 0
        self.results: list[ConfigResult] = []
        self.failure: BaseException | None = None
        self.cond = threading.Condition()

    def take(self, device: int) -> list[Config] | None:
        """The next chunk for `device`, or None once nothing is left for it. A chunk that failed on it waits for
        another device still at work, and comes back to it only when no other is."""
        with self.cond:
            while True:
                if device not in self.live or self.failure is not None:
                    return self._leave(device)
                others = (self.active & self.live) - {device}
                pick = next((i for i, (_, failed_on) in enumerate(self.pending)
                             if failed_on != device or not others), None)
                if pick is not None:
                    self.out += 1
                    return self.pending.pop(pick)[0]
                if not self.out and not self.pending:
                    return self._leave(device)
                self.cond.wait()

    def _leave(self, device: int) -> None:
        self.active.discard(device)
        self.cond.notify_all()  # a chunk that waited for another device may be this one's now
        return None

    def done(self, device: int, chunk: list[Config], outcome: list[ConfigResult] | JobFailed) -> None:
        with self.cond:
            self.out -= 1
            self.cond.notify_all()
            if isinstance(outcome, list):
                self.results.extend(r.model_copy(update={"device": device}) for r in outcome)
                return
            if outcome.kind == "cancelled":
                self.failure = outcome
                return
            crashed = crashed_config(outcome.stage, chunk)
            if crashed is not None:  # the configuration killed its worker: it fails, the rest go on
                self.results.append(ConfigResult(params=crashed.params, status="failed", kind="error",
                                                 reason=str(outcome)[:300], device=device))
                rest = [c for c in chunk if c.key != crashed.key]
            else:  # nothing to blame but the device (its worker did not start, or died between configurations)
                self.live.discard(device)
                if not self.live:
                    self.failure = outcome
                    return
                rest = chunk
            if rest:
                self.pending.append((rest, device))

    def abort(self, error: BaseException) -> None:
        with self.cond:
            self.failure = error
            self.cond.notify_all()

    def outcome(self) -> list[ConfigResult]:
        if self.failure is not None:
            raise self.failure
        return self.results
