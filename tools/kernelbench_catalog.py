"""Which catalog texts each KernelBench problem gets: every file read the way `list_problems` reads a problem folder
(the confined describe subprocess), its traits (peak_mcp/problems/traits.py), and the shipped texts that share one,
as a Markdown table.

    python tools/kernelbench_catalog.py /path/to/KernelBench/KernelBench/level1 --out /tmp/kb-catalog.md --jobs 2

Texts for any problem (coalesced-access, vectorized-loads, ...) reach every problem; the table counts them apart and
lists only the texts a problem gets for its traits. `--cache FILE` keeps each file's reading (JSON lines), so a
second run after a catalog edit reads no file again.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from peak_mcp.problems.declared import DeclaredProblem
from peak_mcp.problems.registry import DescribeFailed, describe_in_subprocess


def read_one(path: Path, timeout_s: float) -> dict[str, Any]:
    try:
        declaration = describe_in_subprocess(path, timeout_s=timeout_s)
    except DescribeFailed as exc:
        return {"file": path.name, "accepted": False, "refusal": exc.message.split("\n")[0][:160]}
    return {"file": path.name, "accepted": True, "name": declaration.name,
            "traits": list(DeclaredProblem(declaration).traits)}


def table(rows: list[dict[str, Any]], catalog: Catalog) -> str:
    generic = [t.id for t in catalog.list() if t.for_any_problem]
    out = ["| problem | traits | texts for its traits (besides the texts for any problem) |", "|---|---|---|"]
    served = 0
    for row in sorted((r for r in rows if r["accepted"]), key=lambda r: int(r["file"].split("_")[0])):
        texts = [t.id for t in catalog.list(problem=row["name"], traits=row["traits"]) if not t.for_any_problem]
        served += bool(texts)
        out.append(f"| {row['file'].removesuffix('.py')} | {', '.join(row['traits']) or '-'} | "
                   f"{', '.join(texts) or '-'} |")
    accepted = sum(r["accepted"] for r in rows)
    head = (f"{len(rows)} files, {accepted} imported; {served} of the {accepted} get at least one text for their "
            f"traits, and every one gets the {len(generic)} texts for any problem ({', '.join(generic)}).\n\n")
    return head + "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a folder of KernelBench files (level1/)")
    parser.add_argument("--out", type=Path, help="write the table here too")
    parser.add_argument("--cache", type=Path, help="JSON lines of readings, reused and extended")
    parser.add_argument("--jobs", type=int, default=2, help="files read at once")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one file may take (the server's)")
    args = parser.parse_args()
    files = sorted(args.folder.glob("*.py"))
    if not files:
        parser.error(f"no .py files in {args.folder}")
    cached: dict[str, dict[str, Any]] = {}
    if args.cache and args.cache.exists():
        cached = {r["file"]: r for r in map(json.loads, args.cache.read_text().splitlines())}
    todo = [p for p in files if p.name not in cached]
    with ThreadPoolExecutor(args.jobs) as pool:
        for row in pool.map(lambda p: read_one(p, args.timeout), todo):
            cached[row["file"]] = row
            print(f"{row['file']}: {row.get('traits', row.get('refusal'))}", file=sys.stderr, flush=True)
            if args.cache:
                with args.cache.open("a") as log:
                    log.write(json.dumps(row) + "\n")
    text = table([cached[p.name] for p in files], Catalog.load(builtin_transformations_dir()))
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
