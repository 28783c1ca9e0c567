"""Flat chunks of a large array, so a pass over it holds float64 temporaries of a bounded size.

A KernelBench softmax of 4096 x 393216 has 1.6G output elements: its checks and its reference's bound, each made of
whole-array float64 temporaries, took over 100 GB of an H200's memory at once. Passes that go chunk by chunk hold a
few hundred MiB of temporaries at any size.
"""

from __future__ import annotations

CHUNK_ELEMENTS = 1 << 25  # elements a pass holds temporaries for at once (256 MiB of float64 each)


def spans_of(n: int) -> list[slice]:
    """[start, stop) slices covering 0..n in order, each at most CHUNK_ELEMENTS long (one empty slice for n = 0)."""
    step = max(1, CHUNK_ELEMENTS)
    return [slice(i, min(i + step, n)) for i in range(0, n, step)] or [slice(0, 0)]
