"""The HLSL backend: compile (glslang or dxc), validate and time through Vulkan. Runs for real on Mesa lavapipe.

Tests that need a Vulkan device or an HLSL compiler skip with probe()'s reason where those are missing; the
probe tests themselves need neither.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from peak_mcp.backends import hlsl, hlsl_compiler
from peak_mcp.backends.base import CompileFailed
from peak_mcp.core.errors import InvalidInput
from peak_mcp.core.launch import parse_annotation
from peak_mcp.evaluation.workspace import Workspace
from peak_mcp.problems.matmul import Matmul
from peak_mcp.runner.jobs import evaluate

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "matmul" / "hlsl"
PYTHONPATH = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)  # keep the caller's path
PROBE = hlsl.probe()
HAS_COMPILER = bool(PROBE["compiler"].get("available"))
HAS_DEVICE = bool(PROBE["devices"]) and HAS_COMPILER
REASON = "; ".join(f"{m['what']}: {m['why']} (fix: {m['fix']})" for m in PROBE["missing"]) or "no Vulkan device"
needs_compiler = pytest.mark.skipif(not HAS_COMPILER, reason=f"no HLSL compiler: {REASON}")
needs_device = pytest.mark.skipif(not HAS_DEVICE, reason=f"no Vulkan device or compiler: {REASON}")
pytestmark = pytest.mark.vulkan

PROBLEM = Matmul()
HEADER = """struct Params { uint M; uint N; uint K; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> A;
[[vk::binding(1)]] StructuredBuffer<float> B;
[[vk::binding(2)]] RWStructuredBuffer<float> C;
"""
NAIVE = PROBLEM.naive_kernel("hlsl", "f32")


def spec_of(source: str) -> Any:
    return parse_annotation(source, needs=("entry", "groups"), symbols=PROBLEM.symbols)


def job(source: str, sizes: dict[str, int], steps: tuple[str, ...] = ("compile", "validate", "benchmark"),
        dtype: str = "f32") -> dict[str, Any]:
    return {"problem": "matmul", "dtype": dtype, "sizes": sizes, "source": source,
            "spec": spec_of(source).model_dump(), "steps": list(steps), "trials": 2, "seed": 7,
            "time_budget_s": 0.1, "min_reps": 3, "max_reps": 50}


@pytest.fixture(scope="module")
def executor() -> Any:
    ex = hlsl.open_executor(0)
    yield ex
    ex.close()


# --- probe (no device needed) ----------------------------------------------------------------------------------


def test_probe_shape_and_facts() -> None:
    assert PROBE["backend"] == "hlsl"
    assert set(PROBE) >= {"devices", "compiler", "missing"}
    for entry in PROBE["missing"]:
        assert set(entry) == {"what", "why", "fix"}
    for index, dev in enumerate(PROBE["devices"]):
        assert dev["index"] == index and dev["backend"] == "hlsl"
        props = dev["properties"]
        assert props["device_type"] in ("discrete", "integrated", "virtual", "cpu", "other")
        assert len(props["max_compute_workgroup_count"]) == 3 and props["max_shared_memory"] > 0
        if "llvmpipe" in dev["name"]:
            assert props["is_software"] and props["device_type"] == "cpu"
    ranks = {"discrete": 0, "integrated": 1, "virtual": 2, "cpu": 3, "other": 4}
    order = [ranks[d["properties"]["device_type"]] for d in PROBE["devices"]]
    assert order == sorted(order), "devices must come discrete first, CPU last"


def test_probe_explains_missing_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    report = hlsl.probe()
    assert report["compiler"] == {"available": False}
    assert any("glslang-tools" in m["fix"] for m in report["missing"] if m["what"] == "HLSL compiler")


def test_probe_explains_missing_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    from peak_mcp.backends import vulkan_devices

    def no_loader() -> None:
        raise OSError("Cannot find Vulkan SDK version")

    monkeypatch.setattr(vulkan_devices, "load_binding", no_loader)
    report = hlsl.probe()
    assert report["devices"] == []
    loader = [m for m in report["missing"] if m["what"] == "Vulkan loader"]
    assert loader and "libvulkan1" in loader[0]["fix"]


def test_probe_explains_missing_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from peak_mcp.backends import vulkan_devices

    class VkErrorIncompatibleDriver(Exception):
        pass

    def no_icd(vk: Any) -> None:
        raise VkErrorIncompatibleDriver()

    monkeypatch.setattr(vulkan_devices, "load_binding", lambda: object())  # a loader, whether or not one is here
    monkeypatch.setattr(vulkan_devices, "create_instance", no_icd)
    report = hlsl.probe()
    driver = [m for m in report["missing"] if m["what"].startswith("Vulkan driver")]
    assert driver and "mesa-vulkan-drivers" in driver[0]["fix"] and "IncompatibleDriver" in driver[0]["why"]


# --- compile ---------------------------------------------------------------------------------------------------

BROKEN = NAIVE.replace("float acc = 0.0;", "float acc = 0.0;\n    acc += undefined_thing;")


@needs_compiler
def test_compile_error_reports_kernel_line_numbers() -> None:
    line = BROKEN.splitlines().index("    acc += undefined_thing;") + 1
    compile_only = hlsl.open_executor(None)  # no device needed to compile
    with pytest.raises(CompileFailed) as failed:
        compile_only.compile(BROKEN, spec_of(BROKEN))
    log = failed.value.log
    assert f"kernel.hlsl:{line}" in log or f"kernel.hlsl({line})" in log, log
    assert "undefined_thing" in log and "/tmp" not in log and "peak-hlsl-" not in log


@needs_compiler
def test_compile_rejects_missing_entry_and_non_abi_bindings() -> None:
    compile_only = hlsl.open_executor(None)
    wrong_entry = NAIVE.replace("entry=main", "entry=matmul")
    with pytest.raises(CompileFailed, match="entry 'matmul'"):
        compile_only.compile(wrong_entry, spec_of(wrong_entry))
    with_cbuffer = NAIVE.replace("[numthreads", "cbuffer Extra : register(b3) { uint scale; };\n[numthreads").replace(
        "C[row * p.N + col] = acc;", "C[row * p.N + col] = acc * scale;")
    with pytest.raises(CompileFailed, match="uniform buffer"):
        compile_only.compile(with_cbuffer, spec_of(with_cbuffer))


@needs_compiler
def test_compile_reports_resources_from_spirv() -> None:
    compile_only = hlsl.open_executor(None)
    naive = compile_only.compile(NAIVE, spec_of(NAIVE)).resources
    assert naive["numthreads"] == [16, 16, 1] and naive["threads_per_group"] == 256
    assert [b["binding"] for b in naive["bindings"]] == [0, 1, 2]
    assert naive["push_constant_bytes"] == 12 and naive["groupshared_bytes"] == 0 and naive["spirv_bytes"] > 0
    source = (EXAMPLES / "register_blocked.hlsl").read_text()
    blocked = compile_only.compile(source, spec_of(source)).resources
    assert blocked["numthreads"] == [256, 1, 1]
    assert blocked["groupshared_bytes"] == 2 * 8 * 128 * 4  # two float4[8][32] tiles


# --- compiler crashes and host paths ----------------------------------------------------------------------------

# glslang 12 dies with SIGSEGV on a function that takes a buffer as a parameter.
BUFFER_PARAMETER = """// peak: entry=main groups=(cdiv(N, 64), 1, 1)
[[vk::binding(0)]] ByteAddressBuffer A;
[[vk::binding(1)]] ByteAddressBuffer B;
[[vk::binding(2)]] RWByteAddressBuffer C;
float load(ByteAddressBuffer buf, uint i) { return asfloat(buf.Load(i * 4)); }
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) { C.Store(id.x * 4, asuint(load(A, id.x))); }
"""


@pytest.mark.skipif(PROBE["compiler"].get("name") != "glslangValidator", reason="needs glslang (the crash is its bug)")
def test_glslang_crash_is_reported_as_a_compiler_bug_with_a_hint() -> None:
    with pytest.raises(CompileFailed) as failed:
        hlsl.open_executor(None).compile(BUFFER_PARAMETER, spec_of(BUFFER_PARAMETER))
    log = failed.value.log
    if "crashed" not in log:
        pytest.skip(f"this glslang no longer crashes on buffer parameters: {log[:200]}")
    assert "glslangValidator" in log and "SIGSEGV" in log and "bug in the compiler" in log, log
    assert "exit status" not in log and "-11" not in log, log
    line = BUFFER_PARAMETER.splitlines().index("float load(ByteAddressBuffer buf, uint i) { return asfloat(buf.Load("
                                               "i * 4)); }") + 1
    assert f"kernel.hlsl:{line}: note:" in log and "`ByteAddressBuffer`" in log and "pass the index" in log, log


def fake_compiler(tmp_path: Path, body: str) -> hlsl_compiler.Compiler:
    """A stand-in compiler (a real process) that prints what a crashing LLVM-based compiler prints."""
    script = tmp_path / "bin" / "glslangValidator"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return hlsl_compiler.Compiler("glslangValidator", str(script))


HOST_NOISE = """echo "$0: warning: ignoring $HOME/.config/glslang.conf" >&2
echo "ERROR: $PWD/kernel.hlsl:3: 'x' : undeclared identifier" >&2
echo "ERROR: $(pwd -P)/kernel.hlsl:4: 'y' : undeclared identifier" >&2
echo " #0 0x00007f3a in frame /usr/lib/x86_64-linux-gnu/libglslang.so.12 (/opt/tools/lib/x.so+0x1f)" >&2
echo "Stack dump: 0. Program arguments: $0 -D -V kernel.hlsl" >&2
"""


@pytest.mark.parametrize("ending", ["exit 2", "kill -ABRT $$"], ids=["fails", "crashes"])
def test_compiler_output_names_no_host_path(tmp_path: Path, ending: str) -> None:
    compiler = fake_compiler(tmp_path, HOST_NOISE + ending + "\n")
    source = "// see /usr/share/doc/notes.txt\n" + NAIVE
    with pytest.raises(CompileFailed) as failed:
        hlsl_compiler.compile_to_spirv(compiler, source, "main", 20)
    log = failed.value.log
    for host in (str(tmp_path), "/usr/lib", "/opt/tools", os.path.expanduser("~") + "/", "peak-hlsl-", "/tmp"):
        assert host not in log, (host, log)
    assert "kernel.hlsl:3: 'x'" in log and "kernel.hlsl:4: 'y'" in log, log
    if ending.startswith("kill"):
        assert "crashed (SIGABRT)" in log and "Stack dump" not in log, log
    else:
        assert hlsl_compiler.REDACTED in log and "Stack dump: 0. Program arguments: glslangValidator -D" in log, log


def test_paths_the_kernel_itself_names_are_kept() -> None:
    compiler = hlsl_compiler.Compiler("glslangValidator", "/usr/bin/glslangValidator")
    text = "ERROR: kernel.hlsl:2: '/data/x.bin' : unexpected string\nnote: see /var/lib/secret and a/b and (n)/2"
    cleaned = hlsl_compiler.clean_log(text, "/tmp/peak-hlsl-1", "#define P \"/data/x.bin\"\n", compiler)
    assert "'/data/x.bin'" in cleaned and "/var/lib" not in cleaned and "a/b" in cleaned and "(n)/2" in cleaned


# --- validate and time on the device ---------------------------------------------------------------------------

EXAMPLE_FILES = ["naive.hlsl", "tiled_groupshared.hlsl", "register_blocked.hlsl", "tuned/double_buffered.hlsl",
                 "tuned/wave_tiled.hlsl", "tuned/wide_tile.hlsl", "tuned/wide_vec.hlsl", "tuned/wide_edge.hlsl",
                 "tuned/wide_raster.hlsl"]


@needs_device
@pytest.mark.parametrize("name", EXAMPLE_FILES)
@pytest.mark.parametrize("sizes", [{"M": 64, "N": 64, "K": 64}, {"M": 70, "N": 50, "K": 33},
                                   {"M": 200, "N": 300, "K": 64}], ids=["64cubed", "70x50x33", "200x300x64"])
def test_examples_validate_and_benchmark(executor: Any, name: str, sizes: dict[str, int]) -> None:
    source = (EXAMPLES / name).read_text()
    messages: list[str] = []
    result = evaluate(executor, job(source, sizes), messages.append)
    assert result.compile and result.compile.ok, result.compile
    assert result.validation and result.validation.passed, result.validation
    assert result.validation.model_extra and result.validation.model_extra["rel_l2_error"] < 1e-5
    timing = result.timing
    assert timing and timing.median_ms > 0 and timing.min_ms and timing.min_ms > 0 and (timing.reps or 0) >= 3
    assert timing.recheck and timing.recheck.model_dump() == {"passed": True}
    assert any(m.startswith("benchmark") for m in messages)


# Each tuning configuration of the tiled examples (the tests above run the defaults) where it fits this device's
# groupshared memory: interior groups take the unchecked loads, edge groups (and K % BK != 0) the zero-filled ones.
TUNED_FILES = [name for name in EXAMPLE_FILES if name.startswith("tuned/")]


@needs_device
@pytest.mark.parametrize("name", TUNED_FILES)
@pytest.mark.parametrize("sizes", [{"M": 256, "N": 512, "K": 48}, {"M": 200, "N": 300, "K": 40},
                                   {"M": 256, "N": 256, "K": 36}, {"M": 1160, "N": 520, "K": 16}],
                         ids=["interior", "edges", "k_not_a_bk_multiple", "short_last_band"])
def test_tuned_examples_validate_in_every_configuration(executor: Any, name: str, sizes: dict[str, int]) -> None:
    source = (EXAMPLES / name).read_text()
    spec = spec_of(source)
    assert spec.params.get("BK")
    ran = 0
    for values in itertools.product(*spec.params.values()):
        config = dict(zip(spec.params, values, strict=True))
        compiled = job(source, sizes, ("compile", "validate")) | {"spec": spec.bind(config).model_dump()}
        result = evaluate(executor, compiled, lambda _: None)
        assert result.compile
        if not result.compile.ok:
            assert "groupshared memory is" in result.compile.log, result.compile.log  # over this device's limit
            continue
        ran += 1
        assert result.validation and result.validation.passed, (config, result.validation)
        assert result.validation.model_extra and result.validation.model_extra["rel_l2_error"] < 1e-5
    assert ran >= 1


@needs_device
@pytest.mark.parametrize("sizes", [{"M": 256, "N": 512, "K": 48}, {"M": 70, "N": 50, "K": 33}],
                         ids=["interior", "edges"])
def test_f16_wide_tile_validates_in_every_configuration(executor: Any, sizes: dict[str, int]) -> None:
    if not executor.facts.properties["f16_supported"]:
        pytest.skip("no 16-bit storage buffers on this device")
    source = (EXAMPLES / "tuned" / "f16" / "wide_raster.hlsl").read_text()
    spec = spec_of(source)
    ran = 0
    for values in itertools.product(*spec.params.values()):
        config = dict(zip(spec.params, values, strict=True))
        compiled = job(source, sizes, ("compile", "validate"), dtype="f16") | {"spec": spec.bind(config).model_dump()}
        result = evaluate(executor, compiled, lambda _: None)
        assert result.compile
        if not result.compile.ok:
            assert "groupshared memory is" in result.compile.log, result.compile.log
            continue
        ran += 1
        assert "StorageBuffer16BitAccess" in result.compile.resources["capabilities"]
        assert result.validation and result.validation.passed, (config, result.validation)
    assert ran >= 1


@needs_device
def test_naive_example_matches_the_problem() -> None:
    assert (EXAMPLES / "naive.hlsl").read_text() == NAIVE


@needs_device
def test_f16_inputs(executor: Any) -> None:
    source = PROBLEM.naive_kernel("hlsl", "f16")
    sizes = {"M": 40, "N": 24, "K": 16}
    if not executor.facts.properties["f16_supported"]:
        with pytest.raises(CompileFailed, match=r"storageBuffer16BitAccess|shaderFloat16"):
            executor.compile(source, spec_of(source))
        return
    result = evaluate(executor, job(source, sizes, ("compile", "validate"), dtype="f16"), lambda _: None)
    assert result.compile and result.compile.ok
    assert "StorageBuffer16BitAccess" in result.compile.resources["capabilities"]
    assert result.validation and result.validation.passed, result.validation


@needs_device
def test_device_without_float16_refuses_half_arithmetic(executor: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    source = PROBLEM.naive_kernel("hlsl", "f16").replace("float acc = 0.0;", "half acc = half(0.0);").replace(
        "acc += float(A[row * p.K + k]) * float(B[k * p.N + col]);", "acc += A[row * p.K + k] * B[k * p.N + col];")
    source = source.replace("C[row * p.N + col] = acc;", "C[row * p.N + col] = float(acc);")
    monkeypatch.setitem(executor.device.physical.features, "shaderFloat16", False)
    with pytest.raises(CompileFailed, match="shaderFloat16") as failed:
        executor.compile(source, spec_of(source))
    assert executor.facts.name in failed.value.log


def kernel(body: str, groups: str = "(cdiv(N, 16), cdiv(M, 16), 1)", numthreads: str = "16, 16, 1",
           params: str = "") -> str:
    head = HEADER.replace("uint K; };", f"uint K;{params} }};")
    return (f"// peak: entry=main groups={groups}\n{head}\n[numthreads({numthreads})]\n"
            f"void main(uint3 id : SV_DispatchThreadID)\n{{\n{textwrap.indent(textwrap.dedent(body), '    ')}}}\n")


CORRECT_BODY = """
uint row = id.y, col = id.x;
if (row >= p.M || col >= p.N) return;
float acc = 0.0;
for (uint k = 0; k < p.K; ++k) acc += A[row * p.K + k] * B[k * p.N + col];
C[row * p.N + col] = acc;
"""
BUGS = {
    "wrong_result": CORRECT_BODY.replace("k < p.K;", "k + 1 < p.K;"),  # drops the last k
    "unwritten_output": CORRECT_BODY.replace("col >= p.N) return;", "col >= p.N || col == 7) return;"),
    "out_of_bounds_write": CORRECT_BODY + "if (row == p.M - 1 && col == p.N - 1) C[p.M * p.N + 3] = 1.0;\n",
    # An Inf bit pattern: drivers may fold x / 0.0 under fast-math assumptions, so it is not a reliable Inf.
    "nan_or_inf": CORRECT_BODY.replace("C[row * p.N + col] = acc;",
                                       "C[row * p.N + col] = row == 3 ? asfloat(0x7f800000u) : acc;"),
}


@needs_device
@pytest.mark.parametrize("check", sorted(BUGS))
def test_buggy_kernels_fail_the_right_check(executor: Any, check: str) -> None:
    result = evaluate(executor, job(kernel(BUGS[check]), {"M": 33, "N": 20, "K": 17}), lambda _: None)
    assert result.compile and result.compile.ok, result.compile
    verdict = result.validation
    assert verdict and not verdict.passed and verdict.check == check, verdict
    assert result.timing is None


@needs_device
def test_kernel_that_writes_the_poison_bits_is_not_called_unwritten(executor: Any) -> None:
    """All-ones NaN written by the kernel (what racing shared memory can propagate) is the kernel's NaN."""
    body = CORRECT_BODY.replace("C[row * p.N + col] = acc;",
                                "C[row * p.N + col] = row == 2 ? asfloat(0xffffffffu) : acc;")
    verdict = evaluate(executor, job(kernel(body), {"M": 33, "N": 20, "K": 17}), lambda _: None).validation
    assert verdict and verdict.check == "nan_or_inf" and "wrote them" in (verdict.message or ""), verdict


@needs_device
def test_modified_input_is_caught(executor: Any) -> None:
    source = kernel(CORRECT_BODY + "if (row == 0 && col == 0) A2[5] = 0.0;\n").replace(
        "[[vk::binding(0)]] StructuredBuffer<float> A;",
        "[[vk::binding(0)]] StructuredBuffer<float> A;\n[[vk::binding(0)]] RWStructuredBuffer<float> A2;")
    result = evaluate(executor, job(source, {"M": 16, "N": 16, "K": 16}), lambda _: None)
    assert result.compile is not None
    if not result.compile.ok:  # some compilers refuse two views of one binding; nothing to test then
        pytest.skip(f"aliased bindings not accepted: {result.compile.log[:200]}")
    assert result.validation and result.validation.check == "input_modified", result.validation


@needs_device
def test_launch_limits_are_checked(executor: Any) -> None:
    limit = executor.facts.properties["max_compute_workgroup_count"][0]
    too_many = kernel(CORRECT_BODY, groups=f"({limit + 1}, 1, 1)")
    result = evaluate(executor, job(too_many, {"M": 16, "N": 16, "K": 16}), lambda _: None)
    assert result.validation and result.validation.check == "launch_geometry"
    assert str(limit) in (result.validation.message or "")
    threads = executor.facts.properties["max_compute_workgroup_invocations"]
    too_wide = kernel(CORRECT_BODY, numthreads=f"{min(threads * 2, 2048)}, 1, 1")
    with pytest.raises(CompileFailed, match="maxComputeWorkGroup"):
        executor.compile(too_wide, spec_of(too_wide))


@needs_device
def test_push_constant_block_larger_than_the_abi_is_refused(executor: Any) -> None:
    source = kernel(CORRECT_BODY, params=" uint extra;")
    compiled = executor.compile(source, spec_of(source))
    ws = Workspace(executor, PROBLEM, "f32", {"M": 16, "N": 16, "K": 16})
    try:
        with pytest.raises(InvalidInput, match="push-constant block is 16 bytes"):
            executor.run(compiled, ws.handles, ws.scalars, compiled.spec.evaluate({"M": 16, "N": 16, "K": 16}))
    finally:
        ws.close()


@needs_device
def test_timing_is_positive_cold_and_warm(executor: Any) -> None:
    source = (EXAMPLES / "register_blocked.hlsl").read_text()
    compiled = executor.compile(source, spec_of(source))
    sizes = {"M": 128, "N": 128, "K": 128}
    ws = Workspace(executor, PROBLEM, "f32", sizes)
    try:
        ws.load(PROBLEM.make_inputs(sizes, "f32", 1, np))
        geometry = compiled.spec.evaluate(sizes)
        for cold in (True, False):
            times = executor.time(compiled, [ws.handles], ws.scalars, geometry, reps=7, cold_cache=cold)
            assert len(times) == 7 and all(t > 0 for t in times) and max(times) < 10_000
        assert executor.facts.properties["timing"] == "timestamp queries" or "host wall-clock" in \
            executor.facts.properties["timing"]
    finally:
        ws.close()


@needs_device
def test_buffers_round_trip_exactly(executor: Any) -> None:
    data = np.random.default_rng(3).integers(0, 256, 3 * (1 << 20) + 5, dtype=np.uint8)
    buf = executor.alloc(data.nbytes)
    try:
        executor.write(buf, data)
        assert np.array_equal(executor.read(buf, data.nbytes), data)
    finally:
        executor.free(buf)


# --- the real worker process ----------------------------------------------------------------------------------


class Worker:
    """`python -m peak_mcp.runner.worker --backend hlsl`, replies read from its result pipe by a thread."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        read_fd, write_fd = os.pipe()
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker; closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "peak_mcp.runner.worker", "--backend", "hlsl", "--device", "0",
             "--result-fd", str(write_fd), "--options", json.dumps(options or {})],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self.stderr, pass_fds=(write_fd,), cwd=ROOT,
            env={**os.environ, "PYTHONPATH": PYTHONPATH}, text=True)
        os.close(write_fd)
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.reader = os.fdopen(read_fd)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.reader:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def next(self, timeout: float) -> dict[str, Any] | None:
        return self.lines.get(timeout=timeout)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def result(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            reply = self.next(max(0.1, deadline - time.monotonic()))
            assert reply is not None, f"worker closed its pipe: {self.log()}"
            if reply.get("event") == "result":
                return reply

    def log(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-2000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.reader.close()
        self.stderr.close()


@needs_device
def test_worker_process_evaluates_a_job() -> None:
    worker = Worker()
    try:
        ready = worker.next(timeout=60)
        assert ready is not None and ready["event"] == "ready", worker.log()
        assert ready["device"]["backend"] == "hlsl" and ready["device"]["name"] == PROBE["devices"][0]["name"]
        worker.send({"id": 1, "type": "evaluate", **job(NAIVE, {"M": 64, "N": 64, "K": 64})})
        reply = worker.result(timeout=120)
        assert reply["id"] == 1 and reply["ok"], reply
        assert reply["result"]["validation"]["passed"] and reply["result"]["timing"]["median_ms"] > 0
    finally:
        worker.close()


# A kernel that does not finish: every thread of 65535 x 1024 groups loops as long as A[0] < 1e30, which the
# compiler cannot know is always true. (lavapipe ends any single invocation after ~65535 loop iterations, so
# the sheer number of invocations is what keeps it busy: hours of CPU time.)
HANG = kernel("""
uint i = 0;
[loop] while (A[0] < 1e30) { i += 1; C[id.x % 64] = float(i); }
""", groups="(65535, 1024, 1)", numthreads="64, 1, 1")


@needs_device
def test_hang_becomes_a_timeout_and_the_worker_exits() -> None:
    worker = Worker({"fence_timeout_s": 2})
    try:
        assert worker.next(timeout=60)["event"] == "ready", worker.log()
        started = time.monotonic()
        worker.send({"id": 9, "type": "evaluate", **job(HANG, {"M": 8, "N": 8, "K": 8}, ("compile", "validate"))})
        reply = worker.result(timeout=60)
        assert not reply["ok"] and reply["fatal"] and reply["kind"] == "timeout", reply
        assert "did not finish within 2 s" in reply["error"]
        # Issue 20: it names the limit and how to raise it, and does not claim the kernel never ends (a slow or
        # busy machine reads the same).
        assert "PEAK_MCP_VK_FENCE_TIMEOUT_S" in reply["error"] and "probably" not in reply["error"]
        assert time.monotonic() - started < 30
        # The worker exits on its own (status 3) although the driver is still busy with the dispatch.
        assert worker.proc.wait(timeout=30) == 3, worker.log()
    finally:
        worker.close()


HANG_SCRIPT = """
import sys, time
import numpy as np
from peak_mcp.backends.base import KernelFault
from peak_mcp.backends.hlsl import open_executor
from peak_mcp.core.launch import parse_annotation
from peak_mcp.problems.matmul import Matmul
from peak_mcp.evaluation.workspace import Workspace
source = sys.stdin.read()
ex = open_executor(0, fence_timeout_s=2)
spec = parse_annotation(source, needs=("entry", "groups"), symbols=("M", "N", "K"))
compiled = ex.compile(source, spec)
sizes = {"M": 8, "N": 8, "K": 8}
ws = Workspace(ex, Matmul(), "f32", sizes)
ws.load(Matmul().make_inputs(sizes, "f32", 0, np))
try:
    ex.run(compiled, ws.handles, ws.scalars, spec.evaluate(sizes))
    print("RETURNED", flush=True)
except KernelFault as fault:
    print("FAULT", fault, flush=True)
try:
    ex.read(ws.buffers[0].handle, 4)
except KernelFault:
    print("STILL-FAULT", flush=True)
time.sleep(600)  # stay alive so the test can check that the process can be killed
"""


@needs_device
def test_hang_with_short_fence_timeout_in_process_that_is_killed() -> None:
    proc = subprocess.Popen([sys.executable, "-c", HANG_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, cwd=ROOT, text=True,
                            env={**os.environ, "PYTHONPATH": PYTHONPATH})
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(HANG)
        proc.stdin.close()
        started = time.monotonic()
        first = proc.stdout.readline()
        assert first.startswith("FAULT") and "fence timeout" in first, first
        assert time.monotonic() - started < 30
        assert proc.stdout.readline().strip() == "STILL-FAULT"  # a lost device stays lost: no half state
    finally:
        proc.kill()
        assert proc.wait(timeout=15) != 0  # SIGKILL works while the driver thread still spins


@needs_device
def test_pool_stops_a_job_at_the_total_limit_and_says_which_limit() -> None:
    from peak_mcp.runner.messages import EvaluateJob
    from peak_mcp.runner.pool import DevicePool, JobFailed
    from peak_mcp.runner.replies import EvaluateResult

    # The fence timeout and the inactivity limit are far away: only the whole-job limit can stop this.
    pool = DevicePool(env={**os.environ, "PYTHONPATH": PYTHONPATH},
                      options=lambda _backend, _index: {"fence_timeout_s": 120})
    try:
        started = time.monotonic()
        with pytest.raises(JobFailed) as failed:
            pool.run("hlsl", 0, EvaluateJob(**job(HANG, {"M": 8, "N": 8, "K": 8}, ("compile", "validate"))),
                     inactivity_s=120, total_s=4)
        assert failed.value.kind == "timeout"
        assert "still running after" in str(failed.value) and "PEAK_MCP_JOB_MAX_SECONDS" in str(failed.value)
        assert time.monotonic() - started < 60 and pool.restarts == 1
        after = pool.run("hlsl", 0, EvaluateJob(**job(kernel(CORRECT_BODY), {"M": 8, "N": 8, "K": 8},
                                                     ("compile", "validate"))), inactivity_s=60, total_s=60)
        assert isinstance(after, EvaluateResult) and after.validation and after.validation.passed, after
    finally:
        pool.close()


@needs_device
def test_pool_stops_a_silent_job_and_names_the_limit_without_blaming_the_kernel() -> None:
    """Issue 20: a job stopped for want of progress may be a slow launch on a busy CPU device as much as a hang:
    the message names PEAK_MCP_JOB_TIMEOUT and how to raise it, and does not say the kernel probably never ends."""
    from peak_mcp.runner.messages import EvaluateJob
    from peak_mcp.runner.pool import DevicePool, JobFailed

    pool = DevicePool(env={**os.environ, "PYTHONPATH": PYTHONPATH},
                      options=lambda _backend, _index: {"fence_timeout_s": 120})
    try:
        with pytest.raises(JobFailed) as failed:
            pool.run("hlsl", 0, EvaluateJob(**job(HANG, {"M": 8, "N": 8, "K": 8}, ("compile", "validate"))),
                     inactivity_s=3, total_s=120)
        text = str(failed.value)
        assert failed.value.kind == "timeout", text
        assert "no progress for 3 s" in text and "PEAK_MCP_JOB_TIMEOUT" in text, text
        assert "slow device" in text and "probably" not in text, text
    finally:
        pool.close()
