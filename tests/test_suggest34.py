"""Issue 34: suggest_next ranks texts whose prerequisites the head has not done after the rest (naming what comes
first), reads features from the head's code alone (shared scratch is not tiling, a float4 register is not a vector
load, a lineage label is not the work), reports the session's earlier attempts at a text and ranks one that failed
repeatedly after the untried; a brief keeps the session's own ABI, never the text's problem's."""

from __future__ import annotations

import copy

import pytest

from peak_mcp.catalog.features import SHARED_SCRATCH, SHARED_TILES, source_features
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.anyio
SMALL = {"M": 64, "N": 48, "K": 32}

# One output element per block: its threads split K and sum their partials in a shared reduction buffer.
SCRATCH_MATMUL = """// peak: entry=matmul_split grid=(N, M, 1) block=(128, 1, 1) shared=0
// The shared-memory tiling text would stage tiles; this kernel only reduces in shared memory.
extern "C" __global__ void matmul_split(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float partial[128];
    const int row = blockIdx.y, col = blockIdx.x, t = threadIdx.x;
    float acc = 0.0f;
    for (int k = t; k < K; k += blockDim.x)
        acc += A[row * K + k] * B[k * N + col];
    partial[t] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s)
            partial[t] += partial[t + s];
        __syncthreads();
    }
    if (t == 0)
        C[row * N + col] = partial[0];
}
"""


async def _start(client) -> str:
    result = await client.call_tool("start_session", {"backend": "cuda", "dtype": "f32", "sizes": SMALL})
    assert not result.is_error, result.content[0].text
    return result.structured_content["session_id"]


async def _suggest(client, sid: str) -> dict:
    result = await client.call_tool("suggest_next", {"session_id": sid, "limit": 25})
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def _submit(client, sid: str, source: str, transformation: str) -> dict:
    result = await client.call_tool("submit_kernel", {"session_id": sid, "source": source, "parent": 0,
                                                      "transformation": transformation})
    return result.structured_content


async def test_texts_whose_prerequisites_are_not_done_rank_after_the_rest(make_client) -> None:
    async with make_client() as (client, _):
        got = (await _suggest(client, await _start(client)))["suggestions"]
        ids = [s["id"] for s in got]
        waiting = [i for i, s in enumerate(got) if s.get("first")]
        ready = [i for i, s in enumerate(got) if not s.get("first")]
        assert ready and waiting and max(ready) < min(waiting), got
        assert ids[0] == "shared-memory-tiling"
        blocking = next(s for s in got if s["id"] == "register-blocking-1d")
        assert blocking["first"] == ["shared-memory-tiling"] and "apply it first" in blocking["why"]
        # one step away (its prerequisite is ready) before two steps away
        assert ids.index("register-blocking-1d") < ids.index("cuda-cp-async"), ids
        assert ids.index("register-blocking-2d") < ids.index("thread-block-clusters"), ids


async def test_a_shared_reduction_buffer_is_not_tiling_and_a_label_is_not_the_work(make_client) -> None:
    async with make_client() as (client, _):
        sid = await _start(client)
        report = await _submit(client, sid, SCRATCH_MATMUL, "shared-memory-tiling")
        assert report["status"] == "compiled" or report["status"] in ("validated", "benchmarked"), report
        got = await _suggest(client, sid)
        assert SHARED_SCRATCH in got["features"] and SHARED_TILES not in got["features"], got["features"]
        tiling = next(s for s in got["suggestions"] if s["id"] == "shared-memory-tiling")
        assert "labelled shared-memory-tiling" in tiling["why"] and "no shared-memory tiles" in tiling["why"]


async def test_a_text_that_failed_twice_is_said_so_and_ranked_after_the_untried(make_client) -> None:
    async with make_client() as (client, _):
        sid = await _start(client)
        broken = (EXAMPLES / "cuda" / "smem_tiled.cu").read_text().replace("__syncthreads();", "__syncthreads()", 1)
        for _ in range(2):
            report = await _submit(client, sid, broken, "shared-memory-tiling")
            assert report["status"] == "compile_error", report
        got = await _suggest(client, sid)
        tiling = next(s for s in got["suggestions"] if s["id"] == "shared-memory-tiling")
        assert len(tiling.get("tried", [])) == 2 and all("failed (" in t for t in tiling["tried"]), tiling
        assert "tried in this session" in tiling["why"] and "ranked after the untried texts" in tiling["why"]
        ids = [s["id"] for s in got["suggestions"]]
        assert ids[-1] == "shared-memory-tiling" and ids.index("register-blocking-1d") < ids.index(
            "shared-memory-tiling"), ids


def test_attempt_outcomes_name_speed_and_checks() -> None:
    from peak_mcp.catalog.suggest import _outcome
    from peak_mcp.evaluation.phases import Timing, Verdict
    from peak_mcp.store.records import VersionRow

    def version(n: int, status: str, ms: float | None = None, **kw) -> VersionRow:
        return VersionRow(session_id="s", number=n, parent=0 if n else None, origin="submit", source="",
                          status=status, created_at=0.0, timing=Timing(median_ms=ms) if ms else None, **kw)

    rows = [version(0, "benchmarked", 2.0), version(1, "benchmarked", 1.0), version(2, "benchmarked", 4.0),
            version(3, "failed", validation=Verdict(passed=False, check="max_abs_error"))]
    assert [_outcome(v, rows) for v in rows[1:]] == ["v1 2× its parent (faster beyond noise)",
                                                    "v2 0.5× its parent (slower beyond noise)",
                                                    "v3 failed (max_abs_error)"]


def test_features_come_from_the_code() -> None:
    assert SHARED_TILES in source_features((EXAMPLES / "cuda" / "smem_tiled.cu").read_text())
    assert SHARED_TILES in source_features((EXAMPLES / "hlsl" / "tiled_groupshared.hlsl").read_text())
    assert SHARED_SCRATCH in source_features(SCRATCH_MATMUL)
    for problem in ("softmax", "rmsnorm", "row_sum"):  # reduction buffers, with or without waves
        for path in (EXAMPLES.parent / problem).rglob("*_*.*"):
            assert SHARED_TILES not in source_features(path.read_text()), path
    hlsl = (EXAMPLES / "hlsl" / "register_blocked.hlsl").read_text()
    assert "float4" in hlsl and "128-bit vectors" not in source_features(hlsl)  # float4 registers load nothing
    commented = "// next: float4 loads, wmma::mma_sync\n" + (EXAMPLES / "cuda" / "naive.cu").read_text()
    assert not {"128-bit vectors", "WMMA"} & set(source_features(commented))
    assert "128-bit vectors" in source_features((EXAMPLES / "cuda" / "regblock_2d.cu").read_text())


def test_a_brief_keeps_the_sessions_own_abi() -> None:
    from peak_mcp.catalog.brief import FailedAttempt, KernelTask, Standing, build_brief, build_retry
    from peak_mcp.catalog.rendering import render_body
    from peak_mcp.core.devices import Device

    catalog = Catalog.load(builtin_transformations_dir())
    abi = "extern \"C\" __global__ void layernorm(const T* x, const T* w, const T* b, T* y, int ROWS, int COLS)"
    for id in ("coalesced-access", "amd-mfma", "attention-online-tiling", "hlsl-groupshared-tiling"):
        t = catalog.get(id)
        task = KernelTask(problem="layernorm", problem_title="LayerNorm", abi=abi, backend=t.backends[0],
                          dtype="f32", sizes={"ROWS": 8, "COLS": 8}, device=Device(name="x"),
                          transformation_id=id, transformation_title=t.title,
                          transformation_body=render_body(t.body, t.backends[0]), language="cuda")
        failed = FailedAttempt(attempt=1, version=1, status="failed", failure="x", verdict="x", source="a",
                               parent=0, parent_source="b")
        for brief in (build_brief(task, Standing(), "src"), build_retry(task, Standing(), failed, attempt=2,
                                                                         max_attempts=2)):
            keep = brief[brief.index("## Keep unchanged"):]
            keep = keep[:keep.index("\n## ", 3)]
            assert "stated above for layernorm" in keep, (id, keep)
            for other in ("const T* A, const T* B", "(q, k, v, o", "Bindings 0", "bindings 0, 1, 2"):
                assert other not in keep, (id, keep)


def test_a_row_problem_by_another_name_gets_the_row_texts() -> None:
    from types import SimpleNamespace

    from peak_mcp.catalog.suggest import suggest_next
    from peak_mcp.problems.shipped import get_problem
    from peak_mcp.store.records import SessionRow, VersionRow

    problem = copy.copy(get_problem("rmsnorm"))
    object.__setattr__(problem, "name", "layer_norm")
    session = SessionRow(id="s", problem="layer_norm", backend="cuda", dtype="f32", sizes={"ROWS": 64, "COLS": 256},
                         device="compile-only", device_index=-1, head=0, created_at=0.0)
    naive = (EXAMPLES.parent / "rmsnorm" / "cuda" / "1_smem_tree.cu").read_text()
    versions = [VersionRow(session_id="s", number=0, origin="naive", source=naive, status="compiled",
                           created_at=0.0)]
    device = SimpleNamespace(name="compile-only", arch="sm_80", family="ampere", sm_count=None)
    got = suggest_next(Catalog.load(builtin_transformations_dir()), session, versions, device, problem, None, 25)
    ids = {s.id for s in got.suggestions}
    assert {"warp-shuffle-reduction", "vectorized-row-access", "row-per-warp"} <= ids, ids
    assert not {"shared-memory-tiling", "register-blocking-2d"} & ids


@pytest.mark.anyio
async def test_tiling_texts_wait_for_a_row_kernel_to_be_one(make_client) -> None:
    """An agent's rmsnorm v0 (one thread per row) got loop-unrolling-and-launch-bounds and tile-size-tuning first:
    their predecessors were GEMM texts, absent for a row problem, so nothing held them back. A row kernel is
    their predecessor now."""
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"problem": "rmsnorm", "backend": "cuda",
                                                           "sizes": {"ROWS": 64, "COLS": 256}})
        sid = started.structured_content["session_id"]
        ranked = (await client.call_tool("suggest_next", {"session_id": sid, "limit": 10})).structured_content
        ids = [s["id"] for s in ranked["suggestions"]]
        assert ids.index("row-per-block-reduction") < ids.index("tile-size-tuning"), ids
        tiling = next(s for s in ranked["suggestions"] if s["id"] == "tile-size-tuning")
        assert tiling["first"] == ["row-per-block-reduction"], tiling


def test_suggestions_on_a_head_slower_than_the_best_say_so() -> None:
    """An agent's head moved to a version at 0.26x of v0 and every suggestion built on it, with nothing saying so."""
    from types import SimpleNamespace

    from peak_mcp.catalog.suggest import _behind_best

    def version(number: int, ms: float) -> SimpleNamespace:
        timing = SimpleNamespace(median_ms=ms, p25_ms=ms * 0.99, p75_ms=ms * 1.01)
        return SimpleNamespace(number=number, timing=timing, beside=lambda t, other: t)  # never re-timed

    v0, v1 = version(0, 10.0), version(1, 38.5)
    line = _behind_best([v0, v1], v1, best=0) or ""
    assert "v1, which these suggestions build on, runs at 0.26x the speed of the best version v0" in line, line
    assert "revert(version=0)" in line
    assert _behind_best([v0, v1], v0, best=0) is None  # ranked from the best itself
    close = version(2, 10.05)
    assert _behind_best([v0, close], close, best=0) is None  # within noise of the best: nothing to say
