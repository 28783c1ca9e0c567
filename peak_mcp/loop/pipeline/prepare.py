"""A session's device prepares its checks in the background, before its first submission and between submissions
(issue 35).

The first submission of a session waited 30-40 s on an H200 for work no kernel caused (runner/prepare_job.py says
what). The agent is writing that kernel meanwhile, so the server starts the work when the session starts; the
submission then finds it done, or waits on the device behind it and is told so. Only where the session's device is a
GPU by default (Settings.prepare_ahead): on a CPU device the same work would compete with the agent's other jobs for
the same cores. After each submission the same job, without the sets kept already, draws what the next one will
draw afresh: the size generality draws at random and the fresh sets (reference_cache.SpareSets).
"""

from __future__ import annotations

import random
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


def prepare_job(ctx: LoopContext, session: SessionRow, *, first: bool = True,
                revalidates: bool | None = None) -> PrepareJob:
    """What the session's next submission will ask for: the kept sets at its sizes (`first`: later ones find them
    kept already), one at each of generality's sampled sizes, the size drawn at random included (its seed drawn
    now and kept for that check: LoopContext.next_draw), the fresh sets it draws (`revalidates`: a validation on
    fresh inputs is expected; default, where the session has a vendor library), and the sanitizer's targets where
    its sanitizer run would take them (compute-sanitizer: CUDA, and HIP on NVIDIA)."""
    problem = ctx.problem(session.problem)
    sizes_list = sample_sizes(problem, session.sizes, session.constraints or [],
                              draw=random.Random(ctx.next_draw(session.id)))
    standby = (first and ctx.settings.sanitizer and ctx.settings.sanitizer_standby and session.backend != "hlsl"
               and backend_spec(session.backend).sanitizer and ctx.device_of(session).vendor != "amd")
    return PrepareJob(**ctx.wire(session), dtype=session.dtype, sizes=session.sizes,
                      trials=ctx.settings.validation_trials, keep_sets=first, sizes_list=sizes_list,
                      sanitizer_standby=standby, spare_fresh=True,
                      spare_revalidation=session.vendor_ms is not None if revalidates is None else revalidates)


def start(ctx: LoopContext, session: SessionRow, *, first: bool = True,
          revalidates: bool | None = None) -> threading.Thread | None:
    """Run the session's prepare job (prepare_job) in a background thread (returned, for tests to join); None where
    not wanted. Never raises, nor does the thread: a failure here is met again, and reported, by the submission."""
    try:
        if not wanted(ctx, session):
            return None
        job = prepare_job(ctx, session, first=first, revalidates=revalidates)
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
