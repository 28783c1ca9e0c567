"""Problem traits: what kind of computation a problem is, in a small vocabulary the catalog's texts are written for.

A catalog text declares the traits it applies to (`traits: [row_reduction]`, or `any`); a problem has traits, and a
text applies to a problem when they share one. So a LayerNorm imported from KernelBench gets the row-reduction texts
written for rmsnorm, and a matrix-vector product the row texts, without either naming the other.

Where a problem's traits come from:
- matmul: declared in its class (`gemm`).
- a problem file (the built-ins under problems/builtin/ and define_problem's): its `TRAITS` list where it has one,
  else derived from the declaration (`declared_traits`): TENSOR_CORES -> gemm; an output that drops the trailing
  axes of an input -> row_reduction (gemv where a second input is the vector); an output shaped like an input ->
  row_reduction with a REDUCTION, elementwise without, unless the reference's behaviour said more when describe
  probed it (`trait_probe`: a LayerNorm's outputs move along the whole row); a 0-d output -> row_reduction.
- a KernelBench file: the aten operations its forward runs (recorded while it is probed, `OpRecorder`), mapped by
  `traits_of_ops`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

# The vocabulary, one line each (docs and the catalog's error messages quote it).
TRAITS: dict[str, str] = {
    "elementwise": "each output element from the input elements at its own position (activations, arithmetic)",
    "row_reduction": "reduces along an axis: sums, means, maxima, norms, a GEMV's dot products, a loss's mean",
    "scan": "a prefix operation along an axis (cumsum, cumprod)",
    "gemm": "a matrix product with both sides matrices (matmul, linear, bmm)",
    "gemv": "a matrix-vector product: one side of the product is a vector",
    "convolution": "a convolution, transposed, grouped and depthwise included (an implicit GEMM)",
    "pooling": "max or average over sliding windows",
    "attention": "softmax(q k^T) v",
    "normalization": "scales by statistics of a row, group or channel (LayerNorm, RMSNorm, GroupNorm, BatchNorm, "
                     "x / ||x||)",
    "softmax": "softmax or log-softmax along an axis",
    "loss": "predictions against targets reduced to one value",
    "fused_epilogue": "a GEMM, GEMV or convolution followed by more work (bias, activation, scaling, a norm, a "
                      "pooling) that can run in its epilogue, in the same kernel",
}
ANY = "any"  # a catalog text for every problem; never a problem's trait
# Traits that are row reductions as well: the row texts (a warp per row, vectorized row access) apply to them.
IMPLIES: dict[str, tuple[str, ...]] = {"softmax": ("row_reduction",), "normalization": ("row_reduction",),
                                       "gemv": ("row_reduction",), "loss": ("row_reduction",)}


def unknown(traits: Iterable[str], allow_any: bool = False) -> list[str]:
    """The names in `traits` outside the vocabulary (`any` allowed for a catalog text)."""
    return [t for t in traits if t not in TRAITS and not (allow_any and t == ANY)]


def closed(traits: Iterable[str]) -> tuple[str, ...]:
    """`traits` with what they imply, in the vocabulary's order."""
    found = set(traits)
    for t in list(found):
        found.update(IMPLIES.get(t, ()))
    return tuple(t for t in TRAITS if t in found)


# --- problem files --------------------------------------------------------------------------------------------
def declared_traits(declared: Sequence[str], tensor_cores: bool, reduction: str | None,
                    inputs: Sequence[Sequence[str]], outputs: Sequence[Sequence[str]],
                    probed: Sequence[str] = ()) -> tuple[str, ...]:
    """A problem file's traits: its TRAITS if it declares them, else what its flags and buffer shapes (expressions
    over the size symbols) say, where an output shaped like an input is read from the reference's behaviour when
    describe could probe it (`probed`, problems/trait_probe.py). A guess where the file says nothing; a file states
    its own with TRAITS."""
    if declared:
        return closed(declared)
    found: set[str] = set()
    if tensor_cores:
        found.add("gemm")
    ins = [tuple(s) for s in inputs]
    for out in (tuple(s) for s in outputs):
        if not out:
            found.add("row_reduction")  # a total, a loss: one value
            continue
        for shape in ins:
            if len(shape) > len(out) and shape[:len(out)] == out:  # y[r] from x[r, :]
                # y = A x: A is (M, K), x (K) or (K, 1), y (M)
                gemv = len(shape) == 2 and any(other in ((shape[1],), (shape[1], "1")) for other in ins)
                found.add("gemv" if gemv else "row_reduction")
            elif shape == out and not tensor_cores:
                found.update(probed or ("row_reduction" if reduction not in (None, "1") else "elementwise",))
    return closed(found)


# --- KernelBench: the aten operations a forward runs ---------------------------------------------------------------
_GEMM = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "_addmm_activation"})
_GEMV = frozenset({"mv", "addmv", "dot", "vdot"})
_REDUCE = frozenset({"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "std_mean",
                     "logsumexp", "linalg_vector_norm", "norm", "nansum", "argmax", "argmin", "median", "all",
                     "any"})
_SCAN = frozenset({"cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "_cummax_helper", "_cummin_helper"})
_SOFTMAX = frozenset({"_softmax", "_log_softmax", "softmax", "log_softmax", "_safe_softmax"})
_NORM = frozenset({"native_layer_norm", "native_group_norm", "native_batch_norm", "_native_batch_norm_legit",
                   "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional", "batch_norm",
                   "layer_norm", "group_norm", "instance_norm", "rms_norm", "_fused_rms_norm"})
# Elementwise operations aten does not tag pointwise.
_POINTWISE = frozenset({"hardswish", "hardsigmoid", "gelu", "silu", "mish", "softplus", "elu", "selu", "celu",
                        "leaky_relu", "hardtanh", "relu", "relu6", "threshold", "clone", "where", "lift_fresh"})
# Moves, views and allocations: no work of their own.
_LAYOUT = frozenset({"view", "_unsafe_view", "reshape", "permute", "transpose", "t", "unsqueeze", "squeeze",
                     "expand", "contiguous", "detach", "alias", "as_strided", "select", "slice", "cat", "stack",
                     "flip", "split", "split_with_sizes", "chunk", "unbind", "empty", "empty_like", "zeros",
                     "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_empty", "_to_copy",
                     "copy", "scalar_tensor", "lift", "triu", "tril", "diagonal", "index_select", "narrow"})
POINTWISE_MARK = "*"  # OpRecorder's suffix for an op aten tags pointwise


def op_kind(op: str) -> str | None:
    """One recorded op's trait (or `pointwise`), None for layout and for ops outside the vocabulary."""
    name = op.removesuffix(POINTWISE_MARK)
    if name in _LAYOUT or name.endswith("_"):  # in place: a module's counter (BatchNorm), dropout's mask
        return None
    if name in _GEMM:
        return "gemm"
    if name in _GEMV:
        return "gemv"
    if "convolution" in name or name.startswith("conv"):
        return "convolution"
    if "pool" in name:
        return "pooling"
    if "scaled_dot_product" in name or "attention" in name:
        return "attention"
    if name in _SOFTMAX:
        return "softmax"
    if name in _NORM:
        return "normalization"
    if name in _SCAN:
        return "scan"
    if "loss" in name or name in ("kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits"):
        return "loss"
    if name in _REDUCE:
        return "row_reduction"
    if op.endswith(POINTWISE_MARK) or name in _POINTWISE:
        return "pointwise"
    return None


def traits_of_ops(ops: Sequence[str], input_shapes: Sequence[Sequence[int]],
                  output_shapes: Sequence[Sequence[int]]) -> tuple[str, ...]:
    """A forward's traits from the aten ops it ran, in order (OpRecorder), and its tensors' shapes."""
    kinds = [k for k in map(op_kind, ops) if k is not None]
    found = {k for k in kinds if k != "pointwise"}
    inputs = {tuple(s) for s in input_shapes}
    outputs = [tuple(s) for s in output_shapes]
    anchors = [i for i, k in enumerate(kinds) if k in ("gemm", "gemv", "convolution")]
    if anchors and any(k not in ("gemm", "gemv", "convolution") for k in kinds[anchors[0] + 1:]):
        found.add("fused_epilogue")  # work after the product: its epilogue
    products = [i for i, k in enumerate(kinds) if k in ("gemm", "gemv")]
    soft = [i for i, k in enumerate(kinds) if k == "softmax"]
    if soft and products and products[0] < soft[0] < products[-1]:
        found.add("attention")  # q k^T, softmax, then p v written out
    if "row_reduction" in found and not found - {"row_reduction"}:
        if outputs and all(not o for o in outputs):
            found.add("loss" if len(input_shapes) > 1 else "row_reduction")
        elif any(o in inputs for o in outputs):  # x / stat(x): same shape out as in
            found.add("softmax" if "exp" in {op.removesuffix(POINTWISE_MARK) for op in ops} else "normalization")
    if not found and "pointwise" in kinds:
        found.add("elementwise")
    return closed(found)


class OpRecorder:
    """A context manager recording the aten ops run inside it (`ops`, in order; a matrix product with a unit
    dimension as `mv`, one aten tags pointwise with POINTWISE_MARK). Imports torch on entry only: call it where the
    problem's code runs (a KernelBench probe), never in the server."""

    def __init__(self) -> None:
        self.ops: list[str] = []
        self._mode: Any = None

    def __enter__(self) -> OpRecorder:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        ops = self.ops

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                ops.append(_name(torch, func, args))
                return func(*args, **(kwargs or {}))

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)


def _name(torch: Any, func: Any, args: Sequence[Any]) -> str:
    name = func.overloadpacket.__name__
    if name in ("mm", "addmm", "bmm", "baddbmm"):
        a, b = (args[1], args[2]) if name.startswith(("add", "badd")) else (args[0], args[1])
        if getattr(a, "ndim", 0) >= 2 and getattr(b, "ndim", 0) >= 2 and 1 in (a.shape[-2], b.shape[-1]):
            return "mv"  # A x, or x^T B: a GEMV whatever aten calls it
    return name + (POINTWISE_MARK if torch.Tag.pointwise in getattr(func, "tags", ()) else "")
