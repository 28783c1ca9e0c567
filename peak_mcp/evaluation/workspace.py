"""Device buffers for one problem instance, each between two guard regions.

Layout of every buffer: [front guard | body | tail guard]. The kernel gets a pointer to the body. An input's
guards hold a byte pattern that is NaN read as f32, f16 or bf16 at every aligned offset, so a kernel that reads
past an input poisons its own result. An output's guards hold a finite canary instead: NaN arithmetic keeps the
payload, so a NaN read past an input and stored past an output (or `C[M*N] += x`) could leave NaN guard bytes
unchanged, while any store of a computed value changes the canary. The tail guard is as large as the body
(within bounds), so writes well past the end still land in it. Outputs are poisoned with 0xFF bytes (NaN in every
float type) before each launch, so an element the kernel never wrote is seen.

The validator's array module (`xp`) is the executor's by default. Beside an executor that keeps host copies
(Vulkan) it may be cupy: then inputs and output bodies cross between the two, and guards and poison stay with the
executor's copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from peak_mcp.backends.base import Executor
from peak_mcp.core.dtypes import STORAGE, itemsize
from peak_mcp.problems.base import BufferArg, Problem, ScalarArg, Sizes

# bytes a5 7f c3 ff: f32 0xffc37fa5, f16 0x7fa5 and 0xffc3, bf16 the same halves: all NaN, none all-ones.
GUARD_PATTERN = np.array([0xA5, 0x7F, 0xC3, 0xFF], np.uint8)
# bytes 3c a5 5a c3: f32 -218.6, f16 and bf16 halves finite too; an unlikely value for a kernel to store.
CANARY_PATTERN = np.array([0x3C, 0xA5, 0x5A, 0xC3], np.uint8)
FRONT_GUARD_BYTES = 1 << 20  # a multiple of every Vulkan minStorageBufferOffsetAlignment and CUDA's 256
TAIL_GUARD_MIN_BYTES = 4 << 20
TAIL_GUARD_MAX_BYTES = 64 << 20
POISON = 0xFF
ALT_POISON = 0x7F  # a second poison tells an element never written from one the kernel set to all ones


def tail_guard_bytes(body_bytes: int) -> int:
    return min(TAIL_GUARD_MAX_BYTES, max(TAIL_GUARD_MIN_BYTES, (body_bytes + 3) // 4 * 4))


@dataclass
class DeviceBuffer:
    arg: BufferArg
    handle: Any
    nbytes: int
    tail: int

    @property
    def itemsize(self) -> int:
        return itemsize(self.arg.dtype)


@dataclass
class GuardDamage:
    buffer: str
    side: str  # "before" | "after"
    offsets: list[int]  # byte offsets from the body's start (negative before it) of the first changed bytes
    count: int


class Workspace:
    def __init__(self, executor: Executor, problem: Problem, dtype: str, sizes: Sizes, xp: Any = None) -> None:
        self.executor, self.sizes = executor, dict(sizes)
        self.host = executor.xp  # where buffer bytes come back: guards and poison are built and checked there
        self.xp = self.host if xp is None else xp  # where the validator computes: inputs, bodies, references
        assert self.xp is self.host or self.host is np, "a validator beside device buffers must be theirs"
        args = problem.arguments(dtype)
        self.scalars = [a.value(sizes) for a in args if isinstance(a, ScalarArg)]
        self.buffers: list[DeviceBuffer] = []
        try:
            for arg in (a for a in args if isinstance(a, BufferArg)):
                nbytes = arg.count(sizes) * itemsize(arg.dtype)
                tail = tail_guard_bytes(nbytes)
                handle = executor.alloc(FRONT_GUARD_BYTES + nbytes + tail)
                self.buffers.append(DeviceBuffer(arg, handle, nbytes, tail))
            self.fill_guards()
        except BaseException:
            self.close()
            raise
        self.handles = [executor.pointer(b.handle, FRONT_GUARD_BYTES) for b in self.buffers]

    def close(self) -> None:
        for buf in self.buffers:
            self.executor.free(buf.handle)
        self.buffers = []

    def buffer(self, name: str) -> DeviceBuffer:
        return next(b for b in self.buffers if b.arg.name == name)

    @property
    def outputs(self) -> list[DeviceBuffer]:
        return [b for b in self.buffers if b.arg.is_output]

    # --- contents --------------------------------------------------------------------------------------------
    def load(self, inputs: dict[str, Any]) -> None:
        """Inputs into their bodies, poison into the outputs; guards are left as they are (checked later)."""
        for buf in self.buffers:
            if not buf.arg.is_output:
                self.executor.write(buf.handle, self._out(inputs[buf.arg.name].reshape(-1).view(np.uint8)),
                                    FRONT_GUARD_BYTES)
        self.poison_outputs()

    def write_element(self, name: str, index: int, value: Any) -> None:
        """Store one element (a 1-element array of the buffer's storage dtype) at flat `index`."""
        buf = self.buffer(name)
        self.executor.write(buf.handle, self._out(value.view(np.uint8)), FRONT_GUARD_BYTES + index * buf.itemsize)

    def poison_outputs(self, byte: int = POISON) -> None:
        for buf in self.outputs:
            self.executor.write(buf.handle, self.host.full(buf.nbytes, byte, np.uint8), FRONT_GUARD_BYTES)

    def fill_guards(self, input_pattern: np.ndarray = GUARD_PATTERN, only: str | None = None) -> None:
        """Fill every input's guards with `input_pattern` (the NaN pattern, or zeros to tell a read past an
        input from a kernel that makes NaN itself) and every output's with the canary. `only`: that input's guards
        get `input_pattern`, the other inputs' zeros (which input a kernel reads past)."""
        for buf in self.buffers:
            pattern = CANARY_PATTERN if buf.arg.is_output else input_pattern
            if only is not None and not buf.arg.is_output and buf.arg.name != only:
                pattern = np.zeros(4, np.uint8)
            self.executor.write(buf.handle, self._tiled(pattern, FRONT_GUARD_BYTES), 0)
            self.executor.write(buf.handle, self._tiled(pattern, buf.tail), FRONT_GUARD_BYTES + buf.nbytes)

    @staticmethod
    def _pattern(buf: DeviceBuffer) -> np.ndarray:
        return CANARY_PATTERN if buf.arg.is_output else GUARD_PATTERN

    def body(self, name: str) -> Any:
        """The body of buffer `name` as a flat array of its storage dtype (in xp)."""
        buf = self.buffer(name)
        raw = self.executor.read(buf.handle, buf.nbytes, FRONT_GUARD_BYTES)
        return (raw if self.xp is self.host else self.xp.asarray(raw)).view(STORAGE[buf.arg.dtype])

    def guard_damage(self) -> GuardDamage | None:
        """The first guard whose bytes changed, or None."""
        for buf in self.buffers:
            for side, offset, size in (("before", 0, FRONT_GUARD_BYTES),
                                       ("after", FRONT_GUARD_BYTES + buf.nbytes, buf.tail)):
                words = self.executor.read(buf.handle, size, offset).reshape(-1, 4)  # guards are whole words
                changed = (words != self.host.asarray(self._pattern(buf))).reshape(-1)
                count = int(changed.sum())
                if count:
                    first = [int(i) for i in self.host.flatnonzero(changed)[:5].tolist()]
                    rel = [i - FRONT_GUARD_BYTES for i in first] if side == "before" else \
                        [buf.nbytes + i for i in first]
                    return GuardDamage(buf.arg.name, side, rel, count)
        return None

    def _tiled(self, pattern: np.ndarray, nbytes: int) -> Any:
        """`pattern` repeated to `nbytes` bytes, built where it is used (made per fill, never kept: tails are up to
        64 MiB a buffer)."""
        reps = -(-nbytes // len(pattern))
        return self.host.tile(self.host.asarray(pattern), reps)[:nbytes]

    def _out(self, data: Any) -> Any:
        """Validator array -> what the executor writes (a host copy where the validator is beside it)."""
        return data if self.xp is self.host else self.xp.asnumpy(data)
