"""The translation's limits (probe rounds and value pools, the largest expressions fitted) and its error."""

from __future__ import annotations

from peak_mcp.core.errors import InvalidInput

PROBE_ROUNDS = 5  # rounds of spread values (distinct primes), which trace every dimension to its variable


CONSECUTIVE_ROUNDS = 8  # rounds of consecutive values, which pin down floor divisions (every residue mod k <= 8)


# Value pools for the probe rounds, tried in order: small values first (cheap), larger ones for models that need
# room (a kernel of 7, say), then multiples of 8 and of 32 for models that need divisibility (GroupNorm's groups; no
# consecutive rounds there, so a floor division fitted on them is less certain).
PROBE_POOLS: tuple[tuple[tuple[int, ...], int | None], ...] = (
    ((5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59), 8),
    ((17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73), 24),
    (tuple(range(8, 121, 8)), None),
    (tuple(range(32, 481, 32)), None),
    # last, small values: where every pool above makes an input past MAX_PROBE_ELEMENTS (a 5-D input that doubles
    # each extent, and six variables)
    ((3, 5, 2, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14), None),
)
DIVISIBLE_POOLS = (2, 3)  # the pools of multiples


MAX_CANDIDATES = 11  # int variables read by get_inputs that can be probed together


MAX_PROBE_ELEMENTS = 1 << 24  # all inputs of one model-probe round together


MAX_OFFSET = 64  # |b| in a * S + b


MAX_FACTOR = 64  # a in a * S + b


MAX_DIVISOR = 16  # k in (a * S + b) // k


MAX_FLOP_SYMBOLS = 4



DTYPES = ("f32", "f16", "bf16")


class KernelBenchError(InvalidInput):
    """A KernelBench file that cannot be translated; the message names what and where."""
