"""A session that starts without a first version gets its device's checks prepared in the background (issue 35).

The first submission of a session waited 30-40 s on an H200 for work no kernel caused (runner/prepare_job.py says
what). The agent is writing that kernel meanwhile, so the server starts the work when the session starts; the
submission then finds it done, or waits on the device behind it and is told so. Only where the session's device is a
GPU by default (Settings.prepare_ahead): on a CPU device the same work would compete with the agent's other jobs for
the same cores.
"""

from __future__ import annotations

import random
import secrets
import threading

import structlog

from peak_mcp.backends.registry import backend_spec
from peak_mcp.evaluation.generality import sample_sizes
from peak_mcp.loop.context import LoopContext
from peak_mcp.runner.messages import PrepareJob
from peak_mcp.store.records import SessionRow

log = structlog.get_logger("peak_mcp.loop.pipeline.prepare")


def wanted(ctx: LoopContext, session: SessionRow) -> bool:
    """Whether this session's checks are prepared ahead: a device that runs kernels, a problem with a Python
    reference (a reference kernel's session has its v0 run already), and the setting."""
    setting = ctx.settings.prepare_ahead
    if setting == "never" or session.device_index < 0 or ctx.problem(session.problem).needs_reference_kernel:
        return False
    return setting == "always" or not ctx.device_of(session).is_cpu


def prepare_job(ctx: LoopContext, session: SessionRow) -> PrepareJob:
    """The session's sizes with its validation's trials, generality's sampled sizes (the same draw as a
    submission's but for its one size drawn from the OS per check), and the sanitizer's targets where a
    submission's sanitizer run would take them (compute-sanitizer: CUDA, and HIP on NVIDIA)."""
    problem = ctx.problem(session.problem)
    sizes_list = sample_sizes(problem, session.sizes, session.constraints or [],
                              draw=random.Random(secrets.randbits(64)))
    standby = (ctx.settings.sanitizer and ctx.settings.sanitizer_standby and session.backend != "hlsl"
               and backend_spec(session.backend).sanitizer and ctx.device_of(session).vendor != "amd")
    return PrepareJob(**ctx.wire(session), dtype=session.dtype, sizes=session.sizes,
                      trials=ctx.settings.validation_trials, sizes_list=sizes_list, sanitizer_standby=standby,
                      spare=session.vendor_ms is not None)


def spare_job(ctx: LoopContext, session: SessionRow) -> PrepareJob:
    """Between submissions: the fresh sets alone, for the next version faster than the vendor library."""
    return PrepareJob(**ctx.wire(session), dtype=session.dtype, sizes=session.sizes, trials=0, spare=True)


def start(ctx: LoopContext, session: SessionRow, *, spare_only: bool = False) -> threading.Thread | None:
    """Run the session's prepare job (`spare_only`: spare_job) in a background thread (returned, for tests to
    join); None where not wanted. Never raises, nor does the thread: a failure here is met again, and reported,
    by the next submission."""
    try:
        if not wanted(ctx, session):
            return None
        job = spare_job(ctx, session) if spare_only else prepare_job(ctx, session)
    except Exception as exc:  # a problem that cannot say its sizes now: the submission will say why
        log.info("session not prepared ahead", session=session.id, reason=str(exc)[:200])
        return None

    def run() -> None:
        try:
            result = ctx.run_job(session, job, lambda _line: None)
            log.info("session prepared ahead", session=session.id, kept=result.kept, seconds=result.seconds,
                     skipped=result.skipped[:3])
        except Exception as exc:  # the server closing, a worker that died: the submission meets it on its own
            log.info("preparing the session ahead stopped", session=session.id, reason=str(exc)[:200])

    thread = threading.Thread(target=run, name=f"prepare-{session.id}", daemon=True)
    thread.start()
    return thread
