"""Buffers with their own storage type (int32, int64, bool, ...), whatever the session's dtype: an argmax's index
output compared exactly, a bool mask and class-like targets drawn within their declared range, a one-value output
(a loss) whose terms cancel; over MCP on lavapipe, and KernelBench's files that need them (with torch)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from peak_mcp.api.responses import whole_answer
from tests.conftest import has_device

pytestmark = pytest.mark.anyio
VULKAN = pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
MIRROR = Path("/work/.mirror/ScalingIntelligence+KernelBench/repo")


async def call(client: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return whole_answer(tool, result)  # the long parts (source, ABI, ...) back from the text


ARGMAX = '''"""Row argmax: i[r] = the first c where x[r, c] is largest."""
NAME = "row_argmax"
SIZES = {"ROWS": 256, "COLS": 300}
DTYPES = ("f32",)
INPUTS = {"x": ("ROWS", "COLS")}
OUTPUTS = {"i": ("int32", ("ROWS",))}
SCALARS = ("ROWS", "COLS")
BATCH = "ROWS"


def reference(x, *, xp):
    return xp.argmax(x, axis=1)
'''
ARGMAX_KERNEL = """// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<int> i;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    uint r = id.x;
    if (r >= p.ROWS) return;
    float best = x[r * p.COLS];
    int at = 0;
    for (uint c = 1; c < p.COLS; ++c) {
        float v = x[r * p.COLS + c];
        if (v > best) { best = v; at = (int)c; }
    }
    i[r] = ANSWER;
}
"""


@VULKAN
async def test_an_int32_output_is_compared_exactly(make_client) -> None:
    async with make_client() as (client, _):
        info = await call(client, "define_problem", {"source": ARGMAX})
        assert "i (int32: int, ROWS, read-write)" in info["abi"]["hlsl"], info["abi"]["hlsl"]
        assert "int* i" in info["abi"]["cuda"] and "i is int32, compared exactly" in info["abi"]["cuda"]
        session = await call(client, "start_session", {"problem": "row_argmax", "backend": "hlsl"})
        sid = session["session_id"]
        good = await call(client, "submit_kernel", {"session_id": sid, "source": ARGMAX_KERNEL.replace("ANSWER", "at")})
        assert good["status"] == "benchmarked" and good["generality"]["passed"], good["message"]
        bad = await call(client, "submit_kernel", {"session_id": sid, "source": ARGMAX_KERNEL.replace(
            "ANSWER", "(r == 5 ? at + 1 : at)")})
        assert bad["failure"] == "wrong_result", bad["message"]
        assert "in 1 of 256 elements" in bad["message"] and "first at (5,): got " in bad["message"], bad["message"]


MASKED = '''"""Masked row sum plus a picked element: y[r] = sum over c of mask[r, c] * x[r, c], plus x[r, t[r]]."""
NAME = "masked_pick"
SIZES = {"ROWS": 128, "COLS": 100}
DTYPES = ("f32",)
INPUTS = {"x": ("ROWS", "COLS"), "mask": ("bool", ("ROWS", "COLS")), "t": ("int64", ("ROWS",), (0, "COLS"))}
OUTPUTS = {"y": ("ROWS",)}
SCALARS = ("ROWS", "COLS")
BATCH = "ROWS"


def reference(x, mask, t, *, xp):
    assert set(xp.unique(mask).tolist()) <= {0.0, 1.0} and t.min() >= 0 and t.max() < x.shape[1]
    return (x * mask).sum(axis=1) + x[xp.arange(x.shape[0]), t.astype(xp.int64)]
'''
MASKED_KERNEL = """// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<uint> mask;
[[vk::binding(2)]] StructuredBuffer<uint2> t;
[[vk::binding(3)]] RWStructuredBuffer<float> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    uint r = id.x;
    if (r >= p.ROWS) return;
    float acc = 0.0;
    for (uint c = 0; c < p.COLS; ++c) {
        uint k = r * p.COLS + c;
        uint m = (mask[k >> 2] >> (8 * (k & 3))) & 0xFF;
        if (KEEP) acc += x[k];
    }
    y[r] = acc + x[r * p.COLS + t[r].x];
}
"""


@VULKAN
async def test_bool_and_int64_inputs_are_drawn_in_range(make_client) -> None:
    async with make_client() as (client, _):
        info = await call(client, "define_problem", {"source": MASKED})
        hlsl = info["abi"]["hlsl"]
        assert "mask (bool as packed uint words, ROWS×COLS)" in hlsl and "t (int64 as uint2, ROWS)" in hlsl, hlsl
        assert "t is int64, values in [0, COLS)" in hlsl and "packed 4 to a uint" in hlsl, hlsl
        assert "const bool* mask, const long long* t" in info["abi"]["cuda"]
        session = await call(client, "start_session", {"problem": "masked_pick", "backend": "hlsl"})
        sid = session["session_id"]
        good = await call(client, "submit_kernel", {"session_id": sid,
                                                    "source": MASKED_KERNEL.replace("KEEP", "m != 0")})
        assert good["status"] == "benchmarked" and good["generality"]["passed"], good["message"]
        bad = await call(client, "submit_kernel", {"session_id": sid, "source": MASKED_KERNEL.replace("KEEP", "true")})
        assert bad["failure"] == "wrong_result", bad["message"]


DOT = '''"""Dot product of two draws in (-1, 1): one value out, whose terms cancel."""
NAME = "dot"
SIZES = {"N": 4096}
DTYPES = ("f32",)
INPUTS = {"x": ("N",), "w": ("N",)}
OUTPUTS = {"y": ("f32", ())}
SCALARS = ("N",)
FLOPS = "2 * N"


def reference(x, w, *, xp):
    return (x * w).sum()
'''
DOT_KERNEL = """// peak: entry=main groups=(1, 1, 1)
struct Params { uint N; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<float> w;
[[vk::binding(2)]] RWStructuredBuffer<float> y;
[numthreads(1, 1, 1)]
void main() {
    float acc = 0.0;
    for (uint i = SKIP; i < p.N; ++i) acc += x[i] * w[i];
    y[0] = acc;
}
"""


@VULKAN
async def test_one_value_whose_terms_cancel_is_bounded_by_what_they_weigh(make_client) -> None:
    """A sequential f32 sum of a dot product of draws in (-1, 1) (its value near 0 where the terms cancel) passes at
    the default tolerance, at every sampled size; one that leaves the first 8 terms out fails."""
    async with make_client() as (client, _):
        await call(client, "define_problem", {"source": DOT})
        session = await call(client, "start_session", {"problem": "dot", "backend": "hlsl"})
        sid = session["session_id"]
        good = await call(client, "submit_kernel", {"session_id": sid, "source": DOT_KERNEL.replace("SKIP", "0")})
        assert good["status"] == "benchmarked" and good["generality"]["passed"], good["message"]
        bad = await call(client, "submit_kernel", {"session_id": sid, "source": DOT_KERNEL.replace(
            "SKIP", "min(8, p.N - 1)")})
        assert bad["failure"] == "wrong_result", bad["message"]


CROSS_ENTROPY = """// peak: entry=main groups=(1, 1, 1)
struct Params { uint BATCH_SIZE; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] StructuredBuffer<uint2> t;
[[vk::binding(2)]] RWStructuredBuffer<float> y;
groupshared float part[1024];
// rows spread over 1024 threads: lavapipe stops a thread's loops after 65535 iterations in all, silently
[numthreads(1024, 1, 1)]
void main(uint3 tid : SV_GroupThreadID) {
    float total = 0.0;
    for (uint r = tid.x; r < p.BATCH_SIZE; r += 1024) {
        float m = x[r * 4096];
        for (uint c = 1; c < 4096; ++c) m = max(m, x[r * 4096 + c]);
        float s = 0.0;
        for (uint k = 0; k < 4096; ++k) s += exp(x[r * 4096 + k] - m);
        total += log(s) + m - x[r * 4096 + PICK];
    }
    part[tid.x] = total;
    GroupMemoryBarrierWithGroupSync();
    for (uint w = 512; w > 0; w >>= 1) {
        if (tid.x < w) part[tid.x] += part[tid.x + w];
        GroupMemoryBarrierWithGroupSync();
    }
    if (tid.x == 0) y[0] = part[0] / p.BATCH_SIZE;
}
"""


@VULKAN
async def test_kernelbench_files_with_integer_and_bool_tensors(make_client, settings, tmp_path: Path) -> None:
    """Level 1's argmax (an int64 output), masked cumsum (a bool input) and cross entropy (int64 class targets drawn
    below num_classes, as get_inputs' torch.randint draws them, and a one-value loss), as published: listed with
    their storage types in the ABI; cross entropy runs on lavapipe, right and wrong."""
    pytest.importorskip("torch")
    folder = tmp_path / "problems"
    folder.mkdir()
    for stem in ("51_Argmax_over_a_dimension", "93_masked_cumsum", "95_CrossEntropyLoss"):
        text = subprocess.run(["git", "-C", str(MIRROR), "show", f"HEAD:KernelBench/level1/{stem}.py"],
                              capture_output=True, text=True, check=False).stdout
        if not text:
            pytest.skip("no KernelBench mirror")
        (folder / f"{stem}.py").write_text(text)
    settings.problem_dirs = [folder]
    async with make_client() as (client, _):
        listed = await call(client, "list_problems", {})
        assert not listed.get("errors"), listed.get("errors")
        abi = {p["name"]: (await call(client, "list_problems", {"problem": p["name"]}))["problems"][0]["abi"]
               for p in listed["problems"] if p["name"].startswith("kb_")}
        assert "const float* x, long long* out" in abi["kb_51_argmax_over_a_dimension"]["cuda"]
        assert "out is int64, compared exactly" in abi["kb_51_argmax_over_a_dimension"]["cuda"]
        assert "const float* x, const bool* mask, float* out" in abi["kb_93_masked_cumsum"]["cuda"]
        assert "mask (bool as packed uint words, BATCH_SIZE×32768)" in abi["kb_93_masked_cumsum"]["hlsl"]
        entropy = abi["kb_95_crossentropyloss"]
        assert "const long long* targets" in entropy["cuda"] and "targets is int64, values in [0, 4096)" in entropy[
            "cuda"], entropy["cuda"]
        session = await call(client, "start_session", {"problem": "kb_95_crossentropyloss", "backend": "hlsl",
                                                       "sizes": {"BATCH_SIZE": 6}})
        sid = session["session_id"]
        good = await call(client, "submit_kernel", {"session_id": sid,
                                                    "source": CROSS_ENTROPY.replace("PICK", "t[r].x")})
        assert good["status"] == "benchmarked" and good["generality"]["passed"], good["message"]
        bad = await call(client, "submit_kernel", {"session_id": sid,
                                                   "source": CROSS_ENTROPY.replace("PICK", "((t[r].x + 1) % 4096)")})
        assert bad["failure"] == "wrong_result", bad["message"]


PICK_ROW = """
import torch
import torch.nn as nn

batch_size = 8
dim = 32


class Model(nn.Module):
    def forward(self, x, t):
        return x.gather(1, t[:, None])[:, 0], x.argmax(dim=1), x > 0


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randint(0, dim, (batch_size,))]


def get_init_inputs():
    return []
"""


def test_kernelbench_integer_range_follows_the_sizes() -> None:
    """An integer input's range is read from get_inputs' torch.randint call and fitted to the sizes (targets below
    DIM at every size, not below the value seen); integer and bool outputs keep their own types; the reference takes
    the targets as integers again."""
    pytest.importorskip("torch")
    import types

    import numpy as np

    from peak_mcp.problems.kernelbench.translate import declare_kernelbench

    module = types.ModuleType("kb_pick_row")
    exec(compile(PICK_ROW, "<kb_pick_row>", "exec"), module.__dict__)
    problem = declare_kernelbench(module, "pick_row")
    d = problem.declaration
    assert d["INPUTS"] == {"x": ("BATCH_SIZE", "DIM"), "t": ("int64", ("BATCH_SIZE",), ("0", "DIM"))}
    assert d["OUTPUTS"] == {"out0": ("BATCH_SIZE",), "out1": ("int64", ("BATCH_SIZE",)),
                            "out2": ("bool", ("BATCH_SIZE", "DIM"))}
    x = np.arange(15.0).reshape(3, 5) - 7
    picked, argmax, positive = problem.reference(x, np.array([4.0, 0.0, 2.0]), BATCH_SIZE=3, DIM=5)
    np.testing.assert_array_equal(picked, [-3, -2, 5])
    np.testing.assert_array_equal(argmax, [4, 4, 4])
    np.testing.assert_array_equal(positive, x > 0)


def test_the_cuda_and_hip_signatures_of_exact_buffers_compile() -> None:
    """The ABI's own signature line, every exact type in it, compiled (NVRTC; HIP through its CUDA header)."""
    from peak_mcp.backends import cuda as cuda_backend
    from peak_mcp.backends.hip import HipOnCudaExecutor
    from peak_mcp.backends.registry import launch_spec
    from peak_mcp.problems.declaration import ProblemDeclaration
    from peak_mcp.problems.declared import DeclaredProblem

    types = ("int32", "int64", "uint8", "int8", "bool")
    problem = DeclaredProblem(ProblemDeclaration(
        name="every_type", title="Every exact type", sizes={"N": 64}, dtypes=("f32",),
        inputs=[{"name": "x", "shape": ["N"]}, *({"name": f"i_{t}", "shape": ["N"], "dtype": t} for t in types)],
        outputs=[{"name": f"o_{t}", "shape": ["N"], "dtype": t} for t in types],
        scalars=[{"name": "N", "expr": "N"}], path="every_type.py", sha256="0" * 64))
    body = " ".join(f"o_{t}[i] = i_{t}[i] + (x[i] > 0.0f);" for t in types if t != "bool")
    for backend, executor, head in (("cuda", cuda_backend.CudaExecutor(None, arch="sm_90a"), ""),
                                    ("hip", HipOnCudaExecutor(None, arch="sm_90a"), "#include <hip/hip_runtime.h>\n")):
        abi = problem.abi(backend, "f32")
        signature = next(line for line in abi.splitlines() if line.startswith('extern "C"'))
        assert "const long long* i_int64" in signature and "bool* o_bool" in signature, signature
        source = (f"{head}// peak: entry=k grid=(cdiv(N, 64), 1, 1) block=(64, 1, 1)\n"
                  + signature.replace("<entry>", "k") + " {\n  int i = blockIdx.x * 64 + threadIdx.x;\n"
                  f"  if (i < N) {{ {body} o_bool[i] = i_bool[i] && x[i] > 0.0f; }}\n}}\n")
        assert executor.compile(source, launch_spec(source, backend, problem.symbols)).resources["registers"] > 0


SIGN = '''"""Signs: s[i] = sign(x[i]) as int32 and as int8 (-1 is all ones: the poison's bits)."""
NAME = "signs"
SIZES = {"N": 1000}
DTYPES = ("f32",)
INPUTS = {"x": ("N",)}
OUTPUTS = {"s": ("int32", ("N",)), "b": ("int8", ("N",))}
SCALARS = ("N",)


def reference(x, *, xp):
    return xp.sign(x), xp.sign(x)
'''
SIGN_KERNEL = """// peak: entry=main groups=(cdiv(N, 64), 1, 1)
struct Params { uint N; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<int> s;
[[vk::binding(2)]] RWStructuredBuffer<uint> b;  // int8, packed 4 to a word
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    uint i = id.x;
    if (i >= p.N) return;
    int v = x[i] < 0.0 ? -1 : 1;
    s[i] = v;
    uint shift = 8 * (i & 3);  // one byte of its word: the others (and bytes past the end) stay as they are
    InterlockedAnd(b[i >> 2], ~(0xFFu << shift));
    InterlockedOr(b[i >> 2], ((uint)BYTE & 0xFFu) << shift);
}
"""


@VULKAN
async def test_minus_one_is_a_value_and_8_bit_outputs_take_byte_writes(make_client) -> None:
    """-1 in an integer output has the poison's bits: a second poison tells it was written, and it is judged as a
    value. An int8 output written a byte at a time through atomics on its words leaves the guard bytes after its
    last element alone."""
    async with make_client() as (client, _):
        await call(client, "define_problem", {"source": SIGN})
        session = await call(client, "start_session", {"problem": "signs", "backend": "hlsl"})
        sid = session["session_id"]
        good = await call(client, "submit_kernel", {"session_id": sid, "source": SIGN_KERNEL.replace("BYTE", "v")})
        assert good["status"] == "benchmarked" and good["generality"]["passed"], good["message"]
        bad = await call(client, "submit_kernel", {"session_id": sid, "source": SIGN_KERNEL.replace("BYTE", "-v")})
        assert bad["failure"] == "wrong_result" and "b (int8) differs" in bad["message"], bad["message"]


async def test_an_int64_range_past_float64_s_integers_is_refused(make_client) -> None:
    """References are float64: past 2^53 they lose integers, and a correct y = x + 1 failed while y = x passed (a
    hostile review). Such a range is refused where the problem is read, naming the bound."""
    big = ('NAME = "plus_one_big"\nSIZES = {"N": 256}\nDTYPES = ("f32",)\n'
           'INPUTS = {"x": ("int64", ("N",), ("1152921504606846976", "2305843009213693952"))}\n'
           'OUTPUTS = {"y": ("int64", ("N",))}\nSCALARS = ("N",)\n\ndef reference(x, *, xp):\n    return x + 1\n')
    async with make_client() as (client, _):
        result = await client.call_tool("define_problem", {"source": big})
        assert result.is_error and "9007199254740992" in result.content[0].text, result.content[0].text
