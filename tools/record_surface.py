"""Record what a client sees of the server: tools/list (and resources, templates, prompts) and the answers of one
scripted lavapipe session, so that a change meant to move code only can be shown to change no byte of either.

    python tools/record_surface.py --out /tmp/surface-before     # on the tree before
    python tools/record_surface.py --out /tmp/surface-after      # on the tree after
    python tools/record_surface.py --compare /tmp/surface-before /tmp/surface-after

Runs `python -m peak_mcp serve` over stdio (a real MCP client) on a fresh data dir, HLSL on the CPU Vulkan driver.
What a run cannot repeat is masked before the comparison, and each mask is named in `masked.txt`: timings (every
decimal number, and the words `noise`/`faster`/`slower` that compare two timings), durations, session and apply
ids, and the data dir's path. Two runs of one tree must compare equal after masking; that is what makes an equal
comparison across trees mean something.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
MATMUL = ROOT / "examples" / "matmul" / "hlsl"
SIZES = {"M": 96, "N": 80, "K": 72}
# Kernels slower than the naive v0 by a factor no noise reverses (each computes its dot products several times
# over), so that head, best and every "faster/slower" a run says are the same in every run.
SLOW = """// Correct and slow: the dot product computed REPEAT times, the same value kept.
// peak: entry=main groups=(cdiv(N, 16), cdiv(M, 16), 1)
#define REPEAT 12
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;
[numthreads(16, 16, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    uint row = id.y, col = id.x;
    if (row >= p.M || col >= p.N) return;
    float kept = 0.0;
    for (uint r = 0; r < REPEAT; ++r) {
        float acc = 0.0;
        for (uint k = 0; k < p.K; ++k) acc += A[row * p.K + k] * B[k * p.N + col];
        kept = r == 0 ? acc : min(kept, acc);
    }
    C[row * p.N + col] = kept;
}
"""
TUNABLE = """// Tunable and slow: BLOCK threads a group along N; the dot product computed 6 times.
// peak: entry=main groups=(cdiv(N, BLOCK), M, 1)
// peak: params BLOCK=[16, 32, 64]
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;
[numthreads(BLOCK, 1, 1)]
void main(uint3 g : SV_GroupID, uint3 t : SV_GroupThreadID) {
    uint col = g.x * BLOCK + t.x, row = g.y;
    if (col >= p.N) return;
    float kept = 0.0;
    for (uint r = 0; r < 6; ++r) {
        float acc = 0.0;
        for (uint k = 0; k < p.K; ++k) acc += A[row * p.K + k] * B[k * p.N + col];
        kept = r == 0 ? acc : min(kept, acc);
    }
    C[row * p.N + col] = kept;
}
"""
PROBLEM = '''"""Scale a vector by two."""
NAME = "surface_scale"
TITLE = "y = 2x (x, y: N in the session's dtype)"
SIZES = {"N": 1000}
DTYPES = ("f32",)
INPUTS = {"x": ("N",)}
OUTPUTS = {"y": ("f32", ("N",))}
SCALARS = ("N",)
FLOPS = "N"


def reference(x, *, xp):
    return 2 * x
'''


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _answer(result: Any) -> dict[str, Any]:
    return {"is_error": result.is_error, "structured": result.structured_content,
            "content": [c.model_dump(mode="json", exclude_none=True) for c in result.content]}


async def _record(out: Path) -> None:
    data = Path(tempfile.mkdtemp(prefix="peak-surface-"))
    env = {**os.environ, "PEAK_MCP_DATA_DIR": str(data)}
    server = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "serve"], env=env)
    calls: list[dict[str, Any]] = []

    async with Client(server, read_timeout_seconds=1800) as client:
        listing = {"tools": (await client.list_tools()).model_dump(mode="json", exclude_none=True),
                   "resources": (await client.list_resources()).model_dump(mode="json", exclude_none=True),
                   "templates": (await client.list_resource_templates()).model_dump(mode="json", exclude_none=True),
                   "prompts": (await client.list_prompts()).model_dump(mode="json", exclude_none=True)}
        (out / "listing.json").write_text(json.dumps(listing, indent=1, sort_keys=True, ensure_ascii=False) + "\n")

        async def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(tool, args)
            shown = {k: (f"<{len(v)} chars>" if k == "source" else v) for k, v in args.items()}
            calls.append({"tool": tool, "args": shown, **_answer(result)})
            log(f"== {tool} {'ERROR' if result.is_error else (result.structured_content or {}).get('status', '')}")
            return result.structured_content or {}

        await call("doctor", {})
        await call("list_problems", {})
        await call("list_transformations", {"backend": "hlsl"})
        await call("get_transformation", {"transformation": "hlsl-groupshared-tiling"})
        started = await call("start_session", {"problem": "matmul", "backend": "hlsl", "dtype": "f32",
                                               "sizes": SIZES, "label": "surface"})
        sid = started["session_id"]
        await call("submit_kernel", {"session_id": sid, "source": SLOW,
                                     "transformation": "loop-unrolling-and-launch-bounds"})
        wrong = (MATMUL / "naive.hlsl").read_text().replace("acc += ", "acc -= ")
        await call("submit_kernel", {"session_id": sid, "source": wrong, "parent": 0})
        await call("submit_kernel", {"session_id": sid, "source": TUNABLE, "parent": 0})
        await call("tune", {"session_id": sid, "version": 3, "max_configs": 1})
        await call("history", {"session_id": sid})
        await call("get_version", {"session_id": sid, "version": 1})
        await call("diff", {"session_id": sid, "a": 0, "b": 1})
        await call("validate", {"session_id": sid, "version": 1, "sizes": {"M": 33, "N": 17, "K": 9}})
        await call("revert", {"session_id": sid, "version": 2})
        await call("revert", {"session_id": sid, "version": 1})
        await call("suggest_next", {"session_id": sid})
        await call("get_transformation_stats", {})
        await call("profile", {"session_id": sid, "version": 1})
        await call("apply_transformation", {"session_id": sid, "transformation": "hlsl-groupshared-tiling"})
        await call("list_sessions", {})
        await call("define_problem", {"source": PROBLEM})
        await call("start_session", {"problem": "surface_scale", "backend": "hlsl", "dtype": "f32"})
        # arguments an agent gets wrong
        await call("submit_kernel", {"session_id": sid, "source": ""})
        await call("submit_kernel", {"session_id": "nope", "source": "x"})
        await call("history", {"session_id": sid, "extra": 1})
        await call("tune", {"session_id": sid, "version": 0})
        await call("benchmark", {"session_id": sid, "version": -1})
    (out / "session.json").write_text(json.dumps(calls, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    (out / "data_dir.txt").write_text(str(data))


MASKS = [
    ("the data dir's path", None),
    ("session and apply ids (12 hex digits)", re.compile(r"(?<![0-9a-f])[0-9a-f]{12}(?![0-9a-f])")),
    ("the apply brief's hash and length (its text names the session and quotes timings)",
     re.compile(r'"brief_sha256": "[0-9a-f]+"|"brief_chars": \d+')),
    ("how many rounds the CPU yardstick took: a second three when the first disagree (another process busy)",
     re.compile(r'\. The rounds disagreed \([^)]*\): the CPU was busy with other work meanwhile, and kernels timed now '
                r'may read slow too|(?<=quietest of )\d+(?= rounds)|(?<="rounds_ms": \[)[^\]]*(?=\])|'
                r'(?<=cold cache, rounds )[^m]*(?= ms)'), ""),
    ("tune's note that its full timing differs from the search's estimate beyond noise (a timing's outcome)",
     re.compile(r'; the full timing is [^"(]*\([^)]*\)|"estimate_gap": "[^"]*",\n\s*'), ""),
    ("decimal numbers (timings, ratios, seconds)", re.compile(r"-?\d+(?:\.\d+(?:e[-+]?\d+)?|e-\d+)")),
    ("numbers in the JSON fields of durations and timings",
     re.compile(r'"(seconds|wall_s|median_ms|min_ms|max_ms|mean_ms|p\d+_ms|cv|tflops|gbps|reps|[a-z_]*_ms|'
                r'[a-z_]*_s|pct_[a-z_]*|[a-z_]*_pct|speedup[a-z_]*|q\d)": -?\d+')),
    ("whole numbers of a timing unit, and launch and call counts",
     re.compile(r"\b\d+(?= ?(?:[kMGT]?FLOP/s|[kMGT]?B/s|ms|µs|us|s|%|launches|calls|reps)(?!\w))")),
    ("the words that compare two timings", re.compile(r"\b(noise|faster|slower|within noise)\b")),
]


def masked(text: str, data_dir: str) -> str:
    text = text.replace(data_dir, "<data dir>")
    for _name, pattern, *removed in MASKS[1:]:
        text = pattern.sub(removed[0] if removed else
                           lambda m: m.group(0).split(":")[0] + ": #" if m.group(0).startswith('"') else "#", text)
    return text


def compare(a: Path, b: Path) -> int:
    differ = 0
    for name in ("listing.json", "session.json"):
        left = masked((a / name).read_text(), (a / "data_dir.txt").read_text())
        right = masked((b / name).read_text(), (b / "data_dir.txt").read_text())
        raw = (a / name).read_bytes() == (b / name).read_bytes()
        if left == right:
            print(f"{name}: identical {'byte for byte' if raw else 'after masking'} ({len(left)} chars)")
            continue
        differ += 1
        print(f"{name}: DIFFERS")
        sys.stdout.writelines(difflib.unified_diff(left.splitlines(keepends=True), right.splitlines(keepends=True),
                                                   str(a / name), str(b / name), n=2))
    print("masked: " + "; ".join(name for name, *_ in MASKS))
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        parser.error("--out or --compare")
    args.out.mkdir(parents=True, exist_ok=True)
    anyio.run(_record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
