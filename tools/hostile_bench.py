"""Run the hostile-kernel manifest (tests/hostile/manifest.yaml) through MCP and print a Markdown table of verdicts.

Like tools/bench_matmul.py it starts `python -m peak_mcp serve` as a subprocess and talks to it over stdio, so what
it shows is what a real client sees, including whether anything a kernel printed leaked into the transport (the
session would break) and how long each verdict took. One session per problem and size, on a fresh server; every
entry of that problem for the backend is submitted to it (parent 0); after a fault a good kernel is submitted and
must benchmark. Each problem runs at its own sizes (tests/hostile/harness.py SESSION_SIZES: matmul 256^3 and
100x77x53 on CUDA/HIP, the row problems ROWS x COLS 256x1024 and 100x77); --sizes replaces them for the problems
whose symbols it names.

    python tools/hostile_bench.py --backend cuda --out hostile_cuda.json
    python tools/hostile_bench.py --backend cuda --problem softmax --sizes ROWS=4096,COLS=1000
    python tools/hostile_bench.py --backend hip --problem matmul --sizes 256,256,256
    python tools/hostile_bench.py --backend cuda --jobs 8 --gpus 4   # 8 servers side by side over 4 GPUs

Exit status 0 when every expectation held (entries with a known `gap` excepted: the table marks them), 1 otherwise.
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

from tests.hostile.harness import (  # noqa: E402
    SYMBOLS,
    Outcome,
    by_problem,
    load_manifest,
    markdown,
    run_all,
    session_sizes,
)


def parse_sizes(text: str) -> dict[str, int]:
    """M,N,K (matmul), or NAME=V,NAME=V for any problem (ROWS=256,COLS=1024)."""
    parts = [p.strip() for p in text.replace("x", ",").split(",") if p.strip()]
    try:
        if all("=" in p for p in parts):
            sizes = {k.strip(): int(v) for k, v in (p.split("=", 1) for p in parts)}
        else:
            sizes = dict(zip(("M", "N", "K"), (int(p) for p in parts), strict=True))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither M,N,K nor NAME=V,...") from None
    if min(sizes.values()) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes are at least 1")
    return sizes


def runs(backend: str, problems: dict[str, list], given: list[dict[str, int]]) -> list[tuple[str, dict[str, int]]]:
    """(problem, sizes) for every session: the sizes given for the problem's symbols, else its defaults."""
    out = []
    for problem in problems:
        mine = [s for s in given if set(s) == set(SYMBOLS[problem])]
        out += [(problem, s) for s in mine or session_sizes(problem, backend).values()]
    return out


def shards(entries: list, jobs: int) -> list[list]:
    """`entries` dealt round-robin into at most `jobs` non-empty shares, each in manifest order."""
    count = max(1, min(jobs, len(entries)))
    return [entries[i::count] for i in range(count)]


async def bench(backend: str, given: list[dict[str, int]], data_dir: Path, only: set[str], skip: set[str],
                problems: set[str], jobs: int = 1, gpus: int = 0) -> dict:
    """Every (problem, sizes) session of the manifest, its entries split over `jobs` servers that run side by side
    (each its own process, data dir and session; with `gpus`, the servers running at once spread evenly over
    them). No verdict rests on a timing; servers that share a GPU slow each other (a hanging kernel spins until its
    job's limit), so keep PEAK_MCP_JOB_TIMEOUT well above a launch's time when jobs outnumber GPUs."""
    entries = [e for e in load_manifest(backend, problem=None)
               if (not problems or e.problem in problems)
               and (not only or e.cls in only or e.name in only or e.file in only)
               and e.cls not in skip and e.name not in skip and e.file not in skip]
    groups = by_problem(entries)
    sessions = runs(backend, groups, given)
    env = dict(os.environ)
    env.setdefault("PEAK_MCP_VK_FENCE_TIMEOUT_S", "5")
    env.setdefault("PEAK_MCP_JOB_TIMEOUT", "20")
    out: dict = {"backend": backend, "sessions": sessions, "jobs": jobs, "outcomes": [], "errors": []}

    def show(o: Outcome) -> None:
        mark = "ok  " if o.ok else "FAIL"
        if not o.ok and o.entry.gap:
            mark = "gap "
        print(f"{mark} {o.entry.file:<40} {o.verdict:<36} expected {o.expected:<50} {o.seconds:6.1f} s",
              file=sys.stderr, flush=True)

    work = [(k, problem, sizes, share) for k, (problem, sizes) in enumerate(sessions)
            for share in shards(groups[problem], jobs)]
    found: list[tuple[int, Outcome]] = []  # (the session's place in `sessions`, outcome)
    # One slot per server running at once; slot i keeps GPU i % gpus, so running servers spread evenly over the
    # GPUs whatever order they finish in.
    slots_in, slots_out = anyio.create_memory_object_stream[int](max(1, jobs))
    for slot in range(max(1, jobs)):
        slots_in.send_nowait(slot)

    async def one(n: int, k: int, problem: str, sizes: dict[str, int], share: list) -> None:
        slot = await slots_out.receive()
        try:
            await serve(n, slot, k, problem, sizes, share)
        finally:
            slots_in.send_nowait(slot)

    async def serve(n: int, slot: int, k: int, problem: str, sizes: dict[str, int], share: list) -> None:
        shard_env = dict(env, **({"CUDA_VISIBLE_DEVICES": str(slot % gpus)} if gpus else {}))
        server = StdioServerParameters(command=sys.executable, args=[
            "-m", "peak_mcp", "--data-dir", str(data_dir / f"server-{n}"), "serve"], env=shard_env)
        # A fresh server per share: a kernel that breaks the transport (stdout leak) fails its own share only.
        try:
            async with Client(server, read_timeout_seconds=1800) as client:
                found.extend((k, o) for o in await run_all(client, backend, sizes, share, progress=show))
                doctor = await client.call_tool("doctor", {})  # still answering at the end
                out.setdefault("server_alive", []).append(not doctor.is_error)
        except Exception as exc:  # the transport died or the session could not start: that is a finding too
            out["errors"].append({"problem": problem, "sizes": sizes, "error": f"{type(exc).__name__}: {exc}"})

    t0 = time.perf_counter()
    async with anyio.create_task_group() as group:
        for n, (k, problem, sizes, share) in enumerate(work):
            group.start_soon(one, n, k, problem, sizes, share)
    order = {id(e): i for i, e in enumerate(entries)}  # the table in manifest order, whatever finished first
    outcomes = [o for _, o in sorted(found, key=lambda pair: (pair[0], order[id(pair[1].entry)]))]
    out["outcomes"] = [o.as_dict() for o in outcomes]
    out["_objects"] = outcomes
    out["seconds"] = time.perf_counter() - t0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cuda", choices=["cuda", "hip", "hlsl"],
                        help="hip: the CUDA kernels as HIP twins, judged against the CUDA expectations")
    parser.add_argument("--sizes", action="append", type=parse_sizes, default=[],
                        help="M,N,K or NAME=V,... (repeatable): replaces the default sizes of the problems whose "
                             "symbols it names (default: harness SESSION_SIZES, an aligned and an unaligned size)")
    parser.add_argument("--problem", action="append", default=[],
                        help="problem to run (repeatable; default every problem in the manifest)")
    parser.add_argument("--only", action="append", default=[],
                        help="class, file stem or file (softmax/race_missing_barrier.cu) to run (repeatable)")
    parser.add_argument("--skip", action="append", default=[], help="class, file stem or file to leave out")
    parser.add_argument("--jobs", type=int, default=1,
                        help="servers side by side, each judging a share of every session's entries (default 1)")
    parser.add_argument("--gpus", type=int, default=0,
                        help="with --jobs: server i sees only GPU i %% GPUS (CUDA_VISIBLE_DEVICES); 0: every GPU")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/peak-hostile"))
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.jobs < 1 or args.gpus < 0:
        parser.error("--jobs is at least 1 and --gpus at least 0")
    result = anyio.run(bench, args.backend, args.sizes, args.data_dir, set(args.only), set(args.skip),
                       set(args.problem), args.jobs, args.gpus)
    objects = result.pop("_objects", [])
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, default=str))
    print(f"## hostile kernels, {args.backend}\n")
    print(markdown(objects))
    passed = sum(o.ok for o in objects)
    gaps = [o for o in objects if not o.ok and o.entry.gap]
    print(f"\n{passed}/{len(objects)} expectations held ({len(gaps)} known gaps); {len(result['errors'])} session "
          f"errors; server alive after each session: {result.get('server_alive')}; {result['seconds']:.0f} s in all")
    for o in gaps:
        print(f"- known gap, {o.entry.file} at {o.sizes}: {o.entry.gap}")
    for err in result["errors"]:
        print(f"- session error, {err['problem']} at {err['sizes']}: {err['error']}")
    sys.exit(0 if objects and passed + len(gaps) == len(objects) and not result["errors"] else 1)


if __name__ == "__main__":
    main()
