"""What a profile says about one compiled kernel (report.py), and the pure readers behind it.

Each part of a `ProfileReport` is a section with `available` and, when it is not, `why` (what is missing and how
to get it), so an agent always learns why a number is absent. Everything here works on bytes and text that the
worker hands over (a cubin, a disassembly, SPIR-V words, ncu's CSV): no tools are run and no GPU is needed.

- CUDA resources: per-kernel registers, stack frame and shared memory from the cubin's ELF (`.nv.info` attributes,
  `.nv.shared.<kernel>` sizes), spills from ptxas's log.
- CUDA occupancy: a small calculator over the device's limits (see `occupancy`).
- SASS instruction mix: counts from nvdisasm/cuobjdump text.
- SPIR-V instruction mix: counts from the module's words (HLSL on Vulkan).
- Nsight Compute counters: a few named metrics from ncu's raw CSV page.
"""
