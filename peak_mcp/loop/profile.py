"""profile: what the tools at hand tell of one version at the session's sizes (resources, occupancy, instruction mix,
and on CUDA with ncu the hardware counters), run by the session's worker."""

from __future__ import annotations

from typing import Any

from peak_mcp.core.errors import InvalidInput
from peak_mcp.evaluation.configs import Config
from peak_mcp.loop.context import LoopContext, Progress, quiet
from peak_mcp.loop.versions import Versions
from peak_mcp.runner.messages import ProfileJob
from peak_mcp.store.reports import trim_log

PROFILE_INACTIVITY_S, PROFILE_TOTAL_S = 90.0, 360.0


def profile(ctx: LoopContext, versions: Versions, session_id: str, version: int | None, *, counters: bool = True,
            progress: Progress = quiet) -> dict[str, Any]:
    """Resources, occupancy, instruction mix and (CUDA with ncu on a GPU) hardware counters of one version at
    the session's sizes; every part says when it is unavailable and why."""
    session = ctx.store.session(session_id)
    v = versions.resolve_version(session_id, version)
    spec = ctx.spec(session, v.source)
    params = v.timing.params if v.timing else None  # the configuration the version's time is of (tuned)
    if params:
        spec = spec.bind(params)
    job = ProfileJob(**ctx.wire(session), dtype=session.dtype, sizes=session.sizes, source=v.source,
                     spec=spec, counters=counters)  # the worker says why it cannot
    # nvdisasm may run a minute without progress, and ncu replays the kernel: longer limits than a timing job.
    result = ctx.run_job(session, job, progress,
                         inactivity_s=max(ctx.settings.inactivity_timeout_s, PROFILE_INACTIVITY_S),
                         total_s=max(ctx.settings.job_total_timeout_s, PROFILE_TOTAL_S))
    if result.profile is None:
        log_text = result.compile.log if result.compile else None
        raise InvalidInput(f"version {v.number} does not compile here:\n{trim_log(log_text)}",
                           "profile a version that compiles (see history).")
    configuration = {"configuration": Config(params=params).label()} if params else {}
    return {"session_id": session_id, "version": v.number, **configuration, **result.profile.lean()}
