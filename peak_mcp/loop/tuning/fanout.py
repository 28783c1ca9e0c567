"""Tuning fan-out: the batches of one `tune` call measured at once on every idle device of the session's model.

Only one model per ranking: times from two kinds of GPU do not compare, so a configuration measured on another
model could win or lose for the wrong reason. The session's own device always takes part (it may be busy: its
chunk then waits in its queue); other devices only while nothing is queued on them, so a tune never delays another
session's jobs by more than the chunk it started. A device whose worker dies mid-chunk is reaped by the pool; its
unfinished configurations go again on another device, so no configuration asked for is lost.
"""

from __future__ import annotations

import contextvars
import queue
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

    def measure(self, batch: list[Config]) -> list[ConfigResult]:
        lanes = self._lanes or self.devices()
        self._lanes = []  # a plan serves one batch
        live = list(lanes)
        pending: list[tuple[list[Config], int | None]] = [(batch[i::len(live)], None) for i in range(len(live))]
        pending = [(chunk, None) for chunk, _ in pending if chunk]
        results: list[ConfigResult] = []
        while pending:
            rounds = self._assign(pending, live)
            pending = []
            for device, chunk, outcome in self._run_round(rounds, len(lanes)):
                if isinstance(outcome, list):
                    results.extend(r.model_copy(update={"device": device}) for r in outcome)
                    continue
                if outcome.kind == "cancelled":
                    raise outcome
                crashed = crashed_config(outcome.stage, chunk)
                if crashed is not None:  # the configuration killed its worker: it fails, the rest go elsewhere
                    results.append(ConfigResult(params=crashed.params, status="failed", kind="error",
                                                reason=str(outcome)[:300], device=device))
                    rest = [c for c in chunk if c.key != crashed.key]
                else:  # nothing to blame but the device (its worker did not start, or died between configurations)
                    if device in live:
                        live.remove(device)
                    if not live:
                        raise outcome
                    rest = chunk
                if rest:
                    pending.append((rest, device))
        return results

    @staticmethod
    def _assign(pending: list[tuple[list[Config], int | None]],
                live: list[int]) -> dict[int, list[list[Config]]]:
        """Each chunk to the least loaded live device, another than the one it failed on where there is one."""
        rounds: dict[int, list[list[Config]]] = {d: [] for d in live}
        for chunk, failed_on in pending:
            others = [d for d in live if d != failed_on] or live
            device = min(others, key=lambda d: (len(rounds[d]), live.index(d)))
            rounds[device].append(chunk)
        return {d: chunks for d, chunks in rounds.items() if chunks}

    def _run_round(self, rounds: dict[int, list[list[Config]]],
                   lanes: int) -> list[tuple[int, list[Config], list[ConfigResult] | JobFailed]]:
        """One thread per device runs its chunks in turn; progress is relayed from this thread (the MCP layer
        reports progress only from the request's own thread)."""
        notes: queue.SimpleQueue[str] = queue.SimpleQueue()

        def on_device(device: int) -> list[tuple[int, list[Config], list[ConfigResult] | JobFailed]]:
            out: list[tuple[int, list[Config], list[ConfigResult] | JobFailed]] = []
            note = (lambda m: notes.put(f"device {device}: {m}")) if lanes > 1 else notes.put
            for chunk in rounds[device]:
                try:
                    out.append((device, chunk, self.run(device, chunk, self.compile_workers(lanes), note)))
                except JobFailed as exc:
                    out.append((device, chunk, exc))
            return out

        with ThreadPoolExecutor(max_workers=len(rounds), thread_name_prefix="tune-device") as threads:
            # each thread runs in a copy of this context: the request's cancel token reaches the pool
            futures: list[Future[Any]] = [threads.submit(contextvars.copy_context().run, on_device, d)
                                          for d in rounds]
            remaining = set(futures)
            while remaining:
                _, remaining = wait(remaining, timeout=RELAY_S, return_when=FIRST_COMPLETED)
                self._relay(notes)
            self._relay(notes)
            return [item for f in futures for item in f.result()]

    def _relay(self, notes: queue.SimpleQueue[str]) -> None:
        while True:
            try:
                self.progress(notes.get_nowait())
            except queue.Empty:
                return
