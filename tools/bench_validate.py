"""Where validation time goes, in-process on one device: validate + benchmark of one kernel, twice (the first
pays one-time costs such as cupy's kernel compiles), then a cProfile of the second. A benchmark, not a test.

    python tools/bench_validate.py --backend cuda --size 4096 examples/matmul/cuda/double_buffered.cu
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

from peak_mcp.backends.registry import launch_spec, open_executor
from peak_mcp.evaluation import benchmark, validate
from peak_mcp.problems import get_problem


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("kernel", type=Path)
    args = parser.parse_args()
    problem = get_problem("matmul")
    sizes = {"M": args.size, "N": args.size, "K": args.size}
    executor = open_executor(args.backend, 0)
    source = args.kernel.read_text()
    kernel = executor.compile(source, launch_spec(source, args.backend, problem.symbols))

    def once() -> tuple[float, float, dict]:
        started = time.perf_counter()
        validated = validate(executor, kernel, problem, args.dtype, sizes, trials=args.trials, seed=1,
                             progress=lambda _: None)
        validated_s = time.perf_counter() - started
        timing = benchmark(executor, kernel, problem, args.dtype, sizes, validated, time_budget_s=1.0, min_reps=10,
                           max_reps=1000, progress=lambda _: None)
        validated.close()
        benchmarked_s = time.perf_counter() - started - validated_s
        return validated_s, benchmarked_s, {**validated.verdict.model_dump(), **timing.model_dump()}

    for label in ("first", "second"):
        v, b, result = once()
        print(f"{label}: validate {v:.3f} s, benchmark {b:.3f} s, passed={result['passed']}, "
              f"median {result['median_ms']:.4f} ms, reps {result['reps']}, recheck {result['recheck']}")
    profile = cProfile.Profile()
    profile.enable()
    once()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(30)
    print(text.getvalue())


if __name__ == "__main__":
    main()
