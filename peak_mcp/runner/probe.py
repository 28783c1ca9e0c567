"""Device discovery in a child process, so the MCP process itself never initializes a GPU driver."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from peak_mcp.backends.registry import BACKENDS, probe
from peak_mcp.confine.child_env import child_environment
from peak_mcp.confine.isolated import python_command, safe_cwd


def probe_all_in_subprocess(timeout_s: float = 120.0,
                            options: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every backend's probe; `options` are each backend's probe arguments (from the settings)."""
    try:
        done = subprocess.run(python_command(sys.executable, "peak_mcp.runner.probe", json.dumps(options or {})),
                              capture_output=True, timeout=timeout_s, check=False, cwd=safe_cwd(),
                              env=child_environment())
    except subprocess.TimeoutExpired:
        return {name: {"backend": name, "devices": [], "compiler": {"available": False},
                       "missing": [{"what": "device probe", "why": f"timed out after {timeout_s:.0f} s",
                                    "fix": "check the GPU driver (nvidia-smi / vulkaninfo)"}]}
                for name in BACKENDS}
    try:
        return json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = done.stderr.decode(errors="replace")[-500:]
        return {name: {"backend": name, "devices": [], "compiler": {"available": False},
                       "missing": [{"what": "device probe", "why": f"probe crashed: {tail}",
                                    "fix": "reinstall peak-mcp: pip install -e ."}]}
                for name in BACKENDS}


def main() -> int:
    options = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    print(json.dumps({name: probe(name, **options.get(name, {})) for name in BACKENDS}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
