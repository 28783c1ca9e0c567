"""The Hopper GEMM ladder (examples/matmul/cuda/{bf16,f16}/hopper/) and its header peak/hopper.cuh, without a GPU:
every configuration of every step compiles for sm_90a with NVRTC without spills, the f16 and bf16 twins differ only
in their element type, and every helper of the header is used by a shipped kernel (the GPU tests then run them all:
tests/test_hopper_gpu.py)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from peak_mcp.backends import cuda as cuda_backend
from peak_mcp.backends.registry import launch_spec
from peak_mcp.core.launch import with_params
from peak_mcp.problems.matmul import Matmul
from tests.conftest import EXAMPLES

HEADER = Path(cuda_backend.PEAK_INCLUDE_DIR) / "peak" / "hopper.cuh"
STEPS = ("wgmma_tma.cu", "wgmma_ws.cu", "wgmma_persistent.cu", "wgmma_cluster.cu")  # the ladder, in order
LADDER = [EXAMPLES / "cuda" / dtype / "hopper" / name for dtype in ("bf16", "f16") for name in STEPS]


@pytest.fixture(scope="module")
def compiler() -> cuda_backend.CudaExecutor:
    return cuda_backend.CudaExecutor(None, arch="sm_90a")


def configurations(path: Path) -> list[tuple[Path, dict[str, int]]]:
    spec = launch_spec(path.read_text(), "cuda", Matmul.symbols)
    names = list(spec.params)
    return [(path, dict(zip(names, values, strict=True))) for values in itertools.product(*spec.params.values())]


@pytest.mark.parametrize(("path", "params"), [c for p in LADDER for c in configurations(p)],
                         ids=lambda v: v.parent.parent.name + "/" + v.name if isinstance(v, Path) else str(v))
def test_every_configuration_compiles_without_spills(compiler: cuda_backend.CudaExecutor, path: Path,
                                                     params: dict[str, int]) -> None:
    source = path.read_text()
    spec = launch_spec(source, "cuda", Matmul.symbols).on_device(132).bind(params)
    for sizes in ({"M": 4096, "N": 4096, "K": 4096}, {"M": 77, "N": 77, "K": 77}):
        geometry = spec.evaluate(sizes)
        assert geometry["shared"] <= 232448, geometry  # 227 KB: an H100's opt-in limit per block
    resources = compiler.compile(with_params(source, spec.config()), spec).resources
    assert resources.get("spill_store_bytes", 0) == 0 and resources.get("stack_frame_bytes", 0) == 0, resources
    # 384-thread steps hand registers between warpgroups: the compiler's cap must not exceed what setmaxnreg gives
    assert resources["registers"] <= (168 if "384" in source.split("block=(", 1)[1][:4] else 255), resources


@pytest.mark.parametrize("name", STEPS)
def test_f16_and_bf16_twins_differ_only_in_the_element_type(name: str) -> None:
    bf16 = (EXAMPLES / "cuda" / "bf16" / "hopper" / name).read_text()
    f16 = (EXAMPLES / "cuda" / "f16" / "hopper" / name).read_text()
    assert "typedef __nv_bfloat16 T;" in bf16 and "typedef __half T;" in f16
    assert f16 == bf16.replace("typedef __nv_bfloat16 T;", "typedef __half T;").replace("(bf16 inputs", "(f16 inputs")


def test_every_header_function_is_used_by_a_shipped_kernel() -> None:
    header = HEADER.read_text()
    defined = set(re.findall(r"^(?:template <[^>]*>\s*)?__device__ (?:__forceinline__ )?(?:\w+ )+?(\w+)\(", header,
                         re.M))
    assert {"mbar_wait", "tma_load_2d_multicast", "wgmma_desc_sw128", "setmaxnreg_dec", "fallback_tile"} <= defined
    # the matmul ladder, and the other shipped kernels that include the header (attention's Hopper step)
    others = [p for p in EXAMPLES.parent.rglob("*.cu") if p not in LADDER and "peak/hopper.cuh" in p.read_text()]
    assert others, "the attention ladder's Hopper step includes the header"
    kernels = "\n".join(p.read_text() for p in LADDER + others)
    used = {name for name in defined if re.search(rf"peak::{name}\b", kernels)}
    # helpers reached only through another helper: the dtype-specific wgmma forms, to_float, fence_proxy_async
    for _ in range(3):
        bodies = "\n".join(header[m.start():header.find("\n}\n", m.start())]
                           for name in used for m in re.finditer(rf"^\S.* {name}\(", header, re.M))
        used |= {name for name in defined if re.search(rf"\b{name}\(", bodies)}
    assert defined == used, f"not exercised by any ladder kernel: {sorted(defined - used)}"


def test_ladder_steps_share_the_abi_and_ask_for_both_maps() -> None:
    for path in LADDER:
        source = path.read_text()
        spec = launch_spec(source, "cuda", Matmul.symbols)
        assert spec.entry == "gemm" and [m.buffer for m in spec.tensor_maps] == ["A", "B"], path
        assert "peak::tma_usable(mapA) || !peak::tma_usable(mapB)" in source, path  # the fallback comes first
