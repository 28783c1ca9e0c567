"""KernelBench problem files, translated into the declaration of docs/problems.md.

A KernelBench file is a Python module with module-level int sizes (`batch_size = 16; dim = 16384`), a
`class Model(torch.nn.Module)` built as `Model(*get_init_inputs())` and called as `model(*get_inputs())`.
`translate.declare_kernelbench(module, name)` turns an imported one into a `KernelBenchProblem`: the declaration
(pure data, the upper-case names of a problem file) plus the callables a problem file defines (`reference`, `generate`,
`torch_reference`). It runs where problem code may run: in the describe subprocess or a worker, never in the
server. It imports nothing the module did not: a module that uses torch brings torch; a torch-free module (numpy
arrays from `get_inputs`, a plain class `Model`) is translated the same way, without torch.

Hangs: importing the module, `get_inputs`, `Model(...)` and `forward` all run in the caller's process, with no
timer here. A file that hangs at import or while it is probed is stopped by the describe subprocess's timeout,
which reports it; nothing in this module guards against it.

The rules (tests/test_kernelbench.py checks each):

Size symbols. The candidates are the module's top-level `int` variables that `get_inputs` reads (directly or through
the module's own functions). `get_inputs` runs in probe rounds with them patched to small distinct values (five
rounds of primes, mixed so that no variable passes for another plus a constant, which trace each dimension to one
variable; then eight of consecutive integers, which pin down floor divisions), and each tensor dimension is
explained by the simplest expression that matches every round: a constant, a variable `S`, `a * S + b`, `(a * S + b)
// k`, a product of variables times a constant, or a sum of two variables plus a constant. The variables that
explain some dimension are the size symbols; the other ints (a reduction axis, `out_features`, a kernel size) stay
at their module values and are listed as `constants`. A candidate whose probe values make `get_inputs` fail is left
at its value too. A dimension no rule explains (`dim * dim`, `2 ** n`) is refused, naming the input, the axis and
the values seen. Symbols are the variable names upper-cased (`batch_size` -> `BATCH_SIZE`); `symbols` maps them
back; SCALARS lists them in the module's order.

Model probing. The model is built and run in the same rounds over the size symbols (other ints at their values).
Where the smallest values fail, larger pools are tried (primes from 17, multiples of 8, multiples of 32); each
symbol that then fails alone at a small prime gets a constraint (`S >= n`, the least n found by bisection; or
`S % 8 == 0`, GroupNorm's channels), kept where the module's own value meets it.

Inputs. The tensors of `get_inputs` in order, named after `forward`'s parameters (`x`, `A`, `B`; `x0, x1, ...`
for `*args`). An integer or bool tensor keeps its own storage type (kernelbench/exact.py): an integer's range is
read from the torch.randint call that drew it, fitted to the sizes (targets < num_classes); its outputs likewise,
compared exactly. `generate` draws each floating one like
`get_inputs` did, judged from the probe values: standard normal (randn), uniform in (0, 1) (rand), half-normal
(randn().abs()), or a constant c scaled by uniform [0.5, 1.5); never all zeros. A non-tensor item of `get_inputs`
that is the same in every round becomes a fixed argument (outside the ABI, in `fixed_arguments`); an int that
changes with the sizes is passed as the value of its fitted expression; any other is refused.

Parameters. A `torch.nn.Module`'s parameters (nn.Linear, nn.Conv2d, a norm's weight) become inputs after the
tensors of `get_inputs`, in `named_parameters()` order, named by their path with dots as underscores (`fc_weight`);
`reference` and `torch_reference` pass them through `torch.func.functional_call`. Their shapes are fitted like the
others. `generate` draws a parameter initialized to a constant c (a norm's 1 or 0) uniform in c +- 0.5, any other of
two or more dimensions uniform in +-1/sqrt(fan_in) (PyTorch's init of Linear and Conv), a vector uniform in
[-0.5, 0.5). Floating-point buffers are allowed where they do not change the output (BatchNorm's running statistics
in training mode, the module default, as KernelBench runs it); a buffer that does is refused by name.

Outputs. `forward` returns a tensor (output `out`) or a tuple or list of tensors (`out0`, `out1`, ...), fitted like
the inputs (a 0-d result, a loss, has shape `()`). Refused: an integer or boolean output (argmax), a non-tensor in
the result, a forward whose result changes between two calls on the same inputs (dropout in training mode).

Work. FLOPS comes from torch's FlopCounterMode (matrix products, convolutions and attention; elementwise work is
not counted) over the probe rounds, fitted as `c * S1 * S2 ...` (at most four symbols) or as `c * (the elements of
an output) * S ...` (a convolution); 0, with a note, where nothing is counted or neither fits. BYTES is left to the
default (every input read once, every output written once). NAIVE is empty: a KernelBench file has no kernel.

References. `reference(*inputs, **sizes)` takes float64 numpy arrays in INPUTS order and the sizes by symbol, builds
the model at those sizes (module variables patched while it runs, restored after; four models cached), converts it
to float64 and runs forward on copies of the inputs on `reference_device` (by default cuda where torch sees one when
it runs, else cpu); it returns float64 numpy arrays, one per output (a tuple for several).
`torch_reference(*tensors, **sizes)` runs the same model at the tensors' dtype and device (the yardstick; it does
not copy the inputs). Before returning, `declare_kernelbench` checks the reference on generated inputs at a probe
size: finite, and of the declared output shapes.

The package: rules.py (limits, the error), tracing.py (what the module reads), fitting.py (sizes as expressions),
probing.py (the probe rounds), wrapper.py (the model as `reference`), translate.py (the entry point).
"""
