"""KernelBench files translated into declarations (peak_mcp/problems/kernelbench/).

The probing, the fitting and every refusal that needs no torch run on torch-free stand-ins (numpy arrays from
get_inputs, a plain class Model), so they are checked where torch is not installed; the real KernelBench files in
tests/data/kernelbench/ need torch and skip without it."""

from __future__ import annotations

import importlib.util
import itertools
import textwrap
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from peak_mcp.api.responses import whole_answer
from peak_mcp.core.errors import InvalidInput
from peak_mcp.problems.kernelbench.fitting import Expr, fit_dimension, latin_rounds, probe_rounds
from peak_mcp.problems.kernelbench.fitting import evaluate_expression as _evaluate
from peak_mcp.problems.kernelbench.rules import KernelBenchError
from peak_mcp.problems.kernelbench.translate import declare_kernelbench, kernelbench_name, looks_like_kernelbench
from peak_mcp.problems.registry import describe_in_subprocess
from tests.conftest import has_device

DATA = Path(__file__).parent / "data" / "kernelbench"


def load(stem: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"kernelbench_test_{stem}", DATA / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def from_source(source: str, name: str = "kb_inline") -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(textwrap.dedent(source), f"<{name}>", "exec"), module.__dict__)
    return module


def shape(exprs: tuple[str, ...], sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(_evaluate(e, sizes) for e in exprs)


def generated(problem: Any, sizes: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [problem.generate(n, shape(s, sizes), rng) for n, s in problem.declaration["INPUTS"].items()]


# --- fitting, torch-free ----------------------------------------------------------------------------------------


ROUNDS = probe_rounds(["a", "b", "c"])


@pytest.mark.parametrize(("expected", "text"), [
    (Expr("const", const=7), "7"),
    (Expr("affine", ("b",)), "b"),
    (Expr("affine", ("a",), 2), "2 * a"),
    (Expr("affine", ("c",), 1, 1), "c + 1"),
    (Expr("affine", ("a",), 1, -2), "a - 2"),
    (Expr("affine", ("b",), 3, 4), "3 * b + 4"),
    (Expr("affine", ("a",), 1, -1, 2), "(a - 1) // 2"),
    (Expr("affine", ("c",), 1, 0, 3), "c // 3"),
    (Expr("product", ("a", "c"), 1), "a * c"),
    (Expr("product", ("a", "b", "c"), 4), "4 * a * b * c"),
    (Expr("sum", ("a", "b"), const=-1), "a + b - 1"),
])
def test_fit_dimension_finds_the_expression(expected: Expr, text: str) -> None:
    seen = [expected(r) for r in ROUNDS]
    fitted = fit_dimension(seen, ROUNDS)
    assert fitted is not None and fitted.text() == text
    # The fitted expression agrees with the true one everywhere, not only at the probes.
    for values in itertools.product(range(1, 40, 3), repeat=3):
        env = dict(zip("abc", values, strict=True))
        assert fitted(env) == expected(env) == _evaluate(text, env)


@pytest.mark.parametrize("dim", [lambda r: r["a"] ** 2, lambda r: 2 ** r["b"] % 1000003, lambda r: r["a"] * r["a"] + 1])
def test_fit_dimension_refuses_non_linear(dim: Any) -> None:
    assert fit_dimension([dim(r) for r in ROUNDS], ROUNDS) is None


def test_probe_rounds_keep_variables_apart() -> None:
    names = ["v0", "v1", "v2", "v3", "v4"]
    rounds = probe_rounds(names)
    for r in rounds:
        assert len(set(r.values())) == len(names)  # distinct within a round: each dim traces to one variable
    for v in names:
        assert len({r[v] for r in rounds[:5]}) == 5  # every variable moves
        consecutive = sorted(r[v] for r in rounds[5:])
        assert consecutive == list(range(consecutive[0], consecutive[0] + 8))  # every residue mod k <= 8
    assert max(np.prod(list(r.values())) for r in rounds) < 1 << 22  # probes stay small
    with pytest.raises(KernelBenchError, match="at most"):
        latin_rounds([f"v{i}" for i in range(20)], range(5, 20))


def test_names() -> None:
    assert kernelbench_name("19_ReLU") == "kb_19_relu"
    assert kernelbench_name("Matmul-with Transposed-B") == "matmul_with_transposed_b"
    assert kernelbench_name("x" * 80) == "x" * 80  # whole: an agent passes the name back to start_session
    with pytest.raises(KernelBenchError, match="101 characters: over 100"):
        kernelbench_name("x" * 101)
    assert looks_like_kernelbench(load("np_matmul").__dict__)
    assert not looks_like_kernelbench({"NAME": "x", "Model": type("Model", (), {}), "get_inputs": list})
    with pytest.raises(KernelBenchError, match="does not match"):
        declare_kernelbench(load("np_matmul"), "19_ReLU")


# --- torch-free stand-ins: the whole translation ----------------------------------------------------------------


def test_numpy_matmul() -> None:
    p = declare_kernelbench(load("np_matmul"), "np_matmul")
    d = p.declaration
    assert d["NAME"] == "np_matmul" and d["DTYPES"] == ("f32", "f16", "bf16")
    assert d["SIZES"] == {"M": 256, "N": 128, "K": 512}
    assert list(d["INPUTS"].items()) == [("A", ("M", "K")), ("B", ("K", "N"))]  # get_inputs order
    assert d["OUTPUTS"] == {"out": ("M", "N")}
    assert d["SCALARS"] == ("M", "N", "K")  # module order
    assert d["FLOPS"] == 0 and d["NAIVE"] == {}
    assert p.torch_reference is None and p.parameters == {}
    sizes = {"M": 9, "N": 4, "K": 6}
    a, b = generated(p, sizes)
    np.testing.assert_array_equal(p.reference(a, b, **sizes), a @ b)


def test_numpy_rows_fits_affine_and_floor_and_several_outputs() -> None:
    module = load("np_rows")
    p = declare_kernelbench(module, "np_rows")
    d = p.declaration
    assert p.symbols == {"ROWS": "rows", "COLS": "cols"}
    assert p.constants == {"factor": 3}  # read by get_init_inputs only: held at its value
    assert list(d["INPUTS"]) == ["x", "w"]  # forward's parameter names
    assert d["INPUTS"]["w"] == ("ROWS", "COLS + 1")
    assert d["OUTPUTS"] == {"out0": ("ROWS", "2 * COLS"), "out1": ("ROWS", "1"), "out2": ("ROWS", "(COLS - 1) // 2")}
    assert p.distributions == {"x": "normal", "w": "uniform01"}
    assert d["TITLE"] == "Scaled rows, row sums and strided halves."
    assert module.rows == 64 and module.cols == 100  # probing restored the module
    for sizes in ({"ROWS": 3, "COLS": 10}, {"ROWS": 1, "COLS": 3}, {"ROWS": 5, "COLS": 101}):  # even, tiny, big
        x, w = generated(p, sizes, seed=3)
        outs = p.reference(x, w, **sizes)
        assert isinstance(outs, tuple) and len(outs) == 3
        for out, exprs in zip(outs, d["OUTPUTS"].values(), strict=True):
            assert out.shape == shape(exprs, sizes) and out.dtype == np.float64
        np.testing.assert_allclose(outs[0], np.concatenate([x, x], axis=1) * 3)
        np.testing.assert_allclose(outs[1], x.sum(axis=1, keepdims=True) + w[:, :1])
    with pytest.raises(KernelBenchError, match="exactly"):
        p.reference(x, w, ROWS=3)


def test_generate_is_seeded_and_never_zero() -> None:
    p = declare_kernelbench(load("np_rows"), "np_rows")
    sizes = {"ROWS": 16, "COLS": 33}
    first, again, other = generated(p, sizes, 5), generated(p, sizes, 5), generated(p, sizes, 6)
    for a, b, c in zip(first, again, other, strict=True):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)
        assert np.count_nonzero(a) == a.size
    x, w = first
    assert x.min() < -1 and x.max() > 1  # randn-like
    assert w.min() > 0 and w.max() < 1  # rand-like


NUMPY_HEAD = """
import numpy as np

rows = 8
cols = 16
"""
NUMPY_MODEL = """
class Model:
    def forward(self, x):
        return x * 2
"""
NUMPY_INPUTS = """
def get_inputs():
    return [np.random.randn(rows, cols)]
"""


@pytest.mark.parametrize(("source", "message"), [
    (NUMPY_HEAD + NUMPY_INPUTS, "no class Model"),
    (NUMPY_HEAD + NUMPY_MODEL, "no function get_inputs"),
    (NUMPY_HEAD + NUMPY_MODEL + "def get_inputs():\n    raise RuntimeError(f'no data here for {rows}')\n",
     r"get_inputs\(\) raised RuntimeError: no data here for \d+ \(with rows=\d+\)"),
    (NUMPY_HEAD + NUMPY_MODEL + "def get_inputs():\n    return [np.random.randn(rows, cols * cols)]\n",
     r"input x: dimension 1 is not a constant or a simple expression .*cols=\d+ -> \d+"),
    (NUMPY_HEAD + NUMPY_MODEL + "def get_inputs():\n    return [np.random.randn(rows, 2 ** cols)]\n",
     "dimension 1 is not a constant or a simple expression"),
    (NUMPY_HEAD + NUMPY_MODEL + "def get_inputs():\n    return np.random.randn(rows, cols)\n",
     "returned a tensor; it must return a list"),
    (NUMPY_HEAD + NUMPY_MODEL + "def get_inputs():\n    return [np.ones((rows, cols), dtype=np.int16)]\n",
     "input 0 \\(x\\) of get_inputs holds int16 elements"),
    (NUMPY_HEAD + NUMPY_MODEL + "def get_inputs():\n    return [1.5]\n", "returns no tensor"),
    (NUMPY_HEAD + "class Model:\n    def forward(self, x, n):\n        return x\n"
     "def get_inputs():\n    return [np.random.randn(rows, cols), float(rows) / 3]\n",
     r"argument 1 \(n\) of get_inputs is a float that changes with the sizes"),
    (NUMPY_HEAD + "class Model:\n    def forward(self, x):\n        return x, 'done'\n" + NUMPY_INPUTS,
     "forward returned str as item 1 of its result"),
    (NUMPY_HEAD + "class Model:\n    def forward(self, x):\n        return x + 1j\n" + NUMPY_INPUTS,
     "forward returns a complex tensor"),
    # numpy's and torch's generators are seeded per call; Python's `random` is not
    (NUMPY_HEAD + "class Model:\n    def forward(self, x):\n        return x + __import__('random').random()\n"
     + NUMPY_INPUTS, "different results on the same inputs"),
    (NUMPY_HEAD + "class Model:\n    def forward(self, x):\n        assert x.shape[1] == 99\n        return x\n"
     + NUMPY_INPUTS, "at the file's own sizes too: forward raised AssertionError"),
    (NUMPY_HEAD + "class Model:\n    def forward(self, x):\n        return np.log(x)\n" + NUMPY_INPUTS,
     "NaN or Inf in output out"),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # np.log of negatives, on purpose
def test_refusals_name_the_problem(source: str, message: str) -> None:
    with pytest.raises(KernelBenchError, match=message) as info:
        declare_kernelbench(from_source(source), "bad")
    assert isinstance(info.value, InvalidInput)  # reported like every invalid request, with a hint where one helps


def test_constant_scalar_argument_and_size_argument() -> None:
    source = NUMPY_HEAD + """
class Model:
    def forward(self, x, scale, n):
        return x[:, :n] * scale

def get_inputs():
    return [np.random.randn(rows, cols), 0.25, cols - 1]
"""
    p = declare_kernelbench(from_source(source), "scaled")
    assert p.fixed_arguments == {1: 0.25}
    assert p.declaration["OUTPUTS"] == {"out": ("ROWS", "COLS - 1")}
    (x,) = generated(p, {"ROWS": 2, "COLS": 7})
    np.testing.assert_allclose(p.reference(x, ROWS=2, COLS=7), x[:, :6] * 0.25)


def test_get_inputs_reads_ints_that_are_not_sizes() -> None:
    # `axis` is read by get_inputs but probing it to a prime breaks it: it stays a constant, not a symbol.
    source = NUMPY_HEAD + "axis = 1\n" + NUMPY_MODEL + """
def get_inputs():
    x = np.random.randn(rows, cols)
    return [x / np.abs(x).max(axis=(0, 1)[axis], keepdims=True)]
"""
    p = declare_kernelbench(from_source(source), "scaled")
    assert p.declaration["SCALARS"] == ("ROWS", "COLS") and p.constants == {"axis": 1}


def test_sizes_the_model_needs_become_constraints() -> None:
    # Fails below 12 columns: probed again at primes from 17; COLS alone at 7 fails, bisection finds 12.
    large = NUMPY_HEAD + """
class Model:
    def forward(self, x):
        assert x.shape[1] >= 12, "too narrow"
        return x[:, 2:]
""" + NUMPY_INPUTS
    p = declare_kernelbench(from_source(large), "wide")
    assert p.declaration["CONSTRAINTS"] == ("COLS >= 12",)
    assert p.declaration["OUTPUTS"] == {"out": ("ROWS", "COLS - 2")}
    assert any("too narrow" in n for n in p.notes)
    # Needs an even number of columns: probed at multiples of 8.
    even = NUMPY_HEAD + """
class Model:
    def forward(self, x):
        return x.reshape(x.shape[0], -1, 2).sum(axis=2)
""" + NUMPY_INPUTS
    p = declare_kernelbench(from_source(even), "pairs")
    assert p.declaration["CONSTRAINTS"] == ("COLS % 8 == 0",)
    assert p.declaration["OUTPUTS"] == {"out": ("ROWS", "COLS // 2")}
    (x,) = generated(p, {"ROWS": 3, "COLS": 16})
    np.testing.assert_allclose(p.reference(x, ROWS=3, COLS=16), x[:, ::2] + x[:, 1::2])


def test_no_size_symbols() -> None:
    source = "import numpy as np\n" + NUMPY_MODEL + "def get_inputs():\n    return [np.random.randn(4, 6)]\n"
    p = declare_kernelbench(from_source(source), "fixed")
    assert p.declaration["SIZES"] == {} and p.declaration["INPUTS"] == {"x": ("4", "6")}
    assert any("no size symbols" in n for n in p.notes)


# --- real KernelBench files (torch) ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch() -> Any:
    return pytest.importorskip("torch")


def test_relu(torch: Any) -> None:
    p = declare_kernelbench(load("relu"), "relu")
    d = p.declaration
    assert d["SIZES"] == {"BATCH_SIZE": 16, "DIM": 16384} and d["SCALARS"] == ("BATCH_SIZE", "DIM")
    assert d["INPUTS"] == {"x": ("BATCH_SIZE", "DIM")} and d["OUTPUTS"] == {"out": ("BATCH_SIZE", "DIM")}
    assert d["FLOPS"] == 0 and d["TITLE"] == "Simple model that performs a ReLU activation."
    assert p.symbols == {"BATCH_SIZE": "batch_size", "DIM": "dim"} and p.distributions == {"x": "normal"}
    (x,) = generated(p, {"BATCH_SIZE": 3, "DIM": 50})
    np.testing.assert_array_equal(p.reference(x, BATCH_SIZE=3, DIM=50), np.maximum(x, 0))


def test_softmax(torch: Any) -> None:
    p = declare_kernelbench(load("softmax"), "softmax")
    sizes = {"BATCH_SIZE": 4, "DIM": 333}
    (x,) = generated(p, sizes)
    expected = torch.softmax(torch.from_numpy(x), dim=1).numpy()
    np.testing.assert_allclose(p.reference(x, **sizes), expected, rtol=1e-15)
    y = p.torch_reference(torch.from_numpy(x).float(), **sizes)
    assert y.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-7)


def test_matmul(torch: Any) -> None:
    p = declare_kernelbench(load("matmul"), "matmul")
    d = p.declaration
    assert list(d["INPUTS"].items()) == [("A", ("M", "K")), ("B", ("K", "N"))]
    assert d["OUTPUTS"] == {"out": ("M", "N")} and d["SCALARS"] == ("M", "K", "N")
    assert d["FLOPS"] == "2 * M * K * N"
    sizes = {"M": 17, "K": 9, "N": 30}
    a, b = generated(p, sizes)
    out = p.reference(a, b, **sizes)
    assert out.dtype == np.float64 and out.shape == (17, 30)
    np.testing.assert_allclose(out, torch.matmul(torch.from_numpy(a), torch.from_numpy(b)).numpy(), rtol=1e-14)


def test_sum_keepdim(torch: Any) -> None:
    p = declare_kernelbench(load("sum_keepdim"), "sum_keepdim")
    d = p.declaration
    assert d["OUTPUTS"] == {"out": ("BATCH_SIZE", "1", "DIM2")}
    assert p.constants == {"reduce_dim": 1}
    sizes = {"BATCH_SIZE": 2, "DIM1": 5, "DIM2": 3}
    (x,) = generated(p, sizes)
    np.testing.assert_allclose(p.reference(x, **sizes), x.sum(axis=1, keepdims=True), rtol=1e-14)


def test_linear_parameters_become_inputs(torch: Any) -> None:
    p = declare_kernelbench(load("linear"), "linear")
    d = p.declaration
    assert list(d["INPUTS"].items()) == [("x", ("BATCH_SIZE", "IN_FEATURES")), ("fc_weight", ("512", "IN_FEATURES")),
                                         ("fc_bias", ("512",))]
    assert p.parameters == {"fc_weight": "fc.weight", "fc_bias": "fc.bias"}
    assert d["OUTPUTS"] == {"out": ("BATCH_SIZE", "512")} and p.constants == {"out_features": 512}
    assert d["FLOPS"] == "1024 * BATCH_SIZE * IN_FEATURES"
    sizes = {"BATCH_SIZE": 3, "IN_FEATURES": 100}
    x, w, b = generated(p, sizes)
    assert np.abs(w).max() <= 0.1 and np.abs(w).max() > 0.05  # +-1/sqrt(fan_in), like nn.Linear's init
    np.testing.assert_allclose(p.reference(x, w, b, **sizes), x @ w.T + b, rtol=1e-12, atol=1e-14)
    y = p.torch_reference(*(torch.from_numpy(a).float() for a in (x, w, b)), **sizes)
    np.testing.assert_allclose(y.numpy(), x @ w.T + b, rtol=1e-4, atol=1e-5)


def test_conv2d_flops_and_shapes(torch: Any) -> None:
    p = declare_kernelbench(load("conv2d"), "conv2d")
    d = p.declaration
    assert d["INPUTS"]["conv2d_weight"] == ("8", "IN_CHANNELS", "3", "3")
    assert d["OUTPUTS"] == {"out": ("BATCH_SIZE", "8", "HEIGHT - 2", "WIDTH - 2")}
    assert d["FLOPS"] == "144 * BATCH_SIZE * (HEIGHT - 2) * (WIDTH - 2) * IN_CHANNELS"  # 2 * 8 * 3 * 3 per MAC
    sizes = {"BATCH_SIZE": 2, "IN_CHANNELS": 4, "HEIGHT": 9, "WIDTH": 6}
    x, w = generated(p, sizes)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w)).numpy()
    np.testing.assert_allclose(p.reference(x, w, **sizes), expected, rtol=1e-12)


def test_conv_pool_two_outputs_and_a_constant_argument(torch: Any) -> None:
    p = declare_kernelbench(load("conv_pool"), "conv_pool")
    d = p.declaration
    assert d["OUTPUTS"] == {"out0": ("BATCH_SIZE", "16", "(HEIGHT - 2) // 2", "(WIDTH - 2) // 2"), "out1": ()}
    assert p.fixed_arguments == {1: 0.5} and d["FLOPS"] == 0
    sizes = {"BATCH_SIZE": 1, "IN_CHANNELS": 2, "HEIGHT": 8, "WIDTH": 7}
    x, w = generated(p, sizes)
    y = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w))
    pooled, mean = p.reference(x, w, **sizes)
    np.testing.assert_allclose(pooled, (torch.nn.functional.max_pool2d(y, 2) * 0.5).numpy(), rtol=1e-14)
    assert mean.shape == () and np.isclose(mean, y.mean().item(), rtol=1e-12)


TORCH_HEAD = """
import torch
import torch.nn as nn

batch_size = 8
dim = 32

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
"""


@pytest.mark.parametrize(("model", "message"), [
    ("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.calls = 0\n"
     "    def forward(self, x):\n        self.calls += 1\n        return x * self.calls\n",
     "different results on the same inputs"),
    ("class Model(nn.Module):\n    def forward(self, x):\n        return torch.fft.fft(x)\n",
     "forward returns a complex tensor"),
    ("class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
     "def get_inputs():\n    return [torch.randint(0, 10, (batch_size, dim), dtype=torch.int16)]\n",
     "holds int16 elements"),
    ("class Model(nn.Module):\n    def forward(self, x):\n        return x.reshape(-1)[: dim * dim]\n"
     "def get_inputs():\n    return [torch.randn(batch_size, dim * dim)]\n",
     "input x: dimension 1 is not a constant or a simple expression"),
])
def test_torch_refusals(torch: Any, model: str, message: str) -> None:
    with pytest.raises(KernelBenchError, match=message):
        declare_kernelbench(from_source(TORCH_HEAD + model), "bad")


def test_batchnorm_running_stats_are_left_out(torch: Any) -> None:
    source = TORCH_HEAD + """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(dim)
    def forward(self, x):
        return self.bn(x)
"""
    p = declare_kernelbench(from_source(source), "bn")
    assert list(p.declaration["INPUTS"]) == ["x", "bn_weight", "bn_bias"]
    assert p.distributions["bn_weight"] == "vector" and any("running_mean" in n for n in p.notes)
    sizes = {"BATCH_SIZE": 5, "DIM": 3}
    x, g, b = generated(p, sizes)
    assert g.min() >= 0.5 and g.max() <= 1.5  # around nn.BatchNorm1d's initial weight 1
    expected = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5) * g + b
    np.testing.assert_allclose(p.reference(x, g, b, **sizes), expected, rtol=1e-10, atol=1e-12)


def test_a_plain_class_on_torch_tensors(torch: Any) -> None:
    source = TORCH_HEAD + """
class Model:
    def __init__(self):
        self.scale = 3.0
    def forward(self, x):
        return torch.tanh(x) * self.scale
"""
    p = declare_kernelbench(from_source(source), "tanh")
    assert p.parameters == {} and p.torch_reference is not None
    (x,) = generated(p, {"BATCH_SIZE": 2, "DIM": 5})
    np.testing.assert_allclose(p.reference(x, BATCH_SIZE=2, DIM=5), np.tanh(x) * 3, rtol=1e-14)
    y = p.torch_reference(torch.from_numpy(x).half(), BATCH_SIZE=2, DIM=5)
    assert y.dtype == torch.float16


def test_group_norm_gets_a_divisibility_constraint(torch: Any) -> None:
    source = TORCH_HEAD.replace("return [torch.randn(batch_size, dim)]",
                                "return [torch.randn(batch_size, dim, 6)]") + """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(8, dim)
    def forward(self, x):
        return self.gn(x)
"""
    p = declare_kernelbench(from_source(source), "gn")
    assert p.declaration["CONSTRAINTS"] == ("DIM % 8 == 0",)
    assert p.distributions == {"x": "normal", "gn_weight": "vector", "gn_bias": "vector"}
    sizes = {"BATCH_SIZE": 3, "DIM": 16}
    x, g, b = generated(p, sizes)
    expected = torch.nn.functional.group_norm(*(torch.from_numpy(a) for a in (x,)), 8, torch.from_numpy(g),
                                              torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(p.reference(x, g, b, **sizes), expected, rtol=1e-12, atol=1e-13)


def test_distributions_follow_get_inputs(torch: Any) -> None:
    source = TORCH_HEAD.replace("return [torch.randn(batch_size, dim)]",
                                "return [torch.rand(batch_size, dim), torch.randn(batch_size, dim).abs()]") + """
class Model(nn.Module):
    def forward(self, p, q):
        return torch.log(p) + torch.sqrt(q)
"""
    p = declare_kernelbench(from_source(source), "logs")
    assert p.distributions == {"p": "uniform01", "q": "halfnormal"}


def test_independent_rows_are_probed_into_batch() -> None:
    """BATCH (the host check then recomputes only the rows it checks) where changing one row of the inputs changes
    only that row of every output; none where rows mix (a normalization across the batch) or a weight shares the
    axis."""
    assert declare_kernelbench(load("np_relu"), "np_relu").declaration["BATCH"] == "BATCH_SIZE"
    assert declare_kernelbench(load("np_rows"), "np_rows").declaration["BATCH"] == "ROWS"
    assert declare_kernelbench(load("np_matmul"), "np_matmul").declaration["BATCH"] == "M"  # B is used whole
    across = from_source("""
        import numpy as np
        class Model:
            def forward(self, x):
                return x - x.mean(axis=0, keepdims=True)
        rows = 32
        cols = 8
        def get_inputs():
            return [np.random.randn(rows, cols)]
        def get_init_inputs():
            return []
    """, "kb_across")
    assert declare_kernelbench(across, "kb_across").declaration["BATCH"] is None
    square = from_source("""
        import numpy as np
        class Model:
            def forward(self, x, w):
                return w @ x
        n = 16
        def get_inputs():
            return [np.random.randn(n, n), np.random.randn(n, n)]
        def get_init_inputs():
            return []
    """, "kb_square")
    assert declare_kernelbench(square, "kb_square").declaration["BATCH"] is None  # w @ x mixes x's rows


def test_the_definition_says_what_forward_computes(torch: Any) -> None:
    """An agent over MCP alone must learn what to compute: the model as built (init arguments by name), its
    submodules with their arguments evaluated, forward's own source, which module variable each size symbol is and
    the ints that stay fixed (a cumsum's title names no dimension; the ABI had nothing else)."""
    text = declare_kernelbench(load("sum_keepdim"), "sum_keepdim").declaration["DEFINITION"]
    assert "Built as Model(dim=1)" in text and "return torch.sum(x, dim=self.dim, keepdim=True)" in text
    assert "DIM1 = the module's dim1" in text and "fixed: reduce_dim=1" in text
    conv = declare_kernelbench(load("conv2d"), "conv2d").declaration["DEFINITION"]
    assert "Built as Model(in_channels=3, out_channels=8, kernel_size=3)" in conv
    # built at the probe's sizes: each probe value that stands for one symbol is written as that symbol
    assert "Conv2d(IN_CHANNELS, 8, kernel_size=(3, 3), stride=(1, 1), bias=False)" in conv
    assert "size symbols where the probe's values stood BATCH_SIZE=5, IN_CHANNELS=7" in conv


def test_the_definition_writes_probe_values_as_symbols_and_names_float_constants() -> None:
    from peak_mcp.problems.kernelbench.definition import symbolic

    shown = "LayerNorm((7, 11, 13), eps=1e-05, elementwise_affine=True)\nLinear(in_features=7, out_features=5)"
    text, replaced = symbolic(shown, {"features": 7, "dim1": 11, "dim2": 13, "batch": 5}, {"out_features": 5},
                              {"features": "FEATURES", "dim1": "DIM1", "dim2": "DIM2", "batch": "BATCH"})
    assert replaced and "LayerNorm((FEATURES, DIM1, DIM2), eps=1e-05" in text
    assert "out_features=5" in text  # 5 is also a fixed int: ambiguous, left as the value
    leaky = from_source("""
        import numpy as np
        class Model:
            def __init__(self, multiplier, negative_slope):
                self.m, self.s = multiplier, negative_slope
            def forward(self, x):
                y = x * self.m
                return np.where(y > 0, y, y * self.s)
        batch_size = 16
        dim = 64
        multiplier = 2.0
        negative_slope = 0.1
        def get_inputs():
            return [np.random.randn(batch_size, dim)]
        def get_init_inputs():
            return [multiplier, negative_slope]
    """, "leaky")
    text = declare_kernelbench(leaky, "leaky").declaration["DEFINITION"]
    assert "The module's floats, fixed: multiplier=2.0, negative_slope=0.1" in text


# --- fixed sizes, many parameters, buffers, dropout (issue 33) ----------------------------------------------------


def test_a_model_tied_to_its_sizes_keeps_them_and_says_so(tmp_path: Path) -> None:
    """A forward that only runs at the file's own sizes is probed there, as KernelBench runs it: no size symbols
    (SIZES {} holds through describe), every shape a number, and the definition says why."""
    source = NUMPY_HEAD + "class Model:\n    def forward(self, x):\n        assert x.shape == (8, 16), 'fixed'\n" \
        "        return x[:, :4] * 2\n" + NUMPY_INPUTS
    p = declare_kernelbench(from_source(source), "tied")
    assert p.declaration["SIZES"] == {} and p.declaration["OUTPUTS"] == {"out": ("8", "4")}
    assert "Fixed sizes: at other values of rows, cols" in p.declaration["DEFINITION"]
    assert "no size symbols" in p.declaration["DEFINITION"]
    (tmp_path / "tied.py").write_text(textwrap.dedent(source))
    declared = describe_in_subprocess(tmp_path / "tied.py", timeout_s=60)
    assert declared.sizes == {} and [b.shape for b in declared.outputs] == [("8", "4")]
    assert "Fixed sizes" in declared.definition


def test_a_depthwise_convolution_keeps_its_channels_fixed(torch: Any) -> None:
    """KernelBench level 1, 84 (unedited): groups=in_channels with out_channels fixed at 128, so in_channels cannot
    vary; the batch and the image still do, as size symbols."""
    p = declare_kernelbench(load("kb_84_conv_depthwise_2d_asymmetric_input_square_kernel"), "kb_84")
    d = p.declaration
    assert d["SIZES"] == {"BATCH_SIZE": 64, "WIDTH_IN": 512, "HEIGHT_IN": 256}
    assert d["INPUTS"]["x"] == ("BATCH_SIZE", "128", "HEIGHT_IN", "WIDTH_IN")
    assert d["OUTPUTS"]["out"] == ("BATCH_SIZE", "128", "HEIGHT_IN - 2", "WIDTH_IN - 2")
    assert "Fixed sizes: at other values of in_channels" in d["DEFINITION"]
    assert "only batch_size, width_in, height_in vary" in d["DEFINITION"]
    assert "WIDTH_IN >= 3" in d["CONSTRAINTS"]  # the least size the 3x3 filter runs at
    sizes = {"BATCH_SIZE": 2, "WIDTH_IN": 6, "HEIGHT_IN": 5}
    x, w = generated(p, sizes)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), groups=128).numpy()
    np.testing.assert_allclose(p.reference(x, w, **sizes), expected, rtol=1e-12, atol=1e-12)


def test_a_deep_network_passes_every_parameter(torch: Any) -> None:
    """KernelBench level 3, 3 (unedited): 17 linear layers, 34 parameters, each an input named by its path."""
    from peak_mcp.problems.declaration import MAX_BUFFERS

    p = declare_kernelbench(load("kb_3_deepnarrowmlp"), "kb_3")
    inputs = p.declaration["INPUTS"]
    assert len(inputs) == 35 and list(inputs)[:3] == ["x", "network_0_weight", "network_0_bias"]
    assert inputs["network_0_weight"] == ("1024", "INPUT_SIZE") and len(inputs) + 1 <= MAX_BUFFERS
    assert p.parameters["network_32_bias"] == "network.32.bias"


def test_a_causal_mask_buffer_is_an_input(torch: Any) -> None:
    """KernelBench level 3, 43 (unedited): the registered causal mask `bias` changes the output, so it is passed to
    the kernel (named in the ABI and the definition) holding the model's own values, not random ones."""
    p = declare_kernelbench(load("kb_43_mingptcausalattention"), "kb_43")
    d = p.declaration
    assert list(d["INPUTS"])[-1] == "bias" and d["INPUTS"]["bias"] == ("1", "1", "1024", "1024")
    assert "registered buffers bias change the output" in d["DEFINITION"]
    assert "dropout is off (attn_dropout, resid_dropout)" in d["DEFINITION"]
    mask = p.generate("bias", (1, 1, 1024, 1024), np.random.default_rng(1))
    np.testing.assert_array_equal(mask[0, 0], np.tril(np.ones((1024, 1024))))
    sizes = {"BATCH_SIZE": 2, "SEQ_LEN": 3, "N_EMBD": 16}
    arrays = generated(p, sizes)
    out = p.reference(*arrays, **sizes)
    # causal: the first position's output does not move when a later one's input does
    later = [a.copy() for a in arrays]
    later[0][:, 2] += 1.0
    moved = p.reference(*later, **sizes)
    np.testing.assert_allclose(moved[:, 0], out[:, 0], rtol=1e-13)
    assert not np.allclose(moved[:, 2], out[:, 2])


def test_dropout_in_forward_is_off(torch: Any) -> None:
    """KernelBench level 2, 66 (unedited): Dropout(0.2) between a linear layer and a softmax. The model runs in eval
    mode (KernelBench's own runs are random there), so the reference is deterministic: the softmax of the product."""
    p = declare_kernelbench(load("kb_66_matmul_dropout_softmax"), "kb_66")
    assert "dropout is off (dropout)" in p.declaration["DEFINITION"]
    sizes = {"BATCH_SIZE": 3, "IN_FEATURES": 5}
    x, w, b = generated(p, sizes)
    first = p.reference(x, w, b, **sizes)
    np.testing.assert_array_equal(first, p.reference(x, w, b, **sizes))
    expected = torch.softmax(torch.from_numpy(x @ w.T + b), dim=1).numpy()
    np.testing.assert_allclose(first, expected, rtol=1e-12, atol=1e-15)


def test_a_buffer_that_follows_a_size_fixes_that_size(torch: Any) -> None:
    """A buffer input holds the model's own values, which must not depend on the sizes: a mask of `dim` values
    fixes DIM at the file's value; the batch still varies."""
    source = TORCH_HEAD + """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer('mask', torch.arange(dim, dtype=torch.float32) % 2)
    def forward(self, x):
        return x * self.mask
"""
    p = declare_kernelbench(from_source(source), "masked")
    d = p.declaration
    assert d["SIZES"] == {"BATCH_SIZE": 8} and d["INPUTS"] == {"x": ("BATCH_SIZE", "32"), "mask": ("32",)}
    assert "Fixed sizes: at other values of dim" in d["DEFINITION"]
    (x, mask) = generated(p, {"BATCH_SIZE": 3})
    np.testing.assert_array_equal(mask, np.arange(32) % 2)
    np.testing.assert_array_equal(p.reference(x, mask, BATCH_SIZE=3), x * mask)


TIED = NUMPY_HEAD + '''
class Model:
    def forward(self, x):
        assert x.shape == (8, 16), "fixed"
        return x[:, :4] * 2
''' + NUMPY_INPUTS
TIED_KERNEL = """// peak: entry=main groups=(1, 1, 1)
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;  // `out` is an HLSL keyword: bindings go by index
[numthreads(32, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    uint r = id.x / 4, c = id.x % 4;
    y[id.x] = (id.x == WRONG ? 0.0 : 2.0 * x[r * 16 + c]);
}
"""


@pytest.mark.anyio
@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
async def test_a_problem_of_fixed_shapes_runs_the_loop(make_client) -> None:
    """No size symbols: the ABI passes no sizes, a wrong element is caught at the session's (only) sizes, and
    generality says there are no other sizes instead of checking any."""
    async with make_client() as (client, _):
        result = await client.call_tool("define_problem", {"source": textwrap.dedent(TIED), "name": "tied"})
        assert not result.is_error, result.content[0].text
        info = whole_answer("define_problem", result)
        assert "No push constants" in info["abi"]["hlsl"] and "x: 8 x 16; out: 8 x 4" in info["abi"]["hlsl"]
        started = await client.call_tool("start_session", {"problem": info["name"], "backend": "hlsl"})
        assert not started.is_error, started.content[0].text
        sid = started.structured_content["session_id"]
        async def submit(wrong: str) -> dict[str, Any]:
            source = TIED_KERNEL.replace("WRONG", wrong)
            return (await client.call_tool("submit_kernel", {"session_id": sid, "source": source})).structured_content

        good = await submit("99")
        assert good["status"] == "benchmarked", good["message"]
        assert "no size symbols" in good["generality"]["note"]
        bad = await submit("5")
        assert bad["failure"] == "wrong_result", bad["message"]
