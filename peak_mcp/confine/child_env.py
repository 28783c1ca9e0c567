"""The environment a child process gets: an allowlist, never the server's own.

The server's environment holds what its operator put there: the HTTP bearer token, cloud credentials, an SSH agent's
socket. Problem files, compilers and device workers run text the agents sent, so each child starts from the names a
GPU runtime, a compiler or a Vulkan loader reads (paths, locale, CUDA/HIP/Vulkan/Mesa variables, thread counts) and
nothing else. The server's own settings travel explicitly (worker options), never as `PEAK_MCP_*` variables. An
operator who needs one more variable in the children names it in `PEAK_MCP_CHILD_ENV` (comma-separated); a name
that looks like a secret is refused even then.

Only the standard library is imported here (the sandbox launcher imports this module).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "XDG_DATA_DIRS", "XDG_CONFIG_DIRS",
    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "PEAK_CUDA_ARCH", "PEAK_HIP_ARCH", "PEAK_HIP_CLANG", "TORCH_CUDA_ARCH_LIST",
})
# Families of runtime variables: CUDA and its tools, NVIDIA's container and GL/EGL vendor choice, Vulkan's loader and
# layers, Mesa (lavapipe), HIP/ROCm, cupy's settings.
PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "__GL", "__EGL", "VK_", "MESA_", "LP_", "GALLIUM_", "HIP_", "HSA_", "ROCR_",
            "ROCM_", "AMD_", "CUPY_")
EXTRA_VARIABLE = "PEAK_MCP_CHILD_ENV"
# Never passed on, whatever the allowlist says: what a credential is called.
SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE|KEY|AUTH|SESSION|COOKIE", re.IGNORECASE)


def extra_names(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The operator's additions (PEAK_MCP_CHILD_ENV), less any that look like a secret."""
    environ = os.environ if environ is None else environ
    names = [n.strip() for n in environ.get(EXTRA_VARIABLE, "").split(",") if n.strip()]
    return tuple(n for n in names if not SECRET.search(n))


def allowed(name: str, extra: Iterable[str] = ()) -> bool:
    if SECRET.search(name) or name.startswith("PEAK_MCP_"):
        return False
    return name in NAMES or name.startswith(PREFIXES) or name in set(extra)


def child_environment(overrides: Mapping[str, str] | None = None,
                      environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowlisted part of `environ` (this process's by default), then `overrides` (HOME, TMPDIR, ...)."""
    environ = os.environ if environ is None else environ
    extra = extra_names(environ)
    env = {k: v for k, v in environ.items() if allowed(k, extra)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(overrides or {})
    return env
