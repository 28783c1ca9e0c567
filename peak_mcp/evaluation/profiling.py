"""What a profile says about one compiled kernel, and the pure readers behind it.

Each part of a `ProfileReport` is a section with `available` and, when it is not, `why` (what is missing and how
to get it), so an agent always learns why a number is absent. Everything here works on bytes and text that the
worker hands over (a cubin, a disassembly, SPIR-V words, ncu's CSV): no tools are run and no GPU is needed.

- CUDA resources: per-kernel registers, stack frame and shared memory from the cubin's ELF (`.nv.info` attributes,
  `.nv.shared.<kernel>` sizes), spills from ptxas's log.
- CUDA occupancy: a small calculator over the device's limits (see `occupancy`).
- SASS instruction mix: counts from nvdisasm/cuobjdump text.
- SPIR-V instruction mix: counts from the module's words (HLSL on Vulkan).
- Nsight Compute counters: a few named metrics from ncu's raw CSV page.
"""

from __future__ import annotations

import csv
import io
import math
import re
import struct
from collections import Counter
from typing import Any

from pydantic import BaseModel, Field

from peak_mcp.backends.spirv import instructions

# --- the report -------------------------------------------------------------------------------------------------


class Section(BaseModel):
    available: bool = True
    why: str | None = None  # set when unavailable: what is missing, and how to get it


class Resources(Section):
    """Per-thread and per-block resources of the entry kernel, as the compiler allocated them."""

    registers: int | None = None  # per thread
    static_shared_bytes: int | None = None  # declared __shared__ / groupshared, per block
    dynamic_shared_bytes: int | None = None  # from the launch annotation at the session's sizes
    local_bytes: int | None = None  # stack frame per thread: local arrays and spills
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    max_threads_per_block: int | None = None  # __launch_bounds__ / [numthreads]
    block: tuple[int, int, int] | None = None
    source: str | None = None
    note: str | None = None


class Occupancy(Section):
    """Resident blocks and warps per SM for the launch, and which limit binds."""

    block_threads: int | None = None
    warps_per_block: int | None = None
    shared_per_block_bytes: int | None = None  # static + dynamic + the per-block reservation, rounded up
    blocks_per_sm: int | None = None
    warps_per_sm: int | None = None
    max_warps_per_sm: int | None = None
    occupancy: float | None = None  # warps_per_sm / max_warps_per_sm
    limited_by: list[str] = Field(default_factory=list)
    blocks_by_limit: dict[str, int] = Field(default_factory=dict)  # registers, shared, warps, blocks
    driver_blocks_per_sm: int | None = None  # the CUDA driver's own answer, where a GPU was present
    waves_per_simd: int | None = None  # AMD: the compiler's figure from registers and LDS
    device_limits: dict[str, Any] = Field(default_factory=dict)
    note: str | None = None


class InstructionMix(Section):
    """Static counts: each instruction of the code once, however often a loop runs it."""

    source: str | None = None  # the tool or format counted
    counts: str | None = None  # what the numbers are: static counts of the code, never executed counts
    total: int | None = None
    groups: dict[str, int] = Field(default_factory=dict)  # fp32, fp16, tensor, integer, memory, control, ...
    ops: dict[str, int] = Field(default_factory=dict)  # the arithmetic that matters: FFMA, HMMA.16816.F32, OpFMul
    memory: dict[str, int] = Field(default_factory=dict)  # LDG.128, LDS.32, StorageBuffer.load.128, ...


class Counters(Section):
    """Nsight Compute metrics of one launch at `sizes`."""

    sizes: dict[str, int] | None = None
    metrics: dict[str, float | str] = Field(default_factory=dict)  # readable name -> value in `units`
    units: dict[str, str] = Field(default_factory=dict)
    seconds: float | None = None


class ProfileReport(BaseModel):
    backend: str
    entry: str
    device: str
    arch: str | None = None
    resources: Resources
    occupancy: Occupancy
    instruction_mix: InstructionMix
    counters: Counters

    def lean(self) -> dict[str, Any]:
        """The report without empty fields (None, {}, []), for responses read by an LLM."""
        return _prune(self.model_dump(mode="json", exclude_none=True))


def _prune(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _prune(v) for k, v in value.items() if v not in ({}, [], None)}
    return value


def unavailable(model: type[Section], why: str, **fields: Any) -> Any:
    return model(available=False, why=why, **fields)


# --- CUDA occupancy -----------------------------------------------------------------------------------------------


class CudaLimits(BaseModel):
    """Per-SM limits of one compute capability, with the allocation rules the occupancy calculator uses."""

    arch: str
    warp_size: int = 32
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_threads_per_block: int = 1024
    registers_per_sm: int = 65536
    max_registers_per_block: int = 65536
    register_unit: int = 256  # registers are given to a warp in multiples of this
    register_partitions: int = 4  # the register file is split among the SM's 4 schedulers
    shared_per_sm_bytes: int
    shared_per_block_optin_bytes: int
    reserved_shared_per_block_bytes: int = 0  # set aside by the system for every resident block (sm_80+)
    shared_unit: int = 128  # shared memory is given to a block in multiples of this
    source: str = "table"


# From the CUDA C++ Programming Guide's "Technical Specifications per Compute Capability" table and the
# cudaDevAttrReservedSharedMemoryPerBlock attribute (1 KiB from compute capability 8.0 on). Shared memory per SM
# is the largest carveout; the driver picks the carveout per kernel (by default as large as the kernel needs).
_KIB = 1024
_CUDA_TABLE: dict[str, dict[str, int]] = {
    "sm_70": dict(max_threads_per_sm=2048, max_blocks_per_sm=32, shared_per_sm_bytes=96 * _KIB,
                  shared_per_block_optin_bytes=96 * _KIB, reserved_shared_per_block_bytes=0, shared_unit=256),
    "sm_75": dict(max_threads_per_sm=1024, max_blocks_per_sm=16, shared_per_sm_bytes=64 * _KIB,
                  shared_per_block_optin_bytes=64 * _KIB, reserved_shared_per_block_bytes=0, shared_unit=256),
    "sm_80": dict(max_threads_per_sm=2048, max_blocks_per_sm=32, shared_per_sm_bytes=164 * _KIB,
                  shared_per_block_optin_bytes=163 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_86": dict(max_threads_per_sm=1536, max_blocks_per_sm=16, shared_per_sm_bytes=100 * _KIB,
                  shared_per_block_optin_bytes=99 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_87": dict(max_threads_per_sm=2048, max_blocks_per_sm=16, shared_per_sm_bytes=164 * _KIB,
                  shared_per_block_optin_bytes=163 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_89": dict(max_threads_per_sm=1536, max_blocks_per_sm=24, shared_per_sm_bytes=100 * _KIB,
                  shared_per_block_optin_bytes=99 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_90": dict(max_threads_per_sm=2048, max_blocks_per_sm=32, shared_per_sm_bytes=228 * _KIB,
                  shared_per_block_optin_bytes=227 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_100": dict(max_threads_per_sm=2048, max_blocks_per_sm=32, shared_per_sm_bytes=228 * _KIB,
                   shared_per_block_optin_bytes=227 * _KIB, reserved_shared_per_block_bytes=_KIB),
    "sm_120": dict(max_threads_per_sm=1536, max_blocks_per_sm=32, shared_per_sm_bytes=100 * _KIB,
                   shared_per_block_optin_bytes=99 * _KIB, reserved_shared_per_block_bytes=_KIB),
}
# cuda.core DeviceProperties names -> CudaLimits fields: detected values replace the table's.
_DETECTED = {"warp_size": "warp_size", "max_threads_per_multiprocessor": "max_threads_per_sm",
             "max_blocks_per_multiprocessor": "max_blocks_per_sm", "max_threads_per_block": "max_threads_per_block",
             "max_registers_per_multiprocessor": "registers_per_sm",
             "max_registers_per_block": "max_registers_per_block",
             "max_shared_memory_per_multiprocessor": "shared_per_sm_bytes",
             "max_shared_memory_per_block_optin": "shared_per_block_optin_bytes",
             "reserved_shared_memory_per_block": "reserved_shared_per_block_bytes"}


def cuda_limits(arch: str, detected: dict[str, Any] | None = None) -> CudaLimits | None:
    """Limits for an NVRTC target (sm_90a reads as sm_90), overridden by what a live device reports; None when
    the architecture is not in the table and nothing was detected."""
    base = re.sub(r"[af]$", "", arch)
    table = _CUDA_TABLE.get(base)
    found = {field: int(detected[name]) for name, field in _DETECTED.items()
             if detected and detected.get(name) is not None}
    if table is None and len(found) < 4:
        return None
    merged = {**(table or _CUDA_TABLE["sm_90"]), **found}
    return CudaLimits(arch=base, source="device" if found else "table", **merged)


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(registers: int, block_threads: int, shared_bytes: int, limits: CudaLimits) -> Occupancy:
    """Resident blocks per SM for a kernel, by the rules of CUDA's occupancy calculator (cuda_occupancy.h):

    - warps: a block takes ceil(threads / 32) warps; an SM holds max_threads_per_sm / 32 warps and at most
      max_blocks_per_sm blocks.
    - registers: a warp is given registers_per_thread * 32 rounded up to 256; the register file is split into 4
      partitions (one per scheduler) and a warp lives in one, so an SM holds 4 * floor(regs_per_sm / 4 /
      regs_per_warp) warps. A block cannot launch when regs_per_warp * (its warps rounded up to 4) exceeds the
      per-block limit (64 Ki registers).
    - shared memory: a block takes static + dynamic + the system's reservation (1 KiB from sm_80 on), rounded up
      to 128 bytes; an SM holds floor(shared_per_sm / that) blocks, with shared_per_sm the largest carveout.
    Blocks per SM is the smallest of the four; occupancy is the resident warps over the SM's maximum.
    """
    warps = math.ceil(block_threads / limits.warp_size)
    max_warps = limits.max_threads_per_sm // limits.warp_size
    by: dict[str, int] = {"warps": max_warps // warps if warps else 0, "blocks": limits.max_blocks_per_sm}
    problems: list[str] = []
    if block_threads > limits.max_threads_per_block:
        problems.append(f"{block_threads} threads exceed the {limits.max_threads_per_block}-thread block limit")
        by["warps"] = 0
    regs_per_warp = _round_up(registers * limits.warp_size, limits.register_unit) if registers > 0 else 0
    if regs_per_warp:
        per_partition = limits.registers_per_sm // limits.register_partitions // regs_per_warp
        warps_by_regs = per_partition * limits.register_partitions
        by["registers"] = warps_by_regs // warps if warps else 0
        block_regs = regs_per_warp * _round_up(warps, limits.register_partitions)
        if block_regs > limits.max_registers_per_block:
            problems.append(f"{registers} registers x {block_threads} threads need {block_regs} registers, over the "
                            f"{limits.max_registers_per_block} a block may have")
            by["registers"] = 0
    shared = shared_bytes + limits.reserved_shared_per_block_bytes
    shared_alloc = _round_up(shared, limits.shared_unit)
    if shared_bytes > limits.shared_per_block_optin_bytes:
        problems.append(f"{shared_bytes} B of shared memory exceed the per-block limit of "
                        f"{limits.shared_per_block_optin_bytes} B")
        by["shared"] = 0
    elif shared_alloc:
        by["shared"] = limits.shared_per_sm_bytes // shared_alloc
    blocks = min(by.values())
    limited = sorted(k for k, v in by.items() if v == blocks)
    active = blocks * warps
    return Occupancy(
        block_threads=block_threads, warps_per_block=warps, shared_per_block_bytes=shared_alloc,
        blocks_per_sm=blocks, warps_per_sm=active, max_warps_per_sm=max_warps,
        occupancy=round(active / max_warps, 4) if max_warps else None, limited_by=limited, blocks_by_limit=by,
        device_limits=limits.model_dump(include={"arch", "max_threads_per_sm", "max_blocks_per_sm", "registers_per_sm",
                                                 "shared_per_sm_bytes", "reserved_shared_per_block_bytes",
                                                 "source"}),
        note="; ".join(problems) or None)


# --- CUDA resources from the cubin ----------------------------------------------------------------------------

_SHT_SYMTAB, _SHT_NOBITS = 2, 8
_STT_FUNC = 2
# .nv.info attribute codes (EIATTR_*): (format, attribute) byte pairs, format 4 = 2-byte size then payload,
# 3 = a 2-byte value, 2 = a 1-byte value, 1 = none. The module-wide .nv.info holds (symbol index, value) pairs.
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_MIN_STACK_SIZE = 0x12
_EIATTR_MAX_STACK_SIZE = 0x23
_EIATTR_REGCOUNT = 0x2F
_EIATTR_MAX_THREADS = 0x05
_EIATTR_REQNTID = 0x10


class _Elf:
    """Sections and symbols of a 64-bit little-endian ELF (every cubin NVRTC makes)."""

    def __init__(self, data: bytes) -> None:
        if data[:4] != b"\x7fELF" or data[4] != 2:
            raise ValueError("not a 64-bit ELF cubin")
        self.data = data
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        # (name offset, type, flags, addr, offset, size, link, info, align, entsize)
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        names_at = self.sections[shstrndx][4]
        self.names = [self._text(names_at, s[0]) for s in self.sections]

    def _text(self, table_offset: int, at: int) -> str:
        start = table_offset + at
        return self.data[start:self.data.index(b"\0", start)].decode(errors="replace")

    def section(self, name: str) -> tuple[int, ...] | None:
        return next((s for s, n in zip(self.sections, self.names, strict=True) if n == name), None)

    def contents(self, section: tuple[int, ...]) -> bytes:
        return b"" if section[1] == _SHT_NOBITS else self.data[section[4]:section[4] + section[5]]

    def symbols(self) -> dict[str, int]:
        """Function symbol name -> symbol index."""
        found: dict[str, int] = {}
        for symtab in (s for s in self.sections if s[1] == _SHT_SYMTAB):
            offset, size, link, entsize = symtab[4], symtab[5], symtab[6], symtab[9] or 24
            for index, pos in enumerate(range(offset, offset + size, entsize)):
                name_at, info = struct.unpack_from("<IB", self.data, pos)
                if info & 0xF == _STT_FUNC:
                    found[self._text(self.sections[link][4], name_at)] = index
        return found


def _attributes(blob: bytes) -> list[tuple[int, bytes]]:
    """(attribute, payload) pairs of an .nv.info section."""
    found, pos = [], 0
    while pos + 2 <= len(blob):
        fmt, attr = blob[pos], blob[pos + 1]
        if fmt == _EIFMT_SVAL:
            size, = struct.unpack_from("<H", blob, pos + 2)
            found.append((attr, blob[pos + 4:pos + 4 + size]))
            pos += 4 + size
        elif fmt == _EIFMT_HVAL:
            found.append((attr, blob[pos + 2:pos + 4]))
            pos += 4
        elif fmt == _EIFMT_BVAL:
            found.append((attr, blob[pos + 2:pos + 3]))
            pos += 4  # a byte value is padded to 4 bytes
        elif fmt == _EIFMT_NVAL:
            found.append((attr, b""))
            pos += 2
        else:
            break  # an unknown format: stop rather than misread the rest
    return found


def cubin_resources(cubin: bytes, entry: str) -> dict[str, int]:
    """Registers, stack frame, stack size, shared-section bytes and thread limits of `entry`, read from the cubin.

    `shared_section_bytes` is the size of `.nv.shared.<entry>`; from sm_90 on NVRTC 13 places the 1 KiB system
    reservation in that section too, so it is not the declared __shared__ size (ptxas's log gives that)."""
    elf = _Elf(cubin)
    symbol = elf.symbols().get(entry)
    if symbol is None:
        raise ValueError(f"no function '{entry}' in the cubin")
    found: dict[str, int] = {}
    info = elf.section(".nv.info")
    names = {_EIATTR_REGCOUNT: "registers", _EIATTR_FRAME_SIZE: "local_bytes",
             _EIATTR_MAX_STACK_SIZE: "max_stack_bytes", _EIATTR_MIN_STACK_SIZE: "min_stack_bytes"}
    for attr, payload in _attributes(elf.contents(info)) if info else ():
        if attr in names and len(payload) == 8:
            sym, value = struct.unpack("<II", payload)
            if sym == symbol:
                found[names[attr]] = value
    own = elf.section(f".nv.info.{entry}")
    for attr, payload in _attributes(elf.contents(own)) if own else ():
        if attr in (_EIATTR_MAX_THREADS, _EIATTR_REQNTID) and len(payload) == 12:
            x, y, z = struct.unpack("<III", payload)
            found["max_threads_per_block" if attr == _EIATTR_MAX_THREADS else "required_threads"] = x * y * z
    shared = elf.section(f".nv.shared.{entry}")
    found["shared_section_bytes"] = shared[5] if shared else 0
    return found


_PTXAS_FUNCTION = re.compile(r"Function properties for (\S+)")
_PTXAS_FIELDS = {
    "local_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_store_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_load_bytes": re.compile(r"(\d+) bytes spill loads"),
    "registers": re.compile(r"Used (\d+) registers"),
    "static_shared_bytes": re.compile(r"(\d+) bytes smem"),
}


def ptxas_resources(log: str, entry: str) -> dict[str, int]:
    """ptxas -v's numbers for `entry` alone (a module may hold several kernels); smem is 0 when not printed."""
    blocks = _PTXAS_FUNCTION.split(log)
    # split() gives [before, name1, text1, name2, text2, ...]; a function's "Used" line follows its properties
    for name, text in zip(blocks[1::2], blocks[2::2], strict=True):
        if name == entry:
            found = {k: int(m.group(1)) for k, p in _PTXAS_FIELDS.items() if (m := p.search(text))}
            if "registers" in found:
                found.setdefault("static_shared_bytes", 0)
            return found
    return {}


# --- SASS instruction mix -----------------------------------------------------------------------------------------

_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P(?:T|\d)\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")
_SASS_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
_SASS_ENTRY = re.compile(r"^\s*\.other\s+([^,\s]+),\s*@\"STO_CUDA_ENTRY", re.MULTILINE)
_TENSOR = {"HMMA", "HGMMA", "IMMA", "IGMMA", "DMMA", "BMMA", "BGMMA", "QMMA", "QGMMA", "OMMA", "UTCHMMA",
           "UTCIMMA", "UTCQMMA", "UTCOMMA", "UTCMMA", "UTCBAR"}
_FP32 = {"FFMA", "FADD", "FMUL", "FMNMX", "FSETP", "FSET", "FSEL", "MUFU", "FCHK", "FSWZADD", "FFMA2",
         "FADD2", "FMUL2"}
_FP16 = {"HFMA2", "HADD2", "HMUL2", "HMNMX2", "HSETP2", "HSET2"}
_FP64 = {"DFMA", "DADD", "DMUL", "DSETP", "DMNMX"}
_CONVERT = {"F2F", "F2I", "I2F", "F2FP", "I2FP", "F2IP", "FRND"}
_CONTROL = {"BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "BREAK", "BPT", "WARPSYNC", "NOP",
            "BAR", "DEPBAR", "YIELD", "KILL", "ACQBULK", "ELECT", "WARPGROUP", "ERRBAR", "MEMBAR", "CCTL", "SYNCS",
            "LDGDEPBAR", "ARRIVES", "VOTE", "VOTEU", "MATCH", "REDUX", "SHFL", "NANOSLEEP", "PMTRIG", "CGAERRBAR"}
# memory opcode -> (space, direction); widths come from the modifiers
_MEMORY = {"LDG": ("global", "load"), "STG": ("global", "store"), "LDS": ("shared", "load"),
           "STS": ("shared", "store"), "LDL": ("local", "load"), "STL": ("local", "store"), "LD": ("generic", "load"),
           "ST": ("generic", "store"), "ATOMG": ("global", "atomic"), "ATOM": ("generic", "atomic"),
           "ATOMS": ("shared", "atomic"), "RED": ("global", "atomic"), "REDG": ("global", "atomic"),
           "LDGSTS": ("global_to_shared", "async_copy"), "LDSM": ("shared", "ldmatrix"),
           "STSM": ("shared", "stmatrix"), "UTMALDG": ("global_to_shared", "tma"),
           "UTMASTG": ("shared_to_global", "tma"), "UBLKCP": ("global_to_shared", "tma"),
           "UTMAPF": ("global", "tma_prefetch"), "LDGMC": ("global", "load")}
_WIDTHS = {"128": 128, "64": 64, "U8": 8, "S8": 8, "U16": 16, "S16": 16}


def _width(base: str, modifiers: list[str]) -> str:
    if base in ("LDSM", "STSM"):  # .16.M88.4: four 8x8 matrices per warp; MT88 loads them transposed
        count = next((m for m in reversed(modifiers) if m in ("1", "2", "4")), "1")
        return f"x{count}" + (".T" if "MT88" in modifiers else "")
    if base.startswith("UTMA") or base == "UBLKCP":
        return next((m for m in modifiers if m.endswith("D")), "") or "tile"
    return str(next((_WIDTHS[m] for m in modifiers if m in _WIDTHS), 32))


def _group(base: str) -> str:
    if base in _TENSOR:
        return "tensor"
    if base in _MEMORY:
        return "memory"
    if base in _FP32:
        return "fp32"
    if base in _FP16:
        return "fp16"
    if base in _FP64:
        return "fp64"
    if base in _CONVERT:
        return "convert"
    if base in _CONTROL:
        return "control"
    if base in ("LDC", "ULDC", "S2R", "S2UR", "CS2R", "MOV", "UMOV", "R2UR", "PRMT", "SEL"):
        return "move"
    return "integer"  # IMAD, IADD3, LOP3, SHF, LEA, ISETP, VIADD, and the uniform-datapath U* forms


def sass_mix(text: str, entry: str | None = None, source: str = "SASS") -> InstructionMix:
    """Count the instructions of a disassembly (nvdisasm or cuobjdump -sass).

    With `entry`, only that kernel's code and the non-kernel functions (its callees) are counted; text without
    section markers is counted whole."""
    entries = set(_SASS_ENTRY.findall(text))
    current: str | None = None
    opcodes: Counter[str] = Counter()
    for line in text.splitlines():
        section = _SASS_SECTION.match(line)
        if section:
            current = section.group(1)
            continue
        if "Function : " in line:  # cuobjdump -sass marks kernels so
            current = line.split("Function : ", 1)[1].strip()
            entries.add(current)
            continue
        match = _SASS_LINE.match(line)
        if not match or match.group(1) == "NOP":  # NOPs pad code to alignment; they are never issued
            continue
        if entry and current is not None and current != entry and current in entries:
            continue
        opcodes[match.group(1)] += 1
    groups: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    for opcode, count in opcodes.items():
        base, *modifiers = opcode.split(".")
        group = _group(base)
        groups[group] += count
        if group == "tensor":
            ops[opcode] += count  # the shape and types matter: HMMA.16816.F32.BF16, HGMMA.64x128x16.F32
        elif base in ("FFMA", "FADD", "FMUL", "FFMA2", "HFMA2", "DFMA", "DADD", "DMUL"):
            ops[base] += count
        elif group == "memory":
            memory[f"{base}.{_width(base, modifiers)}"] += count
    if not opcodes:
        return InstructionMix(available=False, why=f"no instructions found for '{entry}' in the disassembly",
                              source=source)
    return InstructionMix(source=source, counts=static_counts("SASS"), total=sum(opcodes.values()),
                          groups=dict(groups.most_common()),
                          ops=dict(ops.most_common()), memory=dict(sorted(memory.items())))


# --- SPIR-V instruction mix ---------------------------------------------------------------------------------------

_OP = {"ExtInstImport": 11, "ExtInst": 12, "TypeBool": 20, "TypeInt": 21, "TypeFloat": 22, "TypeVector": 23,
       "TypeMatrix": 24, "TypeArray": 28, "TypeRuntimeArray": 29, "TypeStruct": 30, "TypePointer": 32,
       "Constant": 43, "Function": 54, "FunctionParameter": 55, "Variable": 59, "Load": 61, "Store": 62,
       "CopyMemory": 63, "AccessChain": 65, "InBoundsAccessChain": 66, "PtrAccessChain": 67, "Decorate": 71,
       "CopyObject": 83, "Bitcast": 124, "Select": 169, "Phi": 245}
_POINTER_RESULTS = {_OP[n] for n in ("Variable", "AccessChain", "InBoundsAccessChain", "PtrAccessChain", "CopyObject",
                                     "FunctionParameter", "Bitcast", "Select", "Phi")}
_FLOAT_OPS = {127: "OpFNegate", 129: "OpFAdd", 131: "OpFSub", 133: "OpFMul", 136: "OpFDiv", 140: "OpFRem",
              141: "OpFMod", 142: "OpVectorTimesScalar", 143: "OpMatrixTimesScalar", 144: "OpVectorTimesMatrix",
              145: "OpMatrixTimesVector", 146: "OpMatrixTimesMatrix", 148: "OpDot"}
_INT_OPS = set(range(128, 141)) - set(_FLOAT_OPS) | set(range(194, 201))  # IAdd..SMod, shifts and bitwise
_BARRIERS = {224: "OpControlBarrier", 225: "OpMemoryBarrier"}
_COOPERATIVE = {4457: "OpCooperativeMatrixLoadKHR", 4458: "OpCooperativeMatrixStoreKHR",
                4459: "OpCooperativeMatrixMulAddKHR", 5359: "OpCooperativeMatrixLoadNV",
                5360: "OpCooperativeMatrixStoreNV", 5361: "OpCooperativeMatrixMulAddNV"}
_CONTROL_OPS = {245, 246, 247, 248, 249, 250, 251, 252, 253}  # Phi, merges, Label, Branch(Conditional), Switch, Kill
_GLSL_FMA = 50
_STORAGE = {0: "UniformConstant", 1: "Input", 2: "Uniform", 3: "Output", 4: "Workgroup", 5: "CrossWorkgroup",
            6: "Private", 7: "Function", 9: "PushConstant", 12: "StorageBuffer", 5349: "PhysicalStorageBuffer"}
_DEC_BUFFER_BLOCK = 3
_VARIABLES = {"Function", "Private", "Input", "Output", "PushConstant", "UniformConstant"}


def spirv_mix(spirv: bytes) -> InstructionMix:
    """Count a SPIR-V module's arithmetic, memory and barrier instructions (static counts, all functions).

    Loads and stores are named by the storage class of the variable they reach (a Uniform block decorated
    BufferBlock, as glslang emits for StructuredBuffer, counts as StorageBuffer) and by the bits moved."""
    types: dict[int, tuple[Any, ...]] = {}
    buffer_blocks: set[int] = set()
    constants: dict[int, int] = {}
    glsl_set: int | None = None
    pointer_root: dict[int, str] = {}  # pointer id -> storage label of the variable it derives from
    value_type: dict[int, int] = {}  # pointer id -> its pointer type id
    in_function = False
    total = 0
    groups: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    memory: Counter[str] = Counter()

    def bits(tid: int, depth: int = 0) -> int:
        t = types.get(tid)
        if t is None or depth > 16:
            return 0
        if t[0] == "scalar":
            return t[1]
        if t[0] == "vector":
            return t[2] * bits(t[1], depth + 1)
        if t[0] == "array":
            return constants.get(t[2], 0) * bits(t[1], depth + 1)
        if t[0] == "struct":
            return sum(bits(m, depth + 1) for m in t[1])
        return 0

    def label(storage: int, pointee: int) -> str:
        if storage == 2 and pointee in buffer_blocks:
            return "StorageBuffer"
        return _STORAGE.get(storage, f"StorageClass{storage}")

    for op, args in instructions(spirv):
        if op == _OP["ExtInstImport"] and bytes(struct.pack(f"<{len(args) - 1}I", *args[1:])).startswith(b"GLSL"):
            glsl_set = args[0]
        elif op == _OP["TypeBool"]:
            types[args[0]] = ("scalar", 32)
        elif op in (_OP["TypeInt"], _OP["TypeFloat"]):
            types[args[0]] = ("scalar", args[1])
        elif op in (_OP["TypeVector"], _OP["TypeMatrix"]):
            types[args[0]] = ("vector", args[1], args[2])
        elif op == _OP["TypeArray"]:
            types[args[0]] = ("array", args[1], args[2])
        elif op == _OP["TypeStruct"]:
            types[args[0]] = ("struct", list(args[1:]))
        elif op == _OP["TypePointer"]:
            types[args[0]] = ("pointer", args[1], args[2])
        elif op == _OP["Constant"] and len(args) >= 3:
            constants[args[1]] = args[2]
        elif op == _OP["Decorate"] and len(args) >= 2 and args[1] == _DEC_BUFFER_BLOCK:
            buffer_blocks.add(args[0])
        elif op == _OP["Function"]:
            in_function = True
        if op in _POINTER_RESULTS and len(args) >= 2 and types.get(args[0], ("",))[0] == "pointer":
            ptr_type, result = args[0], args[1]
            value_type[result] = ptr_type
            if op == _OP["Variable"]:
                pointer_root[result] = label(types[ptr_type][1], types[ptr_type][2])
            elif len(args) >= 3 and args[2] in pointer_root:
                pointer_root[result] = pointer_root[args[2]]
            else:
                pointer_root[result] = _STORAGE.get(types[ptr_type][1], "?")
        if not in_function:
            continue
        total += 1
        if op in (_OP["Load"], _OP["Store"]):
            pointer = args[2] if op == _OP["Load"] else args[0]
            root = pointer_root.get(pointer, "?")
            if root in _VARIABLES:  # function locals, inputs, push constants: registers once the driver compiles
                groups["variable"] += 1
                continue
            groups["memory"] += 1
            if op == _OP["Load"]:
                memory[f"{root}.load.{bits(args[0])}"] += 1
            else:
                memory[f"{root}.store.{bits(types.get(value_type.get(pointer, -1), ('', 0, -1))[2])}"] += 1
        elif 227 <= op <= 242:  # OpAtomic*
            groups["memory"] += 1
            memory[f"{pointer_root.get(args[2], '?')}.atomic"] += 1
        elif op in _FLOAT_OPS:
            groups["float"] += 1
            ops[_FLOAT_OPS[op]] += 1
        elif op == _OP["ExtInst"] and len(args) >= 4 and args[2] == glsl_set:
            if args[3] == _GLSL_FMA:
                groups["float"] += 1
                ops["Fma"] += 1
            else:
                groups["math"] += 1
        elif op in _COOPERATIVE:
            groups["cooperative_matrix"] += 1
            ops[_COOPERATIVE[op]] += 1
        elif op in _BARRIERS:
            groups["barrier"] += 1
            ops[_BARRIERS[op]] += 1
        elif 333 <= op <= 366 or 4421 <= op <= 4432:
            groups["subgroup"] += 1
        elif op in _INT_OPS:
            groups["integer"] += 1
        elif op in _CONTROL_OPS:
            groups["control"] += 1
        elif op in (_OP["AccessChain"], _OP["InBoundsAccessChain"], _OP["PtrAccessChain"]):
            groups["addressing"] += 1
        else:
            groups["other"] += 1
    return InstructionMix(source="SPIR-V", counts=static_counts("SPIR-V module"), total=total,
                          groups=dict(groups.most_common()), ops=dict(ops.most_common()),
                          memory=dict(sorted(memory.items())))


def static_counts(code: str) -> str:
    """What a mix's numbers are, said where an agent reads them."""
    return (f"static: each instruction in the {code} counted once, however often it runs (not executed counts; "
            "a loop body counts once)")


# --- Nsight Compute ---------------------------------------------------------------------------------------------

# Raw metric name -> the name a response uses. Present on sm_70+ in ncu 2022 and later; absent ones are skipped.
NCU_METRICS = {
    "gpu__time_duration.sum": "duration",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "compute_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "dram__bytes_read.sum": "dram_read",
    "dram__bytes_write.sum": "dram_write",
    "l1tex__t_sector_hit_rate.pct": "l1_hit_rate_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "smsp__inst_executed.sum": "instructions_executed",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "ffma_thread_instructions",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "shared_load_bank_conflicts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "shared_store_bank_conflicts",
    "launch__registers_per_thread": "registers_per_thread",
}


def ncu_raw_csv(text: str) -> tuple[dict[str, float | str], dict[str, str]]:
    """The first kernel's metrics from `ncu --import ... --csv --page raw`: a header row of metric names, a row of
    units, then one row per profiled launch. Returns (readable name -> value, readable name -> unit)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    header_at = next((i for i, r in enumerate(rows) if r[0] == "ID"), None)
    if header_at is None or len(rows) < header_at + 3:
        return {}, {}
    header, units, values = rows[header_at], rows[header_at + 1], rows[header_at + 2]
    metrics: dict[str, float | str] = {}
    unit_of: dict[str, str] = {}
    for column, name in enumerate(header):
        if name not in NCU_METRICS or column >= len(values):
            continue
        readable = NCU_METRICS[name]
        raw = values[column].replace(",", "").strip()
        try:
            metrics[readable] = float(raw)
        except ValueError:
            metrics[readable] = raw
        if column < len(units) and units[column]:
            unit_of[readable] = units[column]
    return metrics, unit_of
