"""Ray stays optional: without it the server runs as ever, and `serve --ray` says what to install and stops."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_serve_with_ray_but_without_ray_installed_says_what_to_install(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "ray.py").write_text('raise ModuleNotFoundError("No module named \'ray\'", name="ray")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "peak_mcp", "serve", "--ray", "auto", "--data-dir",
                           str(tmp_path / "data")], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "--ray needs Ray, which is not installed" in done.stderr and 'peak-mcp[ray]' in done.stderr
    assert "Traceback" not in done.stderr
