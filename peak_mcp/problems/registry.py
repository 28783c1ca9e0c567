"""Where problems come from, by name: built-in classes (matmul: trusted code shipped with the server), then problem
files, each read by a confined subprocess (`describe`) and cached by content.

The names of the shipped problem files and the built-in classes are reserved: a file elsewhere (defined in the data
directory, or in an operator directory) that declares one is left out with an error, never served in its place.
Otherwise, precedence for a name, highest first (docs/problems.md): problems defined in the data directory, then
operator directories (`--problems DIR`, `PEAK_MCP_PROBLEMS`, in the order given). A file that cannot be read (syntax
error, an exception or a hang at import, a declaration that does not hold, a reference that returns the wrong shape)
is left out with an error naming it and its line, and so is a file that declares a name another file of the same
source already took; the server goes on with the rest.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, ValidationError, field_validator

from peak_mcp.confine.child_env import child_environment
from peak_mcp.confine.isolated import python_command
from peak_mcp.confine.sandbox import SYSTEM_READ, Policy, confined_command, python_runtime_paths, tool_paths
from peak_mcp.core.errors import NotFound
from peak_mcp.core.text_safety import clean
from peak_mcp.problems.base import Problem
from peak_mcp.problems.declaration import ProblemDeclaration
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.problems.described_cache import DescribedCache

log = structlog.get_logger("peak_mcp.problems")
BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
# Importing numpy and running the reference at small sizes takes about a second; a KernelBench network (level 3) is
# built and run a dozen times, at its own image size where it has a fixed one, and checked once in float64:
# up to 240 s on a busy 2-core machine (tools/kernelbench_acceptance.py's seconds: UNet 239, VGG19 222, the level-3
# median 33). A loop is still stopped.
DESCRIBE_TIMEOUT_S = 300.0
DESCRIBE_MEMORY_BYTES = 8 << 30  # Settings.problem_memory_mb's default
DESCRIBE_MAX_PROCESSES = 256  # tasks (threads count): numpy's and torch's pools, never a fork bomb
MAX_ANSWER_BYTES = 4 << 20  # a declaration with its naive kernel texts is far smaller
MAX_FILE_BYTES = 1 << 20
MAX_ERROR_CHARS = 2000  # a problem file's error as a client sees it (describe's own text, the file's message in it)


class ProblemFileError(BaseModel):
    """A problem file left out (level error) or a note on one (level warning: it shadows another)."""

    file: str
    line: int | None = None
    message: str
    level: str = "error"

    @field_validator("message", "file")
    @classmethod
    def _safe(cls, value: str) -> str:  # text a problem file wrote (its exception's message, its file name)
        return clean(value, MAX_ERROR_CHARS)

    def __str__(self) -> str:
        return f"{self.file}{f':{self.line}' if self.line else ''}: {self.message}"


class DescribeFailed(Exception):
    def __init__(self, message: str, line: int | None = None) -> None:
        message = clean(message, MAX_ERROR_CHARS)  # it quotes the file's own text: no terminal control, bounded
        super().__init__(message)
        self.message, self.line = message, line


@dataclass
class _Entry:
    fingerprint: str
    problem: DeclaredProblem | None = None
    error: ProblemFileError | None = None


@dataclass
class Source:
    """One place problem files come from: a folder, its kind (defined, operator, shipped) and its rank."""

    folder: Path
    kind: str


# Declarations already read in this process, by (path, fingerprint): servers built one after another in a test
# process, or a list_problems after nothing changed, describe nothing again.
_described: dict[tuple[str, str], ProblemDeclaration] = {}
_described_lock = threading.Lock()


def _unchanged(path: Path, print_: str) -> bool:
    try:
        return fingerprint(path) == print_
    except OSError:
        return False


FINGERPRINT_FILES = 2000  # the most files below a problem's folder a fingerprint looks at


def fingerprint(path: Path) -> str:
    """The file's sha256, and the path, size and time of every file below its folder that is not Python (the kernel
    texts its NAIVE names, which may sit in subfolders), the first FINGERPRINT_FILES of them in order. Other problem
    files are left out: one added beside a hundred must not make the hundred read again. A declaration kept across
    restarts (described_cache) is served only while this is unchanged."""
    digest = hashlib.sha256(path.read_bytes())
    folder = path.parent
    others = (p for p in sorted(folder.rglob("*")) if p.suffix != ".py" and "__pycache__" not in p.parts)
    for count, other in enumerate(others):
        if count >= FINGERPRINT_FILES:
            break
        with contextlib.suppress(OSError):
            if other.is_file():
                stat = other.stat()
                digest.update(f"{other.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def describe_in_subprocess(path: Path, *, sandbox: bool = True, timeout_s: float = DESCRIBE_TIMEOUT_S,
                           folder_readable: bool = True,
                           memory_bytes: int = DESCRIBE_MEMORY_BYTES) -> ProblemDeclaration:
    """Run `peak_mcp.problems.describe` on `path` isolated and confined (its own PID, mount and network namespaces,
    no capabilities, the file's folder readable, a scratch folder writable, memory, process count, CPU time and wall
    time bounded), read its one-line answer as soon as it is written, kill its whole process tree, and validate the
    answer here."""
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    with tempfile.TemporaryDirectory(prefix="peak-describe-") as workdir:
        # The folder where its NAIVE files are (an operator's); a defined file only itself, never the other
        # clients' files beside it in the data dir
        readable = str(path.parent) if folder_readable else str(path)
        policy = Policy(read=(*SYSTEM_READ, *python_runtime_paths(), *tool_paths(), readable),
                        write=(workdir,), cgroup_memory_bytes=memory_bytes, address_space_fallback=True,
                        cpu_seconds=int(timeout_s) + 1, isolate=True, max_processes=DESCRIBE_MAX_PROCESSES,
                        no_sockets=True)
        command = confined_command(policy, python_command(sys.executable, "peak_mcp.problems.describe", str(path)),
                                   enabled=sandbox)
        env = child_environment({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                                 "TMPDIR": workdir, "HOME": workdir})
        process = subprocess.Popen(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, start_new_session=True)
        try:
            answer, err, finished = _read_answer(process, timeout_s)
        finally:
            kill_tree(process)
    if answer is None and not finished:
        raise DescribeFailed(f"reading it took more than {timeout_s:g} s and was stopped (a loop or a wait at "
                             "import, or a reference far too slow at small sizes)")
    if not isinstance(answer, dict):
        if process.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
            raise DescribeFailed(f"reading it went past its CPU time ({int(timeout_s) + 1} s) or memory limit "
                                 f"({memory_bytes >> 20} MiB) and was stopped (a model whose parameters or inputs "
                                 "at its own sizes need more: the server's PEAK_MCP_PROBLEM_MEMORY_MB raises it)")
        tail = [line for line in err.strip().splitlines() if line.strip()][-3:]
        raise DescribeFailed(f"reading it ended without an answer (exit {process.returncode}): "
                             f"{' | '.join(tail)[:400] or 'no output'}")
    if "error" in answer:
        line = answer.get("line")
        raise DescribeFailed(str(answer["error"])[:1000], line if isinstance(line, int) else None)
    try:
        declaration = ProblemDeclaration.model_validate(answer.get("declaration"))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise DescribeFailed(f"its declaration does not hold: {first.get('msg')} at {first.get('loc')}") from None
    if declaration.path != str(path) or declaration.sha256 != sha:
        raise DescribeFailed("it changed while it was read; read again with list_problems")
    return declaration


def _read_answer(process: subprocess.Popen[bytes], timeout_s: float) -> tuple[Any, str, bool]:
    """(the answer, the tail of stderr, whether the process ended) once describe's JSON line arrives, the process
    ends, or `timeout_s` passes, whichever is first: a child that keeps its pipes open (a daemon it forked) costs
    nothing, and stdout and stderr are bounded."""
    assert process.stdout is not None and process.stderr is not None
    out, err = bytearray(), bytearray()
    streams = {process.stdout.fileno(): out, process.stderr.fileno(): err}
    deadline = time.monotonic() + timeout_s
    while streams:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, err.decode(errors="replace"), False
        for fd in select.select(list(streams), [], [], left)[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                del streams[fd]
                continue
            buffer = streams[fd]
            buffer += chunk
            if len(buffer) > MAX_ANSWER_BYTES:  # keep the end: the answer is the last line, an error's tail
                del buffer[:len(buffer) - MAX_ANSWER_BYTES]
        if out.endswith(b"\n"):
            answer = _last_json(out.decode(errors="replace"))
            if answer is not None:
                return answer, err.decode(errors="replace"), True
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=max(0.1, deadline - time.monotonic()))
    return _last_json(out.decode(errors="replace")), err.decode(errors="replace"), True


def _last_json(text: str) -> Any:
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return None


def kill_tree(process: subprocess.Popen[bytes]) -> None:
    """The launcher's process group, and with the launcher the namespace it supervises: everything the file
    started, whatever it did to stay alive."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


class ProblemRegistry:
    """Every problem this server offers, by name. `refresh` (start, list_problems, start_session) reads files
    that are new or changed; `get` is the lookup everything else uses."""

    def __init__(self, folders: Iterable[Path] = (), *, defined: Path | None = None,
                 builtin_dir: Path | None = BUILTIN_DIR, classes: Iterable[Problem] = (), sandbox: bool = True,
                 timeout_s: float = DESCRIBE_TIMEOUT_S, defined_on: Callable[[], bool] | None = None,
                 memory_bytes: int = DESCRIBE_MEMORY_BYTES, cache_dir: Path | None = None) -> None:
        """`defined_on`: asked at every look at the folders; while it says False the `defined` folder is not
        looked at (its files are neither read nor served): a server that refuses define_problem never imports
        what another server defined in the same data dir. `cache_dir`: where files already read are kept across
        restarts (described_cache); None keeps them in this process only."""
        self.defined_on = defined_on or (lambda: True)
        self.sources: list[Source] = []
        if defined is not None:
            self.sources.append(Source(defined, "defined"))
        self.sources += [Source(Path(f).expanduser().resolve(), "operator") for f in folders]
        if builtin_dir is not None:
            self.sources.append(Source(builtin_dir, "shipped"))
        self.classes = {p.name: p for p in classes}
        self.sandbox, self.timeout_s, self.memory_bytes = sandbox, timeout_s, memory_bytes
        self.kept = DescribedCache(cache_dir) if cache_dir is not None else None
        self._entries: dict[Path, _Entry] = {}
        self._by_name: dict[str, Problem] = {}
        self._errors: list[ProblemFileError] = []
        self._lock = threading.RLock()
        self._loaded = False

    def files(self) -> list[tuple[Source, Path]]:
        found = []
        for source in self.sources:
            if source.kind == "defined" and not self.defined_on():
                continue
            try:
                paths = sorted(p for p in source.folder.glob("*.py") if not p.name.startswith("_"))
            except OSError:
                continue
            found += [(source, p.resolve()) for p in paths if p.is_file()]
        return found

    def refresh_for(self, name: str) -> None:
        """What a session on `name` needs read: where `name` is known and its file has not changed, nothing (other
        files new or changed are not read: a session never waits on another problem's reading); else a refresh."""
        with self._lock:
            known = self._by_name.get(name) if self._loaded else None
            path = Path(known.source) if known is not None and getattr(known, "declaration", None) else None
            entry = self._entries.get(path) if path is not None else None
        if known is not None and (path is None or (entry is not None and _unchanged(path, entry.fingerprint))):
            return  # a built-in class, or a file as it was read
        self.refresh()

    def refresh_in_background(self) -> threading.Thread:
        """Read every file now, on a thread of its own (a server's start): list_problems and sessions then find
        them read, and nothing waits for them before it asks."""
        thread = threading.Thread(target=self._quiet_refresh, name="peak-problem-reading", daemon=True)
        thread.start()
        return thread

    def _quiet_refresh(self) -> None:
        try:
            self.refresh()
        except Exception as exc:  # the next refresh (list_problems, start_session) reads again and says why
            log.warning("reading problem files in the background failed", error=str(exc))

    def refresh(self) -> None:
        """Read the files that are new or changed since the last look (in parallel, each confined), then settle
        which file each name comes from."""
        # Files are read outside the lock: a slow or hanging file delays only the call that reads it, never a
        # get() for a problem already known. Two refreshes at once may read one file twice; the cache keeps one.
        with self._lock:
            files = self.files()
            todo: dict[Path, tuple[str, bool]] = {}
            errors: list[ProblemFileError] = []
            for source, path in files:
                try:
                    if path.stat().st_size > MAX_FILE_BYTES:
                        errors.append(ProblemFileError(file=str(path), message=f"over {MAX_FILE_BYTES} bytes"))
                        continue
                    print_ = fingerprint(path)
                except OSError as exc:
                    errors.append(ProblemFileError(file=str(path), message=f"cannot read it: {exc.strerror}"))
                    continue
                entry = self._entries.get(path)
                if entry is None or entry.fingerprint != print_:
                    todo[path] = (print_, source.kind != "defined")
        read: dict[Path, _Entry] = {}
        if todo:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, len(todo))) as pool:
                read = dict(zip(todo, pool.map(lambda item: self._read(item[0], *item[1]), todo.items()), strict=True))
        with self._lock:
            self._entries.update(read)
            self._settle(files, errors)
            self._loaded = True

    def remember(self, path: Path, declaration: ProblemDeclaration) -> None:
        """`declaration`, read from the same bytes staged elsewhere, taken as `path`'s: define_problem reads a file
        before it saves it, and the refresh after the save then reads nothing again."""
        declaration = declaration.model_copy(update={"path": str(path)})
        print_ = fingerprint(path)
        if declaration.sha256 != hashlib.sha256(path.read_bytes()).hexdigest():
            return  # not the bytes that were read: the refresh reads the file itself
        with _described_lock:
            _described[(str(path), print_)] = declaration
        if self.kept is not None:
            self.kept.put(path, print_, declaration)

    def _read(self, path: Path, print_: str, folder_readable: bool) -> _Entry:
        key = (str(path), print_)
        with _described_lock:
            cached = _described.get(key)
        if cached is None and self.kept is not None:
            cached = self.kept.get(path, print_)
        if cached is None:
            try:
                cached = describe_in_subprocess(path, sandbox=self.sandbox, timeout_s=self.timeout_s,
                                                folder_readable=folder_readable, memory_bytes=self.memory_bytes)
                if self.kept is not None:
                    self.kept.put(path, print_, cached)
            except DescribeFailed as exc:
                log.warning("problem file left out", file=str(path), line=exc.line, error=exc.message)
                return _Entry(print_, error=ProblemFileError(file=str(path), line=exc.line, message=exc.message))
            except OSError as exc:
                return _Entry(print_, error=ProblemFileError(file=str(path), message=f"cannot read it: {exc}"))
            with _described_lock:
                _described[key] = cached
        return _Entry(print_, problem=DeclaredProblem(cached))

    def reserved(self, files: list[tuple[Source, Path]] | None = None) -> dict[str, str]:
        """The names no defined or operator file may take, each with what holds it: the built-in classes', and each
        shipped problem file's (its file name, and the NAME it declares where it was read)."""
        taken = {name: f"the built-in problem {name}" for name in self.classes}
        with self._lock:
            for source, path in self.files() if files is None else files:
                if source.kind != "shipped":
                    continue
                entry = self._entries.get(path)
                names = [path.stem] + ([entry.problem.name] if entry and entry.problem else [])
                for name in names:
                    taken.setdefault(name, f"the shipped problem {name} ({path})")
        return taken

    def _settle(self, files: list[tuple[Source, Path]], errors: list[ProblemFileError]) -> None:
        by_name: dict[str, Problem] = {}
        kind_of: dict[str, str] = {}
        reserved = self.reserved(files)
        refused: set[Path] = set()
        for source, path in files:
            entry = self._entries.get(path)
            if entry is None:
                continue
            if entry.error is not None:
                errors.append(entry.error)
                continue
            problem = entry.problem
            assert problem is not None
            d = problem.declaration
            holder = reserved.get(problem.name)
            if holder is not None and (source.kind != "shipped" or problem.name in self.classes):
                errors.append(ProblemFileError(
                    file=str(path), line=d.line_of("NAME"),
                    message=f"NAME {problem.name!r} is taken by {holder}, which a problem file cannot replace; "
                            "choose a different NAME (a KernelBench file: rename the file)"))
                refused.add(path)
                continue
            if problem.name in by_name:
                first = by_name[problem.name]
                if kind_of[problem.name] == source.kind:  # two files of one source: the later one is left out
                    errors.append(ProblemFileError(
                        file=str(path), line=d.line_of("NAME"),
                        message=f"NAME {problem.name!r} is already declared by {first.source}; rename one"))
                continue  # a source of lower precedence: shadowed (noted below)
            by_name[problem.name] = problem
            kind_of[problem.name] = source.kind
        by_name.update(self.classes)
        for source, path in files:  # a file shadowed by one of higher precedence: a warning on it
            entry = self._entries.get(path)
            if entry and entry.problem and path not in refused and by_name.get(entry.problem.name) is not \
                    entry.problem and kind_of.get(entry.problem.name) != source.kind:
                errors.append(ProblemFileError(file=str(path), level="warning",
                                               message=f"{entry.problem.name!r} is taken by "
                                                       f"{by_name[entry.problem.name].source}, which wins"))
        self._by_name, self._errors = by_name, errors

    def _ensure(self) -> None:
        if not self._loaded:
            self.refresh()

    def get(self, name: str) -> Problem:
        self._ensure()
        with self._lock:
            found = self._by_name.get(name)
            if found is not None:
                return found
            failed = [e for e in self._errors if e.level == "error" and Path(e.file).stem == name]
        shown = [e for e in failed if self.kind_of_file(e.file) != "defined"]
        if shown:
            raise NotFound(f"problem {name!r} is not available: its file failed to load: {shown[0]}",
                           "fix the problem file, then call list_problems (it reads changed files again).")
        if failed:  # a defined file's error is its definer's: define_problem told that client; nobody else sees it
            raise NotFound(f"problem {name!r} is not available: its file, saved by define_problem, failed to load",
                           "define it again with define_problem, whose answer says what is wrong.")
        raise NotFound(f"unknown problem {name!r}", f"call list_problems; known: {sorted(self._by_name)}.")

    def kind_of_file(self, file: str) -> str | None:
        """The kind of source (defined, operator, shipped) whose folder holds `file`, None for none of them."""
        folder = Path(file).parent
        return next((s.kind for s in self.sources if s.folder.resolve() == folder), None)

    def client_errors(self) -> list[ProblemFileError]:
        """The errors any client may see (list_problems): those of operator and shipped files. A file in the defined
        folder is one client's text: its error went to the client that defined it, and is not shown to others."""
        return [e for e in self.errors if self.kind_of_file(e.file) != "defined"]

    def problems(self) -> list[Problem]:
        self._ensure()
        with self._lock:
            return sorted(self._by_name.values(), key=lambda p: (p.name != "matmul", p.name))

    @property
    def errors(self) -> list[ProblemFileError]:
        self._ensure()
        with self._lock:
            return list(self._errors)

