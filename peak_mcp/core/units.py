"""Speeds said in the unit their work is judged by, scaled to fit the device."""

from __future__ import annotations

MEMORY_BOUND_FLOPS_PER_BYTE = 4.0  # below every GPU's ridge point: such work is read by its bandwidth


def memory_bound(tflops: float | None, gbps: float | None) -> bool:
    """Work judged by its bandwidth: under MEMORY_BOUND_FLOPS_PER_BYTE, or no flops declared (its % of a FLOP peak
    says nothing)."""
    return bool(gbps) and (not tflops or tflops * 1e3 / gbps < MEMORY_BOUND_FLOPS_PER_BYTE)


def speed(tflops: float | None, gbps: float | None) -> str:
    """A version's speed in the unit its work is judged by: GB/s for memory-bound work (softmax, norms, sums, or a
    problem that declares no flops), FLOP/s otherwise."""
    if memory_bound(tflops, gbps):
        return f"{gbps:,.0f} GB/s" if gbps >= 100 else f"{gbps:.3g} GB/s"
    return rate(tflops) if tflops else ""


def rate(tflops: float | None) -> str:
    """A FLOP rate in the unit that fits it: a CPU device's 6e-05 TFLOP/s reads 0.063 GFLOP/s, not 0.00."""
    if tflops is None:
        return "n/a"
    for unit, scale in (("TFLOP/s", 1.0), ("GFLOP/s", 1e-3), ("MFLOP/s", 1e-6)):
        if tflops >= scale:
            return f"{tflops / scale:.3g} {unit}"
    return f"{tflops / 1e-6:.2g} MFLOP/s"
