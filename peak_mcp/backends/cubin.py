"""What a compiled CUDA module (an ELF cubin) keeps between launches, read from its symbol table.

A kernel may not carry state from one launch to the next: the validator changes the inputs before every timed
launch, and a kernel with writable device memory of its own (a `__device__` variable, the device heap) can keep
copies and recompute only what changed, which no output check can tell from real work. Constants (`__constant__`)
and string literals (printf formats, local `$str` symbols) are read-only and allowed.
"""

from __future__ import annotations

import struct

_SHT_SYMTAB = 2
_STT_OBJECT = 1
_WRITABLE = (".nv.global", ".nv.global.init")
_HEAP = ("malloc", "free", "__nv_aligned_device_malloc")


def persistent_state(cubin: bytes) -> list[str]:
    """Names of writable device variables and device-heap calls in the module; empty when there are none."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:  # only 64-bit ELF (every cubin NVRTC makes)
        return []
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]

    def text(table_offset: int, at: int) -> str:
        start = table_offset + at
        return cubin[start:cubin.index(b"\0", start)].decode(errors="replace")

    names = [text(sections[shstrndx][4], s[0]) for s in sections]
    found: list[str] = []
    for symtab in (s for s in sections if s[1] == _SHT_SYMTAB):
        offset, size, link, entsize = symtab[4], symtab[5], symtab[6], symtab[9] or 24
        strtab = sections[link][4]
        for pos in range(offset, offset + size, entsize):
            name_at, info, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", cubin, pos)
            name = text(strtab, name_at)
            in_section = names[shndx] if 0 < shndx < len(names) else ""
            if info & 0xF == _STT_OBJECT and in_section in _WRITABLE and not name.startswith("$"):
                found.append(f"__device__ variable '{name}'")
            elif shndx == 0 and name in _HEAP:
                found.append(f"device heap ({name})")
    return sorted(set(found))
