"""A problem host: the one process that runs an untrusted problem file's Python for one device.

A device worker serves every session on its device and holds their kernels, so an operator's or a client's problem
file never runs there. The pool starts one host per (file, worker) through the sandbox launcher (its own PID, mount
and network namespaces, no capabilities, Landlock: the runtime and the file's folder readable, a scratch folder
writable, and the GPU where the worker has one, for references that compute with `xp` and for torch's yardsticks),
with a memory and a process limit, and an environment with no secret in it. The worker reaches it through a socket
the pool handed it (peak_mcp.runner.problem_link) and sends it arrays; the host answers with arrays
(peak_mcp.runner.problem_wire). Nothing else of the worker's is in reach: no kernel source, no other session.

`python -m peak_mcp.runner.problem_host --socket-fd N --declaration FILE --backend B --device I`
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from peak_mcp.core.errors import PeakError
from peak_mcp.evaluation import torch_paths
from peak_mcp.problems.code import FUNCTIONS, LocalCode
from peak_mcp.problems.declaration import ProblemDeclaration
from peak_mcp.problems.loading import ProblemCodeError, allow_problem_code
from peak_mcp.runner import device_memory
from peak_mcp.runner import problem_wire as wire

MAX_REQUEST_BYTES = 64 << 30  # what the worker sends: the inputs of one call (it is the trusted side)
MAX_CALLS = 8  # functions one `calls` request runs on its inputs
PRECISIONS = ("float64", "float32")


def _array_module(backend: str, device: int) -> Any:
    """cupy on the host's own context on the worker's GPU where there is one, else numpy."""
    if backend not in ("cuda", "hip") or device < 0:
        return np
    try:
        import cupy

        cupy.cuda.Device(device).use()
        return cupy
    except Exception:
        return np


def _mib(arrays: list[np.ndarray]) -> str:
    return f"{sum(a.nbytes for a in arrays) / 2**20:,.0f} MiB"


class Host:
    """`note(text)`: tells the worker what the host is doing (a frame of its own before the answer); each note keeps
    the job alive, so the pool's inactivity limit counts from the last step done, not from the request."""

    def __init__(self, code: LocalCode, xp: Any, note: Any = lambda _text: None) -> None:
        self.code, self.xp, self.note = code, xp, note

    def hello(self) -> dict[str, Any]:
        module = self.code.module()
        found = {}
        for function in FUNCTIONS:
            if callable(getattr(module, function, None)):
                params = self.code.parameters(function)
                found[function] = None if params is None else [sorted(params[0]), params[1]]
        return {"parameters": found, "xp": self.xp.__name__}

    def handle(self, header: dict[str, Any], arrays: list[np.ndarray]) -> tuple[dict[str, Any], list[np.ndarray]]:
        op = header.get("op")
        out: list[np.ndarray] = []
        if op == "call":
            args = wire.decode(header["args"], arrays)
            kwargs = dict(wire.decode(header["kwargs"], arrays))
            if header.get("xp"):
                kwargs["xp"] = self.xp
                args = tuple(self.xp.asarray(a) if isinstance(a, np.ndarray) else a for a in args)
            function = str(header["function"])
            self.note(f"{function}: received {_mib(arrays)}, running it")
            arrays.clear()  # the decoded arguments hold them; gone as soon as the call is
            result = self.code.call(function, *args, **kwargs)
            del args, kwargs
            reply = {"result": wire.encode(result, out)}
            self.note(f"{function}: done, answering {_mib(out)}")
            return reply, out
        if op == "calls":
            return self._calls(header, arrays)
        if op == "generate":
            shape = tuple(int(n) for n in header["shape"])
            name = str(header["name"])
            self.note(f"generate {name}: drawing {shape}")
            result = self.code.generate(name, shape, [int(n) for n in header["seed"]])
            if isinstance(result, np.ndarray) and result.dtype == np.float64:
                result = result.astype(np.float32)  # what the worker stores inputs from: half the bytes to send
            reply = {"result": wire.encode(result, out)}
            self.note(f"generate {name}: done, answering {_mib(out)}")
            return reply, out
        if op == "torch":
            from peak_mcp.runner.jobs import torch_timings

            fn = self.code.torch_reference()
            if fn is None:
                return {"timings": {"torch_note": "the problem file has no torch_reference"}}, out
            kwargs = dict(wire.decode(header["kwargs"], arrays))
            shaped = [self.xp.asarray(a) for a in wire.decode(header["args"], arrays)]
            paths = torch_paths.known(header.get("paths") if isinstance(header.get("paths"), list) else [])
            timings = torch_timings(lambda *tensors: fn(*tensors, **kwargs), shaped, str(header["dtype"]),
                                    float(header["budget_s"]), self.note, paths)
            return {"timings": timings}, out
        raise PeakError(f"unknown request {op!r}")

    def _calls(self, header: dict[str, Any], arrays: list[np.ndarray]) -> tuple[dict[str, Any], list[np.ndarray]]:
        """Several functions on one set of inputs, each given its own copy at its precision (the float64 and float32
        references, the error scale): the inputs cross once, as stored, and widen here."""
        shared = wire.decode(header["args"], arrays)
        calls = header.get("calls")
        if not isinstance(calls, list) or not 0 < len(calls) <= MAX_CALLS:
            raise PeakError("a calls request without its list of calls")
        said = ", ".join(f"{c.get('function')} at {c.get('precision')}" for c in calls if isinstance(c, dict))
        self.note(f"{calls[0].get('function') if isinstance(calls[0], dict) else 'calls'}: received {_mib(arrays)} "
                  f"for {len(calls)} calls ({said})")
        arrays.clear()
        out: list[np.ndarray] = []
        results = []
        for call in calls:
            function, precision = str(call["function"]), str(call["precision"])
            if precision not in PRECISIONS:
                raise PeakError(f"unknown precision {precision!r}")
            kwargs = dict(wire.decode(call["kwargs"], []))
            mod = self.xp if call.get("xp") else np
            if call.get("xp"):
                kwargs["xp"] = self.xp
            # a fresh array per call: a function that changes its inputs in place changes no other call's
            args = tuple(mod.asarray(a).astype(precision) if isinstance(a, np.ndarray) else a for a in shared)
            self.note(f"{function} at {precision}: running it")
            result = self.code.call(function, *args, **kwargs)
            del args
            results.append(wire.encode(result, out))
            del result  # encoded: its arrays are host copies in `out`
        self.note(f"{len(calls)} calls: done, answering {_mib(out)}")
        return {"results": results}, out


def _error(exc: BaseException) -> dict[str, Any]:
    if device_memory.is_out_of_memory(exc):  # the device's memory, whatever raised it: the worker says so
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}", "memory": True}
    if isinstance(exc, ProblemCodeError):
        return {"error": exc.message, "hint": exc.hint, "line": exc.line}
    if isinstance(exc, PeakError):
        return {"error": exc.message, "hint": exc.hint}
    return {"error": f"the problem host failed: {type(exc).__name__}: {str(exc)[:300]}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="peak-mcp-problem-host")
    parser.add_argument("--socket-fd", type=int, required=True)
    parser.add_argument("--declaration", required=True)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--device", type=int, default=-1)
    args = parser.parse_args(argv)
    os.dup2(2, 1)  # what the problem file prints goes to the log, never into the socket
    sys.stdout = sys.stderr
    sock = socket.socket(fileno=args.socket_fd)
    allow_problem_code()
    declaration = ProblemDeclaration.model_validate_json(Path(args.declaration).read_text())
    host = Host(LocalCode(declaration), _array_module(args.backend, args.device),
                lambda text: wire.send(sock, {"note": str(text)[:200]}))
    try:
        hello = host.hello()
        gc.collect()
        gc.freeze()  # the file and what it imported (torch): never walked again by the per-message collections
        wire.send(sock, hello)
    except BaseException as exc:  # the file's import: SystemExit too
        if isinstance(exc, wire.WireError):
            return 0
        if not isinstance(exc, PeakError):
            exc = ProblemCodeError(f"importing the problem file raised {type(exc).__name__}: {str(exc)[:300]}")
        wire.send(sock, _error(exc))
        return 0
    while True:
        try:
            header, arrays = wire.receive(sock, MAX_REQUEST_BYTES)
        except wire.WireError:
            return 0  # the worker is gone
        try:
            reply, out = host.handle(header, arrays)
        except BaseException as exc:
            if not isinstance(exc, PeakError | Exception):
                raise  # KeyboardInterrupt and the like end the host
            if not isinstance(exc, PeakError):
                traceback.print_exc(file=sys.stderr)
            reply, out = _error(exc), []
        del arrays  # the request's
        # Cached device blocks (torch's allocator, cupy's pool) back to the driver before the answer: the worker
        # allocates next (the answer's arrays are the host's). free_note releases them first. A collection comes
        # first (a failed call's traceback, or a file's own reference cycle, holds arrays); what survives it is
        # frozen, so the next one walks only what the next call made: with torch loaded a full collection cost
        # 0.1-0.25 s on every message, and a KernelBench file's generality sizes exchange about a hundred.
        if reply.get("memory"):
            reply["free"] = device_memory.free_note()
        else:
            device_memory.release()
        gc.freeze()
        try:
            wire.send(sock, reply, out)
        except wire.WireError:
            return 0


if __name__ == "__main__":
    sys.exit(main())
