"""One attempt's outcome class, from the version report apply_transformation returns: the classes PEAK counts
(compile error, wrong result, timeout, ...) and, for a correct kernel, its speed against the base beyond noise."""

from __future__ import annotations

from typing import Any

FAILURES = ("invalid_reply", "compile_error", "wrong_result", "not_general", "fault", "timeout", "error")
CORRECT = ("faster", "noise", "slower", "untimed")
CLASSES = FAILURES + CORRECT + ("compiled_only",)  # compiled where nothing can run it


def outcome(report: dict[str, Any]) -> str:
    status, failure = report.get("status", ""), report.get("failure") or ""
    if status == "invalid_reply":
        return "invalid_reply"  # no kernel in the reply: nothing was compiled
    if status in ("compile_error", "invalid_annotation"):
        return "compile_error"
    if status == "not_general":
        return "not_general"
    if status in ("failed", "error"):
        if "timeout" in failure:
            return "timeout"
        if "fault" in failure or failure == "worker_died":
            return "fault"
        return "wrong_result" if status == "failed" else "error"
    if status == "benchmarked":
        change = (report.get("performance") or {}).get("change_vs_parent") or ""
        return ("faster" if change.startswith("faster") else "slower" if change.startswith("slower")
                else "noise" if "noise" in change else "untimed")
    return {"validated": "untimed", "compiled": "compiled_only"}.get(status, "error")
