"""tune: a version's tuning parameters searched (tuning/search.py) over batches measured at once on the session's
device and its idle twins (tuning/fanout.py); the search's fastest few re-timed where noise could have ordered them;
the best validated, checked at other sizes and timed in full before the version takes it."""

from __future__ import annotations

import time
from typing import Any

from peak_mcp.core.errors import InvalidInput, Unavailable
from peak_mcp.core.launch import LaunchSpec
from peak_mcp.core.units import speed
from peak_mcp.evaluation.configs import BestConfig, Config, ConfigResult, SearchedSpace, TuneReport, beats
from peak_mcp.evaluation.noise import NOISE, SLOWER, change
from peak_mcp.loop.context import LoopContext, Progress, quiet
from peak_mcp.loop.tuning.fanout import FanOut
from peak_mcp.loop.tuning.full_round import candidates, full_round
from peak_mcp.loop.tuning.search import Space, batch_size, make_strategy, run_tuning, usable_cores
from peak_mcp.loop.versions import Versions
from peak_mcp.runner.messages import TuneJob
from peak_mcp.runner.pool import JobFailed
from peak_mcp.store.records import SessionRow, Status, VersionRow

# The search's fastest few are timed again before the best is chosen where their spreads are wide or overlap.
RETIME_TOP, NOISY_CV = 3, 0.1
WIDE_CV = 0.25  # a re-timing spread past this (a busy CPU device reached 0.48) ranks nothing


class Tuner:
    def __init__(self, ctx: LoopContext, versions: Versions) -> None:
        self.ctx, self.versions = ctx, versions

    def tune(self, session_id: str, version: int | None, *, strategy: str = "auto", max_configs: int = 64,
             budget_s: float | None = None, again: bool = False, progress: Progress = quiet) -> TuneReport:
        """Search a version's tuning parameters (`// peak: params`): batches of configurations compiled in
        parallel, pruned with their reasons, validated once and timed briefly in the worker; then the fastest is
        validated and timed in full, and becomes the version's performance. Every configuration tried is stored;
        the kept ones seed the tuning of the version's children. Where the version's space was already searched in
        full at these sizes on this kind of device, that record is returned (`reused` says so) unless `again`."""
        session = self.ctx.store.session(session_id)
        v = self.versions.resolve_version(session_id, version)
        if session.device_index < 0:
            raise Unavailable(f"no {session.backend} device on this machine: configurations can be compiled, "
                              "not timed", "run the server on a machine with a device (see doctor).")
        if not 1 <= max_configs <= 4096:
            raise InvalidInput(f"max_configs={max_configs} is out of range", "use 1 to 4096.")
        if budget_s is not None and not 1 <= budget_s <= 3600:
            raise InvalidInput(f"budget_s={budget_s} is out of range", "use 1 to 3600 seconds.")
        if v.status in (Status.PENDING, Status.INVALID_ANNOTATION, Status.INVALID_REPLY, Status.COMPILE_ERROR):
            raise InvalidInput(f"version {v.number} did not compile ({v.status.value}): tune searches the parameters "
                               "of a version that compiles", "fix it and submit it again, then tune the new version.")
        spec = self.ctx.spec(session, v.source)
        if not spec.params:
            symbols = self.ctx.problem(session.problem).symbols
            size = symbols[0] if symbols else "1048576"  # a problem at fixed sizes: a number
            launch = (f"groups=(cdiv({size}, BLOCK), 1, 1) with [numthreads(BLOCK, 1, 1)]" if session.backend == "hlsl"
                      else f"grid=(cdiv({size}, BLOCK), 1, 1) block=(BLOCK, 1, 1)")
            raise InvalidInput(f"version {v.number} declares no tuning parameters",
                               "add a line such as `// peak: params BLOCK=[256, 128, 512]` and use the names as "
                               f"macros in the kernel and in the launch line (e.g. {launch}); README.md, section "
                               "Tuning parameters, has the rules.")
        space = Space(spec, session.sizes)
        searched = SearchedSpace(params=spec.params, where=list(spec.where), sizes=dict(session.sizes),
                                 device=session.device)
        if not again and v.tuning is not None and v.tuning.complete and v.tuning.searched == searched:
            return _reused(v.tuning, v.number)
        parent = self.ctx.store.version(session_id, v.parent) if v.parent is not None else None
        seeds = parent.tuning.top() if parent and parent.tuning else []
        search = make_strategy(strategy, space, max_configs=max_configs, seed=v.number, seed_configs=seeds)
        done: list[ConfigResult] = []
        fan = FanOut(lambda device, batch, workers, note: self.tune_chunk(session, v.source, spec, device, batch,
                                                                          workers, note),
                     lambda: self.ctx.devices.tuning_devices(session),
                     per_device=lambda lanes: batch_size(max_configs, lanes), cores=usable_cores(), progress=progress)

        def measure(batch: list[Config]) -> list[ConfigResult]:
            results = fan.measure(batch)
            done.extend(results)
            timed = [r for r in done if r.status == "ok" and r.median_ms is not None]
            best = min(timed, key=lambda r: r.median_ms or 0.0, default=None)
            progress(f"tuning: {len(done)}/{max_configs} configurations"
                     + (f", best {best.median_ms:.4g} ms ({Config(params=best.params).label()})" if best else ""))
            return results

        # Each batch: tuning.batch_size configurations per device, on the devices idle when it is asked for; a
        # strategy that learns nothing between batches asks for all at once (the devices pull chunks of it), unless a
        # time budget is to be checked between batches. The best is then timed in full on the session's device alone.
        whole = not search.learns and budget_s is None
        report = run_tuning(space, search, measure, version=v.number, max_configs=max_configs,
                            budget_s=budget_s, batch_size=(lambda: fan.plan_all(max_configs)) if whole else fan.plan)
        report.searched = searched
        level = self.choose_best(session, v.source, spec, report, progress)
        cpu = self.ctx.device_of(session).is_cpu
        columns: dict[str, Any] = {}
        own = (v.timing.params if v.timing else None) or spec.config()
        full = candidates(report, own, v.timing, level)
        if report.best is not None and not full:
            # The search's fastest is the configuration the version was timed with, and its estimate is near that
            # full time: nothing to adopt. A new full timing of it would only replace a measurement with another.
            report.recorded = BestConfig(params=report.best.params, median_ms=v.timing.median_ms,
                                         tflops=v.timing.tflops, gbps=v.timing.gbps) if v.timing else None
            report.recorded_device = session.device_index
            if v.timing:  # the same measurement, now known to be the tuned configuration (children take it)
                columns["timing"] = v.timing.model_copy(update={"params": report.best.params,
                                                                "params_from": "tuned"}).model_dump(mode="json")
                report.stopped += (f"; the search's fastest, {Config(params=report.best.params).label()}, is "
                                   f"v{v.number}'s own configuration: nothing to adopt, its recorded time stays "
                                   f"{v.timing.median_ms:.4g} ms")
        elif full:
            self.judge_round(session, v, spec, report, own, full, level, columns, cpu, progress)
        # The time the version's text earned as submitted outlives every tune (tune after tune overwrite `timing`).
        report.submitted = v.tuning.submitted if v.tuning else v.timing
        report.at = time.time()
        self.ctx.store.update_version(session_id, v.number, tuning=report.model_dump(mode="json"), **columns)
        return report

    def judge_round(self, session: SessionRow, v: VersionRow, spec: LaunchSpec, report: TuneReport,
                    own: dict[str, int], configs: list[dict[str, int]], level: list[dict[str, int]],
                    columns: dict[str, Any], cpu: bool, progress: Progress) -> None:
        """The candidates and the own configuration timed in full back to back (full_round.py); the version takes
        the winner only where it beats the own configuration's timing of this round (its submit-time record only
        where that re-timing failed, and then said)."""
        found = full_round(self.ctx, session, v, own, configs, progress)
        report.own = found.own
        report.runners_up = [BestConfig(params=p, median_ms=o.timing.median_ms, tflops=o.timing.tflops,
                                        gbps=o.timing.gbps) for p, o in found.timed
                             if o.timing and o.status.passed and (found.winner is None or p != found.winner[0])]
        searched_own = report.best is not None and report.best.params == own
        if searched_own and report.best is not None and v.timing is not None:
            report.stopped += (f"; the search's fastest, {Config(params=own).label()}, is v{v.number}'s own "
                               f"configuration, but its estimate ({report.best.median_ms:.4g} ms) is far from its "
                               f"recorded full time ({v.timing.median_ms:.4g} ms): "
                               f"{', '.join(Config(params=p).label() for p in configs)} timed in full beside it")
        against = found.own or v.timing
        how = ("timed in full back to back in this round" if found.own is not None else
               f"its recorded time: its re-timing in this round failed ({found.own_failed})")
        assert found.winner is not None
        params, tuned = found.winner
        label = Config(params=params).label()
        estimate = next((r for r in [*report.retimed, *report.results] if r.params == params and r.status == "ok"
                         and r.median_ms is not None), None)
        if report.best is not None and params != report.best.params and estimate is not None:
            # a runner-up won the round: `best` names the configuration the full timings judged, at its estimate
            report.best = BestConfig(params=params, median_ms=estimate.median_ms or 0.0, tflops=estimate.tflops,
                                     gbps=estimate.gbps)
        if tuned.status.passed and tuned.timing and not beats(tuned.timing, against):
            assert against is not None
            report.full = BestConfig(params=params, median_ms=tuned.timing.median_ms, tflops=tuned.timing.tflops,
                                     gbps=tuned.timing.gbps)
            report.estimate_gap = _estimate_gap(tuned.timing, report, cpu)
            which = f"{label}," if searched_own else f"the search's fastest, {label},"
            report.stopped += (f"; {which} timed in full at {tuned.timing.median_ms:.4g} ms, is no faster than "
                               f"v{v.number}'s own configuration ({against.median_ms:.4g} ms, {how}"
                               f"{', slower beyond noise' if change(tuned.timing, against) == SLOWER else ''}), "
                               "which it keeps")
        elif tuned.status.passed and tuned.timing:
            timing = tuned.timing.model_copy(update={"params": params, "params_from": "tuned"})
            report.recorded = BestConfig(params=params, median_ms=timing.median_ms, tflops=timing.tflops,
                                         gbps=timing.gbps)
            report.recorded_device = session.device_index
            report.estimate_gap = _estimate_gap(timing, report, cpu)
            report.versus_own = _versus_own(timing, against if params != own else None, v.number, spec.config(),
                                            level, how)
            columns["timing"] = timing.model_dump(mode="json")
            columns["retimed"] = None  # the old configuration's re-timing: the version's time is of another now
            columns.update({k: x for k, x in tuned.columns().items() if k in ("generality", "validation")})
            columns["message"] = (f"{v.message or ''}; tuned over {report.tried} configurations: {label}, median "
                                  f"{timing.median_ms:.4g} ms ({speed(timing.tflops, timing.gbps) or 'n/a'})")
        else:
            report.stopped += (f"; the fastest configuration {label} then failed its full checks ({tuned.failure}), "
                               f"so v{v.number} keeps its configuration: {(tuned.message or '')[:300]}")

    def choose_best(self, session: SessionRow, source: str, spec: LaunchSpec, report: TuneReport,
                    progress: Progress) -> list[dict[str, int]]:
        """The search times each configuration briefly (a few launches, beside builds): its medians can be noise. Where
        the fastest few have wide spreads (cv over NOISY_CV) or spreads that overlap the fastest's, they are timed
        again, longer and one after another on the session's device, and the best is the fastest of that re-time.
        `report.chosen_by` says which way it went. Returns the configurations the re-timing could not tell from the
        best (their middle halves overlap), for the full timing to settle where it can."""
        timed = sorted((r for r in report.results if r.status == "ok" and r.median_ms is not None),
                       key=lambda r: r.median_ms or 0.0)
        top = timed[:RETIME_TOP]
        if len(top) < 2:
            report.chosen_by = "the only configuration the search timed" if top else None
            return []
        widest = max((r.cv or 0.0) for r in top)
        overlapping = [r for r in top[1:] if change(r, top[0]) == NOISE]
        if widest <= NOISY_CV and not overlapping:
            report.chosen_by = (f"the search's fastest median: its spread is narrow (cv at most {widest:.2g}) and "
                                f"clear of the next ({Config(params=top[1].params).label()})")
            return []
        why = (f"cv up to {widest:.2g}" if widest > NOISY_CV else "") + \
            ("; " if widest > NOISY_CV and overlapping else "") + \
            (f"{len(overlapping)} within noise of the fastest" if overlapping else "")
        budget = self.ctx.settings.benchmark_budget_s
        progress(f"tuning: re-timing the {len(top)} fastest ({why}) for {budget:g} s each")
        job = TuneJob(**self.ctx.wire(session), dtype=session.dtype, sizes=session.sizes, source=source, spec=spec,
                      configs=[r.params for r in top], time_budget_s=budget, min_reps=20, max_reps=1000,
                      compile_workers=1, retime=True)
        try:
            result = self.ctx.run_job(session, job, progress)
        except JobFailed as exc:
            report.chosen_by = (f"the search's fastest median, unconfirmed ({why}): re-timing the {len(top)} fastest "
                                f"failed ({exc.kind}: {str(exc)[:200]})")
            return []
        report.retimed = [r.model_copy(update={"device": session.device_index}) for r in result.results]
        again = sorted((r for r in report.retimed if r.status == "ok" and r.median_ms is not None),
                       key=lambda r: r.median_ms or 0.0)
        if not again:
            report.chosen_by = (f"the search's fastest median, unconfirmed ({why}): none of the {len(top)} fastest "
                                "passed when re-timed")
            return []
        winner, first = again[0], Config(params=top[0].params)
        report.best = BestConfig(params=winner.params, median_ms=winner.median_ms or 0.0, tflops=winner.tflops,
                                 gbps=winner.gbps)
        text = (f"re-timed the search's {len(top)} fastest ({why}) for {budget:g} s each, one after another on "
                f"device {session.device_index}; the fastest then: {Config(params=winner.params).label()}")
        if Config(params=winner.params) != first:
            text += f" (the search's median had {first.label()} first)"
        # What the re-timings can and cannot tell: they are short runs too, and a full timing can disagree with them
        # (an agent read "as fast" of NT=256, which took 33.8 ms in full against NT=64's 11.3 ms).
        level = [r for r in again[1:] if change(r, winner) == NOISE]
        if level:
            others = ", ".join(Config(params=r.params).label() for r in level)
            text += (f"; these re-timings cannot order it and {others} (their middle halves overlap): only a full "
                     "timing could")
        spread = max((r.cv or 0.0) for r in again)
        if spread > WIDE_CV:
            text += (f"; the re-timings themselves spread widely (cv up to {spread:.2g}): they rank these "
                     "configurations no better than the search did")
        report.chosen_by = text
        return [r.params for r in level]

    def tune_chunk(self, session: SessionRow, source: str, spec: LaunchSpec, device: int, batch: list[Config],
                   compile_workers: int | None, progress: Progress) -> list[ConfigResult]:
        """One worker tune job on `device` (the session's or a same-model helper)."""
        job = TuneJob(**self.ctx.wire(session), dtype=session.dtype, sizes=session.sizes, source=source, spec=spec,
                      configs=[c.params for c in batch], compile_workers=compile_workers)
        return self.ctx.run_job(session, job, progress, device=device).results


def _reused(prior: TuneReport, number: int) -> TuneReport:
    """The record of a complete search of the same space, returned instead of measuring it again (an agent's second
    tune of a version, on suggest_next's advice, re-ran the whole exhaustive search to the same end)."""
    assert prior.searched is not None
    ago = f", {_ago(time.time() - prior.at)} ago" if prior.at else ""
    return prior.model_copy(update={"reused": (
        f"nothing measured: v{number}'s space was already searched in full{ago} ({prior.tried} of "
        f"{prior.valid_size} valid configurations, the same parameters and where lines, at "
        f"{' '.join(f'{k}={x}' for k, x in prior.searched.sizes.items())} on {prior.searched.device}); this is that "
        "search's record. Pass again=true to search it again (only timing noise can change its outcome), or declare "
        "other values in a new version to search further")})


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


def _versus_own(timing: Any, own: Any | None, number: int, defaults: dict[str, int],
                level: list[dict[str, int]], how: str = "in full") -> str | None:
    """One phrase: the taken configuration's full timing against the version's own configuration's, with the verdict
    (an agent's tune took a configuration 2.5% faster, within a spread of cv 0.35, and nothing said so)."""
    if own is None or not own.median_ms or not timing.median_ms:
        return None
    params = own.params or defaults
    verdict = change(timing, own)
    said = {NOISE: "within noise: the full timings do not establish a gain",
            SLOWER: "slower beyond noise"}.get(verdict, "faster beyond noise")
    cv = max(timing.cv or 0.0, own.cv or 0.0)
    text = (f"against v{number}'s own configuration {Config(params=params).label()} ({own.median_ms:.4g} ms {how}, "
            f"the taken one runs at {own.median_ms / timing.median_ms:.3g}× its speed): {said}"
            + (f" (cv up to {cv:.2g})" if cv else ""))
    if verdict != NOISE and any(Config(params=p) == Config(params=params) for p in level):
        text += "; the full timings order what the re-timings could not"
    return text


def _estimate_gap(timing: Any, report: TuneReport, cpu: bool = False) -> str | None:
    """One phrase where the full timing and the search's estimate of the same configuration differ beyond noise
    (their middle halves do not overlap), with why they can; None where they agree or the estimate is not found.
    Both time the same way (runner/tune_job.py calls evaluation.steps.benchmark: cold cache, rotated inputs); the
    search's runs are short (0.2 s each, on one input set). On a CPU device the gap is the host's load: the device
    spreads workgroups over the host's cores, and on a shared 2-core host one matmul configuration's launches split
    between about 3.5 ms and 7 ms within one 20-launch run (p25 3.3, p75 7.3 ms), while back-to-back tune-style and
    full timings of it agreed (7.5 and 7.5 ms), so a short median lands on either."""
    if report.best is None:
        return None
    estimate = next((r for r in [*report.retimed, *report.results] if r.params == report.best.params
                     and r.status == "ok" and r.median_ms is not None), None)
    if estimate is None or not estimate.median_ms or not timing.median_ms:
        return None
    verdict = change(timing, estimate)
    if verdict == NOISE:
        return None
    # a speed ratio, as submit_kernel's speedups are (above 1: faster), never a time ratio
    ratio = estimate.median_ms / timing.median_ms
    why = ("on a CPU device its speed follows how many host cores are free, and the search's short runs caught other "
           "moments than the full one: trust the full timing" if cpu else
           "the search's runs are short (0.2 s, one input set): trust the full timing")
    return (f"timed in full, it runs at {ratio:.3g}× the speed the search estimated "
            f"({'slower' if verdict == SLOWER else 'faster'} beyond noise: "
            f"{timing.median_ms:.4g} ms against {estimate.median_ms:.4g} ms); {why}")
