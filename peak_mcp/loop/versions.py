"""The read side of one version, and head: a version's report, its detail with the configuration its time is of, a
diff of two versions, revert, and the one line that says where a submission left head and best."""

from __future__ import annotations

import difflib
from typing import Any

from peak_mcp.core.errors import InvalidInput, NotFound, PeakError
from peak_mcp.evaluation.configs import Config, TuneReport
from peak_mcp.evaluation.noise import NOISE, SLOWER, change
from peak_mcp.evaluation.phases import dumped
from peak_mcp.loop.context import LoopContext
from peak_mcp.loop.models import DiffReport, VersionDetail, VersionReport
from peak_mcp.store.records import Status, VersionRow
from peak_mcp.store.reports import best_version, performance, trim_log


def _number(version: VersionRow | None) -> int | None:
    return version.number if version is not None else None


def _tuning_brief(report: TuneReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    timed = sorted((r for r in report.results if r.status == "ok"), key=lambda r: r.median_ms or 0.0)
    return {"strategy": report.strategy, "space_size": report.space_size, "tried": report.tried,
            "pruned": len(report.pruned) + report.where_pruned, "stopped": report.stopped, "devices": report.devices,
            "best": report.best.model_dump() if report.best else None, "chosen_by": report.chosen_by,
            "fastest": [{"params": r.params, "median_ms": r.median_ms} for r in timed[:5]],
            "complete": report.complete, "failures": report.failures,
            # the full timing: of the taken best (the version's time) or of a best not taken, and the verdict
            "recorded": report.recorded.model_dump() if report.recorded else None,
            "full": report.full.model_dump() if report.full else None, "versus_own": report.versus_own}


class Versions:
    def __init__(self, ctx: LoopContext) -> None:
        self.ctx = ctx

    def version_report(self, session_id: str, number: int) -> VersionReport:
        session = self.ctx.store.session(session_id)
        versions = {v.number: v for v in self.ctx.store.versions(session_id)}
        if number not in versions:
            self.ctx.store.version(session_id, number)  # raises NotFound with the hint
        v = versions[number]
        problem = self.ctx.problem(session.problem)
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
            performance=performance(v, versions, session.baseline, self.ctx.device_of(session),
                                    problem.peak_path(session.dtype, session.backend),
                                    self.ctx.roofline(session, session.sizes)),
            head=session.head, best=_number(best_version(versions.values())),
            phases={phase: round(record.seconds, 3) for phase, record in spent.items()
                    if record is not None and record.seconds is not None})

    def resolve_version(self, session_id: str, version: int | None) -> VersionRow:
        session = self.ctx.store.session(session_id)
        if version is None:
            if session.head is None:
                raise NotFound(f"session {session_id} has no passing version yet",
                               "submit a kernel that compiles and validates first.")
            version = session.head
        return self.ctx.store.version(session_id, version)

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
        whose = f"the configuration tuned on v{timing.params_tuned_on}" \
            if timing.params_tuned_on not in (None, v.parent) else f"v{v.parent}'s tuned configuration"
        how = {"defaults": "its defaults", "parent": whose}.get(timing.params_from or "", "tuned")
        if timing.params_from == "parent" and timing.params_inherited is not None and \
                set(timing.params_inherited) != set(timing.params):
            how = f"{' '.join(timing.params_inherited)} from {whose}, the rest its defaults"
        defines = " ".join(f"#define {k} {x}" for k, x in timing.params.items())
        text = f"timed with {Config(params=timing.params).label()} ({how}): compiled as `{defines}` before this source"
        try:
            defaults = self.ctx.spec(self.ctx.store.session(v.session_id), v.source).config()
        except PeakError:
            return text
        if defaults != timing.params:
            text += (f"; the params line's first values ({Config(params=defaults).label()}) are only the defaults, "
                     "not what was timed")
        return text

    def diff(self, session_id: str, a: int, b: int | None) -> DiffReport:
        first = self.ctx.store.version(session_id, a)
        second = self.resolve_version(session_id, b)
        text = "".join(difflib.unified_diff(first.source.splitlines(keepends=True),
                                            second.source.splitlines(keepends=True),
                                            fromfile=f"v{a}", tofile=f"v{second.number}"))
        return DiffReport(session_id=session_id, a=a, b=second.number, diff=text or "(identical)")

    def revert(self, session_id: str, version: int, require_generality: bool = True) -> VersionReport:
        v = self.ctx.store.version(session_id, version)
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
        self.ctx.store.set_head(session_id, version)
        return self.version_report(session_id, version)

    def head_and_best(self, session_id: str) -> tuple[int | None, int | None]:
        """Head (where work continues by default) and best (the fastest general version)."""
        return self.ctx.store.session(session_id).head, _number(best_version(self.ctx.store.versions(session_id)))

    def standing_note(self, session_id: str, number: int) -> str:
        """Where version `number` left head and best, in one line: "head → v5 (0.21× its parent v4); best: v2
        (54.59 ms), head is 0.26× as fast"."""
        session = self.ctx.store.session(session_id)
        versions = {v.number: v for v in self.ctx.store.versions(session_id)}
        v, head, best = versions[number], session.head, best_version(versions.values())
        if not session.runs:
            where = f"head stays v{head}" if head is not None else "no head"
            only = f", so v{number} was only compiled" if v.status is Status.COMPILED else ""
            return (f"{where}: nothing runs in this session (no {session.backend} device here){only}; head and best "
                    "move only to versions validated and timed")
        if head == number:
            parent = versions.get(v.parent) if v.parent is not None else None
            text = f"head → v{number}"
            # the records, or the pair where this submission re-timed its parent back to back (records.Retimed)
            mine_now, theirs = v.timing, parent.beside(parent.timing, v.number) if parent is not None else None
            if parent is not None and theirs and mine_now and theirs.median_ms:
                verdict = change(mine_now, theirs)
                said = "a slowdown beyond noise" if verdict == SLOWER else verdict
                again = f", v{parent.number} re-timed back to back" if theirs is not parent.timing else ""
                text += (f" ({theirs.median_ms / mine_now.median_ms:.2f}× its parent v{parent.number}: "
                         f"{said}{again})")
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
        top = best.beside(best.timing, head)
        slower = ""
        if mine is not None and top is not None and mine.median_ms:
            verdict = change(mine, top)
            slower = f", head is {top.median_ms / mine.median_ms:.2f}× as fast ({verdict})"
            if verdict == SLOWER:  # a submission without parent builds on head: say how to build on the best
                slower += f"; to build on the best, submit with parent={best.number} (or revert to it)"
        again = (f", re-timed back to back with v{head} at {top.median_ms:.4g} ms"
                 if top is not None and top is not best.timing else "")
        return text + f"; best: v{best.number} ({best.median_ms:.4g} ms{again}){slower}"
