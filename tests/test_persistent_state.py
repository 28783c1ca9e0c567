"""A CUDA kernel may not keep state between launches: writable __device__ variables and the device heap are
refused at compile, before anything runs (so this holds on a machine without a GPU, through a compile-only
session), with the reason named. Every shipped example still compiles."""

from __future__ import annotations

import pytest

from peak_mcp.backends.cubin import persistent_state
from tests.conftest import EXAMPLES, ROOT
from tests.hostile.harness import SYMBOLS, load_manifest

pytestmark = pytest.mark.anyio
STATEFUL = [e for e in load_manifest("cuda", problem=None) if e.status == ("compile_error",)]
KERNEL = ('// peak: entry=k grid=(1, 1, 1) block=(1, 1, 1)\n{decl}\nextern "C" __global__ void k(const float* A, '
          'const float* B, float* C, int M, int N, int K) {{ {body} }}\n')


@pytest.mark.parametrize(("decl", "body", "named"), [
    ("__device__ int counter;", "C[0] = A[0] + atomicAdd(&counter, 1);", "'counter'"),
    ("__device__ float cache[4] = {1, 2, 3, 4};", "cache[M & 3] = A[0]; C[0] = cache[0];", "'cache'"),
    ("", "static __device__ int calls; C[0] = ++calls;", "calls"),
    ("", "float* p = (float*)malloc(16); p[0] = A[0]; C[0] = p[0]; free(p);", "device heap"),
    # a name in the toolkit's own namespace is still the kernel's state when the kernel declares it
    ("__device__ int __nv_atomic_triv_cp_helper_mine[64];", "C[0] = ++__nv_atomic_triv_cp_helper_mine[0];",
     "'__nv_atomic"),
    # a namespace-scope constexpr is emitted as a __device__ variable: the message says what to write instead
    ("constexpr int TB = 256;", "__shared__ float t[TB]; t[threadIdx.x] = A[0]; __syncthreads(); "
     "C[0] = t[(threadIdx.x + 1) % TB] + (float)(&TB != nullptr);", "make it a #define"),
    # many small ones together: past what the headers' own add up to
    ("namespace cub { __device__ long long " + ", ".join(f"v{i}" for i in range(2100)) + "; }",
     "cub::v0 += 1; C[0] = A[0] + cub::v0 + cub::v2099;", "small variables in the toolkit's namespaces"),
    # with CCCL's headers in, whose tag objects are allowed, the kernel's own variable still counts
    ("#include <cub/block/block_reduce.cuh>\n__device__ float seen;", "seen += A[0]; C[0] = seen;", "seen"),
    # a variable of its own inside a toolkit namespace is the kernel's past a few bytes, however the namespace is
    # opened (a macro, a comment, an attribute: no text scan sees them all; the size is what is bounded)
    ("namespace cub { __device__ float kept[64]; }", "cub::kept[0] += A[0]; C[0] = cub::kept[0];", "kept"),
    ("#define OPEN(n) namespace n\nOPEN(cub) { __device__ float kept[64]; }", "cub::kept[0] += A[0]; "
     "C[0] = cub::kept[0];", "kept"),
])
async def test_state_that_outlives_a_launch_is_refused(make_client, decl: str, body: str, named: str) -> None:
    async with make_client() as (client, _):
        session = (await client.call_tool("start_session", {"backend": "cuda", "sizes": {"M": 8, "N": 8, "K": 8}})
                   ).structured_content
        report = (await client.call_tool("submit_kernel", {"session_id": session["session_id"],
                                                           "source": KERNEL.format(decl=decl, body=body)})
                  ).structured_content
        assert report["status"] == "compile_error", report["message"]
        assert "keeps state between launches" in report["message"] and named in report["message"]


async def test_constants_printf_and_every_example_compile(make_client) -> None:
    allowed = [KERNEL.format(decl="__constant__ float t[4] = {1, 2, 3, 4};", body="C[0] = A[0] + t[M & 3];"),
               KERNEL.format(decl="", body='printf("M=%d\\n", M); C[0] = A[0];'),
               # CCCL: cooperative groups, a CUB block scan, libcu++ (their headers define tag objects of their own)
               KERNEL.format(decl="#include <cooperative_groups.h>\n#include <cub/block/block_scan.cuh>\n"
                                  "#include <cuda/barrier>\nnamespace cg = cooperative_groups;",
                             body="using Scan = cub::BlockScan<float, 32>; __shared__ typename Scan::TempStorage t; "
                                  "float v = A[threadIdx.x]; Scan(t).InclusiveSum(v, v); cg::this_thread_block()"
                                  ".sync(); C[threadIdx.x] = v;"),
               # CUDA 13's atomics instantiate a header variable of their own (__nv_atomic_triv_cp_helper<T>::__val)
               KERNEL.format(decl="", body="unsigned* u = (unsigned*)C; atomicCAS(u, 0u, 1u); atomicCAS((int*)C, 0, "
                                           "1); atomicCAS((unsigned long long*)C, 0ull, 1ull); atomicExch(u, 2u); "
                                           "atomicExch(C, A[0]);"),
               *(p.read_text() for p in sorted((EXAMPLES / "cuda").rglob("*.cu")))]
    async with make_client() as (client, _):
        sid = (await client.call_tool("start_session", {"backend": "cuda", "sizes": {"M": 8, "N": 8, "K": 8}})
               ).structured_content["session_id"]
        for source in allowed:
            report = (await client.call_tool("submit_kernel", {"session_id": sid, "source": source})
                      ).structured_content
            assert report["status"] in ("compiled", "benchmarked"), report["message"]


@pytest.mark.parametrize("entry", STATEFUL, ids=lambda e: e.file.removesuffix(".cu"))
def test_hostile_kernels_with_state_are_refused_by_the_module_check(entry) -> None:
    from peak_mcp.backends.base import CompileFailed
    from peak_mcp.backends.cuda import CudaExecutor
    from peak_mcp.core.launch import parse_annotation

    source = (ROOT / "tests" / "hostile" / entry.file).read_text()
    with pytest.raises(CompileFailed, match="keeps state between launches"):
        CudaExecutor(None).compile(source, parse_annotation(source, needs=("entry", "grid", "block"),
                                                            symbols=SYMBOLS[entry.problem]))


def test_non_elf_input_is_not_mistaken_for_state() -> None:
    assert persistent_state(b"not an ELF at all") == []

