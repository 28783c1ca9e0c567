"""tools/bench_reference.py: bad arguments are exit 2 with one line naming them, before any problem host starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "bench_reference.py"
FILE = __file__  # any file: arguments are checked before it is read


@pytest.mark.parametrize(("args", "named"), [
    ([], "problem"),
    (["/no/such/file.py"], "/no/such/file.py"),
    ([FILE, "--sizes", "BATCH_SIZE"], "BATCH_SIZE"),
    ([FILE, "--sizes", "BATCH_SIZE=x"], "BATCH_SIZE=x"),
    ([FILE, "--repeat", "0"], "--repeat"),
    ([FILE, "--repeat", "two"], "--repeat"),
    ([FILE, "--bogus"], "--bogus"),
])
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], named: str) -> None:
    done = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and named in done.stderr
