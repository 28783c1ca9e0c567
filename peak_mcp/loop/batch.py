"""KernelBench's own metric over a suite of problems: for each problem, a session started and its kernel submitted
through the same pipeline as submit_kernel (correctness, generality, guards and poison, the sanitizer where the
backend has one, timing), its time beside the session's torch eager and torch.compile yardsticks, and the suite's
fast_p: the share of all problems that are correct and more than p times faster than torch eager.

Problems spread over the backend's devices, one lane per device (each lane takes the next problem when it is done
with one), so a machine of eight GPUs runs eight at once. A problem whose kernel is missing, or whose file failed to
load, stays in the suite (KernelBench divides by every problem) with its outcome said."""

from __future__ import annotations

import contextvars
import json
import queue
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from peak_mcp.backends.registry import BACKENDS
from peak_mcp.core.errors import InvalidInput, PeakError
from peak_mcp.core.text_safety import clean
from peak_mcp.loop.context import Progress, quiet
from peak_mcp.loop.pipeline.admit import MAX_SOURCE_BYTES
from peak_mcp.loop.service import PeakService
from peak_mcp.runner.pool import CANCEL
from peak_mcp.store.records import Status

Outcome = Literal["correct", "incorrect", "not_run", "missing_kernel", "error"]
SUFFIX = {"cuda": ".cu", "hip": ".hip", "hlsl": ".hlsl"}
DEFAULT_P = (0.0, 1.0, 1.5, 2.0)
MESSAGE_CHARS = 600  # a row's verdict text: the pipeline's message can quote a whole compile log


class BatchItem(BaseModel):
    """One problem of the suite and the kernel it is given (a file, or its text), or why it cannot run."""

    problem: str = Field(description="the problem's name; the file's stem where its file failed to load")
    file: str | None = Field(None, description="the problem file, where the problem comes from one")
    kernel: str | None = Field(None, description="the kernel file looked for (missing if it is not there)")
    source: str | None = Field(None, description="the kernel's text, where it was given inline")
    sizes: dict[str, int] | None = None
    error: str | None = Field(None, description="why the problem cannot run (its file failed to load)")
    looked_for: list[str] = Field(default_factory=list, description="the kernel files looked for, where none was")


class ProblemResult(BaseModel):
    problem: str
    file: str | None = None
    kernel: str | None = None
    outcome: Outcome
    correct: bool | None = Field(description="passed every check; None where nothing could run (no device)")
    status: str | None = Field(None, description="the version's status (benchmarked, not_general, ...)")
    failure: str | None = Field(None, description="the check that failed, or the error's kind")
    message: str | None = Field(None, description="the verdict in words (clipped)")
    session_id: str | None = None
    version: int | None = None
    device: str | None = None
    sizes: dict[str, int] | None = None
    kernel_ms: float | None = Field(None, description="the kernel's median time")
    torch_eager_ms: float | None = None
    torch_compile_ms: float | None = None
    speedup_eager: float | None = Field(None, description="torch eager's median over the kernel's")
    speedup_compile: float | None = Field(None, description="torch.compile's median over the kernel's")
    yardstick_note: str | None = Field(None, description="why a torch time is missing")
    seconds: float = 0.0


class FastP(BaseModel):
    """fast_p = (problems correct with speedup over torch eager > p) / (all problems). `value` is None where some
    correct problem has no torch eager time: then it lies between `low` and `high`."""

    p: float
    value: float | None
    faster: int
    total: int
    unknown: int = Field(0, description="problems that may count: correct (or not run) without a speedup")
    low: float
    high: float
    note: str | None = None


class BatchResult(BaseModel):
    backend: str
    dtype: str
    devices: list[str] = Field(description="the lanes the problems were spread over")
    problems: list[ProblemResult]
    fast_p: list[FastP]
    counts: dict[str, int] = Field(description="problems per outcome")
    seconds: float
    timing_note: str = ("kernel and torch times are medians of the timed launches, each from a cold L2 (CUDA); "
                        "speedup = torch's median / the kernel's")


def fast_p(rows: Sequence[ProblemResult], p: float) -> FastP:
    """KernelBench's fast_p over `rows`: correct and speedup over torch eager > p, over every row. For p = 0 a
    correct row counts without a yardstick (any time beats 0); otherwise a correct row without torch eager's time is
    unknown, and the value is given only when no row is."""
    total = len(rows)
    faster = unknown = 0
    for r in rows:
        if r.correct is None:
            unknown += 1
        elif not r.correct:
            continue
        elif p <= 0:
            faster += 1
        elif r.speedup_eager is None:
            unknown += 1
        elif r.speedup_eager > p:
            faster += 1
    low = faster / total if total else 0.0
    high = (faster + unknown) / total if total else 0.0
    note = None
    if unknown:
        unrun = sum(r.correct is None for r in rows)
        whys = sorted({r.yardstick_note or "no torch time" for r in rows if r.correct and r.speedup_eager is None})
        parts = ([f"{unrun} not run, so not known to be correct (no device)"] if unrun else []) + \
            ([f"{unknown - unrun} correct without a speedup over torch eager ({'; '.join(whys)})"]
             if unknown > unrun else [])
        note = f"cannot be computed: of {total} problems, {', '.join(parts)}; between {low:.2f} and {high:.2f}"
    return FastP(p=p, value=None if unknown else low, faster=faster, total=total, unknown=unknown, low=low, high=high,
                 note=note)


# --- the suite: problems and their kernels ----------------------------------------------------------------------


def read_map(path: Path) -> dict[str, dict[str, Any]]:
    """A JSON object: problem (a name, or a problem file's stem or name) -> a kernel file (relative to the map's
    folder), or {"kernel": FILE, "sizes": {...}}."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read the map {path}: {exc}",
                           'write a JSON object: {"problem": "kernel.cu", ...}') from None
    if not isinstance(raw, dict):
        raise InvalidInput(f"the map {path} is not a JSON object", 'write {"problem": "kernel.cu", ...}')
    out: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        entry = {"kernel": value} if isinstance(value, str) else value
        if not isinstance(entry, dict) or not isinstance(entry.get("kernel"), str):
            raise InvalidInput(f"the map's entry {key!r} names no kernel file",
                               'give a file name, or {"kernel": FILE, "sizes": {"N": 1024}}')
        sizes = entry.get("sizes")
        if sizes is not None and not (isinstance(sizes, dict) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in sizes.values())):
            raise InvalidInput(f"the map's entry {key!r} has sizes {sizes!r}", 'write {"N": 1024, ...}')
        folder = path.parent.resolve()
        kernel = (folder / entry["kernel"]).resolve()
        if not kernel.is_relative_to(folder):  # a map is data: it names kernels beside it, not /proc/self/environ
            raise InvalidInput(f"the map's entry {key!r} names {entry['kernel']!r}, outside the map's folder",
                               "put the kernels in the map's folder (or below it) and name them relative to it.")
        out[key] = {**entry, "kernel": str(kernel)}
    return out


def read_kernel(path: Path) -> str:
    """A kernel file's text: a regular file of at most MAX_SOURCE_BYTES (a FIFO or /dev/zero would hang or fill
    memory). OSError or UnicodeDecodeError as open and read raise them; ValueError for the rest."""
    if not stat.S_ISREG(path.stat().st_mode):
        raise ValueError(f"{path.name} is not a regular file")
    with path.open("rb") as file:  # st_size can be 0 for a file that is not (/proc): read one byte past the limit
        data = file.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        raise ValueError(f"{path.name} is over the {MAX_SOURCE_BYTES:,} bytes a kernel may have")
    return data.decode()


def plan(service: PeakService, backend: str, problems_dir: Path | None, kernels_dir: Path | None,
         mapping: dict[str, dict[str, Any]] | None = None) -> list[BatchItem]:
    """The suite: every problem file of `problems_dir` (those that failed to load included, with their error), or
    without a folder the map's problems (built-in ones too); each with its kernel: the map's entry, else
    `<kernels_dir>/<file stem><suffix>`, else `<kernels_dir>/<problem name><suffix>`."""
    if backend not in BACKENDS:
        raise InvalidInput(f"unknown backend {backend!r}", f"choose one of {sorted(BACKENDS)}.")
    mapping = dict(mapping or {})
    suffix = SUFFIX[backend]
    registry = service.problems
    registry.refresh()
    items: list[BatchItem] = []
    if problems_dir is not None:
        folder = problems_dir.expanduser().resolve()
        by_file = {Path(p.source).resolve(): p.name for p in registry.problems() if p.source != "built-in"}
        errors = {Path(e.file).resolve(): e for e in registry.errors}
        files = sorted(p.resolve() for p in folder.glob("*.py") if not p.name.startswith("_"))
        if not files:
            raise InvalidInput(f"no problem files (*.py) in {folder}", "name a folder of problem or KernelBench "
                                                                      "files.")
        for path in files:
            name, error = by_file.get(path), errors.get(path)
            item = BatchItem(problem=name or path.stem, file=str(path),
                             error=None if name else (str(error.message) if error else "not loaded"))
            keys = dict.fromkeys([path.stem, path.name] + ([name] if name else []))
            entries = [mapping.pop(k) for k in keys if k in mapping]  # every key of this file's: none left over
            entry = entries[0] if entries else None
            items.append(_with_kernel(item, entry, kernels_dir, [path.stem] + ([name] if name else []), suffix))
    for key, entry in mapping.items():  # without a folder (or beyond it): problems the server knows by name
        try:
            name = registry.get(key).name
            item = BatchItem(problem=name)
        except PeakError as exc:
            item = BatchItem(problem=key, error=exc.message)
        items.append(_with_kernel(item, entry, kernels_dir, [key], suffix))
    if not items:
        raise InvalidInput("no problems to evaluate", "pass a problems folder, a map, or both.")
    return items


def _with_kernel(item: BatchItem, entry: dict[str, Any] | None, kernels_dir: Path | None, stems: list[str],
                 suffix: str) -> BatchItem:
    if entry is not None:
        return item.model_copy(update={"kernel": entry["kernel"], "sizes": entry.get("sizes")})
    if kernels_dir is None:
        return item
    candidates = list(dict.fromkeys(kernels_dir / f"{stem}{suffix}" for stem in stems))
    inside = kernels_dir.resolve()  # a link out of the folder is not one of its kernels
    found = next((c for c in candidates if c.is_file() and c.resolve().is_relative_to(inside)), None)
    if found is None:
        return item.model_copy(update={"looked_for": [str(c) for c in candidates]})
    return item.model_copy(update={"kernel": str(found)})


# --- running it -------------------------------------------------------------------------------------------------


class BatchRunner:
    def __init__(self, service: PeakService) -> None:
        self.service = service

    def lanes(self, backend: str) -> dict[int | None, str]:
        """One lane per device of the backend (index -> name); one of compile-only sessions where it has none."""
        devices = self.service.probe().get(backend, {}).get("devices") or []
        return {int(d["index"]): f"#{d['index']} {d.get('name', '?')}" for d in devices} or \
            {None: "compile-only (no device)"}

    def run(self, items: Sequence[BatchItem], backend: str, dtype: str = "f32", *, ps: Sequence[float] = DEFAULT_P,
            progress: Progress = quiet, on_row: Callable[[ProblemResult], None] | None = None) -> BatchResult:
        """Every item over one lane per device; `on_row` gets each row as it is done (a long suite cut short still
        leaves the rows it finished)."""
        started = time.perf_counter()
        lanes = self.lanes(backend)
        todo = deque(enumerate(items))
        lock = threading.Lock()
        done: queue.Queue[tuple[int, ProblemResult]] = queue.Queue()
        cancel = CANCEL.get()

        def lane(device: int | None) -> None:
            while True:
                with lock:
                    if not todo:
                        return
                    i, item = todo.popleft()
                if cancel is not None and cancel.is_set():
                    done.put((i, _unrun(item, "error", "cancelled before it ran")))
                    continue
                try:
                    done.put((i, self.one(item, backend, dtype, device)))
                except Exception as exc:  # one problem's fault (a server bug included) must not lose the suite
                    done.put((i, _unrun(item, "error", f"{type(exc).__name__}: {exc}")))

        threads = [threading.Thread(target=contextvars.copy_context().run, args=(lane, device), daemon=True,
                                    name=f"peak-batch-{device}") for device in lanes]
        for thread in threads:
            thread.start()
        results: dict[int, ProblemResult] = {}
        while len(results) < len(items):
            i, row = done.get()
            results[i] = row
            if on_row is not None:
                on_row(row)
            progress(f"{len(results)}/{len(items)} {row.problem}: {row.outcome}")
        for thread in threads:
            thread.join()
        rows = [results[i] for i in range(len(items))]
        counts: dict[str, int] = {}
        for r in rows:
            counts[r.outcome] = counts.get(r.outcome, 0) + 1
        return BatchResult(backend=backend, dtype=dtype, devices=list(lanes.values()), problems=rows,
                           fast_p=[fast_p(rows, p) for p in ps], counts=counts,
                           seconds=round(time.perf_counter() - started, 1))

    def one(self, item: BatchItem, backend: str, dtype: str, device: int | None) -> ProblemResult:
        """One problem: its session on `device`, its kernel submitted, the verdict and the speedups."""
        started = time.perf_counter()
        if item.error is not None:
            return _unrun(item, "error", item.error)
        source = item.source
        if source is None:
            try:
                source = read_kernel(Path(item.kernel)) if item.kernel else None
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                return _unrun(item, "missing_kernel" if isinstance(exc, FileNotFoundError) else "error",
                              f"cannot read {item.kernel}: {exc}")
            if source is None:
                looked = ", ".join(Path(f).name for f in item.looked_for)
                folder = f" in {Path(item.looked_for[0]).parent}" if item.looked_for else ""
                return _unrun(item, "missing_kernel", f"no kernel file ({looked}{folder})" if looked else
                              "no kernel given (no --kernels folder, no map entry)")
        service = self.service
        try:
            info = service.sessions.start_session(item.problem, backend, dtype, item.sizes, label="batch",
                                                  device=device, naive=False)
        except PeakError as exc:  # the problem refused the backend, dtype or sizes; no device; ...
            return _unrun(item, "error", exc.message, seconds=time.perf_counter() - started)
        try:
            report = service.submit_kernel(info.session_id, source)
        except PeakError as exc:  # refused before it was recorded (admit: too long, not text)
            return _unrun(item, "error", exc.message, seconds=time.perf_counter() - started).model_copy(
                update={"session_id": info.session_id, "sizes": info.sizes})
        session = service.store.session(info.session_id)
        status = Status(report.status)
        runs = session.device_index >= 0
        correct = status.passed if runs else None
        # a job that failed (a hang, a crash, cancelled) is no verdict on the kernel's values: said as an error
        outcome: Outcome = "not_run" if not runs and status is Status.COMPILED else \
            "correct" if status.passed else "error" if status is Status.ERROR else "incorrect"
        if not runs and status is not Status.COMPILED:
            correct = False  # a compile error needs no device to be one
        perf = report.performance or {}
        kernel_ms = perf.get("median_ms")
        base = session.baseline
        eager = base.torch_eager_ms if base else None
        compiled = base.torch_compile_ms if base else None
        note = (base.torch_note if base else None) or (None if base else "no yardstick: compile-only (no device)")
        if base and eager is None and compiled is None and not note:
            note = "no torch time measured"
        return ProblemResult(
            problem=item.problem, file=item.file, kernel=item.kernel, outcome=outcome, correct=correct,
            status=str(status), failure=report.failure, message=clean(report.message or "", MESSAGE_CHARS),
            session_id=info.session_id, version=report.version, sizes=session.sizes,
            device=f"{session.device} (#{session.device_index})" if runs else session.device,
            kernel_ms=kernel_ms, torch_eager_ms=eager, torch_compile_ms=compiled,
            speedup_eager=_ratio(eager, kernel_ms), speedup_compile=_ratio(compiled, kernel_ms),
            yardstick_note=note, seconds=round(time.perf_counter() - started, 1))


def _ratio(theirs: float | None, mine: float | None) -> float | None:
    return round(theirs / mine, 3) if theirs and mine else None


def _unrun(item: BatchItem, outcome: Outcome, why: str, seconds: float = 0.0) -> ProblemResult:
    return ProblemResult(problem=item.problem, file=item.file, kernel=item.kernel, outcome=outcome, correct=False,
                         failure=outcome, message=clean(why, MESSAGE_CHARS), sizes=item.sizes,
                         seconds=round(seconds, 1))
