"""A worker's process group is killed once: after its leader is reaped, its pid (the group's id) may be another
process group's, e.g. a worker started later, which close() must not kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from peak_mcp.runner import pool as pool_module
from peak_mcp.runner.pool import DevicePool, _Worker


def test_a_killed_workers_group_is_not_killed_again(monkeypatch) -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    worker = _Worker("hlsl", 0, process)
    pool = DevicePool()
    pool._workers[("hlsl", 0)] = worker
    pool._kill(worker)  # a failed job's kill: the worker stays in the pool's table until its device's next job
    assert process.returncode == -signal.SIGKILL
    groups: list[int] = []
    monkeypatch.setattr(pool_module.os, "killpg", lambda pgid, sig: groups.append(pgid))
    pool.close()  # the pid is free now: a new group led by that pid would be killed
    assert groups == [], f"killpg({groups}) on a group whose leader was reaped earlier"
    assert os.getpgid(os.getpid()) != process.pid


class _Host:
    def __init__(self) -> None:
        self.killed = False

    def kill(self) -> None:
        self.killed = True

    def pause(self) -> None:
        pass


def test_a_worker_that_died_between_jobs_is_cleaned_up_when_replaced(monkeypatch) -> None:
    """Its problem hosts (processes of their own) and its reply pipe went on living when run() or warm() started a
    fresh worker in its place."""
    for replace in ("warm", "run"):
        dead = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
        dead.wait()
        read_fd, write_fd = os.pipe()
        os.close(write_fd)
        host = _Host()
        old = _Worker("hlsl", 0, dead, os.fdopen(read_fd, "rb", buffering=0), hosts={("f.py", "0" * 64): host})
        fresh = _Worker("hlsl", 0, None)
        pool = DevicePool()
        pool._workers[("hlsl", 0)] = old
        monkeypatch.setattr(pool, "_start", lambda backend, index, fresh=fresh: fresh)
        monkeypatch.setattr(pool, "_exchange", lambda *args: "done")
        monkeypatch.setattr(pool, "_host_for", lambda worker, job: None)
        if replace == "warm":
            pool.warm("hlsl", 0)
        else:
            assert pool.run("hlsl", 0, object(), inactivity_s=1, total_s=1) == "done"
        assert pool._workers[("hlsl", 0)] is fresh
        assert host.killed and old.results is None and old.killed, replace
