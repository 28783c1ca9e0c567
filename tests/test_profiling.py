"""Profiling: the occupancy calculator on hand-computed cases, the SASS and SPIR-V instruction mixes, CUDA resources
read from real NVRTC cubins, and the worker's profile job (compile-only here; ncu and the driver on a GPU)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from peak_mcp.backends import hlsl
from peak_mcp.backends.cuda import CudaExecutor
from peak_mcp.backends.toolkit import find_tool
from peak_mcp.core.launch import parse_annotation
from peak_mcp.evaluation.profiling.cubin import cubin_resources, ptxas_resources
from peak_mcp.evaluation.profiling.ncu import ncu_raw_csv
from peak_mcp.evaluation.profiling.occupancy import CudaLimits, cuda_limits, occupancy
from peak_mcp.evaluation.profiling.sass import sass_mix
from peak_mcp.evaluation.profiling.spirv_mix import spirv_mix
from peak_mcp.runner.messages import ProfileJob
from peak_mcp.runner.pool import DevicePool
from peak_mcp.runner.profile_job import profile
from peak_mcp.runner.replies import ProfileResult
from tests.conftest import EXAMPLES, has_device, skip_reason

DATA = Path(__file__).parent / "data"
SM90 = cuda_limits("sm_90a")
HAS_HLSL_COMPILER = hlsl.find_compiler() is not None


# --- occupancy: each case worked by hand from the rules in occupancy()'s docstring ------------------------------


def test_sm90_limits_come_from_the_table() -> None:
    assert SM90 is not None and SM90.arch == "sm_90" and SM90.source == "table"
    assert (SM90.max_threads_per_sm, SM90.max_blocks_per_sm, SM90.shared_per_sm_bytes) == (2048, 32, 228 * 1024)
    assert cuda_limits("sm_61") is None  # not in the table, nothing detected: no guess


def test_registers_limit_a_register_blocked_kernel() -> None:
    # 111 regs -> 3552 per warp, rounded to 3584; 16384 // 3584 = 4 warps per partition -> 16 warps -> 2 blocks of 8
    occ = occupancy(111, 256, 8192, SM90)
    assert occ.blocks_by_limit == {"warps": 8, "blocks": 32, "registers": 2, "shared": 233472 // 9216}
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.occupancy, occ.limited_by) == (2, 16, 0.25, ["registers"])
    assert occ.shared_per_block_bytes == 8192 + 1024  # the 1 KiB reservation counts against every block


def test_register_file_partitions_round_warps_down() -> None:
    # 40 regs -> 1280 per warp: 16384 // 1280 = 12 per partition -> 48 warps (not 65536 // 1280 = 51) -> 24 blocks
    occ = occupancy(40, 64, 0, SM90)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.occupancy, occ.limited_by) == (24, 48, 0.75, ["registers"])


def test_full_occupancy_ties_registers_and_warps() -> None:
    occ = occupancy(32, 256, 0, SM90)  # 1024 regs per warp -> 64 warps; 64 // 8 = 8 blocks either way
    assert (occ.blocks_per_sm, occ.occupancy, occ.limited_by) == (8, 1.0, ["registers", "warps"])


def test_shared_memory_limit_includes_the_reservation() -> None:
    occ = occupancy(32, 128, 56 * 1024, SM90)  # 57344 + 1024 = 58368 B a block: 233472 // 58368 = 4
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.limited_by) == (4, 16, ["shared"])
    tight = occupancy(32, 128, 76 * 1024 - 512, SM90)  # 77312 + 1024 = 78336 -> 2 blocks; 77312 alone would fit 3
    assert tight.blocks_per_sm == 2 and tight.limited_by == ["shared"]


def test_tiny_blocks_hit_the_block_limit() -> None:
    occ = occupancy(16, 32, 0, SM90)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.occupancy, occ.limited_by) == (32, 32, 0.5, ["blocks"])


def test_a_block_over_the_per_block_register_limit_cannot_launch() -> None:
    occ = occupancy(255, 1024, 0, SM90)  # 8192 regs per warp x 32 warps = 262144 > 65536
    assert occ.blocks_per_sm == 0 and occ.occupancy == 0.0 and "registers" in occ.limited_by
    assert "65536" in occ.note


def test_other_architectures_and_detected_limits() -> None:
    sm86 = cuda_limits("sm_86")
    occ = occupancy(32, 256, 0, sm86)  # 1536 threads = 48 warps -> 6 blocks of 8; registers would allow 8
    assert (occ.blocks_per_sm, occ.occupancy, occ.limited_by) == (6, 1.0, ["warps"])
    small = cuda_limits("sm_90a", {"max_shared_memory_per_multiprocessor": 100 * 1024, "warp_size": 32,
                                   "max_threads_per_multiprocessor": 2048, "max_blocks_per_multiprocessor": 32})
    assert isinstance(small, CudaLimits) and small.source == "device" and small.shared_per_sm_bytes == 102400
    assert occupancy(32, 128, 48 * 1024, small).blocks_per_sm == 2  # 102400 // 50176


# --- SASS mix -----------------------------------------------------------------------------------------------------


def test_sass_mix_counts_one_kernel_of_a_checked_in_disassembly() -> None:
    text = (DATA / "mix_kernels_sm90a.sass").read_text()
    vec = sass_mix(text, "fma_vec4", source="nvdisasm")
    assert vec.available and vec.total == 31  # NOP padding is not counted
    assert vec.ops == {"FFMA": 4}
    assert vec.memory == {"LDG.128": 1, "LDS.128": 1, "STG.128": 1, "STS.128": 1}
    assert "tensor" not in vec.groups
    mma = sass_mix(text, "mma_tile")
    assert mma.ops == {"HMMA.16816.F32": 2} and mma.groups["tensor"] == 2
    assert mma.memory == {"LDG.32": 8, "STG.64": 4}
    both = sass_mix(text)
    assert both.total == 63 and both.memory["LDG.32"] == 8


def test_sass_mix_reads_widths_and_tensor_shapes() -> None:
    text = textwrap.dedent("""\
        /*0000*/                   LDSM.16.MT88.4 R4, [R2] ;
        /*0010*/               @P0 LDGSTS.E.BYPASS.LTC128B.128 [R3], desc[UR4][R6.64] ;
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24, gsb0 ;
        /*0030*/              @!P1 LDG.E.U16.CONSTANT R9, desc[UR4][R10.64] ;
        /*0040*/                   STL.64 [R1+0x8], R12 ;
        /*0050*/                   HFMA2.MMA R5, -RZ, RZ, 0, 0 ;
        /*0060*/                   UTMALDG.2D [UR8], [UR4] ;
    """)
    mix = sass_mix(text)
    assert mix.memory == {"LDSM.x4.T": 1, "LDGSTS.128": 1, "LDG.16": 1, "STL.64": 1, "UTMALDG.2D": 1}
    assert mix.ops == {"HGMMA.64x128x16.F32.BF16": 1, "HFMA2": 1}  # HFMA2.MMA is an fp16 op, not a tensor op
    assert mix.groups["tensor"] == 1 and mix.groups["fp16"] == 1


def test_sass_mix_without_the_entry_says_so() -> None:
    mix = sass_mix((DATA / "mix_kernels_sm90a.sass").read_text().replace("/*", "//"), "fma_vec4")
    assert not mix.available and "fma_vec4" in mix.why


# --- CUDA resources from real cubins (NVRTC compiles here without a GPU) --------------------------------------------

TRANSPOSE = """// peak: entry=tr grid=(cdiv(N, 32), cdiv(M, 32), 1) block=(32, 4, 1) shared=0
extern "C" __global__ void __launch_bounds__(128) tr(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float tile[32][33];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 4)
        if (x < N && y + j < M) tile[threadIdx.y + j][threadIdx.x] = A[(y + j) * N + x];
    __syncthreads();
    for (int j = 0; j < 32; j += 4)
        if (x < N && y + j < M) C[(y + j) * N + x] = tile[threadIdx.x][threadIdx.y + j] + B[0] * K;
}
"""
SPILLS = """// peak: entry=spills grid=(1, 1, 1) block=(1024, 1, 1) shared=0
extern "C" __global__ void __launch_bounds__(1024, 2) spills(const float* a, float* c, int n)
{
    float acc[64];
    for (int i = 0; i < 64; ++i)
        acc[i] = a[i * n + threadIdx.x];
    for (int r = 1; r < 8; ++r)
        for (int i = 0; i < 64; ++i)
            acc[i] = fmaf(acc[i], acc[(i + r) & 63], 1.0f);
    float s = 0.0f;
    for (int i = 0; i < 64; ++i)
        s += acc[i] * (float)i;
    c[threadIdx.x] = s;
}
"""


def _cuda_spec(source: str):
    return parse_annotation(source, needs=("entry", "grid", "block"), symbols=("M", "N", "K"))


def test_cubin_resources_match_ptxas_for_a_real_kernel() -> None:
    compiled = CudaExecutor(None, arch="sm_90a").compile(TRANSPOSE, _cuda_spec(TRANSPOSE))
    elf = cubin_resources(compiled.binary, "tr")
    ptxas = ptxas_resources(compiled.log, "tr")
    assert elf["registers"] == ptxas["registers"] > 0
    assert elf["max_threads_per_block"] == 128  # __launch_bounds__(128)
    assert ptxas["static_shared_bytes"] == 32 * 33 * 4
    # from sm_90 the section also holds the 1 KiB system reservation
    assert elf["shared_section_bytes"] == 32 * 33 * 4 + 1024
    assert elf["local_bytes"] == 0
    with pytest.raises(ValueError, match="no function"):
        cubin_resources(compiled.binary, "missing")


def test_spills_and_the_stack_frame_are_reported() -> None:
    compiled = CudaExecutor(None, arch="sm_90a").compile(SPILLS, _cuda_spec(SPILLS))
    elf, ptxas = cubin_resources(compiled.binary, "spills"), ptxas_resources(compiled.log, "spills")
    assert elf["registers"] <= 32  # __launch_bounds__(1024, 2): 65536 / 2048 threads
    assert ptxas["spill_store_bytes"] > 0 and ptxas["spill_load_bytes"] > 0
    assert elf["local_bytes"] == ptxas["local_bytes"] > 0


def test_ptxas_resources_pick_the_named_function() -> None:
    log = textwrap.dedent("""\
        ptxas info    : Compiling entry function 'b' for 'sm_90a'
        ptxas info    : Function properties for b
        ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
        ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem
        ptxas info    : Compiling entry function 'a' for 'sm_90a'
        ptxas info    : Function properties for a
        ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 12 registers, used 0 barriers
    """)
    assert ptxas_resources(log, "a") == {"local_bytes": 0, "spill_store_bytes": 0, "spill_load_bytes": 0,
                                         "registers": 12, "static_shared_bytes": 0}
    assert ptxas_resources(log, "b")["static_shared_bytes"] == 2048
    assert ptxas_resources(log, "c") == {}


def _job(source: str, sizes: dict[str, int], spec) -> ProfileJob:
    return ProfileJob(problem="matmul", dtype="f32", sizes=sizes, source=source, spec=spec.model_dump())


def _lean(result: ProfileResult) -> dict:
    """The report as the profile tool shows it."""
    assert result.profile is not None, result.compile
    return result.profile.lean()


def test_profile_job_compile_only_cuda() -> None:
    source = (EXAMPLES / "cuda" / "regblock_2d.cu").read_text()
    result = profile(CudaExecutor(None, arch="sm_90a"), _job(source, {"M": 256, "N": 256, "K": 64},
                                                            _cuda_spec(source)), lambda _: None)
    report = _lean(result)
    res, occ, mix, counters = (report[k] for k in ("resources", "occupancy", "instruction_mix", "counters"))
    assert res["block"] == [256, 1, 1] and res["static_shared_bytes"] == 8192 and res["spill_store_bytes"] == 0
    assert occ["available"] and occ["block_threads"] == 256
    expected = occupancy(res["registers"], 256, 8192, SM90)
    assert occ["blocks_per_sm"] == expected.blocks_per_sm and occ["limited_by"] == expected.limited_by
    assert not counters["available"] and "needs a GPU" in counters["why"]
    if find_tool("nvdisasm") or find_tool("cuobjdump"):
        assert mix["available"] and mix["ops"]["FFMA"] >= 512  # the 8x8 micro-tile times BK=8, unrolled
        assert mix["memory"]["LDS.128"] > 0 and mix["memory"].get("LDL.32", 0) == 0
    else:
        assert not mix["available"] and "nvdisasm" in mix["why"]
    assert len(str(report)) < 2500  # lean: parsed numbers only


def test_profile_job_reports_a_compile_failure() -> None:
    bad = "// peak: entry=k grid=(1, 1, 1) block=(32, 1, 1) shared=0\nextern \"C\" __global__ void k() { nope; }\n"
    result = profile(CudaExecutor(None), _job(bad, {"M": 1, "N": 1, "K": 1}, _cuda_spec(bad)), lambda _: None)
    assert result.profile is None and result.compile and not result.compile.ok and "nope" in result.compile.log


def test_the_worker_dispatches_profile_jobs() -> None:
    source = (EXAMPLES / "cuda" / "smem_tiled.cu").read_text()
    pool = DevicePool()
    try:
        result = pool.run("cuda", -1, _job(source, {"M": 64, "N": 64, "K": 64}, _cuda_spec(source)),
                          inactivity_s=120, total_s=120)
    finally:
        pool.close()
    assert isinstance(result, ProfileResult) and result.profile
    assert (result.profile.resources.registers or 0) > 0 and result.profile.occupancy.available


def test_find_tool_looks_under_cuda_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "bin" / "nvdisasm"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert find_tool("nvdisasm") == str(tool)
    assert find_tool("peak-no-such-tool") is None


# --- SPIR-V mix (HLSL) ---------------------------------------------------------------------------------------------

needs_hlsl = pytest.mark.skipif(not HAS_HLSL_COMPILER, reason="no HLSL compiler (glslangValidator or dxc)")

VEC4 = """// peak: entry=main groups=(cdiv(N * M, 256), 1, 1)
struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float4> A;
[[vk::binding(1)]] StructuredBuffer<float4> B;
[[vk::binding(2)]] RWStructuredBuffer<float4> C;
groupshared float4 tile[64];

[numthreads(64, 1, 1)]
void main(uint3 tid : SV_DispatchThreadID, uint3 lid : SV_GroupThreadID)
{
    tile[lid.x] = A[tid.x];
    GroupMemoryBarrierWithGroupSync();
    float4 v = tile[63 - lid.x];
    C[tid.x] = (mad(v, B[tid.x], v) * v + v) * v.x;
}
"""


def _hlsl_compile(source: str):
    spec = parse_annotation(source, needs=("entry", "groups"), symbols=("M", "N", "K"))
    return hlsl.open_executor(None).compile(source, spec), spec


@needs_hlsl
def test_spirv_mix_of_a_vector_kernel() -> None:
    compiled, _ = _hlsl_compile(VEC4)
    mix = spirv_mix(compiled.handle.spirv)
    assert mix.memory == {"StorageBuffer.load.128": 2, "StorageBuffer.store.128": 1, "Workgroup.load.128": 1,
                          "Workgroup.store.128": 1}
    # mad() is an Fma; glslang contracts the a * b + c after it into a second one
    assert mix.ops["Fma"] == 2 and mix.ops["OpVectorTimesScalar"] == 1 and "OpFAdd" not in mix.ops
    assert mix.ops["OpControlBarrier"] == 1


@needs_hlsl
def test_spirv_mix_of_the_tiled_example_and_the_hlsl_report() -> None:
    source = (EXAMPLES / "hlsl" / "tiled_groupshared.hlsl").read_text()
    compiled, spec = _hlsl_compile(source)
    mix = spirv_mix(compiled.handle.spirv)
    assert mix.memory["Workgroup.store.32"] == 2 and mix.memory["Workgroup.load.32"] >= 2
    assert mix.memory["StorageBuffer.load.32"] == 2 and mix.memory["StorageBuffer.store.32"] == 1
    assert mix.ops["OpControlBarrier"] == 2
    report = _lean(profile(hlsl.open_executor(None), _job(source, {"M": 64, "N": 64, "K": 64}, spec),
                           lambda _: None))
    assert report["resources"]["block"] == [16, 16, 1]
    assert report["resources"]["static_shared_bytes"] == 16 * 16 * 4 + 16 * 17 * 4
    assert not report["occupancy"]["available"] and "Vulkan defines no occupancy" in report["occupancy"]["why"]
    assert not report["counters"]["available"] and report["instruction_mix"]["memory"] == mix.memory


def test_spirv_mix_refuses_other_bytes() -> None:
    with pytest.raises(ValueError, match="SPIR-V"):
        spirv_mix(b"\x7fELF" + bytes(60))


# --- Nsight Compute -------------------------------------------------------------------------------------------------


def test_ncu_raw_csv_keeps_the_named_metrics() -> None:
    text = textwrap.dedent("""\
        ==PROF== Connected to process 4242
        "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",\
"Device","CC","dram__bytes_read.sum","gpu__time_duration.sum","launch__grid_size","sm__throughput.avg.pct_of_peak_sustained_elapsed"
        "","","","","","","","","","","","byte","nsecond","","%"
        "0","4242","python3","127.0.0.1","matmul_rb2d","1","7","(256, 1, 1)","(8, 8, 1)","0","9.0",\
"1,048,576","12,345","64","71.25"
    """)
    metrics, units = ncu_raw_csv(text)
    assert metrics == {"dram_read": 1048576.0, "duration": 12345.0, "compute_throughput_pct": 71.25}
    assert units == {"dram_read": "byte", "duration": "nsecond", "compute_throughput_pct": "%"}
    assert ncu_raw_csv("==ERROR== nothing profiled\n") == ({}, {})


@pytest.mark.gpu
@pytest.mark.skipif(not has_device("cuda"), reason=f"no CUDA GPU: {skip_reason('cuda')}")
def test_profile_on_a_gpu_agrees_with_the_driver_and_reads_counters() -> None:
    source = (EXAMPLES / "cuda" / "regblock_2d.cu").read_text()
    executor = CudaExecutor(0)
    try:
        report = _lean(profile(executor, _job(source, {"M": 512, "N": 512, "K": 256}, _cuda_spec(source)),
                               lambda _: None))
    finally:
        executor.close()
    occ = report["occupancy"]
    assert occ["device_limits"]["source"] == "device"
    assert occ["driver_blocks_per_sm"] == occ["blocks_per_sm"]
    counters = report["counters"]
    if find_tool("ncu") is None:
        assert not counters["available"] and "not found" in counters["why"]
    elif counters["available"]:
        assert counters["metrics"]["duration"] > 0 and counters["sizes"] == {"M": 512, "N": 512, "K": 256}
    else:
        assert "permission" in counters["why"] or "ncu" in counters["why"]


def test_tool_messages_lose_the_scratch_paths() -> None:
    import tempfile

    from peak_mcp.confine.isolated import safe_cwd
    from peak_mcp.runner.profile_job import _scrub

    workdir = tempfile.mkdtemp(prefix="peak-profile-", dir=safe_cwd())
    said = _scrub(f"nvdisasm fatal: could not open {workdir}/kernel.cubin (in {safe_cwd()})", workdir)
    assert workdir not in said and safe_cwd() not in said and "./kernel.cubin" in said
