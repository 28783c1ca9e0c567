"""CUDA resources: per-kernel registers, stack frame and shared memory from the cubin's ELF (`.nv.info`
attributes, `.nv.shared.<kernel>` sizes), spills from ptxas's log."""

from __future__ import annotations

import re
import struct

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
