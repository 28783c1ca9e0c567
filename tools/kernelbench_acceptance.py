"""How much of the public KernelBench suite the server accepts: every file read the way `list_problems` reads a problem
folder (the confined describe subprocess, its limits), accepted or refused, and the refusals grouped by cause.

    python tools/kernelbench_acceptance.py /path/to/KernelBench/KernelBench --out /tmp/kb-acceptance --jobs 2

The folder holds level1/ ... level3/ as the KernelBench repository publishes them; the files are read where they are,
unedited. Writes OUT/acceptance.jsonl (a file a line: level, file, accepted, seconds, the refusal) and
OUT/acceptance.md (per level: files, accepted, refused by cause). A cause is the refusal's message with its numbers,
quoted names and file paths taken out, so that refusals of one kind count together.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from peak_mcp.problems.registry import DESCRIBE_TIMEOUT_S, DescribeFailed, describe_in_subprocess

LEVELS = ("level1", "level2", "level3")


def cause(message: str) -> str:
    """A refusal's kind: its first clause, with what differs between files of one kind (numbers, names, paths) out."""
    text = message.split("\n")[0].removeprefix("a KernelBench file that cannot be translated: ")
    text = re.sub(r"/\S+\.py(:\d+)?", "<file>", text)
    text = re.sub(r"'[\w./-]*'|\"[\w./-]*\"|`[^`]*`", "<name>", text)  # quoted names, not apostrophes
    text = re.sub(r"\(\s*\d+(?:\s*,\s*\d+)*\s*,?\s*\)|\[\s*\d+(?:\s*,\s*\d+)*\s*\]", "<shape>", text)
    text = re.sub(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", "N", text)
    text = re.sub(r"\b(line N: )", "", text)
    return text[:140]


def read_one(level: str, path: Path, timeout_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        declaration = describe_in_subprocess(path, timeout_s=timeout_s)
        return {"level": level, "file": path.name, "accepted": True, "name": declaration.name,
                "symbols": list(declaration.sizes), "seconds": round(time.perf_counter() - started, 1)}
    except DescribeFailed as exc:
        return {"level": level, "file": path.name, "accepted": False, "refusal": exc.message,
                "cause": cause(exc.message), "seconds": round(time.perf_counter() - started, 1)}


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| level | files | accepted | refused, by cause |", "|---|---|---|---|"]
    by_level: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_level[row["level"]].append(row)
    for level in sorted(by_level):
        found = by_level[level]
        causes = Counter(r["cause"] for r in found if not r["accepted"])
        said = "; ".join(f"{c} ({n})" for c, n in causes.most_common())
        out.append(f"| {level} | {len(found)} | {sum(r['accepted'] for r in found)} | {said or '-'} |")
    total = len(rows)
    accepted = sum(r["accepted"] for r in rows)
    out.append(f"| all | {total} | {accepted} ({100 * accepted / max(total, 1):.0f}%) | |")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the folder holding level1/, level2/, level3/")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--levels", nargs="*", default=list(LEVELS))
    parser.add_argument("--jobs", type=int, default=2, help="files read at once")
    parser.add_argument("--timeout", type=float, default=DESCRIBE_TIMEOUT_S,
                        help="seconds one file may take (the server's)")
    args = parser.parse_args()
    files = [(level, path) for level in args.levels for path in sorted((args.root / level).glob("*.py"))]
    if not files:
        parser.error(f"no problem files under {args.root}/{{{','.join(args.levels)}}}")
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(args.jobs) as pool, (args.out / "acceptance.jsonl").open("w") as log:
        for row in pool.map(lambda item: read_one(*item, args.timeout), files):
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(f"{row['level']} {row['file']}: {'accepted' if row['accepted'] else row['cause']} "
                  f"({row['seconds']} s)", file=sys.stderr, flush=True)
    (args.out / "acceptance.md").write_text(table(rows))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
