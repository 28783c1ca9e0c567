"""HLSL's sanitizer: the Khronos validation layer's GPU-assisted validation over one launch at a small size. The
parsing runs anywhere; the launches need lavapipe (or any Vulkan device) and vulkan-validationlayers."""

from __future__ import annotations

import pytest

from peak_mcp.backends.registry import launch_spec
from peak_mcp.runner import vulkan_sanitizer
from peak_mcp.runner.messages import LaunchTarget
from tests.conftest import EXAMPLES, ROOT

# What vulkan-validationlayers 1.3.239 (Debian 12) printed for tests/hostile/hlsl/oob_read_masked.hlsl on lavapipe.
OOB = """device llvmpipe (LLVM 15.0.6, 256 bits)
VUID-vkCmdDispatch-None-02706(ERROR / SPEC): msgNum: -1660035578 - Validation Error: [ VUID-vkCmdDispatch-None-02706 ] \
Object 0: handle = 0x55831dc5db78, type = VK_OBJECT_TYPE_QUEUE; | MessageID = 0x9d0dde06 | Descriptor index 0 access \
out of bounds. Descriptor size is 21200 and highest byte accessed was 21203 Command buffer (0x55831db618b0). Compute \
Dispatch Index 0. Pipeline (0xc000000000c). Shader Module (0x90000000009). Shader Instruction Index = 116.  Stage = \
Compute.  Global invocation ID (x, y, z) = (0, 0, 0 ) Unable to find SPIR-V OpLine for source information.  Build \
shader with debug info to get source information. The Vulkan spec states: If the robustBufferAccess feature is not \
enabled, and if the VkPipeline object bound to the pipeline bind point used by this command accesses a storage buffer, \
it must not access values outside of the range of the buffer as specified in the descriptor set bound to the same \
pipeline bind point (https://vulkan.lunarg.com/doc/view/1.3.239.0/linux/1.3-extensions/vkspec.html)
    Objects: 1
        [0] 0x55831dc5db78, type: 4, name: NULL
peak-vulkan-sanitizer: launched
"""
# ... and for the same shader compiled for vulkan1.2 (glslang's BufferBlock in SPIR-V 1.5).
NOT_INSTRUMENTED = """UNASSIGNED-GPU-Assisted-Validation(ERROR / SPEC): msgNum: -359834619 - Validation Error: \
[ UNASSIGNED-GPU-Assisted-Validation ] Object 0: handle = 0x55ee8ccf5220, type = VK_OBJECT_TYPE_DEVICE; | \
MessageID = 0xea8d5c05 | Setup Error. Detail: (Failure to instrument shader.  Proceeding with non-instrumented shader.)
    Objects: 1
        [0] 0x55ee8ccf5220, type: 3, name: NULL
peak-vulkan-sanitizer: launched
"""


def test_an_out_of_bounds_message_fails_naming_the_buffer() -> None:
    report = vulkan_sanitizer.parse(OOB, 0, buffers={21200: ["A"], 16324: ["B"]})
    assert report.available and report.passed is False
    (finding,) = report.failures
    assert finding.check == "sanitizer_vulkan_oob"
    assert "buffer A (21200 bytes)" in finding.message and "highest byte accessed was 21203" in finding.message
    assert "0x55" not in finding.message and "spec states" not in finding.message


def test_a_shader_the_layer_cannot_instrument_or_a_launch_that_failed_is_unchecked_not_failed() -> None:
    report = vulkan_sanitizer.parse(NOT_INSTRUMENTED, 0)
    assert report.passed is None and not report.failures
    assert "could not instrument" in report.unchecked[0].message
    crashed = vulkan_sanitizer.parse("Traceback ...\nRuntimeError: no Vulkan device\n", 1)
    assert crashed.passed is None and "did not run (exit 1)" in crashed.unchecked[0].message
    assert vulkan_sanitizer.parse("peak-vulkan-sanitizer: launched\n", 0).clean == ["vulkan_oob"]


def test_without_the_layer_it_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vulkan_sanitizer, "layer_manifest", lambda: None)
    source = (EXAMPLES / "hlsl" / "naive.hlsl").read_text()
    job = LaunchTarget(source=source, spec=launch_spec(source, "hlsl", ("M", "N", "K")), problem="matmul",
                       dtype="f32", sizes={"M": 100, "N": 77, "K": 53}, device=0, backend="hlsl")
    report = vulkan_sanitizer.run(job)
    assert report.available is False and "vulkan-validationlayers" in report.fix and not report.failures


def test_a_select_is_named_only_where_it_reads_a_buffer_the_fault_can_be_in() -> None:
    """The agent's case: the layer reported B (by its size); line 18 reads A inside a `?:`, line 19 reads B plainly.
    Naming line 18 sent it to the wrong buffer."""
    from peak_mcp.runner.vulkan_sanitizer import select_note, suspects

    source = "\n" * 17 + "float a = i < n ? A[i] : 0.0;\nfloat b = B[i * 64 + j];\n"
    buffers = {4096: ["A"], 8192: ["B"], 16384: ["C"]}
    message = "Descriptor index 0 access out of bounds. Descriptor size is 8192 and highest byte accessed was 8196"
    assert suspects(message, buffers) == ["B"] and select_note(source, suspects(message, buffers)) == ""
    assert "Line 18 reads A inside a `?:`" in select_note(source, suspects("no size given", buffers))


def _hostile_job(name: str) -> LaunchTarget:
    source = (ROOT / "tests" / "hostile" / "hlsl" / name).read_text()
    return LaunchTarget(source=source, spec=launch_spec(source, "hlsl", ("M", "N", "K")), problem="matmul",
                        dtype="f32", sizes={"M": 100, "N": 77, "K": 53}, device=0, backend="hlsl")


@pytest.mark.vulkan
@pytest.mark.skipif(vulkan_sanitizer.layer_manifest() is None, reason="no Vulkan validation layer")
def test_a_run_started_beside_other_work_finishes_to_the_same_verdict_and_an_aborted_one_leaves_nothing() -> None:
    """Issue 35: on a GPU the worker starts the layer's run before generality's sizes and finishes it after them.
    Started early, the run still names the fault; ended early (a fault at one of the sizes ends the job), its
    process and folder are gone."""
    import os
    from pathlib import Path

    from tests.conftest import has_device, skip_reason

    if not has_device("hlsl"):
        pytest.skip(f"no Vulkan device: {skip_reason('hlsl')}")
    running = vulkan_sanitizer.start(_hostile_job("oob_read_masked.hlsl"))
    assert isinstance(running, vulkan_sanitizer.Running)
    report = running.finish()
    assert report.passed is False and report.failures[0].check == "sanitizer_vulkan_oob"
    assert not Path(running.workdir).exists()
    aborted = vulkan_sanitizer.start(_hostile_job("oob_read_masked.hlsl"))
    assert isinstance(aborted, vulkan_sanitizer.Running) and aborted.proc is not None
    aborted.abort()
    aborted.proc.wait(timeout=10)
    assert aborted.proc.returncode is not None and not Path(aborted.workdir).exists()
    with pytest.raises(ProcessLookupError):
        os.kill(aborted.proc.pid, 0)
