"""Sessions: one started (its problem, dtype, sizes, constraints and device checked, v0 submitted, the vendor
yardstick timed), described, and listed."""

from __future__ import annotations

from typing import Any

from peak_mcp.backends.registry import BACKENDS
from peak_mcp.core.devices import Device
from peak_mcp.core.errors import InvalidInput, PeakError
from peak_mcp.core.text import checked_label, clipped
from peak_mcp.core.units import speed
from peak_mcp.evaluation.generality import check_constraints, satisfies
from peak_mcp.evaluation.phases import Baseline, dumped
from peak_mcp.loop.context import LoopContext, Progress, quiet
from peak_mcp.loop.models import SessionInfo, SessionList, SessionSummary
from peak_mcp.loop.pipeline.notes import file_sha256
from peak_mcp.loop.pipeline.submit import Pipeline
from peak_mcp.loop.session_rules import session_rules
from peak_mcp.loop.versions import Versions, _number
from peak_mcp.problems.base import Problem
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.store.reports import best_version

# A CPU Vulkan driver (lavapipe) does matmul at 4096^3 in an hour: without sizes, a session on one starts at the
# problem's defaults halved (largest symbol first) until a launch does at most this much work (matmul: 1024^3) and
# moves at most this many bytes (softmax: 1024 x 2048 in f32; each of them passes through the host reference too).
CPU_DEVICE_FLOPS, CPU_DEVICE_BYTES = 2.0**31, 2.0**24


class Sessions:
    def __init__(self, ctx: LoopContext, pipeline: Pipeline, versions: Versions) -> None:
        self.ctx, self.pipeline, self.versions = ctx, pipeline, versions

    def start_session(self, problem: str, backend: str, dtype: str, sizes: dict[str, Any] | str | None,
                      label: str | None = None, progress: Progress = quiet,
                      constraints: list[str] | None = None, device: str | int | None = None,
                      reference_kernel: str | None = None, *, naive: bool = True) -> SessionInfo:
        """`naive=False`: no naive v0 even where the problem has one (a batch evaluates only the kernel given)."""
        label = checked_label(label)
        self.ctx.problems.refresh_for(problem)
        spec = self.ctx.problem(problem)
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
        naive_source = spec.naive_kernel(backend, dtype) \
            if naive and backend in BACKENDS and spec.has_naive(backend, dtype) else None
        placed, index = self.ctx.devices.device_for(backend, device)
        sizes, note = self.session_sizes(spec, placed, sizes)
        checked = spec.check_sizes(sizes)
        if not satisfies(checked, constraints):
            raise InvalidInput(f"the session's sizes {checked} do not meet its constraints {constraints}",
                               "choose sizes that meet them, or drop the constraint.")
        session_id = self.ctx.store.create_session(problem=problem, backend=backend, dtype=dtype, sizes=checked,
                                                   device=placed.name, device_index=index, label=label,
                                                   constraints=constraints, device_info=placed.model_dump(),
                                                   problem_sha256=file_sha256(spec))
        self.ctx.devices.remember(session_id, placed)
        if index >= 0:  # a tune spreads over the idle twins of its device: their workers start now, not in it
            self.ctx.devices.warm_twins(self.ctx.store.session(session_id))
        if reference_kernel is not None:  # the user's current kernel is v0, validated against the reference
            report = self.pipeline.submit(session_id, reference_kernel, parent=None, origin="reference",
                                          transformation=None, progress=progress)
        else:
            report = self.pipeline.submit(session_id, naive_source, parent=None, origin="naive", transformation=None,
                                          progress=progress) if naive_source is not None else None
        if index >= 0:
            self.measure_baseline(session_id, progress)
        info = self.session_info(session_id)
        if report is not None:
            info.version_0 = self.versions.version_report(session_id, report.version)
        else:
            checked = ("validated, timed and checked at other sizes like any other" if index >= 0 else
                       "compiled only: this machine has no device to run it")
            info.brief = (f"{spec.name} has no naive {backend} kernel: no version yet. Submit your first kernel with "
                          f"submit_kernel; it becomes v0 ({checked}).")
        info.abi = spec.abi(backend, dtype)
        info.definition = spec.definition or None
        info.rules = session_rules(spec, backend, dtype, info.sizes, placed, runs=index >= 0)
        if left_out:
            filled = ", ".join(f"{s}={checked[s]}" for s in left_out)
            note = (note + "; " if note else "") + f"sizes not given were taken from the problem's defaults: {filled}"
        info.note = note
        # after the yardsticks: their timings see an idle device
        if report is None and index >= 0 and self.pipeline.prepare_ahead(self.ctx.store.session(session_id)) \
                and info.brief:
            info.brief += (" Meanwhile the server prepares this session's checks on the device (input sets, "
                           "references, the sanitizer), so the first submission need not wait for them.")
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

    def session_info(self, session_id: str) -> SessionInfo:
        s = self.ctx.store.session(session_id)
        versions = self.ctx.store.versions(session_id)
        return SessionInfo(session_id=s.id, problem=s.problem, backend=s.backend, dtype=s.dtype,
                           sizes=s.sizes, device=self.ctx.device_of(s).summary(), head=s.head,
                           best=_number(best_version(versions)), versions=len(versions),
                           baseline=dumped(s.baseline), label=s.label, constraints=s.constraints or [])

    def session_list(self, offset: int = 0, limit: int = 20) -> SessionList:
        """One line per session, oldest first, a page at a time."""
        sessions = self.ctx.store.sessions()
        rows = []
        for s in sessions[offset:offset + limit]:
            versions = self.ctx.store.versions(s.id)  # once per session: the count and the best version's time
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

    def measure_baseline(self, session_id: str, progress: Progress) -> None:
        session = self.ctx.store.session(session_id)
        job = EvaluateJob(**self.ctx.wire(session), dtype=session.dtype, sizes=session.sizes, steps=["baseline"],
                          time_budget_s=self.ctx.settings.benchmark_budget_s)
        try:
            baseline = (self.ctx.run_job(session, job, progress).baseline
                        or Baseline(available=False, reason="no result"))
        except PeakError as exc:
            baseline = Baseline(available=False, reason=str(exc))
        self.ctx.store.set_baseline(session_id, self.ctx.yardstick_said(session, baseline).model_dump(mode="json"))
