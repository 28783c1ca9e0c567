"""Text from untrusted code made safe to show: no terminal control, bounded length.

A problem file's exception message, TITLE or docstring, and a problem host's answers, reach an agent's context and
often a person's terminal. `clean` removes escape sequences (CSI, OSC, and any other ESC-led sequence) and every
other C0/C1 control character except newline and tab (and the Unicode bidirectional overrides, which reorder what a
reader sees), collapses runs of blank lines, and cuts the text to `limit` characters with a note of how much was cut.
"""

from __future__ import annotations

import re

# CSI (ESC [ or 0x9b, parameters, intermediates, a final byte); OSC, DCS, SOS, PM, APC (ESC ] P X ^ _) up to BEL or
# ST, or to the end when unterminated; any other ESC and the byte after it.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?|\x1b[\]PX^_].*?(?:\x07|\x1b\\|$)|\x1b.?|\x9b[0-?]*[ -/]*[@-~]?",
                      re.DOTALL)
# ... and the invisible format characters (zero-width, BOM, word joiners, line/paragraph separators, the Unicode tag
# block), which could carry text a reader never sees into an agent's context.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069"
                       "\ufeff\U000e0000-\U000e007f]")
_BLANK_LINES = re.compile(r"\n[ \t]*(?:\n[ \t]*){2,}")


def clean(text: object, limit: int) -> str:
    """`text` (str() of anything) without control sequences or characters (newline and tab kept), at most `limit`
    characters and then a note of how many more were cut."""
    text = text if isinstance(text, str) else str(text)
    total = len(text)
    # Cleaning only removes characters: beyond 4 x limit (plus room for one long escape) nothing can reach the
    # result, so a 10 MB message costs what a short one does.
    head = text[:4 * limit + 4096]
    head = _CONTROLS.sub("", _ESCAPES.sub("", head.replace("\r\n", "\n")))
    head = _BLANK_LINES.sub("\n\n", head)
    dropped = total - min(total, 4 * limit + 4096)
    if len(head) > limit or dropped:
        cut = len(head) - min(len(head), limit) + dropped
        return f"{head[:limit]}… ({cut:,} more characters cut)"
    return head
