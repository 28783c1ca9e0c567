"""False failures of the problem tolerances, and what they still catch, measured through MCP.

For every problem file that ships with the server (softmax, rmsnorm, row_sum) and every dtype the backend offers,
starts a session (version 0 is the shipped naive kernel: validated at the session's sizes, then at every sampled
size, the generality check) and submits every correct variant in tools/data/problems/<problem>/ for the backend
(group reductions, online softmax, fast math, FMA), and with --examples every step of the problem's example ladder
(examples/<problem>/<backend>/). A version that is not benchmarked, or whose generality check
failed, is a false failure: the count must be 0. Then, for each (problem, dtype), it submits the naive kernel with
one output element (row 1, column 2) multiplied by 1 + eps for eps = 2^-6, 2^-7, ... and prints the smallest eps
that is still caught (the next smaller one passed), and how: failed at the session's sizes (wrong_result), or
not_general (at a sampled size, where the same element weighs more).

With --against-kernel the same runs use each problem's data alone (a copy of its file without reference, error
scale or naive kernels, named <problem>_k, REDUCTION = "COLS"): sessions start from start_session(reference_kernel=
the naive kernel), and every kernel is checked against that kernel's output instead of float64 arithmetic
(peak_mcp/evaluation/kernel_reference.py).

Runs `python -m peak_mcp serve` over stdio (the server a client sees); on a machine without a GPU, --backend hlsl
on lavapipe. Example:

    python tools/false_failures.py --backend hlsl --sizes ROWS=64,COLS=100 [--against-kernel]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from peak_mcp.api.responses import whole_answer
from peak_mcp.problems.declared import C_TYPE, prelude

ROOT = Path(__file__).resolve().parent.parent
BUILTIN = ROOT / "peak_mcp" / "problems" / "builtin"
VARIANTS = ROOT / "tools" / "data" / "problems"
SUFFIX = {"cuda": ".cu", "hip": ".cu", "hlsl": ".hlsl"}
# The store of the output in each naive kernel, and the same store with one element scaled by (1 + EPS).
INJECT = {
    ("softmax", "hlsl"): (r"y\[base \+ c\] = from_f32\((.*)\);",
                          r"y[base + c] = from_f32((\1) * ((row == 1 && c == 2) ? (1.0 + EPS) : 1.0));"),
    ("rmsnorm", "hlsl"): (r"y\[base \+ c\] = from_f32\((.*)\);",
                          r"y[base + c] = from_f32((\1) * ((row == 1 && c == 2) ? (1.0 + EPS) : 1.0));"),
    ("row_sum", "hlsl"): (r"y\[row\] = sum;", r"y[row] = sum * ((row == 1) ? (1.0 + EPS) : 1.0);"),
    ("softmax", "cuda"): (r"out\[c\] = from_f32\((.*)\);",
                          r"out[c] = from_f32((\1) * ((row == 1 && c == 2) ? (1.0f + EPS) : 1.0f));"),
    ("rmsnorm", "cuda"): (r"out\[c\] = from_f32\((.*)\);",
                          r"out[c] = from_f32((\1) * ((row == 1 && c == 2) ? (1.0f + EPS) : 1.0f));"),
    ("row_sum", "cuda"): (r"y\[row\] = sum;", r"y[row] = sum * ((row == 1) ? (1.0f + EPS) : 1.0f);"),
    ("conv2d", "hlsl"): (r"y\[i\] = from_f32\(acc\);", r"y[i] = from_f32(acc * ((i == 1) ? (1.0 + EPS) : 1.0));"),
    ("conv2d", "cuda"): (r"y\[i\] = from_f32\(acc\);", r"y[i] = from_f32(acc * ((i == 1) ? (1.0f + EPS) : 1.0f));"),
    ("attention", "hlsl"): (r"o\[qi \+ col\] = from_f32\((.*)\);",
                            r"o[qi + col] = from_f32((\1) * ((i == 1 && col == 2) ? (1.0 + EPS) : 1.0));"),
    ("attention", "cuda"): (r"oi\[d0 \+ c\] = from_f32\((.*)\);",
                            r"oi[d0 + c] = from_f32((\1) * ((i == 1 && d0 + c == 2) ? (1.0f + EPS) : 1.0f));"),
}
INJECT["attention_causal", "hlsl"], INJECT["attention_causal", "cuda"] = INJECT["attention", "hlsl"], \
    INJECT["attention", "cuda"]
INJECT.update({(problem, "hip"): pattern for (problem, backend), pattern in list(INJECT.items())
               if backend == "cuda"})


def injected(naive: str, problem: str, backend: str, eps: float) -> str:
    pattern, replacement = INJECT[(problem, backend)]
    text, count = re.subn(pattern, replacement.replace("EPS", repr(eps)), naive)
    assert count == 1, f"the injection pattern for {problem} on {backend} does not match its naive kernel"
    return text


def data_only_copy(name: str, folder: Path) -> str:
    """`name`'s problem file without its functions and naive kernels, as `<name>_k` in `folder`: its name."""
    text = (BUILTIN / f"{name}.py").read_text()
    lines = text.splitlines()
    drop: set[int] = set()
    for node in ast.parse(text).body:
        assigned = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if isinstance(node, ast.FunctionDef) or assigned == ["NAIVE"]:
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            drop.update(range(start - 1, node.end_lineno or node.lineno))
    kept = [line for i, line in enumerate(lines) if i not in drop]
    body = "\n".join(kept).replace(f'NAME = "{name}"', f'NAME = "{name}_k"')
    (folder / f"{name}_k.py").write_text(body + '\nREDUCTION = "COLS"\n')
    return f"{name}_k"


TYPES = {b: C_TYPE[b] for b in ("cuda", "hip")}  # each dtype's storage type, as the problems' preludes name it
LADDER_OF = {"attention_causal": "attention"}  # problems that share one example ladder (the same ABI)


def example_sources(name: str, backend: str, dtype: str) -> list[tuple[str, str]]:
    """The problem's example ladder for the backend and dtype (attention_causal's is attention's): CUDA/HIP files with
    their `typedef float T;` line set to the dtype (16-bit-only steps, static_assert(sizeof(T) == 2), left out of
    f32 sessions); HLSL files of f32 (examples/<problem>/hlsl/) or f16 (its f16/ folder)."""
    folder = ROOT / "examples" / LADDER_OF.get(name, name) / backend
    if backend == "hlsl":
        folder = folder / "f16" if dtype == "f16" else folder
        return [(p.stem, p.read_text()) for p in sorted(folder.glob("*.hlsl"))] if dtype in ("f32", "f16") else []
    return [(p.stem, p.read_text().replace("typedef float T;", f"typedef {TYPES[backend][dtype]} T;", 1))
            for p in sorted(folder.glob("*.cu" if backend == "cuda" else "*.hip"))
            if dtype != "f32" or "static_assert(sizeof(T) == 2" not in p.read_text()]  # tensor-core steps: 16-bit


def naive_source(name: str, backend: str, dtype: str) -> str:
    return prelude(backend, dtype) + (BUILTIN / f"{name}{'.hlsl' if backend == 'hlsl' else '.cu'}").read_text()


def parse_sizes(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (part.split("=") for part in text.split(","))}


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content[0].text}")
    return whole_answer(tool, result)  # the long parts (a source, an ABI) back from the text


def verdict(report: dict[str, Any]) -> tuple[bool, str]:
    """(passed everywhere, one line): benchmarked, and general where generality ran."""
    generality = report.get("generality") or {}
    ok = report["status"] == "benchmarked" and generality.get("passed") is not False
    validation = report.get("validation") or {}
    ratio = validation.get("max_error_over_bound")
    sizes = len(generality.get("sizes_checked") or [])
    line = (f"{report['status']:<12} max error/bound {ratio if ratio is not None else '-':<8} "
            f"generality {generality.get('passed')} at {sizes} sizes")
    if not ok:
        line += f": {(report.get('message') or '')[:300]}"
    return ok, line


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="peak-false-failures-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    served = {name: name for name in args.problems}
    if args.against_kernel:
        folder = Path(tempfile.mkdtemp(prefix="peak-data-only-"))
        served = {name: data_only_copy(name, folder) for name in args.problems}
        env["PEAK_MCP_PROBLEMS"] = str(folder)
    server = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "--data-dir", str(data_dir),
                                                                  "serve"], env=env, cwd=str(ROOT))
    out: dict[str, Any] = {"backend": args.backend, "sizes": args.sizes, "runs": [], "caught": [],
                           "against_kernel": args.against_kernel}
    false_failures = kernels = 0
    async with Client(server, read_timeout_seconds=3600) as client:
        listed = await call(client, "list_problems", {})
        problems = {p["name"]: p for p in listed["problems"]}
        for name in args.problems:
            if served[name] not in problems:
                raise RuntimeError(f"{served[name]} did not load: {listed.get('errors')}")
            info = problems[served[name]]
            for dtype in info["dtypes_by_backend"].get(args.backend, []):
                if args.dtypes and dtype not in args.dtypes:
                    continue
                started = time.perf_counter()
                start = {"problem": served[name], "backend": args.backend, "dtype": dtype, "sizes": args.sizes,
                         "label": f"false failures {name} {dtype}"}
                if args.against_kernel:
                    start["reference_kernel"] = naive_source(name, args.backend, dtype)
                session = await call(client, "start_session", start)
                sid = session["session_id"]
                v0 = session["version_0"]
                ok, line = verdict(v0)
                kernels += 1
                false_failures += not ok
                print(f"{name:8} {dtype:4} naive              {line}", flush=True)
                out["runs"].append({"problem": name, "dtype": dtype, "kernel": "naive", "ok": ok, "line": line})
                variants = [(p.stem, prelude(args.backend, dtype) + p.read_text())
                            for p in sorted((VARIANTS / name).glob(f"*{SUFFIX[args.backend]}"))]
                if args.examples:
                    variants += example_sources(name, args.backend, dtype)
                for stem, source in variants:
                    report = await call(client, "submit_kernel", {"session_id": sid, "source": source, "parent": 0})
                    ok, line = verdict(report)
                    kernels += 1
                    false_failures += not ok
                    print(f"{name:8} {dtype:4} {stem:<18} {line}", flush=True)
                    out["runs"].append({"problem": name, "dtype": dtype, "kernel": stem, "ok": ok, "line": line})
                naive = (await call(client, "get_version", {"session_id": sid, "version": 0}))["source"]
                smallest, how = None, ""
                for k in range(args.from_exp, args.to_exp + 1):
                    eps = 2.0**-k
                    report = await call(client, "submit_kernel", {
                        "session_id": sid, "source": injected(naive, name, args.backend, eps)})
                    if report["status"] == "benchmarked":  # passed at its sizes and every sampled one
                        break
                    smallest, how = k, f"{report['status']}: {report.get('failure')}"
                caught = f"2^-{smallest} = {2.0**-smallest:.3g} ({how})" if smallest else "none of them"
                print(f"{name:8} {dtype:4} smallest single-element relative error caught: {caught} "
                      f"({time.perf_counter() - started:.0f} s)", flush=True)
                out["caught"].append({"problem": name, "dtype": dtype, "smallest_caught_exp": smallest})
    out["kernels"], out["false_failures"] = kernels, false_failures
    print(f"\nfalse failures: {false_failures} of {kernels} correct kernels (each at the session's sizes and at "
          "every sampled size)")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="hlsl", choices=["cuda", "hip", "hlsl"])
    parser.add_argument("--sizes", type=parse_sizes, default={"ROWS": 64, "COLS": 100})
    parser.add_argument("--problems", type=lambda t: t.split(","), default=["softmax", "rmsnorm", "row_sum"])
    parser.add_argument("--dtypes", type=lambda t: t.split(","), default=None)
    parser.add_argument("--from-exp", type=int, default=6, help="the largest eps injected is 2^-FROM")
    parser.add_argument("--to-exp", type=int, default=26, help="the smallest eps injected is 2^-TO")
    parser.add_argument("--against-kernel", action="store_true",
                        help="check against the naive kernel (reference_kernel) instead of the Python reference")
    parser.add_argument("--examples", action="store_true",
                        help="also submit every example under examples/<problem>/<backend>/ (the ladders)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    out = anyio.run(measure, args)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))
    return 1 if out["false_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
