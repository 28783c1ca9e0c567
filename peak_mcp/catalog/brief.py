"""The brief an LLM gets to carry out a transformation, and parsing of its reply."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from pydantic import BaseModel, Field

from peak_mcp.catalog.contract import own_contract
from peak_mcp.catalog.rendering import TUNING_HEADING, split_section
from peak_mcp.core.devices import Device
from peak_mcp.core.errors import InvalidInput
from peak_mcp.core.units import speed

SYSTEM_PROMPT = (
    "You are an expert GPU performance engineer. You rewrite one GPU kernel at a time by applying one named "
    "optimization. You answer with exactly one fenced code block that holds the complete new kernel source, "
    "including its `peak:` annotation line, and nothing that is not part of that file inside the block. "
    "You never write host code. You keep the kernel's argument list (ABI) exactly as specified."
)
_DEVICE_FACTS = ("name", "device_type", "family", "arch", "sm_count", "warp_size", "shared_per_block_kb",
                 "shared_per_block_optin_bytes", "l2_mb", "memory_bandwidth_gbps", "peak_tflops", "subgroup_size",
                 "max_shared_memory")
DIFF_MAX_LINES = 160
_FENCE = re.compile(r"```[ \t]*([\w+#-]*)[ \t]*\n(.*?)```", re.DOTALL)


class KernelTask(BaseModel):
    """What every brief of one apply run shares: the problem, the contract and the transformation text."""

    problem: str
    problem_title: str
    abi: str
    definition: str = ""  # Problem.definition: what it computes, where the ABI's line does not say it all
    backend: str
    dtype: str
    sizes: dict[str, int]
    device: Device
    transformation_id: str
    transformation_title: str
    transformation_body: str
    instructions: str | None = None
    language: str
    # generality's sampled sizes within the session's constraints (evaluation.generality.sample_sizes): named, so
    # that "correct at the awkward sizes" is something the LLM can check its edges against
    constraints: list[str] = Field(default_factory=list)
    generality_sizes: list[dict[str, int]] = Field(default_factory=list)
    # the texts this one usually follows, (id, title), where the kernel it starts from did none of them
    missing_first: list[tuple[str, str]] = Field(default_factory=list)


class Standing(BaseModel):
    """Where the session stands: head (where work continues), best (the fastest general version) and the yardstick
    a new kernel is measured against."""

    head: int | None = None
    head_ms: float | None = None
    head_tflops: float | None = None
    head_gbps: float | None = None
    head_pct_of_peak: float | None = None
    head_spread_ms: tuple[float, float] | None = None  # the middle half of its timed launches (noise.spread)
    best: int | None = None
    best_ms: float | None = None
    best_tflops: float | None = None
    best_gbps: float | None = None
    best_pct_of_peak: float | None = None
    best_spread_ms: tuple[float, float] | None = None
    cpu_device: bool = False  # times on a CPU device also move with the machine's load between measurements
    vendor_ms: float | None = None
    vendor_name: str | None = None
    peak_tflops: float | None = None
    peak_path: str | None = None


class FailedAttempt(BaseModel):
    """The attempt a retry brief is about: its code (or raw reply, when none could be read), verdict, and diff."""

    attempt: int
    version: int
    status: str
    failure: str | None
    verdict: str
    source: str
    parent: int
    parent_source: str
    usable: bool = Field(True, description="False when the reply held no kernel (source is then the raw reply)")


# Detected limits the texts tell the reader to check ("if 512 threads exceed the device's
# maxComputeWorkGroupInvocations"): given where the device reported them.
_DEVICE_LIMITS = ("max_compute_workgroup_invocations", "max_compute_workgroup_size",
                  "max_compute_workgroup_count", "max_threads_per_block", "subgroup_size_control")


def _facts(device: Device) -> dict[str, Any]:
    known = device.model_dump()
    facts = {k: known.get(k) for k in _DEVICE_FACTS if known.get(k)}
    facts.update({k: device.prop(k) for k in _DEVICE_LIMITS if device.prop(k) is not None})
    return facts


def _header(task: KernelTask, attempt: int, max_attempts: int) -> list[str]:
    sm_count = "SM_COUNT, the device's multiprocessor count" if task.device.sm_count else \
        "SM_COUNT, the device's multiprocessor count: 1 here, since this device reports none"
    return [
        f"# Task: apply the transformation `{task.transformation_id}` ({task.transformation_title}) — "
        f"attempt {attempt} of {max_attempts}",
        f"Problem: {task.problem} — {task.problem_title}. Backend: {task.backend}. Data type: {task.dtype}.",
        _sizes(task),
        f"## Kernel contract (ABI) — must not change\n{task.abi}",
        *([f"## What the problem computes (its own definition)\n{task.definition}"] if task.definition else []),
        "The annotation `// peak: ...` is what the server reads first. Exactly one launch line names the entry "
        "point and the launch geometry as integer expressions over the size symbols (and "
        f"{sm_count}) with cdiv/min/max and + - * // %; keep it in step with the tiling of the new kernel "
        "(grid/block/groups/shared). Besides it, any number of `// peak: params NAME=[v1, v2, ...]` lines declare "
        "tuning parameters (the first value is the default, except that a version whose parent was tuned is timed at "
        "the parent's tuned values for the names both declare): the server defines each NAME as a macro when it "
        "compiles, so the kernel uses NAME and never #defines it, and the launch line may use it too.",
        f"## Device\n{json.dumps(_facts(task.device))}",
    ]


def _sizes(task: KernelTask) -> str:
    """The sizes a version must be correct at: the session's, then generality's sampled ones, named."""
    text = f"Sizes this kernel must be correct for: the session's {_size_text(task.sizes)}"
    if task.generality_sizes:
        text += (f", the {len(task.generality_sizes)} awkward sizes generality checks: "
                 + "; ".join(_size_text(s) for s in task.generality_sizes)
                 + ", and one more size drawn at random at every check (each extent up to the session's)")
    else:
        text += " (generality checks no other size in this session)"
    where = " and ".join(task.constraints)
    text += f". The session's constraints: {where}." if where else \
        ". The session has no constraints: nothing may assume a tile multiple."
    return text + " Head moves only to a version correct at all of them."


def _size_text(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _timed(standing: Standing, number: int, ms: float | None, tflops: float | None, pct: float | None,
           gbps: float | None = None, spread: tuple[float, float] | None = None) -> str:
    if ms is None:
        return f"version {number} (not timed on this machine: compile-only device)."
    text = f"version {number}: {ms:.4g} ms"
    if spread is not None and spread[1] > spread[0]:
        text += f" (middle half of its launches {spread[0]:.4g}-{spread[1]:.4g} ms)"
    if speed(tflops, gbps):  # in the unit the version's report uses: GB/s for memory-bound work
        text += f", {speed(tflops, gbps)}"
    if pct is not None:
        path = f"{standing.peak_path} " if standing.peak_path else ""
        text += f" ({pct:.1f}% of the {path}peak)"
    return text + "."


def describe_standing(standing: Standing) -> str:
    """One paragraph: head, the best version when it is another one, and the yardstick, in numbers."""
    head = "no passing version yet." if standing.head is None else _timed(
        standing, standing.head, standing.head_ms, standing.head_tflops, standing.head_pct_of_peak, standing.head_gbps,
        standing.head_spread_ms)
    if standing.best is not None and standing.best == standing.head:
        lines = [f"Head and best (the fastest general version): {head}"]
    else:
        lines = [f"Head (where work continues by default): {head}"]
        if standing.best is not None:
            lines.append("Best (the fastest general version): " + _timed(
                standing, standing.best, standing.best_ms, standing.best_tflops, standing.best_pct_of_peak,
                standing.best_gbps, standing.best_spread_ms))
    if standing.cpu_device and (standing.head_ms or standing.best_ms):
        lines.append("This device is a CPU: its times also move with the machine's load, so two versions timed at "
                     "different moments can differ well beyond the spreads shown.")
    best_ms = standing.best_ms or standing.head_ms
    if standing.vendor_ms is not None:
        yard = f"the vendor library ({standing.vendor_name or 'vendor BLAS'}) takes {standing.vendor_ms:.4g} ms"
        if best_ms:
            who = "best" if standing.best_ms else "head"
            pct = 100.0 * standing.vendor_ms / best_ms
            yard += f"; {who} is at {pct:.1f}% of its speed"
            if pct > 100:  # said plainly, as every report says it (reports.vendor_flag)
                yard += (", faster than the yardstick: rare, so suspect the yardstick (timed on a busy machine?) "
                         "before the kernel")
        lines.append(f"Yardstick: {yard}.")
    elif standing.peak_tflops:
        lines.append(f"Yardstick: no vendor library on this backend; the device peak for this data path is "
                     f"{standing.peak_tflops:.4g} TFLOP/s ({standing.peak_path}).")
    else:
        lines.append("Yardstick: none measured here (no vendor library and no known peak): aim for a faster head.")
    return "\n".join(lines)


_TUNED = re.compile(r"^\s*//\s*peak\s*:\s*params\b", re.MULTILINE)
TUNING_RULE = (f"{TUNING_HEADING}\nThis kernel declares tuning parameters (`// peak: params` lines; each name is a "
               "macro at compile time). Keep them: write tile sizes and similar choices as those names, not as fixed "
               "numbers; a new choice the transformation introduces becomes another parameter with its candidate "
               "values (first = default) and, where some combinations are invalid, a `// peak: where=` line. The "
               "tune tool then searches them, starting from this kernel's best configurations.")


def build_brief(task: KernelTask, standing: Standing, source: str, *, max_attempts: int = 1,
                version: int | None = None) -> str:
    """The first attempt's brief: the parent kernel (`version`) and the transformation text."""
    parts = _header(task, 1, max_attempts)
    which = f" (version {version})" if version is not None else ""
    body, suggested = own_contract(task.transformation_body, task.problem), None
    if _TUNED.search(source):  # one Tuning parameters section: the rule, then what the text suggests
        body, suggested = split_section(body, TUNING_HEADING)
    standing_text = describe_standing(standing)
    if version is not None and standing.head is not None and version != standing.head:
        standing_text += f"\nThis step starts from version {version}, not from head."
    parts += [f"## Where the session stands\n{standing_text}",
              f"## Current kernel{which}\n```{task.language}\n{source.rstrip()}\n```",
              f"## Transformation to apply\n{body.strip()}"]
    if task.missing_first:
        parts.append(starting_point(task.missing_first, version))
    if task.instructions:
        parts.append(f"## Additional instructions from the engineer\n{task.instructions.strip()}")
    if _TUNED.search(source):
        parts.append(TUNING_RULE + (f"\n\nWhat this transformation suggests:\n{suggested}\nA name the kernel "
                                    "already declares keeps the kernel's own candidate values; take from these "
                                    "lines only the names that are new." if suggested else ""))
    parts.append(f"## Answer format\nReply with exactly one ```{task.language} fenced block holding the whole new "
                 "kernel file with its `peak:` annotation line. Brief reasoning may come before the block, none after.")
    return "\n\n".join(parts)


def starting_point(missing: list[tuple[str, str]], version: int | None) -> str:
    """Where the kernel stands against the text's usual predecessors: none of them done (an experiment applies
    every text to v0; an agent may skip a step), so the text's 'Keep unchanged' items about them do not hold yet."""
    kernel = f"version {version}" if version is not None else "the current kernel"
    names = " or ".join(f"{id} ({title})" for id, title in missing)
    return (f"## Starting point\nThis text usually comes after {names}; {kernel} has done none of them (judged from "
            "its lineage and its code). Where the text assumes that step (its 'Keep unchanged' items, the code it "
            "quotes), carry out what it needs of the step as part of this one, and keep everything else of the "
            "contract.")


def build_retry(task: KernelTask, standing: Standing, failed: FailedAttempt, *, attempt: int, max_attempts: int,
                earlier: list[str] = ()) -> str:
    """A retry brief for a sampler that remembers nothing: the code that failed, its verdict once, and what it
    changed from the parent, so the fix starts from the failed attempt rather than from scratch."""
    parts = _header(task, attempt, max_attempts)
    parts += [f"## Where the session stands\n{describe_standing(standing)}",
              f"## Transformation being applied\n{own_contract(task.transformation_body, task.problem).strip()}"]
    if task.missing_first:
        parts.append(starting_point(task.missing_first, failed.parent))
    if task.instructions:
        parts.append(f"## Additional instructions from the engineer\n{task.instructions.strip()}")
    if earlier:
        parts.append("## Earlier attempts\n" + "\n".join(f"- {line}" for line in earlier))
    what = f"version {failed.version}, {failed.status}" + (f" ({failed.failure})" if failed.failure else "")
    if failed.usable:
        parts += [
            f"## The previous attempt (attempt {failed.attempt}: {what}) — this code failed\n"
            f"```{task.language}\n{failed.source.rstrip()}\n```",
            f"## Why it failed\n{failed.verdict.strip()}",
            f"## What it changed from the parent (version {failed.parent})\n```diff\n"
            f"{trim_diff(unified_diff(failed.parent_source, failed.source, failed.parent, failed.version))}\n```",
            "## Answer format\nFix the failed attempt above (keep what is right in it; start again from the parent "
            "only if it is beyond repair). Reply with exactly one "
            f"```{task.language} fenced block holding the whole kernel file, annotation line included.",
        ]
    else:
        parts += [
            f"## The previous attempt (attempt {failed.attempt}: {what}) — the reply could not be used\n"
            f"{failed.verdict.strip()}\nThe reply began:\n```text\n{_trim(failed.source, 1500)}\n```",
            f"## Current kernel (version {failed.parent}, the parent)\n```{task.language}\n"
            f"{failed.parent_source.rstrip()}\n```",
            f"## Answer format\nReply with exactly one ```{task.language} fenced block holding the whole new kernel "
            "file with its `peak:` annotation line. Brief reasoning may come before the block, none after.",
        ]
    return "\n\n".join(parts)


def unified_diff(before: str, after: str, a: int, b: int) -> str:
    text = "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=f"v{a}", tofile=f"v{b}", n=2))
    return text.rstrip("\n") or "(identical to the parent)"


def trim_diff(diff: str, max_lines: int = DIFF_MAX_LINES) -> str:
    """A diff cut to its first and last lines: the failed code is shown whole anyway, the diff only orients."""
    lines = diff.splitlines()
    if len(lines) <= max_lines:
        return diff
    keep = max_lines // 2
    return "\n".join([*lines[:keep], f"... ({len(lines) - 2 * keep} diff lines omitted: the whole failed kernel "
                                      "is shown above) ...", *lines[-keep:]])


def _trim(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


def extract_kernel(reply: str) -> str:
    """The kernel source from an LLM reply: the one fenced block (or the one that carries a `peak:` line)."""
    blocks = [body for _, body in _FENCE.findall(reply)]
    if not blocks:
        if "peak:" in reply and ("__global__" in reply or "[numthreads" in reply):
            return reply.strip() + "\n"  # a bare kernel without fences is unambiguous enough
        raise InvalidInput("the reply holds no fenced code block",
                           "answer with exactly one ``` fenced block holding the whole kernel file.")
    annotated = [b for b in blocks if re.search(r"^\s*//\s*peak\s*:", b, re.MULTILINE)]
    if len(annotated) == 1:
        return annotated[0].rstrip() + "\n"
    if len(annotated) > 1:
        raise InvalidInput(f"the reply holds {len(annotated)} fenced blocks with a peak: line; which one is meant?",
                           "answer with exactly one fenced block holding the whole kernel file.")
    if len(blocks) == 1:
        return blocks[0].rstrip() + "\n"  # the annotation check that follows reports the missing line
    raise InvalidInput(f"the reply holds {len(blocks)} fenced blocks and none has a `// peak:` line",
                       "answer with exactly one fenced block holding the whole kernel with its annotation line.")
