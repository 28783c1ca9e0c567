"""SASS instruction mix: counts from nvdisasm/cuobjdump text."""

from __future__ import annotations

import re
from collections import Counter

from peak_mcp.evaluation.profiling.report import InstructionMix, static_counts

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
        elif base in ("MUFU", "FSETP"):  # transcendentals and compares: what fast-exp2 tells an agent to count
            ops[opcode if base == "MUFU" else base] += count
        elif group == "memory":
            memory[f"{base}.{_width(base, modifiers)}"] += count
    if not opcodes:
        return InstructionMix(available=False, why=f"no instructions found for '{entry}' in the disassembly",
                              source=source)
    return InstructionMix(source=source, counts=static_counts("SASS"), total=sum(opcodes.values()),
                          groups=dict(groups.most_common()),
                          ops=dict(ops.most_common()), memory=dict(sorted(memory.items())))
