"""tools/sgemm_anatomy.py answers bad arguments with exit 2 and a line naming them, before it touches a GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("args, said", [
    (["--config", "{bad"], "is not JSON"),
    (["--config", "[1]"], "is not an object of integer parameters"),
    (["--config", '{"BM": 1.5}'], "is not an object of integer parameters"),
    (["--configs-from", "/nonexistent/configs.jsonl"], "--configs-from"),
    (["--sizes", "0"], "positive integers"),
    (["--kernel", "/nonexistent/kernel.cu"], "--kernel /nonexistent/kernel.cu"),
])
def test_sgemm_anatomy_refuses_bad_input_before_touching_a_gpu(args: list[str], said: str) -> None:
    """tools/sgemm_anatomy.py (the f32 GEMM against cuBLAS): a bad argument is exit 2 with a line that names it,
    on a machine without cupy too."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "sgemm_anatomy.py"), *args], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_sgemm_anatomy_refuses_a_kernel_without_a_launch_line_before_touching_a_gpu(tmp_path: Path) -> None:
    """--kernel names the file timed; one without a `// peak: entry=... grid=... block=...` line is exit 2."""
    kernel = tmp_path / "bare.cu"
    kernel.write_text('extern "C" __global__ void f() {}\n')
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "sgemm_anatomy.py"), "--kernel", str(kernel)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "--kernel" in done.stderr and "no `// peak: entry" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
