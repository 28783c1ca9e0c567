"""Which other sizes a version is validated at after it passes at the session's: PEAK checks every step at many
execution parameters, because a kernel that only works at tile multiples is a wrong kernel unless the session
says those are the only sizes it will ever see (its constraints). At the largest sizes, too big to run, only the
launch line is evaluated against the launch limits (largest_sizes, launch_breach)."""

from __future__ import annotations

import ast
import random
from collections.abc import Sequence

from peak_mcp.core.errors import InvalidInput, PeakError
from peak_mcp.core.expressions import evaluate_condition
from peak_mcp.core.launch import LaunchSpec, beyond_portable_limits
from peak_mcp.evaluation.phases import SizeFailure
from peak_mcp.problems.base import SAMPLED_WORK, Problem, Sizes

DEFAULT_COUNT = 9
DRAWN_MAX = 300  # a drawn extent's bound: about the work of the awkward sizes (1031 x 7 x 67), on a CPU device too
MAX_CONSTRAINTS = 16  # stored with the session, shown with it, evaluated at every sampled size
_ROUNDINGS = (8, 16, 32, 64, 128, 256, 512)


def check_constraints(problem: Problem, constraints: list[str] | None) -> list[str]:
    """Parse each constraint now, so that a typo is an error at start_session; return them stripped."""
    if constraints is not None and len(constraints) > MAX_CONSTRAINTS:
        raise InvalidInput(f"{len(constraints)} constraints, over the limit of {MAX_CONSTRAINTS}",
                           "join conditions with `and`, or keep the ones kernels rely on.")
    cleaned = []
    probe = dict.fromkeys(problem.symbols, 4096)
    for text in constraints or []:
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(f"constraint {text!r} is empty", "write e.g. 'M % 128 == 0'.")
        evaluate_condition(text, probe, where=f"constraint {text!r}")
        cleaned.append(text.strip())
    return cleaned


def satisfies(sizes: Sizes, constraints: list[str]) -> bool:
    return all(evaluate_condition(c, sizes) for c in constraints)


def sample_sizes(problem: Problem, sizes: Sizes, constraints: list[str],
                 count: int = DEFAULT_COUNT, draw: random.Random | None = None) -> list[dict[str, int]]:
    """The problem's awkward sizes that meet the constraints (`count` of them, and every fast-path size), then for
    each symbol one size above the session's in it (Problem.sizes_above: the first choice that meets them). One
    that does not is rounded up, first only in the symbols the constraints name (so the others stay odd), then in
    every symbol, to the smallest multiple that works; a sampled symbol (a parameter) is never rounded, and takes
    the session's value where its own breaks the constraints. With `draw`, one more size last: every extent drawn
    at random up to the session's (at most DRAWN_MAX), so that the sizes a version is checked at are never all
    known in advance (the others are fixed and named in every brief: a kernel could special-case them)."""
    # a problem file's own constraints too: with the session's alone, a file's 'S % 128 == 0' rounded every extent
    named = _symbols_in([*constraints, *problem.own_constraints]) & set(problem.symbols)
    chosen: list[dict[str, int]] = []

    def keep(variant: dict[str, int] | None) -> None:
        if variant is not None and variant not in chosen and variant != dict(sizes):
            chosen.append(variant)

    def keep_fitted(candidate: dict[str, int]) -> None:
        # A session that fixes a parameter (a stride, a filter size) gets the awkward extents at its own value.
        keep(_fit(problem, candidate, constraints, named) or
             _fit(problem, {k: sizes[k] if k in problem.sampled else v for k, v in candidate.items()}, constraints,
                  named))

    # `count` of the awkward sizes, then every fast-path size: capped with the others, they were the ones left out
    # (attention's S = 257 at D = 128, conv2d's 72 and 40 channels)
    fast = problem.fast_path_sizes(sizes)
    for candidate in (c for c in problem.generality_sizes(sizes) if c not in fast):
        keep_fitted(candidate)
        if len(chosen) >= count:
            break
    for candidate in fast:
        keep_fitted(candidate)
    for choices in problem.sizes_above(sizes):
        keep(next((v for v in (_fit(problem, c, constraints, named) for c in choices) if v is not None), None))
    if draw is not None and chosen:
        keep(drawn_size(problem, sizes, constraints, named, draw, max(problem.work(c) for c in chosen)))
    return chosen


def drawn_size(problem: Problem, sizes: Sizes, constraints: list[str], named: set[str], draw: random.Random,
               max_work: float) -> dict[str, int] | None:
    """Each extent uniform in 1 .. min(its session value, DRAWN_MAX); parameters (sampled symbols) at the session's
    value. Drawn again, with the bound halved, until one meets the constraints and the problem's limits (rounded up
    as the others are) and costs no more than the costliest of the other sampled sizes."""
    bound = DRAWN_MAX
    for _ in range(12):
        candidate = {k: v if k in problem.sampled else draw.randint(1, max(1, min(v, bound)))
                     for k, v in sizes.items()}
        fitted = _fit(problem, candidate, constraints, named)
        if fitted is not None and problem.work(fitted) <= max_work:
            return fitted
        bound = max(2, bound // 2)
    return None


def _fit(problem: Problem, candidate: dict[str, int], constraints: list[str],
         named: set[str]) -> dict[str, int] | None:
    """The candidate, or its smallest rounding up that meets the constraints and the problem's limits; None."""
    variants = [candidate]
    extents = set(problem.symbols) - set(problem.sampled)  # a parameter (stride, filter size) is never rounded
    for only in (named & extents, extents):
        variants += [{k: -(-v // r) * r if k in only else v for k, v in candidate.items()} for r in _ROUNDINGS]
    most = max(ROUNDED_WORK_GROWTH * problem.work(candidate), SAMPLED_WORK)
    for variant in variants:
        try:
            if variant is not candidate and problem.work(variant) > most:
                continue  # every extent rounded up to a problem's own multiple: a size past any awkward one's cost
            if satisfies(variant, constraints) and problem.check_sizes(variant) == variant:
                return variant
        except PeakError:
            continue
    return None


# A rounded candidate may cost this many times the candidate (two constrained extents rounded from 33 and 19 to 128
# cost 26x), or SAMPLED_WORK, not more: a file's own 'S % 128 == 0' rounded B = H = 1 to 128 too, and attention's
# small long-row size became 1.2e12 flops, past the session's own.
ROUNDED_WORK_GROWTH = 64


# The largest value a size symbol takes: every size reaches the kernel as a 32-bit int.
MAX_SIZE = 2**31 - 1
# How far past the shape in use a symbol is grown: two orders of magnitude. Problems declare no size ranges, and
# their buffers' cap (max_elements, 2**31) protects the server rather than saying what anyone runs: grown to it, a
# 1-D problem's N reaches 2**31 and every one-thread-per-element dispatch is refused. 64x reaches what users do run
# (an agent's one-group-per-row dispatch broke at 70,000 rows, 17x the default 4,096).
GROWTH = 64
# ... and at least this far, where the buffers allow: a problem file's small defaults (ROWS=64) grown 64x stayed under
# the 65,535 groups a one-group-per-row dispatch breaks, and an agent's groups=(ROWS, 1, 1) passed
FLOOR = 1 << 17
LAUNCH_LIMIT = "launch_limit"  # the check name of a launch past the limits at the largest sizes


def largest_sizes(problem: Problem, sizes: Sizes, constraints: list[str]) -> list[dict[str, int]]:
    """For each extent symbol, the largest value up to GROWTH times its value in use that the problem allows (its
    buffers' max_elements, its own constraints, a 32-bit int) and the session's constraints meet: sizes generality
    never runs (far too big), where only the launch expressions are evaluated. The value in use, and the other
    symbols' values, are the session's or the problem's defaults, whichever is larger: a shape in use grown along
    one axis (from a toy session's sizes, a CPU device's or a test's, the growth would stay toy-sized too)."""
    base = {k: v if k in problem.sampled else max(v, problem.default_sizes.get(k, v)) for k, v in sizes.items()}
    found: list[dict[str, int]] = []
    for symbol in problem.symbols:
        if symbol in problem.sampled:  # a parameter (stride, filter size): its values are sampled, not grown
            continue

        def fitted(value: int, symbol: str = symbol) -> dict[str, int] | None:
            # the value, or its rounding down to a tile multiple, that the constraints (e.g. M % 128 == 0) admit
            for r in (1, *_ROUNDINGS):
                variant = {**base, symbol: value // r * r}
                try:
                    if variant[symbol] >= 1 and satisfies(variant, constraints) and \
                            problem.check_sizes(variant) == variant:
                        return variant
                except PeakError:
                    continue
            return None

        # fitted(low) may fail: bisect anyway
        low, high = sizes[symbol], min(MAX_SIZE, max(GROWTH * base[symbol], FLOOR))
        if fitted(high) is not None:
            low = high
        while high - low > 1:  # the buffers' sizes grow with the symbol: the admitted values are a prefix
            middle = (low + high) // 2
            low, high = (middle, high) if fitted(middle) is not None else (low, middle)
        best = fitted(low)
        if best is not None and best[symbol] > sizes[symbol] and best not in found:
            found.append(best)
    return found


def launch_breach(spec: LaunchSpec, sizes_list: Sequence[Sizes], params: dict[str, int] | None = None,
                  groups: Sequence[int] | None = None) -> SizeFailure | None:
    """The first of these sizes at which the launch expressions give a launch past the limits (beyond_portable_limits;
    `groups`: the Vulkan device's maxComputeWorkGroupCount where known), evaluated without running anything; the
    message names the size, the expression, the limit, the largest size that still launches and the way out."""
    for sizes in sizes_list:
        try:
            if spec.violated(sizes, params):  # this configuration does not claim those sizes (its `where`)
                continue
            why = beyond_portable_limits(spec.evaluate(sizes, params), groups)
        except PeakError as exc:  # e.g. a dimension below 1, a value past the expression grammar's range
            why = str(exc)
        if why is None:
            continue
        return SizeFailure(sizes=dict(sizes), check=LAUNCH_LIMIT, message=(
            f"{_launch_text(spec, why)} cannot be launched at these sizes, which the problem allows (evaluated, "
            f"not run): {why}; {_fits_up_to(spec, sizes, params, groups)}use a grid-stride loop (a fixed grid, "
            "each block looping over its rows or tiles) or spread the blocks over y as well as x, or declare the "
            "bound as a session constraint"))
    return None


def _launch_text(spec: LaunchSpec, why: str) -> str:
    """The annotation's expressions the breach is about (`why` starts with their key), else the whole line's."""
    keys = [k for k in ("grid", "block", "groups", "cluster") if getattr(spec, k) is not None]
    named = [k for k in keys if why.startswith(k)] or keys
    return " ".join(f"{k}=({', '.join(getattr(spec, k))})" for k in named)


def _fits_up_to(spec: LaunchSpec, sizes: Sizes, params: dict[str, int] | None, groups: Sequence[int] | None) -> str:
    """"it launches up to ROWS=65535; " where one symbol grown past the session's is to blame, else ""."""
    for symbol, value in sorted(sizes.items(), key=lambda item: -item[1]):  # the grown symbol first
        low, high = 1, value

        def launches(v: int, symbol: str = symbol) -> bool:
            try:
                return beyond_portable_limits(spec.evaluate({**sizes, symbol: v}, params), groups) is None
            except PeakError:
                return False

        if launches(high) or not launches(low):
            continue
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if launches(middle) else (low, middle)
        return f"it launches up to {symbol}={low:,} (constraint '{symbol} <= {low}'); "
    return ""


def _symbols_in(constraints: list[str]) -> set[str]:
    return {node.id for text in constraints for node in ast.walk(ast.parse(text, mode="eval"))
            if isinstance(node, ast.Name)}


# A worker's verdict at one sampled size, sent as a progress line as soon as it is known ("generality at M=1 N=7:
# verdict wrong_result: ..."): a later size that hangs or crashes the worker ends the job, and the server would
# otherwise lose every verdict before it (an attention kernel wrong at 11 of 13 sizes was reported as one timeout).
VERDICT = "verdict "
PASSED = "passed"
UNJUDGED = "unjudged"  # the reference kernel itself fails there: nothing to judge a candidate by


def size_note(label: str, check: str, message: str | None = None) -> str:
    """The progress line that carries one size's verdict: `check` is PASSED, UNJUDGED or the failing check."""
    return f"generality at {label}: {VERDICT}{check}" + (f": {message}" if message else "")


def read_size_note(line: str) -> tuple[dict[str, int], str, str | None] | None:
    """(sizes, check, message) from a size_note line; None for any other progress line."""
    head, sep, rest = line.partition(f": {VERDICT}")
    if not sep or not head.startswith("generality at "):
        return None
    check, _, message = rest.partition(": ")
    sizes = {}
    for part in head.removeprefix("generality at ").split():
        name, eq, value = part.partition("=")
        if not eq or not value.lstrip("-").isdigit():
            return None
        sizes[name] = int(value)
    return sizes, check.strip(), message or None
