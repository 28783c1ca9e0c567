"""The optimization loop, free of MCP: one object for the MCP tools to call, wired from the loop's parts.

Synchronous on purpose: each call may block on a worker; the MCP layer runs it in a thread. What each call does lives
in a module of its own: devices.py (placement), problem_files.py (list and define), sessions.py, pipeline/ (a
submitted kernel, phase by phase), versions.py and history.py (the read side), tuning/, profile.py, check.py and
doctor.py. This module owns only their wiring and the server's lease on the data dir.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from peak_mcp.backends.registry import BACKENDS
from peak_mcp.catalog.suggest import Suggestions
from peak_mcp.catalog.transformations import Catalog
from peak_mcp.core.config import Settings
from peak_mcp.core.devices import Device
from peak_mcp.evaluation.configs import TuneReport
from peak_mcp.evaluation.phases import Baseline
from peak_mcp.loop import check, doctor, profile
from peak_mcp.loop.context import LoopContext, Progress, quiet
from peak_mcp.loop.devices import Devices
from peak_mcp.loop.history import History
from peak_mcp.loop.models import (
    CheckReport,
    DiffReport,
    DoctorReport,
    HistoryReport,
    ProblemInfo,
    ProblemList,
    SessionInfo,
    SessionList,
    Submission,
    VersionDetail,
    VersionReport,
)
from peak_mcp.loop.pipeline.submit import Pipeline
from peak_mcp.loop.problem_files import ProblemFiles
from peak_mcp.loop.sessions import Sessions
from peak_mcp.loop.tuning.tune import Tuner
from peak_mcp.loop.versions import Versions
from peak_mcp.problems.base import Problem
from peak_mcp.problems.registry import ProblemRegistry
from peak_mcp.problems.shipped import BUILTIN_CLASSES
from peak_mcp.runner.ownership import ServerPresence
from peak_mcp.runner.pool import DevicePool
from peak_mcp.runner.probe import probe_all_in_subprocess
from peak_mcp.store import stats
from peak_mcp.store.database import Store
from peak_mcp.store.lease import HEARTBEAT_S
from peak_mcp.store.records import SessionRow, VersionRow

if TYPE_CHECKING:
    from peak_mcp.runner.ray_pool import RayDevicePool

log = structlog.get_logger("peak_mcp.loop.service")


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
        self.devices = Devices(settings, self.store, self.pool, probe or (lambda: probe_all_in_subprocess(
            options={name: settings.probe_options(name) for name in BACKENDS})))
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
                                        memory_bytes=settings.problem_memory_mb << 20,
                                        cache_dir=settings.data_dir / "cache" / "described")
        self.ctx = LoopContext(settings, self.store, self.pool, self.problems, self.devices)
        self.problem_files = ProblemFiles(settings, self.problems, self.defining_allowed)
        self.versions = Versions(self.ctx)
        self.history_view = History(self.ctx)
        self.pipeline = Pipeline(self.ctx, self.versions)
        self.sessions = Sessions(self.ctx, self.pipeline, self.versions)
        self.tuner = Tuner(self.ctx, self.versions)

    def close(self) -> None:
        self._stopping.set()
        self._heartbeat.join()
        self.pipeline.close()  # its background jobs first: none may start a worker once the pool is closed
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
        return self.devices.probe(refresh)

    def doctor(self, catalog_info: dict[str, Any] | None = None) -> DoctorReport:
        return doctor.doctor(self.settings, self.devices, self.pool, catalog_info)

    def sandbox_summary(self) -> str:
        return doctor.sandbox_summary(self.settings)

    def place(self, backend: str, devices: list[dict[str, Any]], device: str | int | None) -> dict[str, Any]:
        return self.devices.place(backend, devices, device)

    def device_of(self, session: SessionRow) -> Device:
        return self.devices.device_of(session)

    # --- problems --------------------------------------------------------------------------------------------
    def problem(self, name: str) -> Problem:
        return self.ctx.problem(name)

    def list_problems(self) -> ProblemList:
        return self.problem_files.list_problems()

    def defining_allowed(self) -> bool:
        """define_problem is on: always over stdio, over HTTP only with PEAK_MCP_ALLOW_DEFINE_PROBLEM."""
        return not self.http or self.settings.allow_define_problem

    def define_problem(self, source: str, name: str | None = None) -> ProblemInfo:
        return self.problem_files.define_problem(source, name)

    # --- sessions and submissions ----------------------------------------------------------------------------
    def start_session(self, problem: str, backend: str, dtype: str, sizes: dict[str, Any] | str | None,
                      label: str | None = None, progress: Progress = quiet,
                      constraints: list[str] | None = None, device: str | int | None = None,
                      reference_kernel: str | None = None) -> SessionInfo:
        return self.sessions.start_session(problem, backend, dtype, sizes, label, progress, constraints, device,
                                           reference_kernel)

    session_sizes = staticmethod(Sessions.session_sizes)

    def session_info(self, session_id: str) -> SessionInfo:
        return self.sessions.session_info(session_id)

    def session_list(self, offset: int = 0, limit: int = 20) -> SessionList:
        return self.sessions.session_list(offset, limit)

    def submit_kernel(self, session_id: str, source: str, parent: int | None = None,
                      transformation: str | None = None, progress: Progress = quiet, *,
                      apply_id: str | None = None, attempt: int | None = None,
                      require_generality: bool = True) -> Submission:
        return self.pipeline.submit_kernel(session_id, source, parent, transformation, progress, apply_id=apply_id,
                                           attempt=attempt, require_generality=require_generality)

    # --- the read side ---------------------------------------------------------------------------------------
    def version_report(self, session_id: str, number: int) -> VersionReport:
        return self.versions.version_report(session_id, number)

    def resolve_version(self, session_id: str, version: int | None) -> VersionRow:
        return self.versions.resolve_version(session_id, version)

    def get_version(self, session_id: str, version: int | None) -> VersionDetail:
        return self.versions.get_version(session_id, version)

    def timed_configuration(self, v: VersionRow) -> str | None:
        return self.versions.timed_configuration(v)

    def diff(self, session_id: str, a: int, b: int | None) -> DiffReport:
        return self.versions.diff(session_id, a, b)

    def revert(self, session_id: str, version: int, require_generality: bool = True) -> VersionReport:
        return self.versions.revert(session_id, version, require_generality)

    def head_and_best(self, session_id: str) -> tuple[int | None, int | None]:
        return self.versions.head_and_best(session_id)

    def standing_note(self, session_id: str, number: int) -> str:
        return self.versions.standing_note(session_id, number)

    def history(self, session_id: str) -> HistoryReport:
        return self.history_view.history(session_id)

    def history_chart(self, session_id: str, compact: bool = False) -> bytes:
        return self.history_view.history_chart(session_id, compact)

    def suggest_next(self, catalog: Catalog, session_id: str, limit: int = 5) -> Suggestions:
        return self.history_view.suggest_next(catalog, session_id, limit)

    def transformation_stats(self, session_id: str | None = None) -> dict[str, Any]:
        return stats.scoped_statistics(self.store, session_id)

    def roofline(self, session: SessionRow, sizes: dict[str, int], baseline: Baseline | None = None) -> float | None:
        return self.ctx.roofline(session, sizes, baseline)

    # --- tuning, profiling, re-checks ------------------------------------------------------------------------
    def tune(self, session_id: str, version: int | None, *, strategy: str = "auto", max_configs: int = 64,
             budget_s: float | None = None, again: bool = False, progress: Progress = quiet) -> TuneReport:
        return self.tuner.tune(session_id, version, strategy=strategy, max_configs=max_configs, budget_s=budget_s,
                               again=again, progress=progress)

    def tuning_devices(self, session: SessionRow) -> list[int]:
        return self.devices.tuning_devices(session)

    def profile(self, session_id: str, version: int | None, *, counters: bool = True,
                progress: Progress = quiet) -> dict[str, Any]:
        return profile.profile(self.ctx, self.versions, session_id, version, counters=counters, progress=progress)

    def check(self, session_id: str, version: int | None, sizes: dict[str, Any] | None, *, benchmark: bool,
              trials: int | None = None, time_budget_s: float | None = None,
              progress: Progress = quiet) -> CheckReport:
        return check.check(self.ctx, self.versions, session_id, version, sizes, benchmark=benchmark, trials=trials,
                           time_budget_s=time_budget_s, progress=progress)
