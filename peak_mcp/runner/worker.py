"""Worker process: owns one device of one backend and runs jobs read as JSON lines from stdin.

Replies go to a dedicated pipe (--result-fd), never to stdout: kernels may printf, and stdout is redirected to
the log by the parent. A kernel fault that poisons the device context ends the process after replying; the
parent starts a fresh one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback

from pydantic import BaseModel, ValidationError

from peak_mcp.backends.base import KernelFault
from peak_mcp.backends.confined import configure
from peak_mcp.confine.sandbox import Protection, confine, kernel_knobs_safe, worker_policy
from peak_mcp.core.errors import DeviceMemory, PeakError
from peak_mcp.problems.loading import allow_problem_code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="peak-mcp-worker")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--device", type=int, default=-1, help="device index; -1 = compile only")
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--control-fd", type=int, default=None,
                        help="a socket on which the server hands over problem hosts' sockets")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process is no longer the parent")
    parser.add_argument("--options", default="{}", help="the executor's keyword arguments (JSON), from the settings")
    args = parser.parse_args(argv)
    jobs = _watch_parent(args.parent_pid)
    out = os.fdopen(args.result_fd, "w", buffering=1)

    sending = threading.Lock()  # a heartbeat thread sends progress beside the job's own thread

    def send(reply: BaseModel) -> None:
        # fallback: numpy scalars in a backend's resources, as the JSON encoder wrote them before (str)
        line = reply.model_dump_json(fallback=str) + "\n"
        with sending:
            out.write(line)
            out.flush()

    from peak_mcp.backends.registry import open_executor
    from peak_mcp.evaluation.reference_cache import KEPT
    from peak_mcp.runner import device_memory, problem_link
    from peak_mcp.runner.jobs import evaluate, generality
    from peak_mcp.runner.messages import JOB
    from peak_mcp.runner.prepare_job import prepare_session
    from peak_mcp.runner.priming import Primer
    from peak_mcp.runner.profile_job import profile
    from peak_mcp.runner.replies import Done, Failed, Fatal, ProgressNote, Ready
    from peak_mcp.runner.tune_job import tune

    options = json.loads(args.options)
    # A worker imports the problem files that ship with the server; every other file's code runs in a problem host
    # of its own (peak_mcp.runner.problem_host), which the worker reaches through `links`.
    allow_problem_code()
    links = problem_link.install(None if args.control_fd is None else socket.socket(fileno=args.control_fd))
    protection = _confine(options.pop("confinement", None), options.pop("cupy_cache", None))
    options.pop("problem_memory_bytes", None)  # the pool's, for problem hosts
    try:
        executor = open_executor(args.backend, None if args.device < 0 else args.device, **options)
    except Exception as exc:
        send(Fatal(error=f"cannot open {args.backend} device {args.device}: {type(exc).__name__}: {exc}"))
        return 2
    executor.facts.properties["sandbox"] = protection.describe()
    primer = Primer(executor, args.backend)  # chooses where the validator computes, within the start's time limit
    send(Ready(device=executor.facts))

    while True:
        line = jobs.get()
        message = json.loads(line)
        job_id = message.pop("id", None)

        def progress(message: str, job_id: int | None = job_id) -> None:
            send(ProgressNote(id=job_id, message=message))

        failed: Failed | None = None
        out_of_memory: str | None = None
        try:
            try:
                job = JOB.validate_python(message)
            except ValidationError as exc:
                raise PeakError(f"malformed job: {exc.errors(include_url=False)[:3]}") from None
            run = {"evaluate": evaluate, "generality": generality, "profile": profile, "tune": tune,
                   "prepare": prepare_session}[job.type]
            links.accept()  # the server handed over any problem host this job needs before sending it
            links.progress = progress  # what a problem host says it is doing keeps the job alive
            primer.prime(job, progress)
            again = False
            try:
                result = run(executor, job, progress)
            except Exception as exc:
                if not ((isinstance(exc, DeviceMemory) or device_memory.is_out_of_memory(exc)) and len(KEPT)):
                    raise
                again = True  # out of the except clause first: its traceback holds the job's arrays
            if again:
                # the input sets kept between submissions held memory this job needed: they go, and it runs again
                KEPT.clear()
                device_memory.release()
                progress("out of device memory with earlier submissions' input sets kept: running again without them")
                result = run(executor, job, progress)
        except KernelFault as fault:
            send(Failed(id=job_id, fatal=True, kind=fault.kind, error=str(fault)))
            return 3  # the device context is unusable now
        except PeakError as exc:
            failed = Failed(id=job_id, kind=exc.kind, error=str(exc))
        except Exception as exc:
            if device_memory.is_out_of_memory(exc):
                out_of_memory = f"{type(exc).__name__}: {exc}"
            else:
                traceback.print_exc(file=sys.stderr)
                failed = Failed(id=job_id, kind="internal", error=f"{type(exc).__name__}: {exc}")
        finally:
            links.progress = None
        # Out of the except clauses, the failed job's arrays (held by its traceback's frames) are gone: what the job
        # allocated goes back to the device before the reply, so the next job, or the problem host, finds it free.
        device_memory.release()
        if out_of_memory is not None:
            KEPT.clear()  # the sets kept between submissions give way to the next job's (spare sets live on the host)
            device_memory.release()
            error = device_memory.device_memory_error(out_of_memory, "the server's validator (the device worker)")
            failed = Failed(id=job_id, kind=error.kind, error=str(error))
        send(failed or Done(id=job_id, result=result))
    return 0


def _confine(confinement: dict[str, object] | None, cupy_cache: str | None) -> Protection:
    """Before any device or compiler is opened: the compile limits for this process's compilers, and the worker's
    own confinement. Caches that tools would write under $HOME are kept inside the private working directory, except
    cupy's kernel cache, which is the server's data dir's (a warm cache spares the first validation ~15 s; no other
    server's workers write it, and no problem file's code runs here). Problem folders are not readable: the files'
    code runs in problem hosts."""
    if confinement is None:  # a worker started by hand or by a test: unconfined, default compile limits
        return Protection(0, "not asked for")
    limits = configure(**confinement)
    workdir = os.path.realpath(os.getcwd())
    for variable, name in (("TMPDIR", ""), ("XDG_CACHE_HOME", "cache"), ("CUDA_CACHE_PATH", "nv"),
                           ("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor")):
        os.environ.setdefault(variable, os.path.join(workdir, name))
    tempfile.tempdir = None  # re-read TMPDIR
    if cupy_cache:
        os.environ["CUPY_CACHE_DIR"] = cupy_cache
    cupy_cache = os.environ.setdefault("CUPY_CACHE_DIR", os.path.join(workdir, "cupy"))
    with contextlib.suppress(OSError):
        os.makedirs(cupy_cache, exist_ok=True)
    return confine(worker_policy(workdir, [cupy_cache], proc_write=kernel_knobs_safe()), landlock=limits.sandbox)


def _end() -> None:
    """Leave at once, with the children (compute-sanitizer runs) in this worker's process group."""
    with contextlib.suppress(OSError):
        if os.getpgid(0) == os.getpid():  # the worker leads its group (the pool starts it in a new session)
            os.killpg(0, signal.SIGKILL)
    os._exit(0)


def _watch_parent(parent_pid: int | None) -> queue.Queue[str]:
    """Jobs arrive through a reader thread, so that the worker notices its server is gone even mid-kernel.

    stdin reaching EOF means the server closed it or died (kill -9 included): the worker ends at once, whatever it
    is running. The parent pid check catches a server that died while something else keeps the pipe open.
    PR_SET_PDEATHSIG is not used: it fires when the parent *thread* ends, and workers are started from request
    threads that come and go."""
    jobs: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            jobs.put(line)
        _end()

    # In the launcher's PID namespace the parent is outside it (getppid() is 0 throughout) and the launcher's
    # supervisor ends the namespace when the server is gone; outside one, the server is the parent.
    expected = 0 if os.getppid() == 0 else parent_pid

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != expected:
                _end()

    threading.Thread(target=read, name="stdin", daemon=True).start()
    if parent_pid is not None:
        threading.Thread(target=watch, name="parent", daemon=True).start()
    return jobs


if __name__ == "__main__":
    sys.exit(main())
