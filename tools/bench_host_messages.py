"""What a problem file's messages cost: one generality job over many small sizes of a problem file run by its problem
host (each size exchanges a few generate and reference calls with it), through a real pool, on any backend.

    python3 tools/bench_host_messages.py --backend hlsl          # lavapipe here; cuda on a lent GPU

The file is a copy of the shipped row_sum problem that also imports torch, as KernelBench files do (a process with
torch loaded pays more for whatever it does per message).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peak_mcp.core.launch import parse_annotation
from peak_mcp.problems.code import SHIPPED_DIR
from peak_mcp.problems.declared import prelude
from peak_mcp.problems.registry import describe_in_subprocess
from peak_mcp.runner.messages import GeneralityJob
from peak_mcp.runner.pool import DevicePool

SIZES = [(1, 1), (7, 5), (3, 33), (64, 31), (5, 129), (17, 17), (33, 64), (2, 255), (9, 9), (31, 3), (65, 7), (1, 1000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="hlsl", choices=["hlsl", "cuda"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    ext = "hlsl" if args.backend == "hlsl" else "cu"
    folder = Path(tempfile.mkdtemp(prefix="peak-host-messages-"))
    source = (SHIPPED_DIR / "row_sum.py").read_text().replace('NAME = "row_sum"', 'NAME = "rs_messages"')
    for naive in ("row_sum.hlsl", "row_sum.cu"):  # the file names both backends' naive kernels
        (folder / naive).write_text((SHIPPED_DIR / naive).read_text())
    (folder / "rs_messages.py").write_text(source + "\nimport torch  # noqa: E402,F401\n")
    declaration = describe_in_subprocess(folder / "rs_messages.py", timeout_s=120)
    kernel = prelude(args.backend, "f32") + (SHIPPED_DIR / f"row_sum.{ext}").read_text()
    needs = ("entry", "groups") if ext == "hlsl" else ("entry", "grid", "block")
    spec = parse_annotation(kernel, needs=needs, symbols=("ROWS", "COLS"))
    pool = DevicePool()
    try:
        first = GeneralityJob(problem=declaration.name, declaration=declaration, dtype="f32", source=kernel,
                              spec=spec, sizes_list=[{"ROWS": 4, "COLS": 4}], seed=3)
        pool.run(args.backend, 0, first, inactivity_s=120, total_s=600)  # the host starts here, not in the timing
        for _ in range(args.repeats):
            job = first.model_copy(update={"sizes_list": [{"ROWS": r, "COLS": c} for r, c in SIZES]})
            began = time.perf_counter()
            result = pool.run(args.backend, 0, job, inactivity_s=120, total_s=600)
            took = time.perf_counter() - began
            print(f"{len(SIZES)} sizes: {took:.2f} s ({took / len(SIZES) * 1000:.0f} ms a size), "
                  f"passed={result.generality.passed}")
    finally:
        pool.close()


if __name__ == "__main__":
    main()
