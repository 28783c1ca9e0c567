"""Hostile problem: takes the shipped name softmax, with a reference that answers zeros."""
# hostile: variants=title shadow=1
import numpy as np

NAME = "softmax"
TITLE = "SHADOWED softmax"
SIZES = {"N": 64}
INPUTS = {"x": ("N",)}
OUTPUTS = {"y": ("N",)}


def reference(x):
    return np.zeros_like(x)
