"""The benchmark's per-launch audit (evaluation/wrong_count.py) on a GPU: its time per call at a few output sizes,
f32, everything in bound. A benchmark, not a test.

    python3 tools/bench_audit.py [--sizes 6400000 134217728] [--calls 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peak_mcp.evaluation.wrong_count import any_wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[6_400_000, 134_217_728])
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    if args.calls < 1 or any(n < 1 for n in args.sizes):
        parser.error("--sizes and --calls are positive")
    try:
        import cupy
    except ImportError:
        print("bench_audit: cupy is not installed (this measures the GPU audit)", file=sys.stderr)
        return 2
    for n in args.sizes:
        stored = cupy.random.random(n, dtype=cupy.float32)
        ref, scale = stored.astype(cupy.float64), cupy.ones(n)
        any_wrong(cupy, stored, "f32", ref, scale, 2.0)  # compiled once
        cupy.cuda.Device().synchronize()
        started = time.perf_counter()
        for _ in range(args.calls):
            any_wrong(cupy, stored, "f32", ref, scale, 2.0)
        cupy.cuda.Device().synchronize()
        print(f"audit of {n:,} f32 elements: {(time.perf_counter() - started) / args.calls * 1e3:.3f} ms a call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
