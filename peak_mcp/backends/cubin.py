"""What a compiled CUDA module (an ELF cubin) keeps between launches, read from its symbol table.

A kernel may not carry state from one launch to the next: the validator changes the inputs before every timed
launch, and a kernel with writable device memory of its own (a `__device__` variable, the device heap) can keep
copies and recompute only what changed, which no output check can tell from real work. Constants (`__constant__`)
and string literals (printf formats, local `$str` symbols) are read-only and allowed.

The toolkit's own headers define such variables too: CUDA 13's atomics instantiate
`__nv_atomic_triv_cp_helper<T>::__val` (atomicCAS, atomicExch), and CCCL's templates (CUB, libcu++,
cooperative_groups) emit their static members and tag objects (`cub::Log2<32>::VALUE`, `cuda::ptx::cta_group_1`) as
writable globals of 1 to 8 bytes, hundreds of them with CCCL included. A variable in the toolkit's namespaces (`__nv_*`,
cub, cuda, cooperative_groups, thrust, nv) of at most TOOLKIT_OBJECT_BYTES is taken for the headers', up to
TOOLKIT_TOTAL_BYTES in all. The source is not read for it: a kernel can open a namespace through a macro or an
attribute that no text scan sees, so what is bounded is what it could keep there: a few bytes each, which cannot hold
a cached output (and the runtime checks, which change the inputs between launches, stay behind it).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator

_SHT_SYMTAB = 2
_STT_OBJECT = 1
_STT_FUNC = 2
_WRITABLE = (".nv.global", ".nv.global.init")
_HEAP = ("malloc", "free", "__nv_aligned_device_malloc")
# A mangled or plain name whose outermost namespace is the toolkit's.
_TOOLKIT_NAME = re.compile(r"__nv_|_ZN\d+__nv_|_ZN(?:3cub|4cuda|18cooperative_groups|6thrust|2nv)(?=\d)")
TOOLKIT_OBJECT_BYTES = 8  # a tag object or a static constexpr member
TOOLKIT_TOTAL_BYTES = 16 * 1024  # CCCL's headers together (about 900 objects of 1 to 8 bytes)


def _symbols(cubin: bytes) -> Iterator[tuple[str, int, str, int]]:
    """(name, ELF symbol type, name of its section ('' when undefined), size in bytes) for every symbol of a 64-bit
    ELF cubin."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:  # only 64-bit ELF (every cubin NVRTC makes)
        return
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]

    def text(table_offset: int, at: int) -> str:
        start = table_offset + at
        return cubin[start:cubin.index(b"\0", start)].decode(errors="replace")

    names = [text(sections[shstrndx][4], s[0]) for s in sections]
    for symtab in (s for s in sections if s[1] == _SHT_SYMTAB):
        offset, size, link, entsize = symtab[4], symtab[5], symtab[6], symtab[9] or 24
        strtab = sections[link][4]
        for pos in range(offset, offset + size, entsize):
            name_at, info, _, shndx, _, nbytes = struct.unpack_from("<IBBHQQ", cubin, pos)
            yield text(strtab, name_at), info & 0xF, names[shndx] if 0 < shndx < len(names) else "", nbytes


def persistent_state(cubin: bytes) -> list[str]:
    """Names of writable device variables and device-heap calls in the module; empty when there are none. The
    toolkit headers' own small objects (see the module's docstring) are not counted, up to their total bound."""
    found: list[str] = []
    toolkit: list[tuple[str, int]] = []
    for name, kind, section, nbytes in _symbols(cubin):
        if kind == _STT_OBJECT and section in _WRITABLE and not name.startswith("$"):
            if nbytes <= TOOLKIT_OBJECT_BYTES and _TOOLKIT_NAME.match(stable_name(name)):
                toolkit.append((name, nbytes))
                continue
            found.append(f"__device__ variable '{name}'")
        elif not section and name in _HEAP:
            found.append(f"device heap ({name})")
    total = sum(n for _, n in toolkit)
    if total > TOOLKIT_TOTAL_BYTES:
        found.append(f"{len(toolkit)} small variables in the toolkit's namespaces, {total:,} bytes together (the "
                     f"headers' own stay under {TOOLKIT_TOTAL_BYTES:,}), e.g. '{toolkit[0][0]}'")
    return sorted(set(found))


def stable_name(symbol: str) -> str:
    """A symbol with its translation unit's `_INTERNAL_<hash>_<file>_...` component dropped (internal linkage makes
    NVRTC wrap it in a namespace named after the module), so that its own namespace comes first."""
    found = re.match(r"_ZN(\d+)_INTERNAL_", symbol)
    if not found:
        return symbol
    start = found.end(1)
    return "_ZN" + symbol[start + int(found.group(1)):]


def kernel_names(cubin: bytes) -> set[str]:
    """The kernels a cubin defines, by symbol name (an `extern "C"` kernel's is its own name)."""
    return {name for name, kind, section, _ in _symbols(cubin) if kind == _STT_FUNC and section.startswith(".text.")}
