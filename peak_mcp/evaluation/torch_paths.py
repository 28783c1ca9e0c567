"""The paths torch chooses among for one call, each pinned, so that a torch yardstick is the fastest of them, named.

torch picks a backend per call: scaled_dot_product_attention among flash (FlashAttention-2), cuDNN's attention and
the memory-efficient kernel; a convolution among cuDNN's algorithms, by heuristic or (cudnn.benchmark) by timing
them all. On an H200 in bf16, SDPA pinned to flash ran at 340 TFLOP/s where its default choice (cuDNN) ran at 624: a
yardstick pinned to one path can flatter a kernel by almost 2x. So each problem's torch call is timed on every path
its traits say torch has, plus torch's own default, and the fastest is the yardstick.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

DEFAULT = "default"
# Path -> what it pins; the traits (peak_mcp/problems/traits.py) whose torch calls have those paths.
PATHS: dict[str, str] = {
    "sdpa flash": "scaled_dot_product_attention on FlashAttention-2 (f16, bf16)",
    "sdpa cudnn": "scaled_dot_product_attention on cuDNN's attention",
    "sdpa efficient": "scaled_dot_product_attention on the memory-efficient kernel",
    "cudnn benchmark": "convolutions on the algorithm cuDNN finds fastest by timing them (cudnn.benchmark)",
    "cudnn heuristic": "convolutions on the algorithm cuDNN's heuristics pick (torch's default)",
}
BY_TRAIT: dict[str, tuple[str, ...]] = {
    "attention": ("sdpa flash", "sdpa cudnn", "sdpa efficient"),
    "convolution": ("cudnn benchmark", "cudnn heuristic"),
}
MAX_PATHS = 1 + len(PATHS)


def paths_for(traits: Iterable[str]) -> tuple[str, ...]:
    """The pinned paths the traits call for (each once, in a fixed order), then torch's default. Pinned first:
    torch's cuDNN plan cache leaves the benchmark flag out of its key, so a heuristic plan cached by an earlier call
    would be reused by `cudnn benchmark`; timed first, the benchmark's plan is found, and the fastest is honest."""
    wanted = {path for trait in traits for path in BY_TRAIT.get(trait, ())}
    return (*(path for path in PATHS if path in wanted), DEFAULT)


def known(paths: Iterable[Any]) -> tuple[str, ...]:
    """The names in `paths` this module can pin (what a problem host accepts from its worker), in paths_for's
    order, the default last."""
    given = {p for p in paths if isinstance(p, str)}
    return (*(path for path in PATHS if path in given), DEFAULT)


def fastest(by_path: dict[str, float | str]) -> tuple[str, float] | None:
    """The path with the least median of those timed (a value that is a note says why a path did not run)."""
    ran = {path: ms for path, ms in by_path.items() if isinstance(ms, float)}
    return min(ran.items(), key=lambda item: item[1]) if ran else None


@contextlib.contextmanager
def _pinned(torch: Any, path: str) -> Iterator[None]:
    if path.startswith("sdpa "):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = {"sdpa flash": SDPBackend.FLASH_ATTENTION, "sdpa cudnn": SDPBackend.CUDNN_ATTENTION,
                   "sdpa efficient": SDPBackend.EFFICIENT_ATTENTION}[path]
        with sdpa_kernel([backend]):
            yield
        return
    if path.startswith("cudnn "):
        before = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = path == "cudnn benchmark"
        try:
            yield
        finally:
            torch.backends.cudnn.benchmark = before
        return
    yield


def pinned(call: Callable[..., Any], path: str) -> Callable[..., Any]:
    """`call` with torch held to `path` while it runs (unchanged for the default path)."""
    if path == DEFAULT:
        return call

    def on_path(*args: Any, **kwargs: Any) -> Any:
        import torch

        with _pinned(torch, path):
            return call(*args, **kwargs)

    return on_path
