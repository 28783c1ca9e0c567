"""How many configurations each tuning strategy measures before it is within 2% of the best, on a landscape
(a table of configuration -> median ms), averaged over seeds.

    python tools/tune_strategies.py                          # the recorded lavapipe landscape + a synthetic one
    python tools/tune_strategies.py --landscape FILE.json    # another recorded table
    python tools/tune_strategies.py --record FILE.json       # measure a landscape on Vulkan device 0 (lavapipe)

A recorded table comes from runner/tune_job.tune over every configuration of a parameterized HLSL matmul
(examples below); configurations that were pruned or failed are stored with ms null and count as failures.
Replaying a table runs the real strategies (tuning.make_strategy) and the real driver (tuning.run_tuning).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from peak_mcp.core.launch import LaunchSpec, parse_annotation  # noqa: E402
from peak_mcp.evaluation.configs import Config, ConfigResult  # noqa: E402
from peak_mcp.loop.tuning.search import OptunaSearch, Space, make_strategy, run_tuning  # noqa: E402

RECORDED = ROOT / "tools" / "data" / "lavapipe_matmul_landscape.json"
WITHIN = 1.02

# A register-blocked groupshared matmul: TILE x TILE threads per group, each computing WPT rows by TN columns.
KERNEL = """// peak: entry=main groups=(cdiv(N, TILE * TN), cdiv(M, TILE * WPT), 1)
// peak: params TILE=[8, 4, 16, 32] WPT=[1, 2, 4, 8] TN=[1, 2, 4]
// peak: where=TILE * WPT <= 64 and TILE * TN <= 64
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;

groupshared float As[TILE * WPT][TILE];
groupshared float Bs[TILE][TILE * TN];

[numthreads(TILE, TILE, 1)]
void main(uint3 gtid : SV_GroupThreadID, uint3 gid : SV_GroupID)
{
    uint tx = gtid.x, ty = gtid.y;
    uint row0 = gid.y * TILE * WPT + ty;
    uint col0 = gid.x * TILE * TN + tx;
    float acc[WPT][TN];
    [unroll] for (uint w = 0; w < WPT; ++w)
        [unroll] for (uint t = 0; t < TN; ++t) acc[w][t] = 0.0;
    for (uint k0 = 0; k0 < p.K; k0 += TILE) {
        [unroll] for (uint w = 0; w < WPT; ++w) {
            uint row = row0 + w * TILE;
            float a = 0.0;
            if (row < p.M && k0 + tx < p.K) a = A[row * p.K + k0 + tx];
            As[ty + w * TILE][tx] = a;
        }
        [unroll] for (uint t = 0; t < TN; ++t) {
            uint col = col0 + t * TILE;
            float b = 0.0;
            if (k0 + ty < p.K && col < p.N) b = B[(k0 + ty) * p.N + col];
            Bs[ty][tx + t * TILE] = b;
        }
        GroupMemoryBarrierWithGroupSync();
        [unroll] for (uint k = 0; k < TILE; ++k)
            [unroll] for (uint w = 0; w < WPT; ++w)
                [unroll] for (uint t = 0; t < TN; ++t)
                    acc[w][t] = mad(As[ty + w * TILE][k], Bs[k][tx + t * TILE], acc[w][t]);
        GroupMemoryBarrierWithGroupSync();
    }
    [unroll] for (uint w = 0; w < WPT; ++w)
        [unroll] for (uint t = 0; t < TN; ++t) {
            uint row = row0 + w * TILE, col = col0 + t * TILE;
            if (row < p.M && col < p.N) C[row * p.N + col] = acc[w][t];
        }
}
"""


def record(path: Path, sizes: dict[str, int], budget_s: float) -> None:
    from peak_mcp.backends import hlsl
    from peak_mcp.problems.matmul import Matmul
    from peak_mcp.runner.tune_job import tune

    spec = parse_annotation(KERNEL, needs=("entry", "groups"), symbols=Matmul.symbols)
    space = Space(spec, sizes)
    executor = hlsl.open_executor(0)
    started = time.monotonic()
    try:
        result = tune(executor, {"problem": "matmul", "dtype": "f32", "sizes": sizes, "source": KERNEL,
                                 "spec": spec.model_dump(), "configs": [c.params for c in space.valid],
                                 "time_budget_s": budget_s, "min_reps": 10},
                      lambda m: print(f"  {m}", file=sys.stderr) if m.endswith("timed launches") else None)
    finally:
        executor.close()
    table = [{"params": r["params"], "ms": r.get("median_ms") if r["status"] == "ok" else None,
              "status": r["status"], "kind": r.get("kind")} for r in result.model_dump()["results"]]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "what": "median ms of each configuration of tools/tune_strategies.py's KERNEL, measured by tune_job.tune",
        "device": executor.facts.name, "sizes": sizes, "time_budget_s": budget_s,
        "seconds": round(time.monotonic() - started, 1), "params": spec.params, "where": spec.where,
        "table": table}, indent=1) + "\n")
    print(f"recorded {len(table)} configurations to {path}")


def synthetic(seed: int = 0) -> dict[str, Any]:
    """A rugged but structured landscape over 2,000 configurations: a smooth bowl in each parameter's position,
    pairwise interactions, a sawtooth (register-pressure cliffs) and a region that fails outright."""
    params = {"BM": [16, 32, 64, 128, 256], "BN": [16, 32, 64, 128, 256], "BK": [8, 16, 32, 64],
              "STAGES": [1, 2, 3, 4, 5], "VEC": [1, 2, 4, 8]}
    rng = random.Random(seed)
    optimum = {n: rng.randrange(len(v)) for n, v in params.items()}
    weights = {n: rng.uniform(0.3, 1.0) for n in params}
    table = []
    names = list(params)
    for idx in itertools.product(*(range(len(v)) for v in params.values())):
        pos = dict(zip(names, idx, strict=True))
        cost = 1.0 + sum(weights[n] * (pos[n] - optimum[n]) ** 2 / 4 for n in names)
        cost += 0.15 * abs((pos["BM"] - pos["BN"]) * (pos["BK"] - optimum["BK"]))
        cost *= 1.0 + 0.05 * ((pos["STAGES"] * 7 + pos["VEC"] * 3) % 5)
        failed = pos["BM"] + pos["BN"] + pos["BK"] >= 11  # e.g. shared memory over the limit
        table.append({"params": {n: params[n][i] for n, i in pos.items()}, "ms": None if failed else cost})
    return {"device": "synthetic", "sizes": {}, "params": params, "where": [], "table": table}


class _Reached(Exception):
    pass


def needed(landscape: dict[str, Any], make: Any, seeds: int, batch: int) -> tuple[float, float, int]:
    """Mean and standard deviation over seeds of the configurations measured until one is within 2% of the
    table's best; and the space size."""
    spec = LaunchSpec(entry="main", line=1, params=landscape["params"], where=landscape.get("where", []))
    space = Space(spec, landscape["sizes"])
    ms = {Config(params=row["params"]).key: row["ms"] for row in landscape["table"]}
    best = min(v for v in ms.values() if v is not None)
    counts = []
    for seed in range(seeds):
        order: list[float | None] = []

        def measure(configs: list[Config], order: list[float | None] = order) -> list[ConfigResult]:
            out = []
            for c in configs:
                value = ms.get(c.key)
                order.append(value)
                if value is not None and value <= WITHIN * best:
                    raise _Reached  # the rest of the run cannot change the count
                out.append(ConfigResult(params=c.params, status="ok", median_ms=value) if value is not None else
                           ConfigResult(params=c.params, status="pruned", kind="resources", reason="failed"))
            return out

        with contextlib.suppress(_Reached):
            run_tuning(space, make(space, seed), measure, version=0, max_configs=len(space.valid), batch_size=batch)
        counts.append(len(order))
    return statistics.mean(counts), statistics.pstdev(counts), len(space.valid)


def strategies() -> dict[str, Any]:
    def named(name: str) -> Any:
        return lambda space, seed: make_strategy(name, space, max_configs=1, seed=seed)

    def optuna(**options: Any) -> Any:
        return lambda space, seed: OptunaSearch(space, seed=seed, **options)

    return {"exhaustive": named("exhaustive"), "random": named("random"), "optuna TPE ordinal": optuna(),
            "optuna TPE categorical": optuna(categorical=True)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--landscape", type=Path, action="append", help="recorded table(s) to replay")
    parser.add_argument("--record", type=Path, help="measure KERNEL's landscape on Vulkan device 0 into this file")
    parser.add_argument("--sizes", default="256,256,256", help="M,N,K for --record")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timed launches per configuration")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8, help="configurations per ask (a worker job's batch)")
    args = parser.parse_args(argv)
    if args.record:
        m, n, k = (int(x) for x in args.sizes.split(","))
        record(args.record, {"M": m, "N": n, "K": k}, args.budget)
        return 0
    paths = args.landscape or ([RECORDED] if RECORDED.exists() else [])
    landscapes = [(p.name, json.loads(p.read_text())) for p in paths]
    landscapes.append(("synthetic (2,000 configurations)", synthetic()))
    for name, landscape in landscapes:
        print(f"\n{name}: {landscape['device']}, sizes {landscape['sizes']}")
        print(f"{'strategy':<26} {'configs to within 2% of best':>30}   (mean ± sd over {args.seeds} seeds, "
              f"batches of {args.batch})")
        for label, make in strategies().items():
            seeds = 1 if label == "exhaustive" else args.seeds
            started = time.perf_counter()
            mean, sd, valid = needed(landscape, make, seeds, args.batch)
            print(f"{label:<26} {mean:>20.1f} ± {sd:<5.1f} of {valid:<5} "
                  f"({(time.perf_counter() - started) / seeds:.2f} s per run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
