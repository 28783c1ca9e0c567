"""Where validation time goes, in-process on one device: validate + benchmark of one kernel, twice (the first
pays one-time costs such as cupy's kernel compiles), then a cProfile of the second. A benchmark, not a test.

    python tools/bench_validate.py --backend cuda --size 4096 examples/matmul/cuda/double_buffered.cu

--reference picks where the validator computes (inputs, float64 reference, checks): `auto` as a worker would,
`host` (numpy) or `gpu` (cupy on the same GPU; HLSL beside Vulkan), or `both` for HLSL's host against GPU:

    python tools/bench_validate.py --backend hlsl --size 4096 --reference both --no-profile \\
        examples/matmul/hlsl/register_blocked.hlsl
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import numpy as np

from peak_mcp.backends.registry import launch_spec, open_executor
from peak_mcp.evaluation.steps import HOST, ArrayModule, array_module, benchmark, on_device, validate
from peak_mcp.problems.shipped import get_problem


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--reference", choices=("auto", "host", "gpu", "both"), default="auto")
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument("kernel", type=Path)
    args = parser.parse_args()
    problem = get_problem("matmul")
    sizes = {"M": args.size, "N": args.size, "K": args.size}
    executor = open_executor(args.backend, 0)
    source = args.kernel.read_text()
    spec = launch_spec(source, args.backend, problem.symbols, problem.derived)
    kernel = executor.compile(source, spec.on_device(executor.facts.properties.get("sm_count")))
    chosen = array_module(executor)
    host = ArrayModule(np, HOST)
    if args.reference in ("gpu", "both") and chosen.xp is np:
        sys.exit(f"no GPU reference on {executor.facts.name}: {chosen.why}")
    if args.reference in ("host", "both") and on_device(executor):
        sys.exit(f"{args.backend} keeps its buffers on the device: its validator computes there, not on the host")
    modules = {"auto": [chosen], "host": [host], "gpu": [chosen], "both": [host, chosen]}[args.reference]
    print(f"{args.backend} on {executor.facts.name}, {args.size}^3 {args.dtype}, {args.trials} trials")

    def once(module: ArrayModule) -> tuple[float, float, dict]:
        started = time.perf_counter()
        validated = validate(executor, kernel, problem, args.dtype, sizes, trials=args.trials, seed=1,
                             progress=lambda _: None, module=module)
        validated_s = time.perf_counter() - started
        timing = benchmark(executor, kernel, problem, args.dtype, sizes, validated, time_budget_s=1.0, min_reps=10,
                           max_reps=1000, progress=lambda _: None)
        validated.close()
        benchmarked_s = time.perf_counter() - started - validated_s
        return validated_s, benchmarked_s, {**validated.verdict.model_dump(), **timing.model_dump()}

    best: dict[str, float] = {}
    for module in modules:
        for label in ("first", "second"):
            v, b, result = once(module)
            best[module.label] = min(v, best.get(module.label, v))
            print(f"reference {result['reference']}, {label}: validate {v:.3f} s, benchmark {b:.3f} s, "
                  f"passed={result['passed']}, median {result['median_ms']:.4f} ms, reps {result['reps']}, "
                  f"recheck {result['recheck']}")
    if len(best) > 1:
        print(f"validate phase, the faster of two runs: host {best[HOST]:.3f} s, {chosen.label} "
              f"{best[chosen.label]:.3f} s ({best[HOST] / best[chosen.label]:.1f}x)")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        once(modules[-1])
        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(30)
        print(text.getvalue())


if __name__ == "__main__":
    main()
