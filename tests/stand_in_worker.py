"""A stand-in for peak_mcp.runner.worker (stdlib only): it answers every job like a compile-only CUDA worker whose
compile succeeded, except that a job whose source contains MALFORMED gets a reply with a field of the wrong type,
as a worker from another release (or a bug) would send. Tests start it through a `python` shim given to
DevicePool, which drops the real worker's `-I -u -c <bootstrap>` and keeps its arguments."""

from __future__ import annotations

import argparse
import json
import os
import sys

DEVICE = {"backend": "cuda", "index": -1, "name": "stand-in", "properties": {}}


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--backend", "--device", "--parent-pid", "--options"):
        parser.add_argument(name)
    parser.add_argument("--result-fd", type=int, required=True)
    out = os.fdopen(parser.parse_args().result_fd, "w", buffering=1)
    out.write(json.dumps({"event": "ready", "device": DEVICE}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        compiled = {"ok": True, "log": "", "resources": {"arch": "sm_80"}, "seconds": 0.01}
        if "MALFORMED" in (job.get("source") or ""):
            compiled["seconds"] = "soon"
        out.write(json.dumps({"id": job["id"], "event": "result", "ok": True,
                              "result": {"type": "evaluate", "device": DEVICE, "compile": compiled}}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
