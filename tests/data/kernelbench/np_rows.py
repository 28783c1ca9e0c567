"""Torch-free stand-in of a KernelBench file: numpy arrays from get_inputs, a plain class Model. It exercises the
probing (symbols, affine and floor-division dimensions, several outputs) where torch is not installed."""

import numpy as np


class Model:
    """Scaled rows, row sums and strided halves."""

    def __init__(self, factor):
        self.factor = factor

    def forward(self, x, w):
        doubled = np.concatenate([x, x], axis=1) * self.factor  # (rows, 2 * cols)
        half = x[:, ::2][:, : (x.shape[1] - 3) // 2 + 1]  # (rows, (cols - 3) // 2 + 1)
        return doubled, x.sum(axis=1, keepdims=True) + w[:, :1], half


rows = 64
cols = 100
factor = 3


def get_inputs():
    return [np.random.randn(rows, cols), np.random.rand(rows, cols + 1)]


def get_init_inputs():
    return [factor]
