"""Problem files already read, kept in the data dir across restarts: a declaration by (file, fingerprint).

Reading a problem file runs it, confined, in a child process: a KernelBench file imports torch and probes its model
at several sizes (100 level-1 files took 306 s on a 2-core machine). What the reading gives is the declaration, a
function of the file's bytes (its folder's kernel texts with them: `fingerprint`), of this server's code that reads
it, and of the torch it traces with; with those three in the key, a file read once is read again only when one of
them changed. Only successful reads are kept: a failure may be the machine's (memory, time) and is tried again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import os
import tempfile
from pathlib import Path

import peak_mcp
from peak_mcp.problems.declaration import ProblemDeclaration


@functools.cache
def reader_version() -> str:
    """What a declaration depends on besides the file: the server's version, the code of peak_mcp.problems (which
    reads files and builds declarations), and the installed torch's version (which traces KernelBench models)."""
    digest = hashlib.sha256(peak_mcp.__version__.encode())
    package = Path(__file__).resolve().parent
    for source in sorted(package.rglob("*.py")):
        digest.update(str(source.relative_to(package)).encode() + b"\0" + source.read_bytes())
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        digest.update(b"torch " + importlib.metadata.version("torch").encode())
    return digest.hexdigest()


def _same_bytes(path: Path, declaration: ProblemDeclaration) -> bool:
    """The file holds the bytes the declaration was read from (a file changed between its fingerprint and its
    reading must not leave one content's declaration under another's key)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == declaration.sha256
    except OSError:
        return False


class DescribedCache:
    """`get` and `put` declarations under `folder` (created on the first put), one JSON file each."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _file(self, path: Path, fingerprint: str) -> Path:
        key = hashlib.sha256(f"{reader_version()}\0{path}\0{fingerprint}".encode()).hexdigest()
        return self.folder / f"{key}.json"

    def get(self, path: Path, fingerprint: str) -> ProblemDeclaration | None:
        file = self._file(path, fingerprint)
        try:
            declaration = ProblemDeclaration.model_validate_json(file.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):  # torn or foreign: read the problem file again, and replace this
            with contextlib.suppress(OSError):
                file.unlink()
            return None
        return declaration if declaration.path == str(path) and _same_bytes(path, declaration) else None

    def put(self, path: Path, fingerprint: str, declaration: ProblemDeclaration) -> None:
        """Written whole or not at all (a temporary file renamed); a data dir that cannot be written keeps nothing,
        and nor does a file whose bytes are no longer those the declaration was read from (it changed meanwhile)."""
        if not _same_bytes(path, declaration):
            return
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.folder, prefix=".described-", suffix=".json")
            try:
                with os.fdopen(fd, "w") as out:
                    out.write(declaration.model_dump_json())
                os.replace(temporary, self._file(path, fingerprint))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
