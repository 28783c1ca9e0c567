"""A device worker's link to a problem host: `RemoteCode`, the same calls as `LocalCode`, over a socket.

Arguments go out as numpy arrays; results come back as numpy arrays, bounded by what the problem's declaration says
they can hold, and are moved to the caller's `xp` where the call passed one. Whatever the host says is data:
messages are cleaned and cut before they reach an error, and a host that breaks the protocol, dies or exits is a
problem error naming the file, never a crash of the worker.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from peak_mcp.core.errors import PeakError
from peak_mcp.core.text_safety import clean
from peak_mcp.evaluation import torch_paths
from peak_mcp.problems.base import PROBLEM_CODE
from peak_mcp.problems.code import fix_hint
from peak_mcp.problems.declaration import ProblemDeclaration
from peak_mcp.problems.host_call import HostCall
from peak_mcp.problems.loading import ProblemCodeError
from peak_mcp.runner import device_memory
from peak_mcp.runner import problem_wire as wire
from peak_mcp.runner.heartbeat import heartbeat

MAX_MESSAGE = 1000
CALL_FLOOR_BYTES = 1 << 30
MAX_NOTES = 32  # progress notes relayed per call: a host's steps say a few; a flood is not progress
# The worker's own work on an answer (server_work) is said again every BEAT_S, for at most SERVER_WORK_S: a KernelBench
# ReLU's 12 GiB float64 reference took longer than the pool's inactivity limit there (H200), and the job was stopped
# as hung.
BEAT_S, SERVER_WORK_S = 1.0, 180.0


def _to_host(value: Any) -> Any:
    if hasattr(value, "get") and hasattr(value, "shape"):  # cupy
        return value.get()
    return value


Progress = Callable[[str], None]


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


class RemoteCode:
    """The problem file's functions, run by its problem host. `progress` (the job's, set by the worker) hears the
    notes the host sends while it works: each keeps the job alive past the pool's inactivity limit, which then
    measures a host that stopped, not one moving gigabytes."""

    def __init__(self, sock: socket.socket, declaration: ProblemDeclaration,
                 progress: Callable[[], Progress | None] = lambda: None) -> None:
        self.sock, self.declaration, self.progress = sock, declaration, progress
        self._lock = threading.Lock()  # one call at a time on the socket (tune validates on threads)
        self.broken: str | None = None
        self.failed: ProblemCodeError | None = None  # the file's import failed: every call says so
        self._parameters: dict[str, tuple[frozenset[str], bool] | None] = {}
        try:
            header, _ = wire.receive(self.sock, 1 << 20)
        except wire.WireError as exc:
            self.broken = str(exc)
            return
        if "error" in header:
            self.failed = ProblemCodeError(clean(str(header["error"]), MAX_MESSAGE),
                                           fix_hint(declaration.path))
        parameters = header.get("parameters")
        for name, found in (parameters.items() if isinstance(parameters, dict) else ()):
            if isinstance(found, list) and len(found) == 2 and isinstance(found[0], list):
                self._parameters[str(name)] = (frozenset(map(str, found[0])), bool(found[1]))
            else:
                self._parameters[str(name)] = None

    # --- the ProblemCode interface -------------------------------------------------------------------------
    def call(self, function: str, *args: Any, **kwargs: Any) -> Any:
        xp = kwargs.pop("xp", None)
        arrays: list[np.ndarray] = []
        header = {"op": "call", "function": function, "xp": xp is not None,
                  "args": wire.encode([_to_host(a) for a in args], arrays), "kwargs": wire.encode(kwargs, arrays)}
        # A reference is rarely far larger than its inputs (float64 both); past the floor, 16x of them is a host
        # that lies, refused before the worker allocates it.
        limit = max(CALL_FLOOR_BYTES, 16 * sum(a.nbytes for a in arrays))
        reply, received = self._request(header, arrays, limit)
        with self.server_work(f"the server takes the answer of {function} from here"):
            return self._to(xp, reply.get("result"), received)

    def calls(self, args: list[Any], calls: list[HostCall]) -> list[Any]:
        """Each call's result for the same `args`, sent once as they are (stored inputs: float32 where the values
        are) and given to each function as a fresh array at its `precision` by the host: the float64 and float32
        references and the error scale in one round trip, with a third of the bytes of float64 sent twice."""
        arrays: list[np.ndarray] = []
        encoded = wire.encode([_to_host(a) for a in args], arrays)
        wanted = []
        for call in calls:
            keywords = dict(call.kwargs)
            xp = keywords.pop("xp", None)
            loose: list[np.ndarray] = []
            wanted.append({"function": call.function, "precision": call.precision, "xp": xp is not None,
                           "kwargs": wire.encode(keywords, loose)})
            if loose:
                raise ValueError("a call's keywords carry no arrays: its inputs are the shared args")
        # each result bounded as `call`'s is, against the inputs at float64
        limit = len(calls) * max(CALL_FLOOR_BYTES, 16 * sum(a.size * 8 for a in arrays))
        reply, received = self._request({"op": "calls", "function": calls[0].function, "args": encoded,
                                         "calls": wanted}, arrays, limit)
        results = reply.get("results")
        if not isinstance(results, list) or len(results) != len(calls):
            raise ProblemCodeError(f"the problem host for {self.declaration.path} sent a malformed answer: "
                                   f"{len(calls)} results expected")
        with self.server_work("the server takes the answers from here"):
            return [self._to(call.kwargs.get("xp"), value, received)
                    for call, value in zip(calls, results, strict=True)]

    def generate(self, name: str, shape: tuple[int, ...], seed: list[int]) -> Any:
        limit = 16 * math.prod(shape) + (1 << 20)
        reply, received = self._request({"op": "generate", "name": name, "shape": list(shape), "seed": list(seed)},
                                        [], limit)
        return self._to(None, reply.get("result"), received)

    def parameters(self, function: str) -> tuple[frozenset[str], bool] | None:
        return self._parameters.get(function)

    def torch_timings(self, shaped: list[Any], keywords: dict[str, Any], dtype: str, budget_s: float,
                      paths: tuple[str, ...] = (torch_paths.DEFAULT,)) -> dict[str, Any]:
        arrays: list[np.ndarray] = []
        header = {"op": "torch", "dtype": dtype, "budget_s": budget_s, "paths": list(paths),
                  "args": wire.encode([_to_host(a) for a in shaped], arrays), "kwargs": wire.encode(keywords, arrays)}
        timings = self._request(header, arrays, 1 << 20)[0].get("timings")
        if not isinstance(timings, dict):
            return {}
        out: dict[str, Any] = {}
        for key in ("torch_eager_ms", "torch_compile_ms", "torch_compile_s"):
            if _positive(timings.get(key)):
                out[key] = float(timings[key])
        if isinstance(note := timings.get("torch_note"), str):
            out["torch_note"] = clean(note, 400)
        by_path = timings.get("torch_eager_paths")
        if len(paths) > 1 and isinstance(by_path, dict):  # the paths this side asked for, and the fastest of them
            kept = {path: float(value) if _positive(value) else clean(str(value), 200)
                    for path, value in by_path.items() if path in paths}
            out.pop("torch_eager_ms", None)  # read from the paths' times, never taken on the host's word
            best = torch_paths.fastest(kept)
            if best:
                out["torch_eager_path"], out["torch_eager_ms"] = best
                out["torch_eager_paths"] = kept
        return out

    # --- transport ------------------------------------------------------------------------------------------
    def _request(self, header: dict[str, Any], arrays: list[np.ndarray],
                 limit: int) -> tuple[dict[str, Any], list[np.ndarray]]:
        with self._lock:
            if self.failed is not None:
                raise self.failed
            if self.broken:
                raise self._gone(self.broken)
            # the host computes on the same GPU: what this worker's pool keeps cached is the host's to use meanwhile
            device_memory.release(collect=False)
            try:
                self._note(f"{header['op']} {header.get('function') or header.get('name') or ''}: sending "
                           f"{sum(a.nbytes for a in arrays) / 2**20:,.0f} MiB")
                wire.send(self.sock, header, arrays)

                def arriving(done: int, total: int) -> None:  # bytes crossing: the answer's, not a stall
                    self._note(f"receiving the answer: {done / 2**20:,.0f} of {total / 2**20:,.0f} MiB")

                reply, received = wire.receive(self.sock, limit, arriving)
                notes = 0
                while set(reply) == {"note", "arrays"} and not received:  # the host's progress, then its answer
                    notes += 1
                    if notes <= MAX_NOTES:  # past it, a host's notes no longer keep the job alive
                        self._note(clean(str(reply["note"]), 200))
                    reply, received = wire.receive(self.sock, limit, arriving)
            except wire.WireError as exc:
                self.broken = str(exc)
                raise self._gone(self.broken) from None
            progress = self.progress()
            if progress is not None:  # what follows (uploading, checking the answer) is the server's own work
                progress(f"{header['op']}: the problem's answer arrived "
                         f"({sum(a.nbytes for a in received) / 2**20:,.0f} MiB); the server takes it from here")
        if "error" in reply and reply.get("memory"):  # the host's torch or cupy ran out: the device's memory
            raise device_memory.device_memory_error(
                clean(str(reply["error"]), MAX_MESSAGE),
                f"the problem's own code ({self.declaration.path}), run on the session's device",
                clean(str(reply.get("free") or ""), 200))
        if "error" in reply:
            line = reply.get("line")
            raise ProblemCodeError(clean(str(reply["error"]), MAX_MESSAGE),
                                   clean(str(reply.get("hint") or ""), 300) or None,
                                   line if isinstance(line, int) and not isinstance(line, bool) else None)
        return reply, received

    @contextlib.contextmanager
    def server_work(self, message: str) -> Iterator[None]:
        """The worker's own work on an answer (moving it to the device, folding the bound), said now and every
        BEAT_S while the body runs, for at most SERVER_WORK_S: it calls neither the host nor a kernel, so a stall in
        the problem file's code or a hung kernel is still timed by the pool as before."""
        progress = self.progress()
        if progress is None:
            yield
            return
        with heartbeat(progress, message, every_s=BEAT_S, limit_s=SERVER_WORK_S):
            yield

    def _note(self, note: str) -> None:
        progress = self.progress()
        if progress is not None:  # the problem file's work: a stall from here on is the file's (pool.PROBLEM_CODE)
            progress(f"{note} ({PROBLEM_CODE} {self.declaration.path})")

    def _to(self, xp: Any, encoded: Any, arrays: list[np.ndarray]) -> Any:
        try:
            value = wire.decode(encoded, arrays)
        except wire.WireError as exc:
            raise ProblemCodeError(f"the problem host for {self.declaration.path} sent a malformed answer: {exc}") \
                from None
        if xp is None or xp is np:
            return value
        return _map_arrays(value, xp.asarray)

    def _gone(self, why: str) -> PeakError:
        return ProblemCodeError(f"the problem's own code stopped answering, not the kernel: the process running "
                                f"{self.declaration.path} is gone ({clean(why, 200)})",
                                "it exited, crashed or went past its memory or process limit; fix the problem file. "
                                "The next job starts a fresh one.")

    def close(self) -> None:
        self.sock.close()


def _map_arrays(value: Any, convert: Any) -> Any:
    if isinstance(value, np.ndarray):
        return convert(value)
    if isinstance(value, dict):
        return {k: _map_arrays(v, convert) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_map_arrays(v, convert) for v in value)
    return value



class Links:
    """A worker's links to its problem hosts, by (problem file, sha256): the server hands each socket over on the
    control socket before the first job that needs it, and again after a host is restarted."""

    def __init__(self, control: socket.socket | None) -> None:
        self.control = control
        self.progress: Progress | None = None  # the job in flight's (worker.py sets it per job)
        self.sockets: dict[tuple[str, str], socket.socket] = {}
        self.links: dict[tuple[str, str], RemoteCode] = {}
        if control is not None:
            control.setblocking(False)

    def accept(self) -> None:
        """Take every socket the server has handed over since the last job."""
        while self.control is not None:
            try:
                message, fds, _, _ = socket.recv_fds(self.control, 4096, 4)
            except (BlockingIOError, InterruptedError):
                return
            if not message:
                return  # the server closed it: the worker ends with its stdin
            for line, fd in zip(message.splitlines(), fds, strict=False):
                key = json.loads(line)
                path_sha = (str(key["path"]), str(key["sha256"]))
                old = self.links.pop(path_sha, None)
                if old is not None:
                    old.close()
                self.sockets[path_sha] = socket.socket(fileno=fd)

    def attach(self, problem: Any) -> None:
        """Point a declared problem that does not ship with the server at its host's link."""
        from peak_mcp.problems.code import is_shipped

        declaration = getattr(problem, "declaration", None)
        if declaration is None or is_shipped(declaration):
            return
        key = (declaration.path, declaration.sha256)
        if key not in self.links:
            sock = self.sockets.pop(key, None)
            if sock is None:
                raise PeakError(f"no problem host was handed over for {declaration.path}",
                                "this is a bug in peak-mcp; please report it.")
            self.links[key] = RemoteCode(sock, declaration, lambda: self.progress)
        problem.code = self.links[key]


_installed: Links | None = None


def install(control: socket.socket | None) -> Links:
    """This process is a device worker: problem files that do not ship with the server reach it through links."""
    global _installed
    _installed = Links(control)
    return _installed


def attach(problem: Any) -> None:
    """In a worker, point an untrusted declared problem at its host (see Links.attach); elsewhere (a test or a
    maintainer tool playing the worker in its own process) leave it to run the file in this process."""
    if _installed is not None:
        _installed.attach(problem)
