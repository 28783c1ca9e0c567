"""What a version's message says beside its checks' verdicts: the configuration it was timed at when that came from
its parent, a specialized kernel the agent accepted, a problem file that changed since the session started, and what
a reference kernel's own checks can and cannot find."""

from __future__ import annotations

from peak_mcp.backends.includes import REFUSED
from peak_mcp.evaluation.configs import Config
from peak_mcp.loop.pipeline.configuration import Configuration
from peak_mcp.loop.pipeline.verdicts import ACCEPT_SPECIALIZED
from peak_mcp.problems.base import Problem
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.store.records import Outcome, SessionRow, Status


def file_sha256(problem: Problem) -> str | None:
    """A problem file's sha256 (what its sessions were started on); None for a built-in class."""
    return problem.declaration.sha256 if isinstance(problem, DeclaredProblem) else None


def at_configuration(outcome: Outcome, config: Configuration, parent: int | None) -> Outcome:
    """The outcome's timing and message saying which configuration was evaluated, where it was not each list's
    first value alone."""
    params, params_from, inherited, tuned_on = config
    if params and outcome.timing:
        outcome.timing = outcome.timing.model_copy(update={"params": params, "params_from": params_from,
                                                           "params_inherited": inherited,
                                                           "params_tuned_on": tuned_on})
    compile_log = outcome.compile.log if outcome.compile else ""
    refused = REFUSED in f"{outcome.message}{compile_log}"  # the text was refused, whatever the configuration
    if params and params_from == "parent" and not refused:  # said whatever came of it: a failure may be the
        # configuration's
        message = outcome.message or ""
        separator = "\n" if "\n" in message else "; "  # after a compiler log, on a line of its own
        own = {k: x for k, x in params.items() if k not in (inherited or [])}
        whose = f"its parent v{parent}'s tuned configuration" if tuned_on in (None, parent) else \
            f"the configuration v{tuned_on}'s tune chose (its parent v{parent} runs at it too)"
        outcome.message = (f"{message}{separator}evaluated at {whose} "
                           f"{Config(params={k: x for k, x in params.items() if k not in own}).label()}"
                           + (f" with its own defaults {Config(params=own).label()}" if own else "")
                           + (" (tune it to search its own)" if outcome.status.passed else
                              ": the failure may be this configuration's; tune tries the kernel's own "
                              "configurations and says whether any passes"))
    return outcome


def judged(outcome: Outcome, session: SessionRow, problem: Problem, *, origin: str,
           require_generality: bool) -> Outcome:
    """The final message: a specialized kernel accepted, the problem file changed, a reference kernel's v0."""
    if outcome.status is Status.NOT_GENERAL and not require_generality:  # the hint was taken: say so instead
        outcome.message = (outcome.message or "").replace(
            ACCEPT_SPECIALIZED, "accepted here as a specialized kernel (require_generality=false)")
    changed = file_sha256(problem)
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
    return outcome
