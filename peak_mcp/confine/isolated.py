"""Child Python processes that the client's working directory cannot shadow.

`python -I` puts neither the working directory nor $PYTHONPATH on sys.path (and ignores every PYTHON* variable),
so a `numpy.py` in the directory the server was started from is never imported by a worker or the probe. The
import path the children need (this package's parent, $PYTHONPATH entries used by tests and the GPU machine) is
passed explicitly instead: the parent's sys.path minus '' and its working directory. Children also start in an
empty private directory, so nothing relative (a quoted #include, a stray file) resolves where the client is.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path

import peak_mcp


def import_path() -> list[str]:
    cwd = os.path.realpath(os.getcwd())
    package_parent = str(Path(peak_mcp.__file__).resolve().parent.parent)
    entries = [package_parent]
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        if os.path.realpath(entry) == cwd and os.path.realpath(entry) != package_parent:
            continue
        if entry not in entries:
            entries.append(entry)
    return entries


def python_command(python: str, module: str, *args: str) -> list[str]:
    """`python -I -u -c <bootstrap> args...` running `module.main()` with an explicit import path."""
    bootstrap = (f"import sys; sys.path[:0] = {import_path()!r}; "
                 f"from {module} import main; sys.exit(main())")
    return [python, "-I", "-u", "-c", bootstrap, *args]


@functools.cache
def safe_cwd() -> str:
    """One empty, private directory per server process for its children to start in."""
    return tempfile.mkdtemp(prefix="peak-mcp-child-")
