"""Input sets and their references kept in the worker between submissions (issue 35).

A problem file's reference runs in its problem host (torch, float64) and crosses a socket: 10-20 s a submission at
KernelBench's sizes, paid again by every submission of a session for the same inputs. A session's jobs draw their
inputs from the session's seed, so (problem, dtype, sizes, seed, stress) names one input set and its reference:
computed once, kept where the validator computes (device memory on a GPU), handed out as copies (the timed launches'
audit changes elements of both). Kept only within a budget of memory; cleared when the device runs short.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any

import numpy as np

from peak_mcp.evaluation.kernel_reference import KernelReferenced
from peak_mcp.problems.base import BufferArg, Problem, Reference

Key = tuple[Any, ...]
HOST_BUDGET_BYTES = 1 << 30  # numpy (a CPU Vulkan device, a compile-only worker): the worker's own memory
DEVICE_BUDGET_BYTES = 16 << 30
DEVICE_BUDGET_SHARE = 0.15  # of the device's memory, whichever is less
DEVICE_FREE_SHARE = 0.25  # an entry is kept only while this share of the device stays free after it
SPARE_HOST_SHARE = 0.0625  # spare sets: of the host memory available when one is put (each GPU worker holds its own)
SPARE_HOST_MAX_BYTES = 8 << 30


def identity(problem: Problem) -> Any | None:
    """What names a problem's inputs and reference across jobs: a built-in problem's name, a problem file's path
    and sha256; None (never kept) for anything else, e.g. a session whose reference is a kernel of its own."""
    if isinstance(problem, KernelReferenced):
        return None
    declaration = getattr(problem, "declaration", None)
    if declaration is not None:
        return ("file", declaration.path, declaration.sha256)
    return ("builtin", problem.name) if getattr(problem, "source", None) == "built-in" else None


class ReferenceCache:
    def __init__(self) -> None:
        self._kept: OrderedDict[Key, tuple[dict[str, Any], dict[str, Reference], int]] = OrderedDict()
        self.hits = self.misses = 0

    @staticmethod
    def keeps(problem: Problem, xp: Any) -> bool:
        """Whether this problem's sets are kept where `xp` computes: a problem with an identity, numpy or cupy (an
        array module of a tool's own is not)."""
        return identity(problem) is not None and getattr(xp, "__name__", None) in ("numpy", "cupy")

    def key(self, problem: Problem, xp: Any, dtype: str, sizes: dict[str, int], seed: int,
            stressed: bool) -> Key | None:
        if not self.keeps(problem, xp):
            return None
        return (identity(problem), xp.__name__, dtype, tuple(sorted(sizes.items())), int(seed), bool(stressed))

    def get(self, key: Key | None, xp: Any) -> tuple[dict[str, Any], dict[str, Reference]] | None:
        if key is None or key not in self._kept:
            self.misses += key is not None
            return None
        self._kept.move_to_end(key)
        self.hits += 1
        inputs, refs, _ = self._kept[key]
        return _copy_inputs(inputs, xp), {name: _copy_reference(ref, xp) for name, ref in refs.items()}

    def put(self, key: Key | None, xp: Any, inputs: dict[str, Any], refs: dict[str, Reference]) -> None:
        if key is None:
            return
        size = _bytes(inputs, refs)
        budget = _budget(xp)
        if size > budget // 2 or not _room_left(xp, size):
            return
        self._kept[key] = (_copy_inputs(inputs, xp), {n: _copy_reference(r, xp) for n, r in refs.items()}, size)
        self._kept.move_to_end(key)
        while sum(entry[2] for entry in self._kept.values()) > budget:
            self._kept.popitem(last=False)

    def __contains__(self, key: Key | None) -> bool:
        return key is not None and key in self._kept

    def clear(self) -> None:
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)


def _copy_inputs(inputs: dict[str, Any], xp: Any, source: Any = None) -> dict[str, Any]:
    """Copies in `xp`'s memory; from `source`'s (cupy) to the host's where `xp` is numpy and `source` is not."""
    return {name: _copy(value, xp, source) if hasattr(value, "shape") else value for name, value in inputs.items()}


def _copy(array: Any, xp: Any, source: Any) -> Any:
    if xp is np and source is not None and source is not np:
        return source.asnumpy(array)  # a new host array
    return xp.array(array, copy=True)


def _copy_reference(ref: Reference, xp: Any, source: Any = None) -> Reference:
    def copied(array: Any) -> Any:
        return None if array is None else _copy(array, xp, source)

    return dataclasses.replace(ref, values=copied(ref.values), indices=copied(ref.indices), scale=copied(ref.scale))


def _bytes(inputs: dict[str, Any], refs: dict[str, Reference]) -> int:
    arrays = [v for v in inputs.values() if hasattr(v, "nbytes")]
    arrays += [a for r in refs.values() for a in (r.values, r.indices, r.scale) if a is not None]
    return int(sum(int(a.nbytes) for a in arrays))


def _budget(xp: Any) -> int:
    if xp is np:
        return HOST_BUDGET_BYTES
    _, total = xp.cuda.runtime.memGetInfo()
    return int(min(DEVICE_BUDGET_BYTES, DEVICE_BUDGET_SHARE * total))


MEMINFO = "/proc/meminfo"
# In a container /proc/meminfo reports the whole host: its own memory cgroup (v2, then v1) says what it may use
# (limit, usage, stat file, and the stat's reclaimable page cache, which usage counts).
CGROUP_MEMORY = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat",
                  "inactive_file"),
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
                  "/sys/fs/cgroup/memory/memory.stat", "total_inactive_file"))
_NO_LIMIT = 1 << 60  # cgroup v1 writes an unlimited group's limit as a page-rounded 2**63 - 1, v2 as "max"


def _field(path: str, name: str) -> int | None:
    """The number after `name` in a "name value" file (meminfo's "MemAvailable: N kB", a cgroup's memory.stat)."""
    try:
        with open(path) as lines:
            for line in lines:
                words = line.replace(":", " ").split()
                if words and words[0] == name:
                    return int(words[1]) << (10 if words[2:3] == ["kB"] else 0)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    for limit_path, usage_path, stat_path, cache in CGROUP_MEMORY:
        try:
            with open(limit_path) as limit_file, open(usage_path) as usage_file:
                limit, usage = limit_file.read().strip(), int(usage_file.read())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= _NO_LIMIT:
            return None
        return max(0, int(limit) - usage + (_field(stat_path, cache) or 0))
    return None


def _available_host_bytes() -> int | None:
    """What this process may still take: MemAvailable, or less where its container's memory cgroup allows less."""
    known = [n for n in (_field(MEMINFO, "MemAvailable"), _cgroup_available()) if n is not None]
    return min(known) if known else None


def spare_host_budget() -> int:
    """Host memory the spare sets may hold: a share of what the host has free, at least HOST_BUDGET_BYTES. A fixed
    1 GiB refused every set of a KernelBench GEMV (a 512 MiB matrix), so each of its submissions drew its fresh
    trial's inputs and float64 reference again (3-4 s on an H200)."""
    available = _available_host_bytes()
    if available is None:
        return HOST_BUDGET_BYTES
    return max(HOST_BUDGET_BYTES, min(SPARE_HOST_MAX_BYTES, int(SPARE_HOST_SHARE * available)))


def _room_left(xp: Any, size: int) -> bool:
    if xp is np:
        return True
    free, total = xp.cuda.runtime.memGetInfo()
    return free - size > DEVICE_FREE_SHARE * total


# Outputs this small are drawn fresh in one trial of every validation, kept sets or not: a wrong result's message
# quotes expected values, and over a session's fixed inputs an agent could learn a small output's every value and
# submit constants. Past this size the quoted values cannot add up to an output.
FRESH_ELEMENTS = 1 << 20


def fresh_trial(problem: Problem, dtype: str, sizes: dict[str, int], trials: int) -> int | None:
    """The trial that draws fresh inputs (never kept) where the outputs are small: the second (the first when there
    is one), not the stress trial where another is left; None for large outputs."""
    outputs = sum(a.count(sizes) for a in problem.arguments(dtype) if isinstance(a, BufferArg) and a.is_output)
    if outputs > FRESH_ELEMENTS:
        return None
    return 1 if trials >= 3 else 0


class SpareSets:
    """Fresh input sets drawn ahead, each for one use: the fresh trial of a validation whose output is small
    (fresh_trial), and the validation on fresh inputs of a version faster than the vendor library (runner/jobs.py).
    Drawing them took 3-4 s of every such submission of a KernelBench GEMV on an H200; a set drawn between
    submissions from the OS's randomness is as unseen when it is used, and it is used once: `take` hands it over
    and forgets it. Held in host memory, out of reach of the kernels that run meanwhile (a stray write into the
    device's memory pool is not every sanitizer's to see), and copied to the device when taken. Keyed by the
    session (`owner`, its seed) too: no session takes, or learns of, another's. At most PER_KEY sets a key, and
    spare_host_budget() in all (the oldest go first; a set over half of it is not held)."""

    PER_KEY = 2

    def __init__(self) -> None:
        self._sets: OrderedDict[Key, list[tuple[dict[str, Any], dict[str, Reference], int]]] = OrderedDict()

    @staticmethod
    def key(problem: Problem, xp: Any, dtype: str, sizes: dict[str, int], stressed: bool, owner: int) -> Key | None:
        if not ReferenceCache.keeps(problem, xp):
            return None
        return (identity(problem), xp.__name__, dtype, tuple(sorted(sizes.items())), bool(stressed), int(owner))

    def put(self, key: Key | None, xp: Any, inputs: dict[str, Any], refs: dict[str, Reference]) -> bool:
        size, budget = _bytes(inputs, refs), spare_host_budget()
        if key is None or self.count(key) >= self.PER_KEY or size > budget // 2:
            return False
        held = (_copy_inputs(inputs, np, xp), {n: _copy_reference(r, np, xp) for n, r in refs.items()}, size)
        self._sets.setdefault(key, []).append(held)
        self._sets.move_to_end(key)
        while self.nbytes() > budget:
            oldest = next(iter(self._sets))
            self._sets[oldest].pop(0)
            if not self._sets[oldest]:
                del self._sets[oldest]
        return self.count(key) > 0

    def take(self, key: Key | None, xp: Any) -> tuple[dict[str, Any], dict[str, Reference]] | None:
        held = self._sets.get(key) if key is not None else None
        if not held:
            return None
        inputs, refs, _ = held.pop(0)
        if not held:
            del self._sets[key]
        return _copy_inputs(inputs, xp), {n: _copy_reference(r, xp) for n, r in refs.items()}

    def count(self, key: Key | None) -> int:
        return len(self._sets.get(key, ())) if key is not None else 0

    def nbytes(self) -> int:
        return sum(entry[2] for held in self._sets.values() for entry in held)

    def clear(self) -> None:
        self._sets.clear()

    def __len__(self) -> int:
        return sum(len(held) for held in self._sets.values())


KEPT = ReferenceCache()  # the worker process's own (one device per worker)
SPARE = SpareSets()
