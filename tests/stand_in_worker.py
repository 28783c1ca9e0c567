"""A stand-in for peak_mcp.runner.worker (stdlib only). Tests start it through a `python` shim given to DevicePool,
which drops the real worker's `-I -u -c <bootstrap>` and keeps its arguments.

With --device -1 it answers every job like a compile-only CUDA worker whose compile succeeded. With a device index
(0 or more) it acts as the worker of a CUDA GPU: an evaluate job gets a compile, a passing validation and a timing,
a baseline-only job no vendor library, and a generality job a passing generality plus, where the job asks for the
sanitizer, a clean compute-sanitizer report. Replies are built field by field as peak_mcp.runner.jobs builds them.

Markers in a job's source:
- MALFORMED: a reply with a field of the wrong type, as a worker from another release (or a bug) would send;
- SANITIZER_FINDING: compute-sanitizer memcheck finds the write 1.2 MB before the output buffer that
  tests/hostile/cuda/oob_write_before_far.cu does (the finding reported on an H100).
- PROBLEM_ERROR: the job fails as a problem file's exception would make it, with terminal escapes in a 10 MB
  message (the server must clean and cut it);
- `// TIMES median=6.0 p25=5.9 p75=6.1`: the timing's median and middle half (ms); otherwise a median of 10 ms with
  no quartiles and a cv of 0.01 (a timing stored before quartiles were recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

FINDING = ("compute-sanitizer memcheck: Invalid __global__ write of size 4 bytes | at mm_ws_before+0x… in "
           "kernel.cu:28 | by thread (0,0,0) in block (0,0,0) | Address 0x… is out of bounds | and is 1,200,000 "
           "bytes before the nearest allocation at 0x…")


def device(index: int) -> dict[str, Any]:
    if index < 0:
        return {"backend": "cuda", "index": -1, "name": "stand-in", "properties": {}}
    return {"backend": "cuda", "index": index, "name": "NVIDIA H100 80GB HBM3",
            "properties": {"arch": "sm_90a", "compute_capability": "9.0", "sm_count": 132}}


def evaluate(job: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"type": "evaluate", "device": facts}
    if job.get("source") is not None:
        result["compile"] = {"ok": True, "log": "", "resources": {"arch": "sm_90a" if facts["index"] >= 0 else "sm_80",
                                                                   "registers": 32}, "seconds": 0.01}
        if "MALFORMED" in job["source"]:
            result["compile"]["seconds"] = "soon"
        steps = set(job.get("steps") or ())
        if facts["index"] < 0 or not steps & {"validate", "benchmark"}:
            return result
        result["validation"] = {"passed": True, "check": None, "trials": job["trials"], "seconds": 0.2,
                                "message": f"all {job['trials']} trials passed (rel L2 tolerance 1e-05)"}
        if "benchmark" in steps:
            sizes = job["sizes"]
            times = _times(job["source"])
            median = times.get("median", 10.0)
            flops = 2.0 * sizes["M"] * sizes["N"] * sizes["K"]
            result["timing"] = {"reps": 50, "median_ms": median, "min_ms": median * 0.99, "max_ms": median * 1.02,
                                "mean_ms": median, "cv": 0.01, "tflops": flops / (median * 1e-3) / 1e12, "gbps": 1.0,
                                "cold_cache": True, "wall_s": 0.5, "input_sets": 2, "recheck": {"passed": True},
                                "device_name": facts["name"], "seconds": 0.6}
            if "p25" in times:
                result["timing"].update(p25_ms=times["p25"], p75_ms=times["p75"])
    if "baseline" in (job.get("steps") or ()):
        result["baseline"] = {"available": False, "reason": "the stand-in worker has no vendor library"}
    return result


def _times(source: str) -> dict[str, float]:
    """The `// TIMES name=value ...` line of a source, as numbers."""
    for line in source.splitlines():
        if line.strip().startswith("// TIMES "):
            return {k: float(v) for k, v in (item.split("=") for item in line.strip()[len("// TIMES "):].split())}
    return {}


def generality(job: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"type": "generality", "generality": {
        "passed": True, "sizes_checked": job["sizes_list"], "failures": []}}
    if job.get("sanitize_sizes"):
        report: dict[str, Any] = {"available": True, "passed": True, "sizes": job["sanitize_sizes"],
                                  "clean": ["memcheck", "racecheck", "initcheck", "synccheck"], "failures": [],
                                  "unchecked": [], "seconds": 4.2}
        if "SANITIZER_FINDING" in job["source"]:
            report.update(passed=False, clean=["racecheck", "initcheck", "synccheck"],
                          failures=[{"check": "sanitizer_memcheck", "message": FINDING}])
        result["sanitizer"] = report
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--backend", "--parent-pid", "--options", "--control-fd"):
        parser.add_argument(name)
    parser.add_argument("--device", type=int, default=-1)
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args()
    facts = device(args.device)
    out = os.fdopen(args.result_fd, "w", buffering=1)
    out.write(json.dumps({"event": "ready", "device": facts}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        if "PROBLEM_ERROR" in (job.get("source") or ""):
            error = "the problem's own code failed, not the kernel: \x1b[2J\x1b]0;pwn\x07" + "A" * (10 << 20)
            out.write(json.dumps({"id": job["id"], "event": "result", "ok": False, "kind": "problem_error",
                                  "error": error}) + "\n")
            continue
        result = generality(job) if job["type"] == "generality" else evaluate(job, facts)
        out.write(json.dumps({"id": job["id"], "event": "result", "ok": True, "result": result}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
