"""The include sandbox: what a kernel may pull in through the preprocessor, checked before any compiler runs.

An agent's source is untrusted text. A compiler asked to `#include "/etc/passwd"` reads the file and quotes it in
its diagnostics, so every directive that can reach a file is vetted here first: only `#include <name>` or
`#include "name"` where `name` is a header that really lies (symlinks resolved) under one of the toolkit's include
directories. Everything else that can name a file (computed includes, `#include_next`, `#import`, `#embed`,
`__has_include`, `#line` with a file name, GNU line markers, include pragmas) is refused with the line it is on.

The scan is deliberately conservative: it looks at the spliced, comment-free text the preprocessor sees and, in
case that view is fooled (an unusual string or comment), at every physical line as well. Over-refusing a
directive inside `#if 0` or a comment costs the agent an edit; under-refusing would leak a file.

`sanitize_log` is the second wall: compiler output keeps only diagnostics about the kernel itself or a toolkit
header, so no other file's content can reach a reply even if a directive slipped through.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from peak_mcp.core.launch import own_source
from peak_mcp.core.text import HIDDEN_CATEGORIES

# A directive starts a line with `#`, its digraph `%:` or the trigraph `??=` (NVRTC has no trigraphs in C++17;
# refusing them costs nothing).
_DIRECTIVE = re.compile(r"^(?P<lead>[ \t\f\v]*)(?:#|%:|\?\?=)(?P<gap>[^A-Za-z_0-9\n]*)(?P<name>[A-Za-z_0-9]*)"
                        r"(?P<rest>.*)$")
_LEADING_COMMENTS = re.compile(r"^(?:[ \t\f\v]*/\*.*?\*/)+")
_INCLUDE_TARGET = re.compile(r'^\s*(?:<(?P<angle>[^<>"\n]*)>|"(?P<quoted>[^"\n]*)")\s*$')
_HEADER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+\-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+\-]*)*$")
_FILE_NAMING = ("include", "include_next", "import", "embed", "line")
# Operators and pragmas that can test for or name a file from anywhere in the text (not only in a directive).
_ANYWHERE = re.compile(r"__has_include(?:_next)?|__has_embed|\b_Pragma\b|\b__pragma\b")
_PRAGMA_FILE_WORDS = re.compile(r"include|embed|alias|import|depend|push_macro|pop_macro", re.IGNORECASE)
# Token pasting (`##`, its digraph and trigraph spellings, in any mix) assembles an identifier from pieces that no
# text scan can see whole: `CAT(__has_, include)` or `CAT(_Pra, gma)`. Refused outright, and so are trigraphs
# (`??/` splices lines) and universal character names that spell ASCII (`\u005F_has_include`).
_HASH = r"(?:#|%:|\?\?=)"
_PASTING = re.compile(_HASH + _HASH)
_TRIGRAPH = re.compile(r"\?\?[=/'()!<>\-]")
_ASCII_UCN = re.compile(r"\\(?:u00[0-7][0-9A-Fa-f]|U000000[0-7][0-9A-Fa-f])")
# Characters a compiler may take for blanks or skip, or that reorder how a line reads (Trojan Source): what a label
# may not hold either (C0 and C1 controls, format characters such as zero-width space, byte-order mark and
# bidirectional overrides, line separators, lone surrogates), and Unicode blanks; tab, newline, carriage return,
# form feed, vertical tab and the space are let through below.
_ODD_CATEGORIES = HIDDEN_CATEGORIES | {"Zs"}
_PLAIN_BLANKS = " \t\n\r\f\v"


@dataclass(frozen=True)
class Refusal:
    line: int
    what: str

    def render(self, file_name: str) -> str:
        return f"{file_name}:{self.line}: error: {self.what}"


def _splice(text: str) -> list[tuple[int, str]]:
    """Logical lines after backslash-newline splicing (phase 2), each with the number of its first physical line.

    A backslash followed by blanks before the newline counts as a splice too, as gcc and EDG accept it."""
    physical = re.split(r"\r\n|\r|\n", text)
    out: list[tuple[int, str]] = []
    start, parts = 1, []
    for number, line in enumerate(physical, start=1):
        if not parts:
            start = number
        match = re.search(r"\\[ \t]*$", line)
        if match:
            parts.append(line[: match.start()])
            continue
        parts.append(line)
        out.append((start, "".join(parts)))
        parts = []
    if parts:
        out.append((start, "".join(parts)))
    return out


def _strip_comments(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Replace comments with a space (phase 3), leaving string and character literals alone."""
    out: list[tuple[int, str]] = []
    in_block = False
    for number, line in lines:
        result: list[str] = []
        i, n = 0, len(line)
        quote = ""
        while i < n:
            c = line[i]
            if in_block:
                end = line.find("*/", i)
                if end < 0:
                    i = n
                    break
                in_block, i = False, end + 2
                result.append(" ")
                continue
            if quote:
                if c == "\\":
                    result.append(line[i: i + 2])
                    i += 2
                    continue
                if c == quote:
                    quote = ""
                result.append(c)
                i += 1
                continue
            if line.startswith("/*", i):
                in_block, i = True, i + 2
                continue
            if line.startswith("//", i):
                break
            if c in "\"'":
                quote = c
            result.append(c)
            i += 1
        out.append((number, "".join(result)))
    return out


def _directives(source: str) -> list[tuple[int, str, str, str]]:
    """(line, gap, directive name, rest) for every line that may be a directive, from every view of the text; the
    gap is what stands between `#` and the name."""
    views = [_strip_comments(_splice(source)),
             [(n, _LEADING_COMMENTS.sub(" ", line)) for n, line in enumerate(re.split(r"\r\n|\r|\n", source), 1)]]
    # Python's notion of a line break is wider than C's (\v, \f, \x1c-\x1e, \x85, \u2028, \u2029); a compiler
    # that agrees with either notion must not see a directive that this scan misses.
    views.append([(n, _LEADING_COMMENTS.sub(" ", line)) for n, line in enumerate(source.splitlines(), 1)])
    # The comment stripper knows neither raw strings (`R"x()"/*)x"` opens no comment) nor digit separators
    # (`1'000 /*` does): fooled, it hides a spliced directive inside a "comment" or misses the comment that a
    # directive follows (`*/ #include`). So the spliced text is also scanned unstripped, and every line from each
    # `*/` on, whatever the stripper believed.
    views.append([(n, _LEADING_COMMENTS.sub(" ", line)) for n, line in _splice(source)])
    views.append([(n, _LEADING_COMMENTS.sub(" ", line[m.end():]))
                  for lines in (_splice(source), enumerate(re.split(r"\r\n|\r|\n", source), 1))
                  for n, line in lines for m in re.finditer(r"\*/", line)])
    found: dict[tuple[int, str, str, str], None] = {}
    for view in views:
        for number, line in view:
            match = _DIRECTIVE.match(line)
            if match:
                found[(number, match.group("gap"), match.group("name"), match.group("rest"))] = None
    return list(found)


def resolve_header(name: str, allowed_dirs: Sequence[str]) -> str | None:
    """The real path of toolkit header `name`, or None when it is not a regular file under an allowed dir."""
    if not _HEADER_NAME.match(name) or ".." in name.split("/"):
        return None
    for root in allowed_dirs:
        real_root = os.path.realpath(root)
        candidate = os.path.realpath(os.path.join(real_root, name))
        if candidate.startswith(real_root + os.sep) and os.path.isfile(candidate):
            return candidate
    return None


def _shown(text: str) -> str:
    """Odd characters named by code point, so a reply shows what the agent cannot see."""
    def one(c: str) -> str:
        odd = not c.isprintable() or unicodedata.category(c) in _ODD_CATEGORIES
        unnamed = {"Cc": "a control character", "Cs": "a lone surrogate, not valid UTF-8"}.get(
            unicodedata.category(c), "unnamed")
        return f"U+{ord(c):04X} ({unicodedata.name(c, unnamed)})" if odd else f"`{c}`"

    return ", ".join(dict.fromkeys(one(c) for c in text if c not in " \t"))


def odd_characters(source: str) -> list[Refusal]:
    """One refusal per line holding a character outside plain text (see _ODD_CATEGORIES), at most 5 lines."""
    refusals: list[Refusal] = []
    for number, line in enumerate(source.split("\n"), start=1):
        odd = [c for c in line if c not in _PLAIN_BLANKS and unicodedata.category(c) in _ODD_CATEGORIES]
        if odd:
            refusals.append(Refusal(number, f"the character {_shown(''.join(odd))} is not allowed in a kernel: "
                                            "use plain spaces, and write text without control or invisible "
                                            "characters (NUL bytes and invalid UTF-8 included)"))
            if len(refusals) == 5:
                break
    return refusals


def check_source(source: str, allowed_dirs: Sequence[str] | None) -> list[Refusal]:
    """Every directive or operator in `source` that could read a file other than an allowed toolkit header, at the
    kernel's own line numbers (after a tuning configuration's `#define`s and `#line 1`, see launch.with_params).

    `allowed_dirs=None` means the language takes no includes at all (HLSL kernels are one file)."""
    prefix = source.count("\n", 0, len(source) - len(own_source(source)))
    return [Refusal(max(1, r.line - prefix), r.what) for r in _check(source, allowed_dirs)]


def _check(source: str, allowed_dirs: Sequence[str] | None) -> list[Refusal]:
    odd = odd_characters(source)
    if odd:
        return odd  # every other view of the text below would be guessing at what a compiler makes of them
    refusals: dict[tuple[int, str], None] = {}

    def refuse(line: int, what: str) -> None:
        refusals[(line, what)] = None

    for number, gap, name, rest in _directives(source):
        if gap.strip(" \t") and (name or rest.strip()):
            # clang skips NUL and Unicode blanks there, EDG may skip others: `#<U+00A0>include` is an include to
            # a compiler and no directive to a scan that stops at the odd character.
            refuse(number, f"only spaces and tabs may stand between `#` and a directive name (found {_shown(gap)})")
            continue
        if name.isdigit() or (not name and rest.strip()[:1].isdigit()):
            refuse(number, "line markers (`# N \"file\"`) are not allowed")
            continue
        if name == "pragma" and re.search(r"\b__debug\b", rest):  # clang: crash, stack overflow, internal dumps
            refuse(number, f"`#pragma{rest.rstrip()}` is not allowed: compiler debugging pragmas are refused")
            continue
        if name == "pragma" and _PRAGMA_FILE_WORDS.search(rest):
            refuse(number, f"`#pragma{rest.rstrip()}` is not allowed: pragmas that name files are refused")
            continue
        if name not in _FILE_NAMING:
            continue
        shown = f"#{name}{rest.rstrip()}"
        if name == "line" and re.fullmatch(r"[ \t]+[0-9]+[ \t]*", rest):
            continue  # a bare line number names no file (tuning parameters are prepended with `#line 1`)
        if name == "line":
            refuse(number, f"`{shown}` is not allowed: #line would make diagnostics name another file")
        elif allowed_dirs is None:
            refuse(number, f"`{shown}` is refused: HLSL kernels are one file; includes are not allowed")
        elif name != "include":
            refuse(number, f"`{shown}` is not allowed; only `#include` of a toolkit header, by name, is")
        else:
            target = _INCLUDE_TARGET.match(rest)
            if target is None:
                refuse(number, f"`{shown}` is refused: the include target must be written out as <header.h> or "
                               "\"header.h\" (a macro as the target is not allowed)")
                continue
            header = target.group("angle") if target.group("angle") is not None else target.group("quoted")
            found = resolve_header(header, allowed_dirs)
            # A quoted name is looked up in the compiler's working directory first: it must not shadow the header.
            shadowed = target.group("quoted") is not None and os.path.lexists(header) and \
                os.path.realpath(header) != found
            if found is None or shadowed:
                refuse(number, f"`{shown}` is refused: only headers of the CUDA toolkit can be included "
                               "(e.g. <cuda_fp16.h>, <mma.h>); the kernel is one file")
    physical = list(enumerate(re.split(r"\r\n|\r|\n", source), start=1))
    for number, line in [*physical, *_splice(source)]:
        for match in _ANYWHERE.finditer(line):
            refuse(number, f"`{match.group(0)}` is not allowed: it can test for or name files outside the kernel")
        if _PASTING.search(line):
            refuse(number, "token pasting (`##`) is not allowed: it can assemble `__has_include` or `_Pragma` "
                           "from pieces; write identifiers out in full")
        for match in _TRIGRAPH.finditer(line):
            refuse(number, f"the trigraph `{match.group(0)}` is not allowed: write the character it stands for")
        for match in _ASCII_UCN.finditer(line):
            refuse(number, f"`{match.group(0)}` is not allowed: a universal character name may not spell an ASCII "
                           "character; write the character itself")
    return [Refusal(line, what) for line, what in sorted(refusals)]


REFUSED = "refused before any compiler runs"  # what a refusal log says: the source's text, not a configuration


def refusal_log(refusals: Iterable[Refusal], file_name: str) -> str:
    lines = [r.render(file_name) for r in refusals]
    lines.append(f"the kernel was not compiled: these lines are {REFUSED}")
    return "\n".join(lines)


# --- compiler output -----------------------------------------------------------------------------------------

# A diagnostic's location at the start of a line: EDG/NVRTC `file(12): error`, clang/dxc `file:12:3: error`,
# glslang `ERROR: file:12: '...'`.
_LOCATION = re.compile(r"^(?:(?:ERROR|WARNING|NOTE|INFO): )?(?P<file>[^\n]+?)(?:\((?P<l1>\d+)\)|:(?P<l2>\d+))(?::\d+)?"
                       r":\s")


def sanitize_log(text: str, own_name: str, allowed_dirs: Sequence[str] = ()) -> str:
    """Compiler output without diagnostics about files other than the kernel and toolkit headers.

    Lines that follow a location line (EDG and clang quote the offending source line under it) share its fate."""
    roots = [os.path.realpath(d) + os.sep for d in allowed_dirs] + [d.rstrip(os.sep) + os.sep for d in allowed_dirs]
    kept: list[str] = []
    keep, withheld = True, 0
    for line in text.splitlines():
        match = _LOCATION.match(line)
        if match:
            where = match.group("file").strip().strip('"')
            keep = where == own_name or any(where.startswith(root) for root in roots)
        if keep:
            kept.append(line)
        else:
            withheld += 1
    if withheld:
        kept.append(f"({withheld} line(s) of compiler output about a file other than {own_name} or a toolkit "
                    "header were withheld)")
    return "\n".join(kept)


def short_paths(log: str, labels: dict[str, str]) -> str:
    """`log` with each directory of `labels` (as given and resolved) written as its label: a diagnostic about
    `<venv>/site-packages/nvidia/cu13/include/cuda_fp16.h` reads `<cuda>/cuda_fp16.h`."""
    for directory, label in labels.items():
        for prefix in sorted({directory, os.path.realpath(directory)}, key=len, reverse=True):
            log = log.replace(prefix.rstrip(os.sep) + os.sep, label + "/")
    return log
