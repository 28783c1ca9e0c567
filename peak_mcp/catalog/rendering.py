"""A transformation's body as an agent reads it for one backend: the fenced code examples and their languages, the
sections, items labelled for other backends left out, and the Tuning parameters bullets of the platform at hand."""

from __future__ import annotations

import re

from pydantic import BaseModel

# A fenced example's info string: a language (cuda, hlsl, text), then `kernel` when the block is a whole kernel
# file; a cuda/hlsl block without it is a fragment (helpers or statements) that tests compile inside a harness.
FENCE_LANGUAGES = ("cuda", "hlsl", "text")


FENCE_BACKENDS = {"cuda": ("cuda", "hip"), "hlsl": ("hlsl",), "text": ()}


_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
                    re.DOTALL | re.MULTILINE)


class CodeExample(BaseModel):
    """One fenced block of a text: its language, whether it is a whole kernel, its code (dedented), its line."""

    language: str
    kernel: bool
    code: str
    line: int


def code_examples(body: str) -> list[CodeExample]:
    found = []
    for match in _FENCE.finditer(body):
        words = match.group("info").split()
        indent = len(match.group("indent"))
        code = "".join(line[indent:] if line[:indent].isspace() else line.lstrip()
                       for line in match.group("code").splitlines(keepends=True))
        found.append(CodeExample(language=words[0].lower() if words else "", kernel="kernel" in words[1:],
                                 code=code, line=body.count("\n", 0, match.start()) + 1))
    return found


# A "Tuning parameters" bullet that names a platform first is for that platform's backends only: an HLSL brief
# carries no NVIDIA/AMD lines, a CUDA brief no AMD/HLSL ones (HIP runs on both AMD and NVIDIA).
TUNING_PLATFORMS = {"NVIDIA": ("cuda", "hip"), "AMD": ("hip",), "HLSL": ("hlsl",)}


TUNING_HEADING = "## Tuning parameters"


_PLATFORM_BULLET = re.compile(r"^- (?P<platform>NVIDIA|AMD|HLSL)\b")


_SECTION = re.compile(r"^## ", re.MULTILINE)


_STEP_END = re.compile(r"^(?:\d+\. |## )", re.MULTILINE)  # the next numbered step or section


def _section_span(body: str, heading: str) -> tuple[int, int, int] | None:
    """Where the section `heading` lies: (its heading line's start, its text's start, its end: the next `## `)."""
    match = re.search(rf"^{re.escape(heading)}[ \t]*$", body, re.MULTILINE)
    if match is None:
        return None
    following = _SECTION.search(body, match.end())
    return match.start(), match.end(), following.start() if following else len(body)


def split_section(body: str, heading: str) -> tuple[str, str | None]:
    """`body` without the section `heading`, and that section's text without its heading (None when none)."""
    span = _section_span(body, heading)
    if span is None:
        return body, None
    start, text, end = span
    return body[:start] + body[end:], body[text:end].strip("\n")


# An item (a `- ` bullet or an `N. ` step, with its indented lines and fences) that begins with a backend label
# (`HLSL:` or `HLSL (...)`) is for those backends only: a CUDA brief carries no `HLSL:` step, an HLSL brief no
# `CUDA/HIP:` one. (The Tuning parameters section goes by its platform bullets instead, above.)
ITEM_LABELS = {"CUDA/HIP": ("cuda", "hip"), "CUDA": ("cuda",), "HIP": ("hip",), "HLSL": ("hlsl",)}


_LABELLED = re.compile(r"^(?P<indent>[ \t]*)(?:- |\d+\. )(?P<label>CUDA/HIP|CUDA|HIP|HLSL)(?::| \()")


_STEP = re.compile(r"^\d+\. ")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _leads(line: str, after: str) -> bool:
    """`after` is what `line` (ending in a colon) introduces: code, or an item nested under it."""
    text = after.lstrip()
    return text.startswith("```") or (bool(re.match(r"(?:[-*] |\d+\. )", text)) and _indent(after) > _indent(line))


def drop_other_backends(body: str, backend: str) -> str:
    """`body` without the items labelled for other backends (see ITEM_LABELS), its top-level numbered steps
    renumbered where one was left out, so a brief reads 1, 2, 3. Code fences are never read as items."""
    lines, out = body.split("\n"), []
    fenced, dropped, i = False, False, 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
        match = None if fenced else _LABELLED.match(line)
        if match is None or backend in ITEM_LABELS[match.group("label")]:
            out.append(line)
            i += 1
            continue
        # Left out: the item's line, and what follows indented deeper (blank lines inside it included).
        depth, i = len(match.group("indent")), i + 1
        dropped = dropped or bool(_STEP.match(line))
        while i < len(lines):
            if lines[i].strip():
                if _indent(lines[i]) <= depth:
                    break
                i += 1
                continue
            following = next((j for j in range(i, len(lines)) if lines[j].strip()), len(lines))
            if following == len(lines) or _indent(lines[following]) <= depth:
                break
            i = following
        # The line that introduced the item no longer ends in a colon where nothing it introduced is left (an LLM
        # read "reading both operands as 128-bit vectors:" and found no code under it).
        after = next((line for line in lines[i:] if line.strip()), "")
        if out and out[-1].rstrip().endswith(":") and not _leads(out[-1], after):
            out[-1] = out[-1].rstrip()[:-1] + "."
    if not dropped:
        return "\n".join(out)
    number, fenced = 0, False
    for n, line in enumerate(out):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif line.startswith("## "):
            number = 0
        elif not fenced and _STEP.match(line):
            first, rest = line.split(". ", 1)
            number = 1 if first == "1" else number + 1  # a list that starts again at 1 is another list
            out[n] = f"{number}. {rest}"
    return "\n".join(out)


def render_body(body: str, backend: str, arch: str | None = None) -> str:
    """A text's body as a brief for `backend` shows it: items labelled for other backends (`HLSL:`, `CUDA/HIP:`
    ...) are left out, fenced examples in a language that does not serve the backend (a cuda block in an HLSL
    brief, an hlsl block in a CUDA one) give way to a one-line note, and the Tuning parameters bullets for other
    platforms are left out (for HIP, with the device's `arch` known, those of the other vendor too: gfx* is AMD,
    sm_* NVIDIA)."""
    vendor = "AMD" if arch and arch.startswith("gfx") else "NVIDIA" if arch and arch.startswith("sm_") else None
    tuning = _section_span(body, TUNING_HEADING)
    if tuning is None:
        body = drop_other_backends(body, backend)
    else:  # the Tuning parameters section keeps its platform bullets for the filter below
        start, _, end = tuning
        body = (drop_other_backends(body[:start], backend) + body[start:end]
                + drop_other_backends(body[end:], backend))
    def fence(match: re.Match[str]) -> str:
        words = match.group("info").split()
        language = words[0].lower() if words else ""
        if not FENCE_BACKENDS.get(language) or backend in FENCE_BACKENDS[language]:
            return match.group(0)
        # Nothing stands in for it where the same step goes on to give this backend's own example.
        step = _STEP_END.search(body, match.end())
        following = body[match.end():step.start() if step else len(body)]
        if any(backend in FENCE_BACKENDS.get(m.group("info").split()[0].lower() if m.group("info").split() else "",
                                             ()) for m in _FENCE.finditer(following)):
            return "\x00"
        return f"{match.group('indent')}(the text's {language.upper()} example is left out of this {backend} brief)"

    # A line that led into a fence left out no longer ends in a colon (an LLM read "the code is below:" and
    # found none).
    out = re.sub(r":\n\x00\n", ".\n", _FENCE.sub(fence, body))
    out = re.sub(r"^\x00\n", "", out, flags=re.MULTILINE)
    span = _section_span(out, TUNING_HEADING)
    if span is None:
        return out
    start, text, end = span
    # A bullet goes with its indented continuation lines: an NVIDIA bullet wrapped over two lines leaves no tail
    # in an HLSL brief.
    items: list[list[str]] = []
    for line in out[text:end].strip("\n").splitlines():
        if not line[:1].isspace() or not line.strip() or not items:
            items.append([line])
        else:
            items[-1].append(line)
    def wanted(item: list[str]) -> bool:
        m = _PLATFORM_BULLET.match(item[0])
        return not m or (backend in TUNING_PLATFORMS[m.group("platform")]
                         and not (backend == "hip" and vendor and m.group("platform") != vendor))
    kept = [line for item in items if wanted(item) for line in item]
    if (any(_PLATFORM_BULLET.match(item[0]) for item in items)
            and not any(_PLATFORM_BULLET.match(line) for line in kept)):
        kept.append(f"- No candidate values are recorded for {backend}: choose them from the device facts.")
    return out[:start] + TUNING_HEADING + "\n" + "\n".join(kept) + "\n\n" + out[end:]
