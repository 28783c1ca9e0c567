"""Torch-free stand-in of KernelBench's ReLU file (relu.py): the same layout with numpy arrays and a plain class, so
the KernelBench path through MCP is tested where torch is not installed."""

import numpy as np


class Model:
    """Simple model that performs a ReLU activation."""

    def __init__(self):
        pass

    def forward(self, x):
        return np.maximum(x, 0.0)


batch_size = 16
dim = 16384


def get_inputs():
    return [np.random.randn(batch_size, dim)]


def get_init_inputs():
    return []
