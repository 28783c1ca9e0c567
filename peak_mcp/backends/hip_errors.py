"""hip-python's results, `(err, *values)` tuples, unwrapped: the values, or the error raised (a KernelFault where the
device context is lost). Shared by the HIP executor and the hipBLAS baseline."""

from __future__ import annotations

from typing import Any

from peak_mcp.backends.base import KernelFault

_STICKY = ("IllegalAddress", "LaunchFailure", "Assert", "LaunchTimeOut", "ECCNotCorrectable", "ContextIsDestroyed",
           "IllegalState", "HardwareException")


def check(result: Any) -> Any:
    """Unwrap a hip-python (err, *values) tuple, raising on error (a KernelFault when the context is lost)."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        name = getattr(err, "name", str(err))
        if any(code in name for code in _STICKY):
            raise KernelFault(f"the kernel faulted: {name}. The device context is lost; the worker restarts. Look "
                              "for out-of-bounds indexing (check the guards on every load and store against the size "
                              "arguments) or misaligned vector accesses.")
        raise RuntimeError(name)
    return values[0] if len(values) == 1 else (values or None)
