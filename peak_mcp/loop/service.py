"""The optimization loop, free of MCP: sessions, submissions, validation, timing, history, apply runs.

Synchronous on purpose: each call may block on a worker; the MCP layer runs it in a thread.
"""

from __future__ import annotations

import ast
import difflib
import os
import sqlite3
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import structlog

from peak_mcp import __version__
from peak_mcp.backends.confined import CompileLimits
from peak_mcp.backends.includes import REFUSED
from peak_mcp.backends.registry import BACKENDS, backend_spec, launch_spec
from peak_mcp.catalog.suggest import Suggestions, suggest_next
from peak_mcp.catalog.transformations import Catalog
from peak_mcp.confine.sandbox import Protection, landlock_abi, probe_protections
from peak_mcp.core.config import Settings
from peak_mcp.core.devices import Device, cuda_family, describe, load_profiles
from peak_mcp.core.errors import InvalidInput, NotFound, PeakError, Unavailable
from peak_mcp.core.launch import LaunchSpec
from peak_mcp.core.text import checked_label, clipped
from peak_mcp.core.text_safety import clean
from peak_mcp.core.units import speed
from peak_mcp.evaluation.configs import BestConfig, Config, ConfigResult, TuneReport, beats
from peak_mcp.evaluation.generality import check_constraints, sample_sizes, satisfies
from peak_mcp.evaluation.kernel_reference import ReferenceKernel
from peak_mcp.evaluation.noise import NOISE, SLOWER, change
from peak_mcp.evaluation.phases import Baseline, Generality, SanitizerReport, SizeFailure, Verdict, dumped
from peak_mcp.loop.fanout import FanOut, tuning_devices
from peak_mcp.loop.models import (
    BackendStatus,
    CheckReport,
    DiffReport,
    DoctorReport,
    HistoryReport,
    Missing,
    ProblemInfo,
    ProblemList,
    SessionInfo,
    SessionList,
    SessionSummary,
    Submission,
    VersionDetail,
    VersionReport,
)
from peak_mcp.loop.tuning import Space, batch_size, make_strategy, run_tuning, usable_cores
from peak_mcp.loop.verdicts import (
    ACCEPT_SPECIALIZED,
    above_session,
    also_wrong,
    judge,
    loop_caveat,
    named_sizes,
    no_vendor_reason,
    not_general_message,
)
from peak_mcp.problems.base import Problem
from peak_mcp.problems.declaration import NAME as NAME_PATTERN
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.problems.describe import MISSING_MODULE
from peak_mcp.problems.registry import DescribeFailed, ProblemRegistry, describe_in_subprocess
from peak_mcp.problems.shipped import BUILTIN_CLASSES
from peak_mcp.runner.messages import EvaluateJob, GeneralityJob, Job, ProfileJob, TuneJob
from peak_mcp.runner.ownership import ServerPresence
from peak_mcp.runner.pool import DevicePool, JobFailed
from peak_mcp.runner.probe import probe_all_in_subprocess
from peak_mcp.runner.replies import EvaluateResult, GeneralityResult, JobResult, ProfileResult, TuneResult
from peak_mcp.store.database import Store
from peak_mcp.store.lease import HEARTBEAT_S
from peak_mcp.store.records import Outcome, SessionRow, Status, VersionRow
from peak_mcp.store.reports import (
    best_version,
    history_rows,
    markdown_table,
    performance,
    roofline_ms,
    trim_log,
)

if TYPE_CHECKING:
    from peak_mcp.runner.ray_pool import RayDevicePool

log = structlog.get_logger("peak_mcp.loop.service")
Progress = Callable[[str], None]
MAX_SOURCE_BYTES = 256 * 1024
# Generality failures that make a version wrong, not merely specialized: at a legal (and small) size it crashes the
# device or its worker, or never finishes. Guard-detected accesses at other sizes are what an unguarded tile kernel
# does: those keep head where it is and stay in the generality report.
DEVICE_FAULTS = ("kernel_fault", "worker_died", "timeout")
# The sanitizer slows a launch 10-100x: at the session's sizes only when they are small (Problem.work: flops or bytes)
SANITIZER_MAX_FLOPS = 2e10
# ... and GPU-assisted validation on a CPU Vulkan device (lavapipe) runs an instrumented shader at CPU speed.
VULKAN_SANITIZER_MAX_FLOPS = 1e9
# A CPU Vulkan driver (lavapipe) does matmul at 4096^3 in an hour: without sizes, a session on one starts at the
# problem's defaults halved (largest symbol first) until a launch does at most this much work (matmul: 1024^3) and
# moves at most this many bytes (softmax: 1024 x 2048 in f32; each of them passes through the host reference too).
CPU_DEVICE_FLOPS, CPU_DEVICE_BYTES = 2.0**31, 2.0**24
PROFILE_INACTIVITY_S, PROFILE_TOTAL_S = 90.0, 360.0
# Tuning: the search's fastest few are timed again before the best is chosen where their spreads are wide or overlap.
RETIME_TOP, NOISY_CV = 3, 0.1


MAX_DEFINE_BYTES = 256 * 1024  # define_problem's source
# A worker's error (Failed.error: a problem file's exception among them) and the messages of a generality or tune
# result, as the server keeps and returns them: no terminal control, bounded.
WORKER_TEXT_CHARS = 4000


def _cleaned_failure(exc: JobFailed) -> JobFailed:
    """`exc` with its message and hint cleaned (text_safety.clean): a problem_error quotes the problem file's own
    exception message, and a worker's reply is not trusted to be printable or short."""
    exc.message = clean(exc.message, WORKER_TEXT_CHARS)
    exc.hint = clean(exc.hint, 1000) if exc.hint else exc.hint
    exc.args = (exc.message,)
    return exc


def _cleaned_result(result: JobResult) -> JobResult:
    """The texts of a worker's result that may quote problem code (a problem_error at a sampled size, a tune
    configuration that failed with one), cleaned as _cleaned_failure does."""
    if isinstance(result, GeneralityResult) and result.generality is not None:
        for failure in result.generality.failures:
            if failure.message:
                failure.message = clean(failure.message, WORKER_TEXT_CHARS)
        if result.generality.note:
            result.generality.note = clean(result.generality.note, WORKER_TEXT_CHARS)
    elif isinstance(result, TuneResult):
        for config in result.results:
            if config.reason and config.kind in ("error", "validation"):
                config.reason = clean(config.reason, WORKER_TEXT_CHARS)
    return result


def _file_sha256(problem: Problem) -> str | None:
    """A problem file's sha256 (what its sessions were started on); None for a built-in class."""
    return problem.declaration.sha256 if isinstance(problem, DeclaredProblem) else None


REFERENCE_KERNEL_NEEDED = ("none in Python: start_session needs reference_kernel=SOURCE (your current kernel, v0); "
                           "every candidate is checked against it on the same inputs")


def _problem_info(p: Problem) -> ProblemInfo:
    """A problem as list_problems and define_problem show it: symbols, dtypes, the ABI per backend."""
    backends = [b for b in p.backends if b in BACKENDS]
    return ProblemInfo(
        name=p.name, title=p.title, sizes=list(p.symbols), default_sizes=p.default_sizes, dtypes=list(p.dtypes),
        backends=backends, source=p.source, dtypes_by_backend={b: list(p.dtypes_for(b)) for b in backends},
        abi={b: p.abi(b, p.dtypes_for(b)[0]) for b in backends},
        naive=None if all(p.has_naive(b, p.dtypes_for(b)[0]) for b in backends) else
        [b for b in backends if p.has_naive(b, p.dtypes_for(b)[0])],
        reference=REFERENCE_KERNEL_NEEDED if p.needs_reference_kernel else None)


def defined_problem_stem(source: str, name: str | None) -> str:
    """The file stem define_problem stages a source under, read without running it: its NAME (a string literal at
    top level), else for a KernelBench module (class Model, def get_inputs) `name`. InvalidInput naming the line
    for a syntax error, and for a source over MAX_DEFINE_BYTES."""
    if not isinstance(source, str) or not source.strip():
        raise InvalidInput("the problem source is empty", "pass a problem file's whole text.")
    if len(source.encode("utf-8", "replace")) > MAX_DEFINE_BYTES:
        raise InvalidInput(f"the problem source is over {MAX_DEFINE_BYTES} bytes",
                           "inline only the naive kernels it needs.")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise InvalidInput(f"the problem was not saved: line {exc.lineno}: syntax error: {exc.msg}",
                           "fix the source and call define_problem again.") from None
    declared = None
    top = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "NAME" for t in node.targets):
            declared = node.value.value if isinstance(node.value, ast.Constant) else None
            if not isinstance(declared, str):
                raise InvalidInput(f"the problem was not saved: line {node.lineno}: NAME must be a string literal",
                                   "write NAME = \"my_problem\".")
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            top.add(node.name)
    chosen = declared or (name if {"Model", "get_inputs"} <= top else None)
    if chosen is None:
        raise InvalidInput("the problem was not saved: it declares no NAME, and a KernelBench module (class Model, "
                           "get_inputs) needs the name argument", "set NAME, or pass name.")
    if name is not None and declared is not None and name != declared:
        raise InvalidInput(f"name={name!r} differs from the source's NAME {declared!r}", "omit name.")
    if not NAME_PATTERN.fullmatch(chosen):
        raise InvalidInput(f"problem name {chosen!r} must match [a-z][a-z0-9_]{{0,39}}", None)
    return chosen


def _quiet(_: str) -> None:
    pass


def _number(version: VersionRow | None) -> int | None:
    return version.number if version is not None else None


def _tuning_brief(report: TuneReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    timed = sorted((r for r in report.results if r.status == "ok"), key=lambda r: r.median_ms or 0.0)
    return {"strategy": report.strategy, "space_size": report.space_size, "tried": report.tried,
            "pruned": len(report.pruned) + report.where_pruned, "stopped": report.stopped, "devices": report.devices,
            "best": report.best.model_dump() if report.best else None, "chosen_by": report.chosen_by,
            "fastest": [{"params": r.params, "median_ms": r.median_ms} for r in timed[:5]]}


class PeakService:
    def __init__(self, settings: Settings, *, pool: DevicePool | RayDevicePool | None = None,
                 probe: Callable[[], dict[str, Any]] | None = None) -> None:
        self.settings = settings
        self.store = Store(settings.database)
        self.store.join()
        self._presence = ServerPresence(settings.data_dir / "locks")
        # Alone on the data dir, whatever is pending was cut off (versions from before leases included); beside
        # other servers, only what belongs to a gone or lapsed lease. After that, the heartbeat keeps looking.
        stale = self.store.interrupt_pending() if self._presence.alone else self.store.reclaim()
        if stale:
            log.warning("versions left pending by a stopped server marked interrupted", count=stale)
        self._presence.settle()
        self._stopping = threading.Event()
        self._heartbeat = threading.Thread(target=self._keep_lease, name="peak-lease", daemon=True)
        self._heartbeat.start()
        self.pool: DevicePool | RayDevicePool = pool or DevicePool(lock_dir=settings.data_dir / "locks",
                                                                   options=settings.worker_options)
        self._probe_fn = probe or (lambda: probe_all_in_subprocess(
            options={name: settings.probe_options(name) for name in BACKENDS}))
        self._probe: dict[str, Any] | None = None
        self.profiles = load_profiles()
        self._devices: dict[str, Device] = {}  # session id -> described device
        # Problem files are read (confined, by content) at the first look-up, and again by list_problems and
        # start_session when they changed.
        # Made now, before any worker starts: a worker can read only folders that existed when it was confined, and
        # define_problem may write its first file after the workers started.
        settings.defined_problems.mkdir(parents=True, exist_ok=True)
        self.http = False  # serving streamable HTTP (cli): define_problem then needs the operator's consent
        # The defined folder is a source only while this server lets clients define problems: one that refuses
        # never reads (imports, even confined) nor serves what another server wrote into the same data dir.
        self.problems = ProblemRegistry(settings.problem_dirs, defined=settings.defined_problems,
                                        classes=BUILTIN_CLASSES.values(), sandbox=settings.sandbox,
                                        defined_on=self.defining_allowed,
                                        memory_bytes=settings.problem_memory_mb << 20)

    def close(self) -> None:
        self._stopping.set()
        self._heartbeat.join()
        self.pool.close()
        self.store.leave()
        self.store.close()
        self._presence.close()

    def _keep_lease(self) -> None:
        """Renew this server's lease and take over the pending versions of servers that stopped, until close."""
        while not self._stopping.wait(HEARTBEAT_S):
            try:
                self.store.renew()
                taken = self.store.reclaim()
            except sqlite3.Error as exc:  # the data dir busy past SQLite's timeout: the next beat tries again
                log.warning("lease renewal failed", error=str(exc))
                continue
            if taken:
                log.warning("versions of a stopped server marked interrupted", count=taken)

    # --- devices ---------------------------------------------------------------------------------------------
    def probe(self, refresh: bool = False) -> dict[str, Any]:
        if self._probe is None or refresh:
            self._probe = self._probe_fn()
        return self._probe

    def doctor(self, catalog_info: dict[str, Any] | None = None) -> DoctorReport:
        statuses = []
        for name, report in self.probe(refresh=True).items():
            devices = [describe(d, self.profiles) for d in report.get("devices", [])]
            compiler_ok = bool(report.get("compiler", {}).get("available"))
            statuses.append(BackendStatus(
                backend=name, usable=compiler_ok, can_run=compiler_ok and bool(devices),
                devices=[{**d.model_dump(exclude_none=True),
                          "queued_jobs": self.pool.queue_length(name, int(d.index if d.index is not None else -1))}
                         for d in devices],
                compiler=report.get("compiler", {}), missing=[Missing(**m) for m in report.get("missing", [])]))
        return DoctorReport(version=__version__, data_dir=str(self.settings.data_dir), backends=statuses,
                            catalog=catalog_info or {}, workers={"restarts": self.pool.restarts},
                            sandbox=self.sandbox_summary())

    def sandbox_summary(self) -> str:
        """What confines the processes that run agent and problem text here (measured by starting one: namespaces,
        read-only kernel knobs, cgroups, capabilities, Landlock and what it denies, or why each is missing), then
        the limits every compile runs under."""
        limits = CompileLimits(**self.settings.confinement())
        if not self.settings.sandbox:
            off = Protection(0, "switched off by PEAK_MCP_SANDBOX=0")
            return f"{off.describe()}; each compile: {limits.describe()}"
        found = probe_protections()
        missing = f"; missing: {'; '.join(found['missing'])}" if found["missing"] else ""
        return (f"{'; '.join(found['landlock'] or [landlock_abi().describe()])}; isolation: "
                f"{', '.join(found['held']) or 'none'}{missing}; each compile: {limits.describe()}")

    def _device_for(self, backend: str, device: str | int | None = None) -> tuple[Device, int]:
        """A device of `backend` (see `place`), or a compile-only target where a backend can compile without one."""
        if backend not in BACKENDS:
            raise InvalidInput(f"unknown or unavailable backend {backend!r}", f"choose one of {sorted(BACKENDS)}.")
        report = self.probe().get(backend, {})
        if report.get("devices"):
            chosen = self.place(backend, report["devices"], device)
            return describe(chosen, self.profiles), int(chosen["index"])
        if device not in (None, "auto"):
            raise InvalidInput(f"device={device!r}: this machine has no {backend} device",
                               "omit device (a compile-only session), or run the doctor tool.")
        if not report.get("compiler", {}).get("available"):
            why = "; ".join(f"{m['what']}: {m['why']} (fix: {m['fix']})" for m in report.get("missing", []))
            raise Unavailable(f"the {backend} backend cannot compile on this machine: {why}",
                              "run the doctor tool for details.")
        if backend == "cuda":  # the target the compiler really uses ($PEAK_CUDA_ARCH), so resolution matches it
            arch = self.settings.cuda_arch
            return Device(name="compile-only (no GPU)", backend="cuda", index=-1, arch=arch,
                          family=cuda_family(arch)), -1
        if report.get("compile_target"):  # a backend that names its own compile-only target (hip: gfx90a or sm_)
            return describe(report["compile_target"], self.profiles), -1
        why = "; ".join(f"{m['what']}: {m['why']} (fix: {m['fix']})" for m in report.get("missing", []))
        raise Unavailable(f"no {backend} device on this machine: {why}", "run the doctor tool for details.")

    def place(self, backend: str, devices: list[dict[str, Any]], device: str | int | None) -> dict[str, Any]:
        """`device`: an index, a name pattern (case-insensitive substring), or None/"auto". Among the candidates,
        the least loaded: fewest jobs queued, then fewest sessions, then the lowest index."""
        candidates = devices
        if isinstance(device, bool):
            raise InvalidInput(f"device={device!r} is not a device", "pass an index, a name pattern or 'auto'.")
        if isinstance(device, int) or (isinstance(device, str) and device.strip().isdigit()):
            candidates = [d for d in devices if int(d["index"]) == int(device)]
        elif isinstance(device, str) and device.strip().lower() not in ("", "auto"):
            candidates = [d for d in devices if device.strip().lower() in str(d.get("name", "")).lower()]
        if not candidates:
            listed = ", ".join(f"{d['index']}: {d.get('name')}" for d in devices)
            raise InvalidInput(f"no {backend} device matches device={device!r}", f"this machine has {listed}.")
        sessions = Counter(s.device_index for s in self.store.sessions() if s.backend == backend)
        return min(candidates, key=lambda d: (self.pool.queue_length(backend, int(d["index"])),
                                              sessions[int(d["index"])], int(d["index"])))

    # --- problems and sessions -------------------------------------------------------------------------------
    def problem(self, name: str) -> Problem:
        """The problem a session names (NotFound, with the file's error where one failed to load)."""
        return self.problems.get(name)

    def list_problems(self) -> ProblemList:
        self.problems.refresh()
        return ProblemList(problems=[_problem_info(p) for p in self.problems.problems()],
                           errors=[e.model_dump() for e in self.problems.client_errors()])

    def defining_allowed(self) -> bool:
        """define_problem is on: always over stdio, over HTTP only with PEAK_MCP_ALLOW_DEFINE_PROBLEM."""
        return not self.http or self.settings.allow_define_problem

    def define_problem(self, source: str, name: str | None = None) -> ProblemInfo:
        """Save a problem file's text (docs/problems.md, or a KernelBench module, named by `name`) under
        `<data dir>/problems/<NAME>.py` once the confined describe has read it; nothing is saved otherwise. Over
        HTTP only where the operator allows it (PEAK_MCP_ALLOW_DEFINE_PROBLEM)."""
        if not self.defining_allowed():
            raise InvalidInput("define_problem is off on this HTTP server",
                               "the operator turns it on with PEAK_MCP_ALLOW_DEFINE_PROBLEM=true; or put the problem "
                               "file in a folder the server reads (PEAK_MCP_PROBLEMS).")
        stem = defined_problem_stem(source, name)
        self._check_name_free(stem)
        with tempfile.TemporaryDirectory(prefix="peak-define-") as staging:
            staged = Path(staging) / f"{stem}.py"
            staged.write_text(source)
            try:
                declaration = describe_in_subprocess(staged, sandbox=self.problems.sandbox,
                                                     timeout_s=self.problems.timeout_s,
                                                     memory_bytes=self.problems.memory_bytes)
            except DescribeFailed as exc:
                where = f"line {exc.line}: " if exc.line else ""
                raise InvalidInput(f"the problem was not saved: {where}{exc.message}",
                                   "ask the operator to install it, or define the problem with a NumPy reference "
                                   "(docs/problems.md)." if MISSING_MODULE in exc.message else
                                   "fix the source and call define_problem again.") from None
        self._check_name_free(declaration.name)
        folder = self.settings.defined_problems
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{declaration.name}.py"
        temporary = folder / f".{declaration.name}.{os.getpid()}.tmp"
        temporary.write_text(source)
        temporary.replace(target)  # a file of the same name is replaced whole, never half written
        self.problems.refresh()
        return _problem_info(self.problems.get(declaration.name))

    def _check_name_free(self, name: str) -> None:
        """InvalidInput where `name` is a shipped problem's or a built-in one's: a defined file never replaces it."""
        holder = self.problems.reserved().get(name)
        if holder is not None:
            raise InvalidInput(f"the problem was not saved: the name {name!r} is taken by {holder}, which a defined "
                               "problem cannot replace",
                               f"choose a different NAME (e.g. NAME = \"my_{name}\"; for a KernelBench module, a "
                               "different name argument) and call define_problem again.")

    def _wire(self, session: SessionRow) -> dict[str, Any]:
        """What every job for this session carries to name its problem (see Problem.wire), and for a problem without
        a Python reference the session's reference kernel (version 0), which the worker checks candidates against."""
        problem = self.problem(session.problem)
        if not problem.needs_reference_kernel:
            return problem.wire()
        try:
            v0 = self.store.version(session.id, 0)
        except NotFound:
            v0 = None
        if v0 is None or v0.origin != "reference":
            raise InvalidInput(f"session {session.id} of {problem.name} has no reference kernel",
                               f"{problem.name} has no Python reference: start a session with reference_kernel=SOURCE.")
        return {**problem.wire(),
                "reference_kernel": ReferenceKernel(source=v0.source, spec=self._spec(session, v0.source))}

    def start_session(self, problem: str, backend: str, dtype: str, sizes: dict[str, Any] | str | None,
                      label: str | None = None, progress: Progress = _quiet,
                      constraints: list[str] | None = None, device: str | int | None = None,
                      reference_kernel: str | None = None) -> SessionInfo:
        label = checked_label(label)
        self.problems.refresh()
        spec = self.problem(problem)
        spec.check_dtype(dtype, backend if backend in BACKENDS else None)
        if isinstance(sizes, str):
            sizes = spec.parse_sizes(sizes)
        spec.check_sizes(sizes)  # bad sizes fail before the device probe
        left_out = [s for s in spec.symbols if sizes and s not in sizes]
        constraints = check_constraints(spec, constraints)
        if spec.needs_reference_kernel and reference_kernel is None:
            raise InvalidInput(f"{spec.name} has no Python reference: its sessions check every kernel against yours",
                               "pass your current kernel as reference_kernel=SOURCE; it becomes v0.")
        if backend in BACKENDS and backend not in spec.backends:
            raise InvalidInput(f"{spec.name} is not offered on {backend}", f"choose one of {list(spec.backends)}.")
        naive = spec.naive_kernel(backend, dtype) if backend in BACKENDS and spec.has_naive(backend, dtype) else None
        placed, index = self._device_for(backend, device)
        sizes, note = self.session_sizes(spec, placed, sizes)
        checked = spec.check_sizes(sizes)
        if not satisfies(checked, constraints):
            raise InvalidInput(f"the session's sizes {checked} do not meet its constraints {constraints}",
                               "choose sizes that meet them, or drop the constraint.")
        session_id = self.store.create_session(problem=problem, backend=backend, dtype=dtype, sizes=checked,
                                               device=placed.name, device_index=index, label=label,
                                               constraints=constraints, device_info=placed.model_dump(),
                                               problem_sha256=_file_sha256(spec))
        self._devices[session_id] = placed
        if reference_kernel is not None:  # the user's current kernel is v0, validated against the reference
            report = self._submit(session_id, reference_kernel, parent=None, origin="reference", transformation=None,
                                  progress=progress)
        else:
            report = self._submit(session_id, naive, parent=None, origin="naive", transformation=None,
                                  progress=progress) if naive is not None else None
        if index >= 0:
            self._measure_baseline(session_id, progress)
        info = self.session_info(session_id)
        if report is not None:
            info.version_0 = self.version_report(session_id, report.version)
        else:
            info.brief = (f"{spec.name} has no naive {backend} kernel: no version yet. Submit your first kernel with "
                          f"submit_kernel; it becomes v0 (validated, timed and checked at other sizes like any "
                          f"other).\nABI ({backend}, {dtype}):\n{spec.abi(backend, dtype)}")
        if left_out:
            filled = ", ".join(f"{s}={checked[s]}" for s in left_out)
            note = (note + "; " if note else "") + f"sizes not given were taken from the problem's defaults: {filled}"
        info.note = note
        return info

    @staticmethod
    def session_sizes(spec: Problem, device: Device,
                      sizes: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None]:
        """The sizes asked for; on a CPU device without any, ones it does in seconds (Problem.scaled_sizes), with a
        note saying so."""
        scaled = spec.scaled_sizes(CPU_DEVICE_FLOPS, CPU_DEVICE_BYTES) if sizes is None and device.is_cpu else None
        if scaled is not None:
            return scaled, (f"sizes default to {scaled} on this CPU device ({device.name}): the problem's "
                            f"{spec.default_sizes} would take it far longer; pass sizes to override")
        return sizes, None

    def device_of(self, session: SessionRow) -> Device:
        """The device as described when the session started (stored with it, so everything resolved by device
        answers the same after a restart); sessions from before that was stored are described again."""
        cached = self._devices.get(session.id)
        if cached is None and session.device_info:
            cached = Device.model_validate(session.device_info)
        if cached is None:
            report = self.probe().get(session.backend, {})
            found = [d for d in report.get("devices", []) if d.get("name") == session.device]
            cached = describe(found[0], self.profiles) if found else describe({"name": session.device},
                                                                              self.profiles)
        self._devices[session.id] = cached
        return cached

    def _measure_baseline(self, session_id: str, progress: Progress) -> None:
        session = self.store.session(session_id)
        job = EvaluateJob(**self._wire(session), dtype=session.dtype, sizes=session.sizes, steps=["baseline"],
                          time_budget_s=self.settings.benchmark_budget_s)
        try:
            baseline = self._run_job(session, job, progress).baseline or Baseline(available=False, reason="no result")
        except PeakError as exc:
            baseline = Baseline(available=False, reason=str(exc))
        self.store.set_baseline(session_id, self._yardstick_said(session, baseline).model_dump(mode="json"))

    def _yardstick_said(self, session: SessionRow, baseline: Baseline | None) -> Baseline | None:
        """A problem without a vendor library: what stands in for it is said from the server's view of the device
        (its profile's peak and bandwidth), which a worker's own facts lack."""
        problem = self.problem(session.problem)
        if baseline is None or problem.yardstick is not None:
            return baseline
        return baseline.model_copy(update={"reason": no_vendor_reason(problem.name, self.device_of(session))})

    def session_info(self, session_id: str) -> SessionInfo:
        s = self.store.session(session_id)
        versions = self.store.versions(session_id)
        return SessionInfo(session_id=s.id, problem=s.problem, backend=s.backend, dtype=s.dtype,
                           sizes=s.sizes, device=self.device_of(s).summary(), head=s.head,
                           best=_number(best_version(versions)), versions=len(versions),
                           baseline=dumped(s.baseline), label=s.label, constraints=s.constraints or [])

    def session_list(self, offset: int = 0, limit: int = 20) -> SessionList:
        """One line per session, oldest first, a page at a time."""
        sessions = self.store.sessions()
        rows = []
        for s in sessions[offset:offset + limit]:
            versions = self.store.versions(s.id)  # once per session: the count and the best version's time
            fastest = best_version(versions)
            t = fastest.timing if fastest else None
            best = f"v{fastest.number}: {t.median_ms:.4g} ms, {speed(t.tflops, t.gbps) or 'n/a'}" if t else None
            # clipped: a data dir from before labels were bounded may hold one of megabytes, on every page
            rows.append(SessionSummary(session_id=s.id, label=clipped(s.label) if s.label else s.label,
                                       problem=s.problem,
                                       backend=s.backend, dtype=s.dtype, sizes=s.sizes,
                                       device=f"{s.device} (#{s.device_index})" if s.device_index >= 0
                                       else s.device,
                                       head=s.head, versions=len(versions), best=best))
        return SessionList(sessions=rows, total=len(sessions), offset=offset)

    # --- submissions -----------------------------------------------------------------------------------------
    def submit_kernel(self, session_id: str, source: str, parent: int | None = None,
                      transformation: str | None = None, progress: Progress = _quiet, *,
                      apply_id: str | None = None, attempt: int | None = None,
                      require_generality: bool = True) -> Submission:
        session = self.store.session(session_id)
        if parent is None:
            parent = session.head
        elif isinstance(parent, bool) or not isinstance(parent, int) or parent < 0:
            raise InvalidInput(f"parent={parent!r} is not a version number", "omit parent to derive from head, or "
                               "pass a version number from history (0 or more).")
        else:
            self.store.version(session_id, parent)  # raises NotFound with a hint
        origin = "apply" if apply_id else "submit"
        return self._submit(session_id, source, parent=parent, origin=origin, transformation=transformation,
                            progress=progress, apply_id=apply_id, attempt=attempt,
                            require_generality=require_generality)

    def _submit(self, session_id: str, source: str, *, parent: int | None, origin: str,
                transformation: str | None, progress: Progress, apply_id: str | None = None,
                attempt: int | None = None, require_generality: bool = True) -> Submission:
        started = time.perf_counter()
        session = self.store.session(session_id)
        if not isinstance(source, str) or not source.strip():
            raise InvalidInput("the kernel source is empty", "pass the whole kernel file, annotation line included.")
        try:
            size = len(source.encode())
        except UnicodeEncodeError as exc:  # a lone surrogate from JSON's \ud800: no UTF-8 text, nothing to store
            line = source.count("\n", 0, exc.start) + 1
            raise InvalidInput(f"line {line} of the kernel source holds U+{ord(source[exc.start]):04X}, a lone "
                               "surrogate: not valid Unicode text", "send the kernel as plain UTF-8 text.") from None
        if size > MAX_SOURCE_BYTES:
            raise InvalidInput(f"the kernel source is {size} bytes, over the {MAX_SOURCE_BYTES} "
                               "limit", "submit one kernel file, without generated tables.")
        number = self.store.add_version(session_id, parent=parent, origin=origin, transformation=transformation,
                                        apply_id=apply_id, attempt=attempt, source=source, status=Status.PENDING)
        # A child whose parameters take its parent's tuned configuration starts from it, so that its time compares
        # with the parent's tuned one; otherwise each list's first value.
        params, params_from, inherited = self._configuration(session, source, parent)
        outcome = self._evaluate(session, source, progress, vendor_ms=session.vendor_ms, params=params)
        if params and outcome.timing:
            outcome.timing = outcome.timing.model_copy(update={"params": params, "params_from": params_from,
                                                               "params_inherited": inherited})
        compile_log = outcome.compile.log if outcome.compile else ""
        refused = REFUSED in f"{outcome.message}{compile_log}"  # the text was refused, whatever the configuration
        if params and params_from == "parent" and not refused:  # said whatever came of it: a failure may be the
            # configuration's
            message = outcome.message or ""
            separator = "\n" if "\n" in message else "; "  # after a compiler log, on a line of its own
            own = {k: x for k, x in params.items() if k not in (inherited or [])}
            outcome.message = (f"{message}{separator}evaluated at its parent v{parent}'s tuned configuration "
                               f"{Config(params={k: x for k, x in params.items() if k not in own}).label()}"
                               + (f" with its own defaults {Config(params=own).label()}" if own else "")
                               + " (tune it to search its own)")
        if outcome.status.passed:
            # Everything measured so far is recorded now, but the version stays pending until it is checked at the
            # other sizes: a server that dies meanwhile leaves it interrupted, never passed unchecked.
            self.store.update_version(session_id, number,
                                      **outcome.model_copy(update={"status": Status.PENDING}).columns())
            outcome = self._with_generality(session, source, outcome, progress, params)
        if outcome.status is Status.NOT_GENERAL and not require_generality:  # the hint was taken: say so instead
            outcome.message = (outcome.message or "").replace(
                ACCEPT_SPECIALIZED, "accepted here as a specialized kernel (require_generality=false)")
        problem = self.problem(session.problem)
        changed = _file_sha256(problem)
        if session.problem_sha256 and changed and changed != session.problem_sha256:
            outcome.message = (f"{outcome.message or ''}\nnote: the problem file changed since this session started "
                               f"(sha256 {session.problem_sha256[:12]} -> {changed[:12]}): this version was judged by "
                               "the new definition, earlier ones by the old; start a new session to compare like "
                               "with like").lstrip("\n")
        if origin == "reference" and problem.needs_reference_kernel:
            outcome.message = ("v0 is this session's reference (the problem has no Python reference): its checks "
                               "compare it with itself, so they find faults of its own (guards, inputs unchanged, "
                               "every output written, repeat launches alike, other sizes), never a wrong value. "
                               + (outcome.message or ""))
        self.store.update_version(session_id, number, **outcome.columns())
        # Head moves only to versions validated and timed: one wrong at other sizes only when the agent accepts a
        # specialized kernel. Without a device nothing runs, and a version that only compiled (an empty kernel
        # compiles) proves nothing: head stays on v0, the starting point, and the note says why.
        status = outcome.status
        moves = session.runs and (status.passed or (status is Status.NOT_GENERAL and not require_generality))
        if moves or (number == 0 and status is Status.COMPILED and session.head is None):
            self.store.set_head(session_id, number)
        report = Submission(**dict(self.version_report(session_id, number)),
                            note=self.standing_note(session_id, number))
        report.seconds = time.perf_counter() - started
        log.info("version recorded", session=session_id, version=number, status=report.status,
                 seconds=round(report.seconds, 3))
        return report

    def _configuration(self, session: SessionRow, source: str,
                       parent: int | None) -> tuple[dict[str, int] | None, str | None, list[str] | None]:
        """The configuration a new version is evaluated at, and where it came from: its parent's tuned one
        ("parent") for each parameter the source declares under the same name with that value among its
        candidates, when the whole meets `where` at the session's sizes; else the defaults. The third item: the names
        whose values are the parent's (the rest are defaults). (None, None, None) for a source without parameters,
        or one whose annotation does not parse (the evaluation says why)."""
        try:
            spec = self._spec(session, source)
        except PeakError:
            return None, None, None
        if not spec.params:
            return None, None, None
        ran = self.store.version(session.id, parent).timing if parent is not None else None
        tuned = ran.params if ran and ran.params and ran.params_from != "defaults" else {}
        taken = {name: value for name, value in tuned.items() if value in spec.params.get(name, ())}
        if taken:
            config = spec.config(taken)
            try:
                if not spec.violated(session.sizes, config):
                    return config, "parent", list(taken)
            except PeakError:
                pass
        return spec.config(), "defaults", None

    def _with_generality(self, session: SessionRow, source: str, outcome: Outcome, progress: Progress,
                         params: dict[str, int] | None = None) -> Outcome:
        """The outcome once generality and the sanitizer have run (at `params`, the configuration timed): a crash
        or hang at a sampled size, or a sanitizer finding, fails it; a wrong result at another size makes it
        not_general."""
        generality, sanitized = self._generality(session, source, progress, params)
        update: dict[str, Any] = {"generality": generality}
        if sanitized and outcome.validation is not None:  # kept with the verdict at the session's sizes
            update["validation"] = outcome.validation.model_copy(update={"sanitizer": sanitized})
        outcome = outcome.model_copy(update=update)
        unsafe = next((f for f in generality.failures if f.check in DEVICE_FAULTS
                       and not (f.check == "timeout" and above_session(self.problem(session.problem), session.sizes,
                                                                      f.sizes))),
                      None)
        if unsafe:
            return outcome.model_copy(update={"status": Status.FAILED, "failure": unsafe.check,
                                              "message": f"at sizes {unsafe.sizes} (generality): {unsafe.message}"})
        if sanitized and sanitized.failures:
            first = sanitized.failures[0]
            return outcome.model_copy(update={"status": Status.FAILED, "failure": first.check,
                                              "message": f"{first.message} (at {sanitized.sizes})"
                                                         + also_wrong(generality)})
        if generality.passed is False and generality.failures:
            problem = self.problem(session.problem)
            return outcome.model_copy(update={"status": Status.NOT_GENERAL,
                                              "failure": f"generality_{generality.failures[0].check}",
                                              "message": not_general_message(
                                                  outcome, generality, problem.symbols,
                                                  bound_declarable=isinstance(problem, DeclaredProblem)
                                                  and not problem.declaration.has_error_scale)})
        return outcome

    def _generality(self, session: SessionRow, source: str, progress: Progress,
                    params: dict[str, int] | None = None) -> tuple[Generality, SanitizerReport | None]:
        """Validate at the problem's awkward sizes within the session's constraints, then (CUDA, where installed)
        run compute-sanitizer at one of them. A fault at one size (the worker dies) is that size's verdict, not
        the version's. Returns (generality, sanitizer report or None)."""
        problem = self.problem(session.problem)
        constraints = session.constraints or []
        sizes_list = sample_sizes(problem, session.sizes, constraints)
        sanitize_at = None
        # compute-sanitizer watches the CUDA driver: HIP sessions on NVIDIA qualify, HIP on AMD does not. HLSL's
        # is the Vulkan validation layer's GPU-assisted validation, on any Vulkan driver.
        if self.settings.sanitizer and backend_spec(session.backend).sanitizer and \
                (session.backend == "hlsl" or self.device_of(session).vendor != "amd"):
            # One of the sampled sizes; with none, the session's own when small (the sanitizer slows a launch a lot).
            fallback = sizes_list[-1] if sizes_list else (
                session.sizes if problem.work(session.sizes, session.dtype) <= (
                    VULKAN_SANITIZER_MAX_FLOPS if session.backend == "hlsl" else SANITIZER_MAX_FLOPS) else None)
            sanitize_at = next((s for s in sizes_list if min(s.values()) >= 16), fallback)
        unchecked = Generality(passed=None, sizes_checked=[], failures=[], constraints=constraints,
                               note=f"no sampled size meets the constraints {constraints}: generality is unchecked")
        if not sizes_list and sanitize_at is None:
            return unchecked, None
        started = time.perf_counter()
        spec = self._spec(session, source)
        if params:
            spec = spec.bind(params)
        job = GeneralityJob(**self._wire(session), dtype=session.dtype, source=source, spec=spec,
                            sizes_list=sizes_list, sanitize_sizes=sanitize_at)
        sanitized = None
        try:
            result = self._run_job(session, job, progress)
            generality, sanitized = result.generality or Generality(), result.sanitizer  # none: did not compile
        except JobFailed as exc:
            if not exc.stage.startswith("generality at "):  # e.g. during compute-sanitizer: nothing known of sizes
                return Generality(passed=None, sizes_checked=[], failures=[],
                                  note=f"the check stopped during '{exc.stage}': {exc}"), None
            at = exc.stage.removeprefix("generality at ")
            # Only the sizes up to the one it stopped at were checked; the rest never ran.
            stopped = named_sizes(at)
            reached = next((i + 1 for i, s in enumerate(sizes_list) if s == stopped), len(sizes_list))
            generality = Generality(passed=False, sizes_checked=sizes_list[:reached],
                                    failures=[SizeFailure(sizes=at, check=exc.kind, message=str(exc))])
            if reached < len(sizes_list):
                generality.note = (f"the check stopped at {at.split(':')[0]}; {len(sizes_list) - reached} sizes "
                                   "after it were not checked")
        if not sizes_list:
            generality = unchecked
        generality.seconds = round(time.perf_counter() - started, 3)
        if constraints:
            generality.constraints = constraints
        return generality, sanitized

    def _evaluate(self, session: SessionRow, source: str, progress: Progress,
                  sizes: dict[str, int] | None = None, steps: tuple[str, ...] = ("compile", "validate", "benchmark"),
                  trials: int | None = None, time_budget_s: float | None = None,
                  vendor_ms: float | None = None, params: dict[str, int] | None = None) -> Outcome:
        """Parse, compile, validate and time one source (its default configuration, or `params`)."""
        try:
            spec = self._spec(session, source)
            if params:
                spec = spec.bind(params)
            broken = spec.violated(sizes or session.sizes)
            if broken:
                return Outcome(status=Status.INVALID_ANNOTATION, failure="annotation",
                               message=f"the configuration {spec.config()} breaks `where` {broken} at these sizes")
            spec.evaluate(sizes or session.sizes)
        except PeakError as exc:
            return Outcome(status=Status.INVALID_ANNOTATION, failure="annotation", message=str(exc))
        runs = session.device_index >= 0
        job = EvaluateJob(**self._wire(session), dtype=session.dtype, sizes=sizes or session.sizes, source=source,
                          spec=spec, steps=list(steps) if runs else ["compile"],
                          trials=trials or self.settings.validation_trials,
                          time_budget_s=time_budget_s or self.settings.benchmark_budget_s, vendor_ms=vendor_ms)
        try:
            result = self._run_job(session, job, progress)
        except JobFailed as exc:
            return Outcome(status=Status.ERROR, failure=exc.kind, message=str(exc))
        return self._verdict(session, result, runs, sizes or session.sizes)

    def _verdict(self, session: SessionRow, result: EvaluateResult, runs: bool, sizes: dict[str, int]) -> Outcome:
        """The outcome of one worker result at `sizes`: the first failing check, in order of blame
        (verdicts.judge)."""
        return judge(result, problem=self.problem(session.problem), backend=session.backend, dtype=session.dtype,
                     sizes=sizes, device=self.device_of(session), runs=runs)

    def _spec(self, session: SessionRow, source: str) -> LaunchSpec:
        """The source's annotation, checked against what the session's backend needs and its problem's sizes, with
        SM_COUNT bound to the session's device."""
        problem = self.problem(session.problem)
        spec = launch_spec(source, session.backend, problem.symbols, problem.derived)
        return spec.on_device(self.device_of(session).sm_count)

    @overload
    def _run_job(self, session: SessionRow, job: EvaluateJob, progress: Progress) -> EvaluateResult: ...
    @overload
    def _run_job(self, session: SessionRow, job: GeneralityJob, progress: Progress) -> GeneralityResult: ...
    @overload
    def _run_job(self, session: SessionRow, job: TuneJob, progress: Progress) -> TuneResult: ...
    @overload
    def _run_job(self, session: SessionRow, job: ProfileJob, progress: Progress, *, inactivity_s: float,
                 total_s: float) -> ProfileResult: ...

    def _run_job(self, session: SessionRow, job: Job, progress: Progress, *, inactivity_s: float | None = None,
                 total_s: float | None = None) -> JobResult:
        """Run one job on the session's device; the pool answers with the result type of the job's type. Its
        error, or its result's messages, cleaned of terminal control and bounded (_cleaned_failure)."""
        try:
            return _cleaned_result(self.pool.run(session.backend, session.device_index, job,
                                                 inactivity_s=inactivity_s or self.settings.inactivity_timeout_s,
                                                 total_s=total_s or self.settings.job_total_timeout_s,
                                                 progress=progress))
        except JobFailed as exc:
            _cleaned_failure(exc)
            raise

    # --- reports ---------------------------------------------------------------------------------------------
    def version_report(self, session_id: str, number: int) -> VersionReport:
        session = self.store.session(session_id)
        versions = {v.number: v for v in self.store.versions(session_id)}
        if number not in versions:
            self.store.version(session_id, number)  # raises NotFound with the hint
        v = versions[number]
        problem = self.problem(session.problem)
        spent = {"compile": v.compile, "validate": v.validation, "benchmark": v.timing, "generality": v.generality,
                 "sanitize": v.validation.sanitizer if v.validation else None}
        validation = dumped(v.validation)
        if validation and validation.get("message") and validation["message"] in (v.message or ""):
            del validation["message"]  # said once: the report's message quotes it whole (its bound and formula)
        return VersionReport(
            session_id=session_id, version=number, parent=v.parent, origin=v.origin,
            transformation=v.transformation, status=v.status, failure=v.failure, message=v.message or "",
            compile=v.compile.model_copy(update={"log": trim_log(v.compile.log)}) if v.compile else None,
            validation=validation, generality=dumped(v.generality), tuning=_tuning_brief(v.tuning),
            performance=performance(v, versions, session.baseline, self.device_of(session),
                                    problem.peak_path(session.dtype, session.backend),
                                    self.roofline(session, session.sizes)),
            head=session.head, best=_number(best_version(versions.values())),
            phases={phase: round(record.seconds, 3) for phase, record in spent.items()
                    if record is not None and record.seconds is not None})

    def resolve_version(self, session_id: str, version: int | None) -> VersionRow:
        session = self.store.session(session_id)
        if version is None:
            if session.head is None:
                raise NotFound(f"session {session_id} has no passing version yet",
                               "submit a kernel that compiles and validates first.")
            version = session.head
        return self.store.version(session_id, version)

    def get_version(self, session_id: str, version: int | None) -> VersionDetail:
        v = self.resolve_version(session_id, version)
        return VersionDetail(report=self.version_report(session_id, v.number), source=v.source,
                             configuration=self.timed_configuration(v))

    def timed_configuration(self, v: VersionRow) -> str | None:
        """The configuration a version's time is of, beside its source: the source declares lists whose first
        values are its defaults, and a tuned (or inherited) time is of other values."""
        timing = v.timing
        if timing is None or not timing.params:
            return None
        how = {"defaults": "its defaults", "parent": f"v{v.parent}'s tuned configuration"}.get(
            timing.params_from or "", "tuned")
        if timing.params_from == "parent" and timing.params_inherited is not None and \
                set(timing.params_inherited) != set(timing.params):
            how = (f"{' '.join(timing.params_inherited)} from v{v.parent}'s tuned configuration, the rest its "
                   "defaults")
        defines = " ".join(f"#define {k} {x}" for k, x in timing.params.items())
        text = f"timed with {Config(params=timing.params).label()} ({how}): compiled as `{defines}` before this source"
        try:
            defaults = self._spec(self.store.session(v.session_id), v.source).config()
        except PeakError:
            return text
        if defaults != timing.params:
            text += (f"; the params line's first values ({Config(params=defaults).label()}) are only the defaults, "
                     "not what was timed")
        return text

    def diff(self, session_id: str, a: int, b: int | None) -> DiffReport:
        first = self.store.version(session_id, a)
        second = self.resolve_version(session_id, b)
        text = "".join(difflib.unified_diff(first.source.splitlines(keepends=True),
                                            second.source.splitlines(keepends=True),
                                            fromfile=f"v{a}", tofile=f"v{second.number}"))
        return DiffReport(session_id=session_id, a=a, b=second.number, diff=text or "(identical)")

    def revert(self, session_id: str, version: int, require_generality: bool = True) -> VersionReport:
        v = self.store.version(session_id, version)
        if v.status is Status.COMPILED and version != 0:
            raise InvalidInput(f"version {version} was only compiled (nothing ran: no device in this session); head "
                               "moves only to versions validated and timed",
                               f"build on it without moving head: submit_kernel(parent={version}) or "
                               f"apply_transformation(version={version}).")
        if not (v.status.usable or v.status is Status.NOT_GENERAL):
            raise InvalidInput(f"version {version} has status {v.status}; only passing versions can become head",
                               "pick a version whose status is benchmarked (see history).")
        if require_generality and v.status is Status.NOT_GENERAL:
            raise InvalidInput(f"version {version} failed at other sizes (generality); head moves only to general "
                               "versions", "pass require_generality=false to accept a specialized kernel.")
        self.store.set_head(session_id, version)
        return self.version_report(session_id, version)

    def history(self, session_id: str) -> HistoryReport:
        session = self.store.session(session_id)
        device = self.device_of(session)
        problem = self.problem(session.problem)
        versions = self.store.versions(session_id)
        rows = history_rows(session, versions, device, problem.peak_path(session.dtype, session.backend),
                            self.roofline(session, session.sizes))
        return HistoryReport(session_id=session_id, problem=session.problem, backend=session.backend,
                             dtype=session.dtype, sizes=session.sizes, device=session.device,
                             head=session.head, best=_number(best_version(versions)),
                             baseline=dumped(session.baseline), rows=rows, table=markdown_table(rows))

    def roofline(self, session: SessionRow, sizes: dict[str, int],
                 baseline: Baseline | None = None) -> float | None:
        """The least time a launch of this session's problem can take at `sizes` on its device (reports.roofline_ms),
        with the copy bandwidth its worker measured where it did."""
        problem = self.problem(session.problem)
        try:
            flops, nbytes = problem.flops(sizes), problem.min_bytes(sizes, session.dtype)
        except PeakError:
            return None
        return roofline_ms(flops, nbytes, self.device_of(session), problem.peak_path(session.dtype, session.backend),
                           baseline or session.baseline)

    def suggest_next(self, catalog: Catalog, session_id: str, limit: int = 5) -> Suggestions:
        """The catalog's texts ranked for the session's head (catalog.suggest)."""
        session = self.store.session(session_id)
        versions = self.store.versions(session_id)
        return suggest_next(catalog, session, versions, self.device_of(session), self.problem(session.problem),
                            _number(best_version(versions)), limit)

    def head_and_best(self, session_id: str) -> tuple[int | None, int | None]:
        """Head (where work continues by default) and best (the fastest general version)."""
        return self.store.session(session_id).head, _number(best_version(self.store.versions(session_id)))

    def standing_note(self, session_id: str, number: int) -> str:
        """Where version `number` left head and best, in one line: "head → v5 (0.21× its parent v4); best: v2
        (54.59 ms), head is 0.26× as fast"."""
        session = self.store.session(session_id)
        versions = {v.number: v for v in self.store.versions(session_id)}
        v, head, best = versions[number], session.head, best_version(versions.values())
        if not session.runs:
            where = f"head stays v{head}" if head is not None else "no head"
            only = f", so v{number} was only compiled" if v.status is Status.COMPILED else ""
            return (f"{where}: nothing runs in this session (no {session.backend} device here){only}; head and best "
                    "move only to versions validated and timed")
        if head == number:
            parent = versions.get(v.parent) if v.parent is not None else None
            text = f"head → v{number}"
            if parent is not None and parent.timing and v.timing and parent.timing.median_ms:
                verdict = change(v.timing, parent.timing)
                said = "a slowdown beyond noise" if verdict == SLOWER else verdict
                text += f" ({parent.timing.median_ms / v.timing.median_ms:.2f}× its parent v{parent.number}: {said})"
        else:
            text = f"head stays v{head}" if head is not None else "no head yet"
        if best is None:
            return text + "; no general version is timed yet"
        if best.number == head and head != number:
            return text + "; head is also the best (fastest general version)"
        if best.number == head:
            runner_up = best_version(x for x in versions.values() if x.number != number)
            if runner_up is not None and best.timing and runner_up.timing and \
                    change(best.timing, runner_up.timing) == NOISE:  # a re-run could order them the other way
                return text + (f"; the fastest general version, by a margin within noise of v{runner_up.number} "
                               f"({runner_up.median_ms:.4g} ms)")
            return text + "; it is the new best (fastest general version)"
        mine = versions[head].timing if head is not None else None
        slower = ""
        if mine is not None and best.timing is not None and mine.median_ms:
            slower = (f", head is {best.timing.median_ms / mine.median_ms:.2f}× as fast "
                      f"({change(mine, best.timing)})")
        return text + f"; best: v{best.number} ({best.median_ms:.4g} ms){slower}"

    def history_chart(self, session_id: str, compact: bool = False) -> bytes:
        """The lineage chart as PNG; `compact` for an MCP answer (charts.COMPACT), else to read on a screen."""
        from peak_mcp.store.charts import history_chart

        session = self.store.session(session_id)
        device = self.device_of(session)
        peak_path = self.problem(session.problem).peak_path(session.dtype, session.backend)
        timings = {v.number: v.timing for v in self.store.versions(session_id)}
        rows = []
        for row in self.history(session_id).rows:  # with the timing spread, for error bars
            timing = timings.get(row["version"])
            rows.append({**row, "min_ms": timing.min_ms if timing else None,
                         "max_ms": timing.max_ms if timing else None})
        vendor = backend_spec(session.backend).vendor_library or "vendor library"
        return history_chart(rows, session.model_dump(), peak_tflops=device.peak(peak_path),
                             vendor_name=vendor, compact=compact)

    # --- tuning ----------------------------------------------------------------------------------------------
    def tune(self, session_id: str, version: int | None, *, strategy: str = "auto", max_configs: int = 64,
             budget_s: float | None = None, progress: Progress = _quiet) -> TuneReport:
        """Search a version's tuning parameters (`// peak: params`): batches of configurations compiled in
        parallel, pruned with their reasons, validated once and timed briefly in the worker; then the fastest is
        validated and timed in full, and becomes the version's performance. Every configuration tried is stored;
        the kept ones seed the tuning of the version's children."""
        session = self.store.session(session_id)
        v = self.resolve_version(session_id, version)
        if session.device_index < 0:
            raise Unavailable(f"no {session.backend} device on this machine: configurations can be compiled, "
                              "not timed", "run the server on a machine with a device (see doctor).")
        if not 1 <= max_configs <= 4096:
            raise InvalidInput(f"max_configs={max_configs} is out of range", "use 1 to 4096.")
        if budget_s is not None and not 1 <= budget_s <= 3600:
            raise InvalidInput(f"budget_s={budget_s} is out of range", "use 1 to 3600 seconds.")
        spec = self._spec(session, v.source)
        if not spec.params:
            size = self.problem(session.problem).symbols[0]
            launch = (f"groups=(cdiv({size}, BLOCK), 1, 1) with [numthreads(BLOCK, 1, 1)]" if session.backend == "hlsl"
                      else f"grid=(cdiv({size}, BLOCK), 1, 1) block=(BLOCK, 1, 1)")
            raise InvalidInput(f"version {v.number} declares no tuning parameters",
                               "add a line such as `// peak: params BLOCK=[256, 128, 512]` and use the names as "
                               f"macros in the kernel and in the launch line (e.g. {launch}); README.md, section "
                               "Tuning parameters, has the rules.")
        space = Space(spec, session.sizes)
        parent = self.store.version(session_id, v.parent) if v.parent is not None else None
        seeds = parent.tuning.top() if parent and parent.tuning else []
        search = make_strategy(strategy, space, max_configs=max_configs, seed=v.number, seed_configs=seeds)
        done: list[ConfigResult] = []
        fan = FanOut(lambda device, batch, workers, note: self._tune_chunk(session, v.source, spec, device, batch,
                                                                            workers, note),
                     lambda: self.tuning_devices(session), per_device=lambda lanes: batch_size(max_configs, lanes),
                     cores=usable_cores(), progress=progress)

        def measure(batch: list[Config]) -> list[ConfigResult]:
            results = fan.measure(batch)
            done.extend(results)
            timed = [r for r in done if r.status == "ok" and r.median_ms is not None]
            best = min(timed, key=lambda r: r.median_ms or 0.0, default=None)
            progress(f"tuning: {len(done)}/{max_configs} configurations"
                     + (f", best {best.median_ms:.4g} ms ({Config(params=best.params).label()})" if best else ""))
            return results

        # Each batch: tuning.batch_size configurations per device, on the devices idle when it is asked for. The best
        # is then timed in full on the session's own device alone.
        report = run_tuning(space, search, measure, version=v.number, max_configs=max_configs,
                            budget_s=budget_s, batch_size=fan.plan)
        self._choose_best(session, v.source, spec, report, progress)
        columns: dict[str, Any] = {}
        if report.best is not None:
            progress(f"tuning: full validation and timing of {Config(params=report.best.params).label()}")
            tuned = self._evaluate(session, v.source, progress, params=report.best.params, vendor_ms=session.vendor_ms)
            if tuned.status.passed and tuned.timing:
                # The configuration the version takes is checked at other sizes and under the sanitizer as a
                # submission is: a tuned value can be right only at the session's sizes.
                tuned = self._with_generality(session, v.source, tuned, progress, report.best.params)
            own = v.timing if v.timing and (v.timing.params or spec.config()) != report.best.params else None
            if tuned.status.passed and tuned.timing and not beats(tuned.timing, own):
                report.stopped += (f"; the search's fastest, {Config(params=report.best.params).label()}, timed in "
                                   f"full at {tuned.timing.median_ms:.4g} ms, slower beyond noise than "
                                   f"v{v.number}'s own configuration ({own.median_ms:.4g} ms), which it keeps")
            elif tuned.status.passed and tuned.timing:
                timing = tuned.timing.model_copy(update={"params": report.best.params, "params_from": "tuned"})
                report.recorded = BestConfig(params=report.best.params, median_ms=timing.median_ms,
                                             tflops=timing.tflops, gbps=timing.gbps)
                report.recorded_device = session.device_index
                report.estimate_gap = _estimate_gap(timing, report)
                columns["timing"] = timing.model_dump(mode="json")
                columns.update({k: x for k, x in tuned.columns().items() if k in ("generality", "validation")})
                columns["message"] = (f"{v.message or ''}; tuned over {report.tried} configurations: "
                                      f"{Config(params=report.best.params).label()}, median "
                                      f"{timing.median_ms:.4g} ms ({speed(timing.tflops, timing.gbps) or 'n/a'})")
            else:
                report.stopped += (f"; the fastest configuration {Config(params=report.best.params).label()} then "
                                   f"failed its full checks ({tuned.failure}), so v{v.number} keeps its configuration: "
                                   f"{(tuned.message or '')[:300]}")
        self.store.update_version(session_id, v.number, tuning=report.model_dump(mode="json"), **columns)
        return report

    def _choose_best(self, session: SessionRow, source: str, spec: LaunchSpec, report: TuneReport,
                     progress: Progress) -> None:
        """The search times each configuration briefly (a few launches, beside builds): its medians can be noise. Where
        the fastest few have wide spreads (cv over NOISY_CV) or spreads that overlap the fastest's, they are timed
        again, longer and one after another on the session's device, and the best is the fastest of that re-time.
        `report.chosen_by` says which way it went."""
        timed = sorted((r for r in report.results if r.status == "ok" and r.median_ms is not None),
                       key=lambda r: r.median_ms or 0.0)
        top = timed[:RETIME_TOP]
        if len(top) < 2:
            report.chosen_by = "the only configuration the search timed" if top else None
            return
        widest = max((r.cv or 0.0) for r in top)
        overlapping = [r for r in top[1:] if change(r, top[0]) == NOISE]
        if widest <= NOISY_CV and not overlapping:
            report.chosen_by = (f"the search's fastest median: its spread is narrow (cv at most {widest:.2g}) and "
                                f"clear of the next ({Config(params=top[1].params).label()})")
            return
        why = (f"cv up to {widest:.2g}" if widest > NOISY_CV else "") + \
            ("; " if widest > NOISY_CV and overlapping else "") + \
            (f"{len(overlapping)} within noise of the fastest" if overlapping else "")
        budget = self.settings.benchmark_budget_s
        progress(f"tuning: re-timing the {len(top)} fastest ({why}) for {budget:g} s each")
        job = TuneJob(**self._wire(session), dtype=session.dtype, sizes=session.sizes, source=source, spec=spec,
                      configs=[r.params for r in top], time_budget_s=budget, min_reps=20, max_reps=1000,
                      compile_workers=1, retime=True)
        try:
            result = self._run_job(session, job, progress)
        except JobFailed as exc:
            report.chosen_by = (f"the search's fastest median, unconfirmed ({why}): re-timing the {len(top)} fastest "
                                f"failed ({exc.kind}: {str(exc)[:200]})")
            return
        report.retimed = [r.model_copy(update={"device": session.device_index}) for r in result.results]
        again = sorted((r for r in report.retimed if r.status == "ok" and r.median_ms is not None),
                       key=lambda r: r.median_ms or 0.0)
        if not again:
            report.chosen_by = (f"the search's fastest median, unconfirmed ({why}): none of the {len(top)} fastest "
                                "passed when re-timed")
            return
        winner, first = again[0], Config(params=top[0].params)
        report.best = BestConfig(params=winner.params, median_ms=winner.median_ms or 0.0, tflops=winner.tflops)
        text = (f"re-timed the search's {len(top)} fastest ({why}) for {budget:g} s each, one after another on "
                f"device {session.device_index}; the fastest then: {Config(params=winner.params).label()}")
        if Config(params=winner.params) != first:
            text += f" (the search's median had {first.label()} first)"
        level = [Config(params=r.params).label() for r in again[1:] if change(r, winner) == NOISE]
        if level:
            text += f"; still within noise of it: {', '.join(level)} (any of them is as fast as this can tell)"
        report.chosen_by = text

    def tuning_devices(self, session: SessionRow) -> list[int]:
        """The devices a tune of this session measures on now: its own, and every idle one of the same model."""
        report = self.probe().get(session.backend, {})
        devices = [(int(d["index"]), describe(d, self.profiles)) for d in report.get("devices", [])]
        return tuning_devices(self.device_of(session), session.device_index, devices,
                              lambda index: self.pool.queue_length(session.backend, index))

    def _tune_chunk(self, session: SessionRow, source: str, spec: LaunchSpec, device: int, batch: list[Config],
                    compile_workers: int | None, progress: Progress) -> list[ConfigResult]:
        """One worker tune job on `device` (the session's or a same-model helper)."""
        job = TuneJob(**self._wire(session), dtype=session.dtype, sizes=session.sizes, source=source, spec=spec,
                      configs=[c.params for c in batch], compile_workers=compile_workers)
        try:
            result = self.pool.run(session.backend, device, job, inactivity_s=self.settings.inactivity_timeout_s,
                                   total_s=self.settings.job_total_timeout_s, progress=progress)
        except JobFailed as exc:
            _cleaned_failure(exc)
            raise
        assert isinstance(result, TuneResult)
        _cleaned_result(result)
        return result.results

    # --- profile ---------------------------------------------------------------------------------------------
    def profile(self, session_id: str, version: int | None, *, counters: bool = True,
                progress: Progress = _quiet) -> dict[str, Any]:
        """Resources, occupancy, instruction mix and (CUDA with ncu on a GPU) hardware counters of one version at
        the session's sizes; every part says when it is unavailable and why."""
        session = self.store.session(session_id)
        v = self.resolve_version(session_id, version)
        spec = self._spec(session, v.source)
        params = v.timing.params if v.timing else None  # the configuration the version's time is of (tuned)
        if params:
            spec = spec.bind(params)
        job = ProfileJob(**self._wire(session), dtype=session.dtype, sizes=session.sizes, source=v.source,
                         spec=spec, counters=counters)  # the worker says why it cannot
        # nvdisasm may run a minute without progress, and ncu replays the kernel: longer limits than a timing job.
        result = self._run_job(session, job, progress,
                               inactivity_s=max(self.settings.inactivity_timeout_s, PROFILE_INACTIVITY_S),
                               total_s=max(self.settings.job_total_timeout_s, PROFILE_TOTAL_S))
        if result.profile is None:
            log_text = result.compile.log if result.compile else None
            raise InvalidInput(f"version {v.number} does not compile here:\n{trim_log(log_text)}",
                               "profile a version that compiles (see history).")
        configuration = {"configuration": Config(params=params).label()} if params else {}
        return {"session_id": session_id, "version": v.number, **configuration, **result.profile.lean()}

    # --- re-checks at other sizes ----------------------------------------------------------------------------
    def check(self, session_id: str, version: int | None, sizes: dict[str, Any] | None, *, benchmark: bool,
              trials: int | None = None, time_budget_s: float | None = None,
              progress: Progress = _quiet) -> CheckReport:
        session = self.store.session(session_id)
        v = self.resolve_version(session_id, version)
        problem = self.problem(session.problem)
        checked = problem.check_sizes({**session.sizes, **(sizes or {})})
        if session.device_index < 0:
            raise Unavailable(f"no {session.backend} device on this machine: versions can be compiled, not run",
                              "run the server on a machine with a GPU (see doctor).")
        if trials is not None and not 1 <= trials <= 20:
            raise InvalidInput(f"trials={trials} is out of range", "use 1 to 20.")
        if time_budget_s is not None and not 0.05 <= time_budget_s <= 60:
            raise InvalidInput(f"time_budget_s={time_budget_s} is out of range", "use 0.05 to 60 seconds.")
        steps = ("compile", "validate", "benchmark") if benchmark else ("compile", "validate")
        params = v.timing.params if v.timing else None  # the configuration the version's time is of
        outcome = self._evaluate(session, v.source, progress, sizes=checked, steps=steps, trials=trials,
                                 time_budget_s=time_budget_s, params=params)
        if params and outcome.timing:  # the version's configuration, and where it came from, as recorded
            outcome.timing = outcome.timing.model_copy(update={"params": params, "params_from": v.timing.params_from})
        baseline = None
        if benchmark and outcome.status is Status.BENCHMARKED:
            job = EvaluateJob(**self._wire(session), dtype=session.dtype, sizes=checked, steps=["baseline"],
                              time_budget_s=time_budget_s or self.settings.benchmark_budget_s)
            baseline = self._yardstick_said(session, self._run_job(session, job, progress).baseline)
        perf = None
        if outcome.timing:
            device = self.device_of(session)
            scratch = v.model_copy(update={"timing": outcome.timing, "parent": None})
            perf = performance(scratch, {}, baseline, device, problem.peak_path(session.dtype, session.backend),
                               self.roofline(session, checked, baseline))
        validation = outcome.validation or Verdict(passed=False, check=outcome.failure, message=outcome.message)
        caveat = loop_caveat(validation, self.device_of(session), checked)
        if caveat:
            validation = validation.model_copy(update={"message": validation.message + caveat})
        return CheckReport(session_id=session_id, version=v.number, sizes=checked, passed=outcome.status.passed,
                           validation=validation.model_dump(mode="json"), performance=perf,
                           baseline=dumped(baseline), scope=_check_scope(v))


def _check_scope(v: VersionRow) -> str:
    """What validate/benchmark covered: only the sizes asked for; the other sizes and the sanitizer are the
    submission's, said as recorded there."""
    g = v.generality
    generality = ("not run" if g is None or g.passed is None else
                  f"passed at {len(g.sizes_checked)} sizes" if g.passed else
                  f"failed at {len(g.failures)} of {len(g.sizes_checked)} sizes")
    s = v.validation.sanitizer if v.validation else None
    sanitizer = ("not run" if s is None or not s.available or s.passed is None else
                 "passed" if s.passed else f"failed ({s.failures[0].check})" if s.failures else "failed")
    return (f"this check ran only at the sizes above; other sizes and the sanitizer are not re-run here. "
            f"v{v.number}'s submission recorded: generality {generality}, sanitizer {sanitizer}")


def _estimate_gap(timing: Any, report: TuneReport) -> str | None:
    """One phrase where the version's full timing and the search's estimate of the same configuration differ beyond
    noise (their middle halves do not overlap); None where they agree or the estimate is not found."""
    if report.best is None:
        return None
    estimate = next((r for r in [*report.retimed, *report.results] if r.params == report.best.params
                     and r.status == "ok" and r.median_ms is not None), None)
    if estimate is None or not estimate.median_ms or not timing.median_ms:
        return None
    verdict = change(timing, estimate)
    if verdict == NOISE:
        return None
    ratio = timing.median_ms / estimate.median_ms
    return (f"the full timing is {ratio:.3g}× the search's estimate "
            f"({'slower' if verdict == SLOWER else 'faster'} beyond noise)")
