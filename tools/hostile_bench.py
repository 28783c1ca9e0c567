"""Run the hostile-kernel manifest (tests/hostile/manifest.yaml) through MCP and print a Markdown table of verdicts.

Like tools/bench_matmul.py it starts `python -m peak_mcp serve` as a subprocess and talks to it over stdio, so what
it shows is what a real client sees, including whether anything a kernel printed leaked into the transport (the
session would break) and how long each verdict took. One session per size; every entry for the backend is
submitted to it (parent 0); after a fault a good kernel is submitted and must benchmark.

    python tools/hostile_bench.py --backend cuda --sizes 256,256,256 --sizes 100,77,53 --out hostile_cuda.json

Exit status 0 when every expectation held, 1 otherwise (the table says which).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.hostile.harness, when run as a script from anywhere

from tests.hostile.harness import Outcome, load_manifest, markdown, run_all  # noqa: E402

DEFAULT_SIZES = {"cuda": ["256,256,256", "100,77,53"], "hip": ["256,256,256", "100,77,53"],
                 "hlsl": ["128,128,128", "100,77,53"]}


def parse_sizes(text: str) -> dict[str, int]:
    parts = [int(p) for p in text.replace("x", ",").split(",")]
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not M,N,K")
    return dict(zip(("M", "N", "K"), parts, strict=True))


async def bench(backend: str, all_sizes: list[dict[str, int]], data_dir: Path, only: set[str],
                skip: set[str]) -> dict:
    entries = [e for e in load_manifest(backend)
               if (not only or e.cls in only or e.name in only) and e.cls not in skip and e.name not in skip]
    env = dict(os.environ)
    env.setdefault("PEAK_MCP_VK_FENCE_TIMEOUT_S", "5")
    env.setdefault("PEAK_MCP_JOB_TIMEOUT", "20")
    server = StdioServerParameters(command=sys.executable, args=["-m", "peak_mcp", "--data-dir", str(data_dir),
                                                                  "serve"], env=env)
    out: dict = {"backend": backend, "sizes": all_sizes, "outcomes": [], "errors": []}

    def show(o: Outcome) -> None:
        mark = "ok  " if o.ok else "FAIL"
        print(f"{mark} {o.entry.file:<40} {o.verdict:<36} expected {o.expected:<50} {o.seconds:6.1f} s",
              file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    for sizes in all_sizes:
        # A fresh server per size: a kernel that breaks the transport (stdout leak) fails its own size only.
        try:
            async with Client(server, read_timeout_seconds=1800) as client:
                outcomes = await run_all(client, backend, sizes, entries, progress=show)
                out["outcomes"] += [o.as_dict() for o in outcomes]
                out.setdefault("_objects", []).extend(outcomes)
                doctor = await client.call_tool("doctor", {})  # still answering at the end
                out.setdefault("server_alive", []).append(not doctor.is_error)
        except Exception as exc:  # the transport died or the session could not start: that is a finding too
            out["errors"].append({"sizes": sizes, "error": f"{type(exc).__name__}: {exc}"})
    out["seconds"] = time.perf_counter() - t0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cuda", choices=["cuda", "hip", "hlsl"],
                        help="hip: the CUDA kernels as HIP twins, judged against the CUDA expectations")
    parser.add_argument("--sizes", action="append", type=parse_sizes, default=None,
                        help="M,N,K (repeatable); default 256^3 and 100x77x53 (CUDA), 128^3 and 100x77x53 (HLSL)")
    parser.add_argument("--only", action="append", default=[], help="class or file stem to run (repeatable)")
    parser.add_argument("--skip", action="append", default=[], help="class or file stem to leave out")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/peak-hostile"))
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    sizes = args.sizes or [parse_sizes(s) for s in DEFAULT_SIZES[args.backend]]
    result = anyio.run(bench, args.backend, sizes, args.data_dir, set(args.only), set(args.skip))
    objects = result.pop("_objects", [])
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, default=str))
    print(f"## hostile kernels, {args.backend}\n")
    print(markdown(objects))
    passed = sum(o.ok for o in objects)
    print(f"\n{passed}/{len(objects)} expectations held; {len(result['errors'])} session errors; "
          f"server alive after each size: {result.get('server_alive')}; {result['seconds']:.0f} s in all")
    for err in result["errors"]:
        print(f"- session error at {err['sizes']}: {err['error']}")
    sys.exit(0 if objects and passed == len(objects) and not result["errors"] else 1)


if __name__ == "__main__":
    main()
