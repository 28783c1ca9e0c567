"""Torch-free stand-in of a KernelBench matmul: C = A @ B with A (M, K), B (K, N)."""

import numpy as np


class Model:
    def forward(self, A, B):
        return A @ B


M = 256
N = 128
K = 512


def get_inputs():
    return [np.random.randn(M, K), np.random.randn(K, N)]


def get_init_inputs():
    return []
