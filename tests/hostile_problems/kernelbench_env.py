"""Hostile problem: a KernelBench module that reads the environment before it imports torch."""
# hostile: variants=import kernelbench=1
import os

_hot = [f"{k}={v}" for k, v in sorted(os.environ.items()) if any(h in k.upper() for h in ("TOKEN", "SECRET",
                                                                                          "CANARY"))]
raise RuntimeError("PROBE[kernelbench_env:import] " + "; ".join(_hot))

import torch  # noqa: E402

batch_size = 16


class Model(torch.nn.Module):
    def forward(self, x):
        return 2 * x


def get_inputs():
    return [torch.randn(batch_size)]


def get_init_inputs():
    return []
