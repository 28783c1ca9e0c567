"""The `// peak:` annotation lines: entry point and launch geometry as safe integer expressions, and tuning
parameters.

    // peak: entry=sgemm grid=(cdiv(N, BN), cdiv(M, BM), 1) block=(256, 1, 1) shared=0
    // peak: entry=main groups=(cdiv(N, 64), cdiv(M, 64), 1)
    // peak: params BM=[64, 128, 256] BN=[64, 128] BK=[8, 16, 32] STAGES=range(2, 5)
    // peak: where=BM * BK + BK * BN <= 12288 and BM % 32 == 0
    // peak: tensor_map A box=(BM, 64) swizzle=128

Exactly one launch line; any number of `params` and `where` lines (all conditions must hold). CUDA only: `cluster=`
on the launch line launches thread-block clusters of that shape, and each `tensor_map` line asks the server for a
TMA descriptor of one problem buffer, passed after the scalars in line order (peak_mcp/backends/tensor_maps.py).

Each parameter is a preprocessor macro in the compiled source (`with_params`) and a symbol in the launch expressions
and conditions; the first value of each list is the default configuration. Expressions are safe integer
expressions (core/expressions.py): never `eval`. `SM_COUNT` is the device's multiprocessor count (CUDA SMs, AMD
compute units), for persistent grids: the server binds it where a session meets its device (LaunchSpec.on_device).
"""

from __future__ import annotations

import ast
import keyword
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from peak_mcp.core.errors import AnnotationError
from peak_mcp.core.expressions import FUNCTIONS, MAX_EXPR_CHARS, SM_COUNT, evaluate, evaluate_condition, names_in

_LINE = re.compile(r"^\s*(?://|#|;)\s*peak\s*:(?P<body>.*)$", re.MULTILINE)


_KEY = re.compile(r"(\w+)\s*=")


# How the annotation's values are written, as an agent is told it once beside a problem's ABIs.
EXPRESSIONS = ("The values of a `// peak:` launch line (grid, block, groups, shared, cluster) are integer expressions "
               "over the size symbols and SM_COUNT (the device's multiprocessor count) with + - * // % and "
               "cdiv/min/max: `/` is refused (write // or cdiv). `// peak: params NAME=[v1, v2, ...]` lines declare "
               "tuning parameters (the first value is the default; a version whose parent was tuned is timed at the "
               "parent's tuned values for the names both declare): the server defines each NAME as a macro when it "
               "compiles, so the kernel never #defines it, and the launch line may use it.")
_MAX_LIST_CHARS = 2000  # a params value list


_PROBE_SM_COUNT = 132  # parse-time stand-in, like the 1024 of every size symbol


MAX_WHERE = 8  # where lines: a tune evaluates them all over the space before its budget starts counting


MAX_SPACE = 100_000  # configurations in a parameter space: beyond it, no strategy can cover a useful share


_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a C identifier (ASCII: `\w` admits any letter)


_PARAMS_LINE = re.compile(r"params(?:\s+|$)(?!\s*=)")


_WHERE_LINE = re.compile(r"where(?:\s*=|\s+(?!\s*=))")  # where=COND, or where COND as agents also write it


_MAP_LINE = re.compile(r"tensor_map\s+(?P<buffer>[A-Za-z_]\w*)\b(?P<rest>.*)$")


MAX_TENSOR_MAPS = 8


SWIZZLES = (0, 32, 64, 128)  # bytes: none, or the span the 16-byte chunks of a box row are permuted within


class TensorMapLine(BaseModel):
    """One `tensor_map` line: a TMA descriptor of problem buffer `buffer`, box extents per dimension (outermost
    first, expressions over sizes and parameters), swizzle span in bytes."""

    buffer: str
    box: tuple[str, ...]
    swizzle: int = 128
    line: int


class LaunchSpec(BaseModel):
    """The parsed annotation: expressions are kept as text and evaluated per size set."""

    entry: str
    grid: tuple[str, str, str] | None = None  # CUDA / HIP
    block: tuple[str, str, str] | None = None  # CUDA / HIP
    groups: tuple[str, str, str] | None = None  # HLSL dispatch size
    shared: str = "0"  # dynamic shared memory bytes (CUDA / HIP)
    cluster: tuple[str, str, str] | None = None  # thread-block cluster shape (CUDA)
    tensor_maps: list[TensorMapLine] = []  # TMA descriptors passed after the scalars (CUDA)
    line: int  # 1-based line of the annotation in the source
    params: dict[str, list[int]] = {}  # tuning parameters in declared order; the first value is the default
    where: list[str] = []  # conditions every configuration must meet (over parameters and sizes)
    bound: dict[str, int] = {}  # the configuration this spec was compiled for; empty = the default
    sm_count: int | None = None  # SM_COUNT in the expressions: the session's device's, bound by the server

    def on_device(self, sm_count: int | None) -> LaunchSpec:
        """A copy whose expressions see SM_COUNT. A device that does not report it (lavapipe, a compile-only
        target) gets 1: a persistent kernel striding over its tiles stays correct, only not spread out."""
        return self.model_copy(update={"sm_count": max(1, int(sm_count or 1))})

    def _env(self, sizes: Mapping[str, int], params: Mapping[str, int] | None) -> dict[str, int]:
        device = {SM_COUNT: self.sm_count} if self.sm_count is not None else {}
        return {**sizes, **device, **self.config(params)}

    def config(self, params: Mapping[str, int] | None = None) -> dict[str, int]:
        """The full configuration: `params` where given, else the bound one, else the defaults."""
        if not self.params:
            return {}
        chosen = params if params is not None else self.bound
        return {name: int(chosen[name]) if name in chosen else values[0] for name, values in self.params.items()}

    def space_size(self) -> int:
        return math.prod(len(v) for v in self.params.values())

    def bind(self, params: Mapping[str, int]) -> LaunchSpec:
        """A copy compiled for one configuration: every name declared and every value one of its list's."""
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise AnnotationError(f"unknown tuning parameter(s) {unknown}; declared: {sorted(self.params)}", None)
        config = self.config(params)
        for name, value in config.items():
            if value not in self.params[name]:
                raise AnnotationError(f"{name}={value} is not one of the declared values {self.params[name]}", None)
        return self.model_copy(update={"bound": config})

    def violated(self, sizes: Mapping[str, int], params: Mapping[str, int] | None = None) -> str | None:
        """The first `where` condition the configuration breaks at these sizes, or None."""
        env = self._env(sizes, params)
        for condition in self.where:
            if not evaluate_condition(condition, env, where="where", derived_out=True):
                return condition
        return None

    def evaluate(self, sizes: Mapping[str, int],
                 params: Mapping[str, int] | None = None) -> dict[str, tuple[int, int, int] | int]:
        """Launch geometry at these sizes for a configuration (default: the bound one, else the defaults)."""
        env = self._env(sizes, params)
        out: dict[str, tuple[int, int, int] | int] = {}
        for name in ("grid", "block", "groups", "cluster"):
            exprs = getattr(self, name)
            if exprs is not None:
                dims = tuple(evaluate(e, env, where=f"{name}") for e in exprs)
                if any(d < 1 for d in dims):
                    at = f"sizes {dict(sizes)}" + (f" with {self.config(params)}" if self.params else "")
                    raise AnnotationError(
                        f"{name}={dims} at {at}: every dimension must be >= 1",
                        f"check the expression; cdiv({next(iter(sizes), 'N')}, BLOCK) is the usual form.",
                    )
                out[name] = dims  # type: ignore[assignment]
        shared = evaluate(self.shared, env, where="shared")
        if shared < 0:
            raise AnnotationError(f"shared={shared} is negative", "shared is a byte count >= 0.")
        out["shared"] = shared
        if "cluster" in out and "grid" in out:
            grid, cluster = out["grid"], out["cluster"]
            if any(g % c for g, c in zip(grid, cluster, strict=True)):  # type: ignore[arg-type]
                raise AnnotationError(f"grid={grid} is not a whole number of clusters of {cluster} at sizes "
                                      f"{dict(sizes)}", "round each grid dimension up to a multiple of the "
                                      "cluster's, e.g. grid=(cdiv(N, BN*2)*2, ...); extra blocks return early.")
        return out

    def boxes(self, sizes: Mapping[str, int], params: Mapping[str, int] | None = None) -> list[tuple[int, ...]]:
        """Each tensor map's box at these sizes (outermost dimension first)."""
        env = self._env(sizes, params)
        return [tuple(evaluate(e, env, where=f"line {m.line} box") for e in m.box) for m in self.tensor_maps]


# What every CUDA device since compute capability 3.0 (and every HIP device) accepts, and the dispatch size every
# Vulkan device must: a session without a device refuses a launch past these instead of reporting a kernel that
# compiled (with a device, the device's own limits are checked; NVIDIA's Vulkan takes more groups along x).
PORTABLE_BLOCK = (1024, 1024, 64)
PORTABLE_THREADS = 1024
PORTABLE_GRID = (2**31 - 1, 65535, 65535)
PORTABLE_GROUPS = (65535, 65535, 65535)
PORTABLE_CLUSTER = 8  # blocks in a thread block cluster


def beyond_portable_limits(geometry: Mapping[str, Any], groups: Sequence[int] | None = None) -> str | None:
    """Why a launch (LaunchSpec.evaluate's geometry) may not run on every device, or None. `groups`: a Vulkan
    device's own maxComputeWorkGroupCount, in place of the portable one (NVIDIA's takes 2**31 - 1 along x)."""
    for name, limits in (("grid", PORTABLE_GRID), ("block", PORTABLE_BLOCK), ("groups", groups or PORTABLE_GROUPS)):
        dims = geometry.get(name)
        for axis, (d, limit) in enumerate(zip(dims or (), limits, strict=False)):
            if d > limit:
                most = ("the device launches (maxComputeWorkGroupCount)" if name == "groups" and groups else
                        "every Vulkan device launches" if name == "groups" else "any device launches")
                return f"{name} dimension {'xyz'[axis]}={d} is over {limit}, the most {most}"
    cluster = geometry.get("cluster")
    if cluster and cluster[0] * cluster[1] * cluster[2] > PORTABLE_CLUSTER:
        return f"cluster={tuple(cluster)} has more than {PORTABLE_CLUSTER} blocks, the portable limit"
    block = geometry.get("block")
    if block and block[0] * block[1] * block[2] > PORTABLE_THREADS:
        return (f"block={tuple(block)} is {block[0] * block[1] * block[2]} threads, over {PORTABLE_THREADS}, the most "
                "any device runs in one block")
    return None


def parse_annotation(source: str, *, needs: tuple[str, ...], symbols: tuple[str, ...],
                     derived: Mapping[str, str] | None = None) -> LaunchSpec:
    """Find and parse the `peak:` lines: one launch line, optional `params` and `where` lines.

    `needs` names the launch keys the backend requires; `symbols` are the problem's size symbols; `derived` names
    scalars that are expressions of them (conv2d's P, Q), written out wherever a line uses one."""
    launch, params_lines, where_lines, map_lines = [], [], [], []
    for match in _LINE.finditer(source):
        body, line_no = match.group("body").strip(), source.count("\n", 0, match.start()) + 1
        kind = (params_lines if _PARAMS_LINE.match(body) else where_lines if _WHERE_LINE.match(body)
                else map_lines if body.startswith("tensor_map") else launch)
        kind.append((line_no, body))
    example = _example(needs, symbols)
    if not launch:
        raise AnnotationError("the kernel has no `// peak:` annotation line", f"add one, e.g.\n    {example}")
    if len(launch) > 1:
        lines = [n for n, _ in launch]
        raise AnnotationError(f"found {len(launch)} `peak:` launch lines (lines {lines}); exactly one is allowed",
                              "keep the one that matches the kernel's tiling and delete the others (`params` and "
                              "`where` lines may be several).")
    line_no, body = launch[0]
    fields = _split_fields(body, line_no)
    unknown = set(fields) - {"entry", "grid", "block", "groups", "shared", *(("cluster",) if "grid" in needs else ())}
    if unknown:
        raise AnnotationError(f"line {line_no}: unknown annotation key(s) {sorted(unknown)}", f"use e.g. {example}")
    missing = [k for k in needs if k not in fields]
    if missing:
        raise AnnotationError(f"line {line_no}: the annotation lacks {missing}", f"use e.g. {example}")
    entry = fields.get("entry", "")
    if not re.fullmatch(r"[A-Za-z_]\w*", entry):
        raise AnnotationError(f"line {line_no}: entry={entry!r} is not an identifier", "name the kernel function.")
    derived = dict(derived or {})
    params = _parse_params(params_lines, symbols, entry, derived)
    if len(where_lines) > MAX_WHERE:  # each is evaluated for every configuration of a space of up to MAX_SPACE
        raise AnnotationError(f"line {where_lines[MAX_WHERE][0]}: more than {MAX_WHERE} `where` lines",
                              "join conditions with `and` on fewer lines.")
    where = [_parse_where(n, text) for n, text in where_lines]
    if where and not params:
        raise AnnotationError(f"line {where_lines[0][0]}: a `where` line without a `params` line",
                              "declare the tuning parameters, e.g. // peak: params BLOCK=[256, 128]")
    spec = LaunchSpec(
        entry=entry,
        grid=_triple(fields, "grid", line_no),
        block=_triple(fields, "block", line_no),
        groups=_triple(fields, "groups", line_no),
        shared=fields.get("shared", "0"),
        cluster=_triple(fields, "cluster", line_no),
        tensor_maps=[_parse_map(n, text) for n, text in map_lines] if map_lines else [],
        line=line_no,
        params=params,
        where=where,
    )
    _check_written(spec)  # the limits speak of what the agent wrote, not of derived names written out
    if derived:
        spec = _expanded(spec, derived)
    if spec.tensor_maps and "grid" not in needs:
        raise AnnotationError(f"line {map_lines[0][0]}: tensor_map lines are for CUDA kernels (TMA)",
                              "delete the line; this backend passes buffers only.")
    if len(spec.tensor_maps) > MAX_TENSOR_MAPS:
        raise AnnotationError(f"line {map_lines[MAX_TENSOR_MAPS][0]}: more than {MAX_TENSOR_MAPS} tensor_map lines",
                              "one map per buffer and box is enough.")
    # Validate every expression now, with dummy sizes and the default configuration, so syntax errors and unknown
    # symbols surface at submit time.
    probe = {**dict.fromkeys(symbols, 1024), SM_COUNT: _PROBE_SM_COUNT, **spec.config()}
    for name in ("grid", "block", "groups", "cluster"):
        for expr in getattr(spec, name) or ():
            evaluate(expr, probe, where=f"line {line_no} {name}")
    evaluate(spec.shared, probe, where=f"line {line_no} shared")
    for m in spec.tensor_maps:
        for expr in m.box:
            evaluate(expr, probe, where=f"line {m.line} box")
    for (where_no, _), condition in zip(where_lines, where, strict=True):
        holds = evaluate_condition(condition, probe, where=f"line {where_no} where", derived_out=True)
        if not holds and not names_in(condition) & {*symbols, SM_COUNT}:  # sizes and device differ at run time
            raise AnnotationError(f"line {where_no}: the default configuration {spec.config()} (each list's first "
                                  f"value) breaks where={condition}",
                                  "put a value that meets the condition first in each list.")
    _check_own_defines(source, params)
    return spec


def with_params(source: str, params: Mapping[str, int]) -> str:
    """The source as compiled for one configuration: a `#define` per parameter, then `#line 1`, so that the
    compiler's diagnostics keep the kernel's own line numbers (NVRTC and glslang both honour it)."""
    if not params:
        return source
    defines = "".join(f"#define {name} {value if value >= 0 else f'({value})'}\n" for name, value in params.items())
    return f"{defines}#line 1\n{source}"


_PARAM_PREFIX = re.compile(r"\A(?:#define \w+ [^\n]*\n)+#line 1\n")


def own_source(compiled: str) -> str:
    """The kernel's own text from what with_params made of it: diagnostics quote the lines the `#line 1` numbers."""
    return _PARAM_PREFIX.sub("", compiled, count=1)


def _check_written(spec: LaunchSpec) -> None:
    fields = [*(spec.grid or ()), *(spec.block or ()), *(spec.groups or ()), *(spec.cluster or ()), spec.shared,
              *(e for m in spec.tensor_maps for e in m.box)]
    for text in fields:
        if len(text) > MAX_EXPR_CHARS:
            raise AnnotationError(f"line {spec.line}: expression is longer than {MAX_EXPR_CHARS} characters", None)
    for text in spec.where:
        if len(text) > 4 * MAX_EXPR_CHARS:
            raise AnnotationError(f"where: condition is longer than {4 * MAX_EXPR_CHARS} characters", None)


def _expanded(spec: LaunchSpec, derived: dict[str, str]) -> LaunchSpec:
    """The spec with each derived name replaced by its parenthesized expression (a whole-word match: the grammar's
    only words are symbols and cdiv/min/max), so it is evaluated over the sizes alone."""
    word = re.compile(r"\b(" + "|".join(map(re.escape, sorted(derived, key=len, reverse=True))) + r")\b")

    def expand(expr: str) -> str:
        return word.sub(lambda m: f"({derived[m.group(1)]})", expr)

    def triple(t: tuple[str, str, str] | None) -> tuple[str, str, str] | None:
        return None if t is None else (expand(t[0]), expand(t[1]), expand(t[2]))

    maps = [m.model_copy(update={"box": tuple(expand(e) for e in m.box)}) for m in spec.tensor_maps]
    return spec.model_copy(update={"grid": triple(spec.grid), "block": triple(spec.block),
                                   "groups": triple(spec.groups), "cluster": triple(spec.cluster),
                                   "shared": expand(spec.shared), "where": [expand(w) for w in spec.where],
                                   "tensor_maps": maps})


def _parse_params(lines: list[tuple[int, str]], symbols: tuple[str, ...], entry: str,
                  derived: Mapping[str, str]) -> dict[str, list[int]]:
    hint = "write e.g. // peak: params BLOCK=[256, 128] UNROLL=range(1, 5)"
    params: dict[str, list[int]] = {}
    for line_no, body in lines:
        fields = _split_fields(body.removeprefix("params"), line_no, repeats=True)
        if not fields:
            raise AnnotationError(f"line {line_no}: the params line declares no parameter", hint)
        for name, text in fields:
            if not _PARAM_NAME.fullmatch(name) or keyword.iskeyword(name) or name.startswith("__"):
                raise AnnotationError(f"line {line_no}: parameter name {name!r} is not a usable identifier",
                                      "use a C identifier such as BM or TILE_K (no leading __, no Python keyword).")
            clash = ("a size symbol of the problem" if name in symbols else "a function of the expression grammar"
                     if name in FUNCTIONS else "the device's multiprocessor count" if name == SM_COUNT else
                     "a scalar the problem derives from the sizes" if name in derived else
                     "the entry point" if name == entry else
                     "declared twice" if name in params else None)
            if clash:
                raise AnnotationError(f"line {line_no}: parameter {name} is {clash}", "rename the parameter.")
            params[name] = _values(name, text, line_no, hint)
    total = math.prod(len(v) for v in params.values())
    if total > MAX_SPACE:
        sizes = " x ".join(f"{n}:{len(v)}" for n, v in params.items())
        raise AnnotationError(f"the parameter space has {total:,} configurations ({sizes}), over the limit of "
                              f"{MAX_SPACE:,}", "drop values that cannot win (keep powers of two, fewer stages).")
    return params


def _values(name: str, text: str, line_no: int, hint: str) -> list[int]:
    where = f"line {line_no} {name}"
    if len(text) > _MAX_LIST_CHARS:
        raise AnnotationError(f"{where}: the value list is longer than {_MAX_LIST_CHARS} characters", hint)
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise AnnotationError(f"{where}: cannot read the values {text!r}", hint) from None

    def integer(n: ast.AST) -> int:
        sign = 1
        while isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):  # a loop: `[- - - ... 1]` of 2,000
            sign, n = -sign, n.operand  # characters overflowed a recursion (an internal error, a pending version)
        if isinstance(n, ast.Constant) and type(n.value) is int and abs(n.value) < 2**31:
            return sign * n.value
        raise AnnotationError(f"{where}: {ast.unparse(n)!r} is not a 32-bit integer literal", hint)

    if isinstance(node, ast.List):
        values = [integer(e) for e in node.elts]
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
          and 1 <= len(node.args) <= 3 and not node.keywords):
        args = [integer(a) for a in node.args]
        if len(args) == 3 and args[2] == 0:
            raise AnnotationError(f"{where}: range() step must not be zero", hint)
        span = range(*args)
        if len(span) > MAX_SPACE:  # measured before it is materialized
            raise AnnotationError(f"{where}: {text} has {len(span):,} values, over the limit of {MAX_SPACE:,}", hint)
        values = list(span)
    else:
        raise AnnotationError(f"{where}: values must be a list of integers or range(a, b[, step]), not {text!r}",
                              hint)
    if not values:
        raise AnnotationError(f"{where}: the value list is empty", hint)
    if len(set(values)) != len(values):
        raise AnnotationError(f"{where}: repeated values in {text}", "list each value once.")
    return values


def _parse_map(line_no: int, body: str) -> TensorMapLine:
    hint = "write e.g. // peak: tensor_map A box=(BM, 64) swizzle=128"
    match = _MAP_LINE.match(body)
    if not match:
        raise AnnotationError(f"line {line_no}: cannot read the tensor_map line", hint)
    fields = _split_fields(match.group("rest"), line_no)
    unknown = set(fields) - {"box", "swizzle"}
    if unknown or "box" not in fields:
        raise AnnotationError(f"line {line_no}: a tensor_map line takes box=(...) and optionally swizzle=" +
                              (f", not {sorted(unknown)}" if unknown else ""), hint)
    box = fields["box"]
    if not (box.startswith("(") and box.endswith(")")):
        raise AnnotationError(f"line {line_no}: box={box} must be parenthesized", hint)
    extents = tuple(_split_top_level(box[1:-1]))
    if not 1 <= len(extents) <= 5 or not all(extents):
        raise AnnotationError(f"line {line_no}: box has {len(extents)} extents; TMA maps have 1 to 5", hint)
    swizzle = fields.get("swizzle", "128")
    if swizzle not in {str(s) for s in SWIZZLES}:
        raise AnnotationError(f"line {line_no}: swizzle={swizzle} is not one of {list(SWIZZLES)} (bytes)", hint)
    return TensorMapLine(buffer=match.group("buffer"), box=extents, swizzle=int(swizzle), line=line_no)


def _parse_where(line_no: int, body: str) -> str:
    condition = re.sub(r"\Awhere\s*=?", "", body, count=1).strip()
    if not condition:
        raise AnnotationError(f"line {line_no}: empty where=", "write e.g. where=BM * BK <= 4096 and BM % 32 == 0")
    return condition


_GUARD = r"#\s*(?:ifndef\s+{0}\b|if\s+!\s*defined\s*\(?\s*{0}\b)"


def _check_own_defines(source: str, params: Mapping[str, list[int]]) -> None:
    """A parameter the kernel #defines itself would silently win over the configuration (NVRTC only warns on a
    redefinition): allowed only under `#ifndef NAME`, as a default for compiling the file alone."""
    lines = source.splitlines()
    for name in params:
        for i, line in enumerate(lines):
            if re.match(rf"\s*#\s*define\s+{name}\b", line):
                before = next((x for x in reversed(lines[:i]) if x.lstrip().startswith("#")), "")
                if not re.match(_GUARD.format(name), before.strip()):
                    raise AnnotationError(f"line {i + 1} #defines the tuning parameter {name}, which each "
                                          "configuration defines", f"delete it, or guard it with #ifndef {name}.")


def _example(needs: tuple[str, ...], symbols: tuple[str, ...] = ()) -> str:
    """A launch line in the problem's own size symbols: matmul's 2-D tiling of C, else one thread per element of
    the first symbol (`cdiv(ROWS, 256)`)."""
    if not symbols:  # a problem at fixed sizes: the counts are plain numbers
        grid, block = "1024, 1, 1", "256, 1, 1"
    elif {"M", "N"} <= set(symbols):
        grid, block = "cdiv(N, 16), cdiv(M, 16), 1", "16, 16, 1"
    else:
        grid, block = f"cdiv({symbols[0]}, 256), 1, 1", "256, 1, 1"
    if "groups" in needs:
        return f"// peak: entry=main groups=({grid})"
    return f"// peak: entry=kernel grid=({grid}) block=({block}) shared=0"


def _split_fields(body: str, line_no: int, *, repeats: bool = False) -> Any:
    """Split `k=v k=(a, b) k=[1, 2]` respecting brackets; a dict, or (key, value) pairs in order if `repeats`."""
    fields: list[tuple[str, str]] = []
    pos, body = 0, body.strip()
    while pos < len(body):
        key_match = _KEY.match(body, pos)
        if not key_match:
            raise AnnotationError(f"line {line_no}: cannot read the annotation near {body[pos:pos + 30]!r}",
                                  "write key=value pairs separated by spaces; a value with spaces in it goes in "
                                  "parentheses, e.g. shared=((1 + 2 * STAGES) * 32768 + 1024).")
        key, pos, depth = key_match.group(1), key_match.end(), 0
        while pos < len(body) and body[pos].isspace():
            pos += 1
        start = pos
        # A value may contain spaces inside brackets; keep reading until depth returns to 0.
        while pos < len(body) and (depth > 0 or not body[pos].isspace()):
            depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(body[pos], 0)
            pos += 1
        if depth != 0:
            raise AnnotationError(f"line {line_no}: unbalanced brackets in {key}=", "close every '(' and '['.")
        fields.append((key, body[start:pos].strip()))
        while pos < len(body) and body[pos].isspace():
            pos += 1
    return fields if repeats else dict(fields)


def _triple(fields: dict[str, str], key: str, line_no: int) -> tuple[str, str, str] | None:
    text = fields.get(key)
    if text is None:
        return None
    if not (text.startswith("(") and text.endswith(")")):
        raise AnnotationError(f"line {line_no}: {key}={text} must be a parenthesized triple",
                              f"write {key}=(x, y, z).")
    parts = _split_top_level(text[1:-1])
    if not 1 <= len(parts) <= 3:
        raise AnnotationError(f"line {line_no}: {key} has {len(parts)} components", f"write {key}=(x, y, z).")
    parts += ["1"] * (3 - len(parts))
    return (parts[0], parts[1], parts[2])


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        current += ch
    if current.strip():
        parts.append(current.strip())
    return parts
