"""Review 48 of attention step 6 (b6ffa6d): setmaxnreg.inc waits until the block's register pool holds what it asks
for, and only the producer's setmaxnreg.dec fills that pool. The consumers' request must therefore fit in what the
producer gives back from the launch's count; a kernel where it does not hangs on the GPU (no error, no timeout of its
own), which no CPU test would otherwise see."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from peak_mcp.backends.registry import launch_spec
from peak_mcp.problems.shipped import get_problem

STEP6 = Path(__file__).resolve().parent.parent / "examples" / "attention" / "cuda" / "6_warp_specialized.cu"


@pytest.mark.parametrize("stages, pingpong", [(2, 1), (3, 0)])
def test_the_consumers_take_no_more_registers_than_the_producer_gives_back(stages: int, pingpong: int) -> None:
    from peak_mcp.backends import cuda as cuda_backend

    text = STEP6.read_text()
    threads = int(re.search(r"__launch_bounds__\((\d+), 1\)", text).group(1))
    (low,) = map(int, re.findall(r"setmaxnreg_dec<(\d+)>", text))
    (high,) = map(int, re.findall(r"setmaxnreg_inc<(\d+)>", text))
    source = (text.replace("#define STAGES 2", f"#define STAGES {stages}", 1)
              .replace("#define PINGPONG 1", f"#define PINGPONG {pingpong}", 1)
              .replace("typedef float T;", "typedef __nv_bfloat16 T;", 1))
    executor = cuda_backend.CudaExecutor(None, arch="sm_90a")
    registers = executor.compile(source, launch_spec(source, "cuda", get_problem("attention").symbols)).resources[
        "registers"]
    producers, consumers = 128, threads - 128
    given_back, asked = producers * (registers - low), consumers * (high - registers)
    assert asked <= given_back, (f"{consumers} consumer threads ask {asked} registers past the launch's {registers}, "
                                 f"the producer gives back {given_back}: setmaxnreg.inc would wait forever")
