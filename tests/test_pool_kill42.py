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
