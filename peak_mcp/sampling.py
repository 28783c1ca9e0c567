"""The brief an LLM gets to carry out a transformation, and parsing of its reply."""

from __future__ import annotations

import json
import re
from typing import Any

from peak_mcp.errors import InvalidInput

SYSTEM_PROMPT = (
    "You are an expert GPU performance engineer. You rewrite one GPU kernel at a time by applying one named "
    "optimization. You answer with exactly one fenced code block that holds the complete new kernel source, "
    "including its `peak:` annotation line, and nothing that is not part of that file inside the block. "
    "You never write host code. You keep the kernel's argument list (ABI) exactly as specified."
)
_FENCE = re.compile(r"```[ \t]*([\w+#-]*)[ \t]*\n(.*?)```", re.DOTALL)


def build_brief(*, problem: str, problem_title: str, abi: str, backend: str, dtype: str, sizes: dict[str, int],
                device: dict[str, Any], source: str, transformation_id: str, transformation_title: str,
                transformation_body: str, instructions: str | None, language: str) -> str:
    facts = {k: device.get(k) for k in ("name", "family", "arch", "sm_count", "warp_size", "shared_per_block_kb",
                                        "shared_per_block_optin_bytes", "l2_mb", "memory_bandwidth_gbps",
                                        "peak_tflops", "subgroup_size", "max_shared_memory") if device.get(k)}
    parts = [
        f"# Task: apply the transformation `{transformation_id}` ({transformation_title})",
        f"Problem: {problem} — {problem_title}. Backend: {backend}. Data type: {dtype}. "
        f"Sizes this kernel must be correct for: {json.dumps(sizes)} (and ideally any sizes).",
        f"## Kernel contract (ABI) — must not change\n{abi}",
        "The first line that matters to the server is the annotation `// peak: ...`: it names the entry point and "
        "the launch geometry as integer expressions over the size symbols with cdiv/min/max and + - * // %. Keep it "
        "in step with the tiling of the new kernel (grid/block/groups/shared).",
        f"## Device\n{json.dumps(facts)}",
        f"## Current kernel\n```{language}\n{source.rstrip()}\n```",
        f"## Transformation to apply\n{transformation_body.strip()}",
    ]
    if instructions:
        parts.append(f"## Additional instructions from the engineer\n{instructions.strip()}")
    parts.append(f"## Answer format\nReply with exactly one ```{language} fenced block holding the whole new kernel "
                 "file with its `peak:` annotation line. Brief reasoning may come before the block, none after.")
    return "\n\n".join(parts)


def build_retry(*, attempt: int, max_attempts: int, failure: str, details: str) -> str:
    return (f"Attempt {attempt - 1} of {max_attempts} failed: {failure}.\n\n{details.strip()}\n\n"
            "Fix the kernel and answer again with exactly one fenced block holding the whole kernel file, "
            "annotation line included.")


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
