"""A stand-in worker (stdlib only) that poses as one GPU of several: it answers every job type without compiling or
running anything, and logs each job it takes, with its device and start and end times, so a test can see where and
when work ran. Started by DevicePool through a `python` shim (tests/test_fanout.py), which drops the real worker's
`-I -u -c <bootstrap>` and keeps its arguments; what it poses as comes in `--options` (DevicePool's `options`):

  name      the device name it reports
  log       a file it appends one JSON line per job to
  die_on    a parameter value: a tune job dies (exit 3) on the configuration holding it, after naming it
  die_tune  true: every tune job dies before its first configuration (a device that is lost, not a kernel)
  delay_s   seconds each configuration of a tune job takes (so that chunks on two devices overlap in time)
  eval_s    seconds each evaluate job takes (so that sessions on two devices overlap in time)
  general_s seconds each generality job takes
  die_general true: every generality job dies (exit 3) before its first size, as a sick device's worker does
  wrong     true: every validation fails (a wrong kernel)
  kill_host true: a tune job kills the worker's parent (a Ray actor: its node lost) before its first configuration
  search_ms {"A=1 B=2": 0.095, ...}: what the search's brief timing reports for those configurations (label: the
            values in order), as a noisy measurement can; every configuration of a search then has a cv of 1.0
            and a wide middle half. A re-time (a tune job with `retime`) reports each one's own time,
  retime_ms {"A=1 B=2": 0.02, ...}: unless this names it: what a re-time reports for it (a lucky re-timing).

A configuration's time is the sum of its parameter values divided by 100 ms, the same on every device.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--backend", "--device", "--parent-pid", "--options", "--control-fd"):
        parser.add_argument(name)
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args()
    options = json.loads(args.options or "{}")
    index = int(args.device)
    device = {"backend": args.backend, "index": index, "name": options.get("name", "stand-in"), "properties": {}}
    out = os.fdopen(args.result_fd, "w", buffering=1)

    def send(message: dict) -> None:
        out.write(json.dumps(message) + "\n")

    send({"event": "ready", "device": device})
    for line in sys.stdin:
        job = json.loads(line)
        started = time.time()
        if job["type"] == "tune":
            result = _tune(job, options, send)
        elif job["type"] == "generality":
            if options.get("die_general"):
                os._exit(3)
            send({"id": job["id"], "event": "progress", "message": "generality at stand-in sizes"})
            time.sleep(float(options.get("general_s", 0)))
            result = {"type": "generality", "generality": {"passed": True, "sizes_checked": job["sizes_list"]}}
        else:
            steps = job.get("steps") or []
            if "validate" in steps:  # the lines a real worker sends: timing starts only after validation passed
                send({"id": job["id"], "event": "progress", "message": "validate trial 1/1"})
            if "benchmark" in steps and not options.get("wrong"):
                send({"id": job["id"], "event": "progress", "message": "benchmark: warm-up"})
            time.sleep(float(options.get("eval_s", 0)))
            result = _evaluate(job, device, bool(options.get("wrong")))
        if options.get("log"):
            with open(options["log"], "a") as log:
                log.write(json.dumps({"device": index, "ray_device": os.environ.get("PEAK_MCP_RAY_DEVICE"),
                                      "type": job["type"], "steps": job.get("steps"), "retime": job.get("retime"),
                                      "configs": job.get("configs"), "params": (job.get("spec") or {}).get("bound"),
                                      "start": started, "end": time.time()}) + "\n")
        send({"id": job["id"], "event": "result", "ok": True, "result": {**result, "device": device}
              if result["type"] in ("tune", "evaluate") else result})
    return 0


def _ms(params: dict) -> float:
    return sum(params.values()) / 100


def _tune(job: dict, options: dict, send) -> dict:
    configs = job["configs"]
    if options.get("die_tune"):
        os._exit(3)
    if options.get("kill_host"):
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(30)
    results = []
    for i, params in enumerate(configs, start=1):
        send({"id": job["id"], "event": "progress", "message": f"config {i}/{len(configs)}: timing"})
        if options.get("die_on") is not None and options["die_on"] in params.values():
            os._exit(3)  # as a kernel fault ends a real worker
        time.sleep(float(options.get("delay_s", 0)))
        noisy = options.get("search_ms") is not None and not job.get("retime")
        label = " ".join(f"{k}={v}" for k, v in params.items())
        median = (options["search_ms"].get(label, _ms(params))) if noisy else _ms(params)
        if job.get("retime"):
            median = (options.get("retime_ms") or {}).get(label, median)
        spread = 0.5 if noisy else 0.01  # the middle half, as a fraction of the median either way
        results.append({"params": params, "status": "ok", "median_ms": median, "reps": 5 if noisy else 50,
                        "cv": 1.0 if noisy else 0.01, "p25_ms": median * (1 - spread),
                        "p75_ms": median * (1 + spread)} if noisy or job.get("retime") else
                       {"params": params, "status": "ok", "median_ms": median, "reps": 5})
    return {"type": "tune", "results": results, "seconds": 0.01}


def _evaluate(job: dict, device: dict, wrong: bool = False) -> dict:
    steps = job.get("steps") or ["compile"]
    result: dict = {"type": "evaluate"}
    if "baseline" in steps:
        result["baseline"] = {"available": False, "reason": "a stand-in has no vendor library"}
    if "compile" in steps:
        result["compile"] = {"ok": True, "log": "", "resources": {"arch": "sm_90"}, "seconds": 0.01}
    if "validate" in steps:
        result["validation"] = {"passed": not wrong, "trials": 1, "message": "stand-in: " + (
            "wrong at element 0" if wrong else "passed")}
    if "benchmark" in steps:
        params = (job.get("spec") or {}).get("bound") or {}
        result["timing"] = {"median_ms": _ms(params) if params else 10.0, "reps": 10,
                            "recheck": {"passed": True}, "device_name": device["name"]}
    return result


if __name__ == "__main__":
    sys.exit(main())
