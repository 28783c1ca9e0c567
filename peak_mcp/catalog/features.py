"""What a kernel's source visibly does, for suggest_next: feature name -> the catalog texts whose work it shows done.

Read from the code alone, comments left out (a comment that says "float4 loads" or "shared-memory tiling" is not
the feature). Two readings need more than a pattern:
- shared memory: a tile (loaded in a loop that has a barrier and re-read in a barrier-free loop nested in it: the
  loop over K and the product over the tile) is tiling; any other use (a per-block reduction buffer, a row cached
  once, a broadcast slot) is scratch, which does none of the tiling texts' work.
- 128-bit vectors: memory accessed through a 16-byte vector pointer or buffer (`const float4*`, `.Load4(`,
  `StructuredBuffer<float4>`), not a float4 register (an HLSL kernel's float4 accumulators load nothing wide).
"""

from __future__ import annotations

import re

from peak_mcp.problems.base import Problem
from peak_mcp.problems.shipped import get_problem

# Source features, and the transformations whose work a feature shows is already done.
FEATURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "register micro-tile (2-D)": (r"\bacc\s*\[[^\]]+\]\s*\[|\bc[0-7][0-7]\b", ("register-blocking-2d",
                                                                              "register-blocking-1d")),
    "register micro-tile (1-D)": (r"\bacc\s*\[", ("register-blocking-1d",)),
    "128-bit vectors": (r"\b(?:float4|u?int4|double2|u?longlong2)\s*\*|\.Load4\s*\(|\bStore4\s*\(|"
                        r"\b(?:RW)?(?:Structured)?Buffer\s*<\s*(?:float|u?int)4\s*>",
                        ("vectorized-loads", "vectorized-row-access")),
    "cp.async": (r"cp\.async|__pipeline_memcpy_async|cuda::memcpy_async", ("cuda-cp-async", "double-buffering")),
    "WMMA": (r"\bwmma::", ("tensor-cores",)),
    "mma.sync": (r"mma\.sync", ("mma-sync-ptx", "tensor-cores")),
    "wgmma": (r"wgmma\.", ("hopper-wgmma", "mma-sync-ptx", "tensor-cores")),
    "MFMA": (r"__builtin_amdgcn_mfma", ("amd-mfma", "tensor-cores")),
    "__launch_bounds__": (r"__launch_bounds__", ("loop-unrolling-and-launch-bounds",)),
    "clusters": (r"__cluster_dims__|cluster\.sync|cluster_ctarank", ("thread-block-clusters",)),
    "split K": (r"\bsplit_?k\b|\bSPLIT_?K\b|\bsplitK\b", ("split-k",)),
    "grouped block order": (r"\bGROUP_M\b", ("grid-rasterization",)),
    "wave intrinsics": (r"\bWave(ReadLaneAt|ActiveSum|GetLaneIndex|GetLaneCount)\b", ("hlsl-wave-tiling",)),
    "16-bit packed reads": (r"\bf16tof32\b", ("hlsl-16bit-types",)),
    # the reductions of row problems (softmax, norms, sums)
    "warp shuffles": (r"__shfl(_xor|_down|_up)?(_sync)?\s*\(", ("warp-shuffle-reduction",)),
    "a row per warp": (r"for\s*\([^;]*=\s*lane\b[^;]*;[^;]*;[^)]*\+=\s*(32|64|warpSize|WARP)\b", ("row-per-warp",)),
    "wave reductions": (r"\bWaveActive(Sum|Max|Min|Product)\b", ("hlsl-wave-reduction",)),
    "threads striding over a row": (r"for\s*\([^;]*=\s*(threadIdx\.x|tid|gi|lane|lt\.x)\b[^;]*;[^;]*;[^)]*\+=\s*"
                                    r"(blockDim\.x|BLOCK|NT|THREADS)\b", ("row-per-block-reduction",)),
    # a running sum rescaled as its max grows: s * exp(m - m_new) (__expf, exp2f, exp2 and expf alike)
    "online rescaling": (r"\*=?\s*(__)?exp2?f?\s*\(\s*\(?\s*[A-Za-z_]\w*\s*-\s*[A-Za-z_]\w*\s*\)",
                         ("online-softmax",)),
    "rows strided over the grid": (r"\+=\s*(gridDim\.x|GRID)\b", ("persistent-rows",)),
    "cache-eviction hints": (r"__ldcs|__stcs|L2::cache_hint|L1::no_allocate|__builtin_nontemporal_(?:load|store)",
                             ("cache-eviction-hints",)),
    "flushing exp2": (r"ex2\.approx\.ftz", ("fast-exp2",)),
}
SHARED_TILES = "shared-memory tiles"
SHARED_SCRATCH = "shared-memory scratch (not tiles)"
_TILING = ("shared-memory-tiling", "hlsl-groupshared-tiling", "coalesced-access")
_DOUBLE_BUFFER = re.compile(r"(__shared__|groupshared)[^;]*\w+\s*\[\s*(2|STAGES|NSTAGES)\s*\]\s*\[")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_SHARED_DECL = re.compile(r"\b(?:__shared__|groupshared)\b([^;]*);")
_BARRIER = re.compile(r"__syncthreads\s*\(|\b(?:Group|All|Device)MemoryBarrier\w*\s*\(|\bbar(?:rier)?\.sync\b|"
                      r"__builtin_amdgcn_s_barrier|\.sync\s*\(\s*\)|cp\.async\.wait|__pipeline_wait_prior")
_LOOP = re.compile(r"\b(for|while)\s*\(")
_GRID_STRIDE = re.compile(r"\bgridDim\b|\bGRID\b|\bnum_groups\b")


def code_only(source: str) -> str:
    """The source without its comments (an inline asm string's `//` is rare enough to ignore)."""
    return _COMMENT.sub(" ", source)


def _close(code: str, start: int, opening: str, closing: str) -> int | None:
    """The index of the bracket that closes the one at `start`."""
    depth = 0
    for i in range(start, len(code)):
        if code[i] == opening:
            depth += 1
        elif code[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    return None


def _statement_end(code: str, i: int) -> int | None:
    """The end (exclusive) of the statement starting at `i`: a braced block, a loop or if with its body, or up to
    its semicolon."""
    while i < len(code) and code[i].isspace():
        i += 1
    if i >= len(code):
        return None
    if code[i] == "{":
        end = _close(code, i, "{", "}")
        return None if end is None else end + 1
    head = re.match(r"(for|while|if)\s*\(", code[i:])
    if head:
        close = _close(code, i + head.end() - 1, "(", ")")
        return None if close is None else _statement_end(code, close + 1)
    semi = code.find(";", i)
    return None if semi < 0 else semi + 1


def loops(code: str) -> list[tuple[str, int, int]]:
    """Each for/while loop with a body: (its header, its body's start and end)."""
    found = []
    for match in _LOOP.finditer(code):
        close = _close(code, match.end() - 1, "(", ")")
        if close is None or code[close + 1:].lstrip().startswith(";"):  # a do-while's tail, an empty loop
            continue
        end = _statement_end(code, close + 1)
        if end is not None:
            found.append((code[match.end():close], close + 1, end))
    return found


def shared_names(code: str) -> set[str]:
    """The shared arrays a kernel declares, and pointers set from them (a dynamic buffer carved into tiles)."""
    names = {m.group(1) for decl in _SHARED_DECL.finditer(code) for m in re.finditer(r"(\w+)\s*\[", decl.group(1))}
    while names:  # pointers set from a shared name, and pointers set from those
        named = "|".join(map(re.escape, names))
        alias = re.compile(r"(?:\*\s*(?:const\s+|__restrict__\s+)*|\bauto\s+)(\w+)\s*=[^;=]*\b(?:" + named + r")\b")
        address = re.compile(r"(\w+)\s*=[^;=]*__cvta_generic_to_shared\s*\([^;]*\b(?:" + named + r")\b")
        more = {m.group(1) for pattern in (alias, address) for m in pattern.finditer(code)} - names
        if not more:
            break
        names |= more
    return names


_POINTER = re.compile(r"\*\s*(?:const\s+|__restrict__\s+|__restrict\s+)*(\w+)\s*[,)=;\[]")
_BUFFER = re.compile(r"\b(?:RW)?(?:Structured|ByteAddress)?Buffer\b\s*(?:<[^>]*>)?\s+(\w+)")
_FUNCTION = re.compile(r"\b(\w+)\s*\([^;{}]*\)\s*(?:const\s*)?(?:->[^{;]*)?\{")
# Copies from device memory into shared memory that bypass registers: only tiles are filled this way.
_ASYNC_COPY = re.compile(r"cp\.async|__pipeline_memcpy_async|memcpy_async|cp_async|\btma_load|"
                         r"__builtin_amdgcn_global_load_lds")


def _global_names(code: str, shared: set[str]) -> set[str]:
    """Device-memory buffers (pointers that are not into shared memory, HLSL buffers) and the helper functions
    that read them (an HLSL `loadA(m, k)`)."""
    names = {m.group(1) for m in _POINTER.finditer(code)} | {m.group(1) for m in _BUFFER.finditer(code)}
    names -= shared | {"const", "__restrict__"}
    if not names:
        return names
    mention = re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\b")
    for match in _FUNCTION.finditer(code):
        end = _close(code, match.end() - 1, "{", "}")
        if match.group(1) not in ("for", "while", "if", "switch") and end is not None \
                and mention.search(code, match.end(), end):
            names.add(match.group(1))
    return names


def tiled_in_shared(code: str) -> bool:
    """Shared memory used as tiles, by either reading (staged_in_shared, looped_in_shared)."""
    return looped_in_shared(code) or staged_in_shared(code)


def looped_in_shared(code: str) -> bool:
    """A shared array present in a loop that has a barrier (not a grid-stride loop over rows) and read in a
    barrier-free loop nested in it: the loop over K and the product over the tile. A tree reduction's loop holds
    its own barrier; a per-warp slot read once is in no such loop."""
    names = shared_names(code)
    if not names:
        return False
    mention = re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\b")
    spans = loops(code)
    for header, start, end in spans:
        if _GRID_STRIDE.search(header) or not _BARRIER.search(code, start, end) or not mention.search(code, start,
                                                                                                       end):
            continue
        for _, inner_start, inner_end in spans:
            if start <= inner_start and inner_end <= end and (inner_start, inner_end) != (start, end) \
                    and mention.search(code, inner_start, inner_end) and not _BARRIER.search(code, inner_start,
                                                                                             inner_end):
                return True
    return False


def staged_in_shared(code: str) -> bool:
    """Shared memory filled from device memory (an async copy, or a statement that writes a shared array and reads
    a buffer) and re-read in a loop without a barrier. A reduction buffer is filled from registers."""
    shared = shared_names(code)
    if not shared:
        return False
    if _ASYNC_COPY.search(code):
        return True
    mention = re.compile(r"\b(?:" + "|".join(map(re.escape, shared)) + r")\b")
    read_in_loop = any(mention.search(code, start, end) and not _BARRIER.search(code, start, end)
                       for _, start, end in loops(code))
    if not read_in_loop:
        return False
    buffers = _global_names(code, shared)
    if not buffers:
        return False
    device = re.compile(r"\b(?:" + "|".join(map(re.escape, buffers)) + r")\s*(?:\[|\(|\+|\.)")  # read, not named
    return any(mention.search(statement) and device.search(statement) and re.search(r"[^=!<>]=[^=]", statement)
               for statement in re.split(r"[;{}]", code))


# What a row-per-block reduction looks like whatever its names: threads start at their index in the group and step
# by the group's width (an agent's `for (uint c = t; c < p.COLS; c += 256)` under [numthreads(256, 1, 1)]), and the
# partials meet in a shared tree (a loop halving its stride around a barrier, combining slots `[t + s]`).
STRIDED_ROW = "threads striding over a row"
TREE_REDUCTION = "a shared-memory tree reduction"
_HLSL_INDEX = re.compile(r"\b(u?int3?)\s+(\w+)\s*:\s*SV_Group(?:ThreadID|Index)\b")
# an extent written as one word or number (`32 * WARPS` is a block of warps, not a width threads stride by)
_WIDTH_DECLARED = re.compile(r"\[\s*numthreads\s*\(\s*(\w+)\s*,|__launch_bounds__\s*\(\s*(\w+)\s*[,)]")
_BLOCK_LINE = re.compile(r"//\s*peak\s*:[^\n]*\bblock\s*=\s*\(\s*(\w+)\s*,")
_CONSTANT = re.compile(r"#define\s+(\w+)\s+\(?\s*(\d+)[uU]?\s*\)?\s*$|"
                       r"\bstatic\s+const(?:expr)?\s+(?:unsigned\s+)?\w+\s+(\w+)\s*=\s*(\d+)[uU]?\s*;", re.MULTILINE)
_HALVING = re.compile(r"(\w+)\s*(?:>>=\s*1|/=\s*2)\b|(\w+)\s*=\s*(\w+)\s*(?:>>\s*1|/\s*2)\b")


def _alternatives(words: set[str]) -> str:
    return "|".join(re.escape(w).replace(r"\.", r"\s*\.\s*") for w in sorted(words, key=len, reverse=True))


def _thread_indices(code: str) -> set[str]:
    """How the code names a thread's index in its group: threadIdx.x, an HLSL SV_GroupThreadID's .x or an
    SV_GroupIndex, and the variables set from those (`uint t = gtid.x;`)."""
    found = {"threadIdx.x", "tid", "gi", "lane", "lt.x"}  # the usual names, helper functions' parameters too
    found |= {f"{m.group(2)}.x" if m.group(1).endswith("3") else m.group(2) for m in _HLSL_INDEX.finditer(code)}
    while True:
        alias = re.compile(r"\b(\w+)\s*=\s*(?:\(\s*\w+\s*\)\s*)?(?:" + _alternatives(found) + r")\s*[;,)]")
        more = {m.group(1) for m in alias.finditer(code)} - found
        if not more:
            return found
        found |= more


def _group_widths(source: str, code: str) -> set[str]:
    """The group's width as the code writes it: blockDim.x, the first extent of [numthreads] or __launch_bounds__
    or of the annotation's block=, and the named constants that hold the same number."""
    widths = {"blockDim.x", "BLOCK", "NT", "THREADS"}
    widths |= {m.group(1) or m.group(2) for m in _WIDTH_DECLARED.finditer(code)}
    widths |= {m.group(1) for m in _BLOCK_LINE.finditer(source)}
    constants = {(m.group(1) or m.group(3)): (m.group(2) or m.group(4)) for m in _CONSTANT.finditer(code)}
    widths |= {constants[w] for w in list(widths) if w in constants}
    widths |= {name for name, value in constants.items() if value in widths}
    return widths


def strided_over_row(source: str, code: str) -> bool:
    """A loop that starts at a thread's index in its group and steps by the group's width."""
    start, step = _alternatives(_thread_indices(code)), _alternatives(_group_widths(source, code))
    loop = re.compile(r"\bfor\s*\([^;]*=\s*(?:" + start + r")(?=\s*[;+])[^;]*;[^;]*;[^)]*\+=\s*\(?\s*(?:" + step
                      + r")\b")
    return bool(loop.search(code))


def tree_reduction(code: str) -> bool:
    """A loop whose stride halves each trip, with a barrier inside, combining shared slots `[i + stride]`."""
    names = shared_names(code)
    if not names:
        return False
    shared = "|".join(map(re.escape, names))
    for header, start, end in loops(code):
        strides = [m.group(1) or m.group(2) for m in _HALVING.finditer(header)
                   if m.group(1) or m.group(2) == m.group(3)]  # `s >>= 1`, `s = s / 2`; not `s = NT / 2`
        if not strides:
            continue
        stride = re.escape(strides[0])
        pair = re.compile(rf"\b(?:{shared})\s*\[[^\]]*\+\s*{stride}\s*\]|\b(?:{shared})\s*\[\s*{stride}\s*\+")
        if _BARRIER.search(code, start, end) and pair.search(code, start, end):
            return True
    return False


PADDED_TILES = "padded shared tiles"
# A shared array's last extent written as a size plus a small pad: `[BM / 4 + 1]`, `[TILE + PAD]`, `[32 + 4]`.
_PADDED_EXTENT = re.compile(r"\S\s*\+\s*(?:[1-9]|1[0-6]|PAD\w*|\w*_PAD)\s*\)?\s*$")


def padded_in_shared(code: str) -> bool:
    """A shared 2-D (or more) array whose last (fastest-varying) extent is a size plus a small constant and whose
    other extents are not: padding that shifts each row to other banks, the work of bank-conflict-padding. A halo
    (`[TILE + 2][TILE + 2]`: every extent grown alike) and a 1-D buffer (`s[BLOCK + 1]`) are not padding."""
    for decl in _SHARED_DECL.finditer(code):
        for array in re.finditer(r"\w+\s*((?:\[[^\[\]]*\]\s*)+)", decl.group(1)):
            extents = [e.strip() for e in re.findall(r"\[([^\[\]]*)\]", array.group(1))]
            if len(extents) < 2 or not _PADDED_EXTENT.search(extents[-1]):
                continue
            pad = re.search(r"\+\s*(\w+)\s*\)?\s*$", extents[-1])
            grown = pad is not None and all(re.search(rf"\+\s*{re.escape(pad.group(1))}\s*\)?\s*$", e)
                                            for e in extents[:-1])
            if not grown:
                return True
    return False


_INT_VARIABLE = re.compile(r"\b(?:unsigned\s+int|unsigned|int|uint|long|size_t|int64_t|uint32_t)\s+([A-Z][A-Z0-9_]*)\b"
                           r"(?!\s*\()")
_STEP_ONE = re.compile(r"^\s*(?:\+\+\s*\w+|\w+\s*\+\+|\w+\s*\+=\s*(.+?))\s*$")
_UNROLL_MARK = re.compile(r"(?:\[\s*(?:unroll|loop)\s*(?:\(\s*\d*\s*\))?\s*\]|#\s*pragma\s+unroll\b[^\n]*)\s*$")


def unrollable_loops(source: str) -> int:
    """How many for-loops have a trip count fixed at compile time (bound and step made of numbers and constants:
    `k < BK`, `i < BM * BK; i += THREADS`) and no unroll mark (`[unroll]`, `[loop]`, `#pragma unroll`): what an
    unrolling text would unroll. A loop to a size known at run time (`c < p.COLS`) is not one."""
    code = code_only(source)
    named = {m.group(1) or m.group(3) for m in _CONSTANT.finditer(code)}
    # an upper-case name is a constant (a #define, a tuning parameter) unless the code declares it as a variable:
    # CUDA's `int K` parameter, HLSL's `uint K = p.K;`
    variables = {m.group(1) for m in _INT_VARIABLE.finditer(code)
                 if not re.search(r"\bconst(?:expr)?\b", code[max(0, m.start() - 24):m.start()])}

    def constant(expr: str) -> bool:
        words = re.findall(r"[A-Za-z_]\w*", expr)
        return bool(re.fullmatch(r"[\w\s()+\-*/%<>]*", expr)) and all(
            (re.fullmatch(r"[A-Z][A-Z0-9_]*|u|U", w) and w not in variables) or w in named for w in words)

    count = 0
    for match in re.finditer(r"\bfor\s*\(", code):
        close = _close(code, match.end() - 1, "(", ")")
        parts = code[match.end():close].split(";") if close is not None else []
        if len(parts) != 3:
            continue
        bound = re.fullmatch(r"\s*\w+\s*<=?\s*(.+?)\s*", parts[1])
        step = _STEP_ONE.match(parts[2])
        if bound and step and constant(bound.group(1)) and (step.group(1) is None or constant(step.group(1))) \
                and not _UNROLL_MARK.search(code, max(0, match.start() - 80), match.start()):
            count += 1
    return count


def source_features(source: str, problem: Problem | None = None) -> dict[str, tuple[str, ...]]:
    """Feature name -> the transformations it stands for, for the features found in a kernel's code (comments
    left out): the generic ones, and the problem's own (`Problem.source_hints`; matmul's by default)."""
    code = code_only(source)
    found = {name: covers for name, (pattern, covers) in FEATURES.items() if re.search(pattern, code)}
    if STRIDED_ROW not in found and strided_over_row(source, code):
        found[STRIDED_ROW] = FEATURES[STRIDED_ROW][1]
    if tree_reduction(code):
        found[TREE_REDUCTION] = ("row-per-block-reduction",)
    if _SHARED_DECL.search(code):
        if tiled_in_shared(code):
            found[SHARED_TILES] = _TILING
        else:
            found[SHARED_SCRATCH] = ()
    if _DOUBLE_BUFFER.search(code) and SHARED_TILES in found:
        found["multi-buffered shared tiles"] = ("double-buffering",)
    if SHARED_TILES in found and padded_in_shared(code):
        found[PADDED_TILES] = ("bank-conflict-padding",)
    found.update((problem or get_problem("matmul")).source_hints(code))
    if "register micro-tile (2-D)" in found:
        found.pop("register micro-tile (1-D)", None)
    return found
