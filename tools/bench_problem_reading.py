"""How long a server takes to read a folder of problem files, cold and on a restart (issue 35's "reading 100
KernelBench files"). Each reading is a fresh process's, through the same registry the server uses, with the data
dir's cache of files already read (problems/described_cache.py) empty, then kept.

    python tools/bench_problem_reading.py --problems build/kernelbench [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ONE_READING = r"""
import json, sys, time
from pathlib import Path
from peak_mcp.problems.registry import ProblemRegistry
started = time.monotonic()
registry = ProblemRegistry([Path(sys.argv[1])], builtin_dir=None, cache_dir=Path(sys.argv[2]))
problems = registry.problems()  # the first look reads every file
print(json.dumps({"seconds": time.monotonic() - started, "problems": len(problems),
                  "errors": len(registry.errors)}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    files = len([p for p in args.problems.glob("*.py") if not p.name.startswith("_")])
    with tempfile.TemporaryDirectory(prefix="peak-reading-") as scratch:
        cache = (args.data_dir or Path(scratch)) / "cache" / "described"
        print(f"{files} files in {args.problems}")
        for label in ("cold (nothing kept)", "restart (kept)"):
            done = subprocess.run([sys.executable, "-c", ONE_READING, str(args.problems.resolve()), str(cache)],
                                  capture_output=True, text=True, check=True)
            found = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{label}: {found['seconds']:.1f} s, {found['problems']} problems, {found['errors']} left out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
