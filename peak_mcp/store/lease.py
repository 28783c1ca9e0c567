"""Which server process a lease row names, and whether that process is still there.

Every server on a data dir holds a lease (a row of the store's `servers` table) and renews it every HEARTBEAT_S; a
version it leaves `pending` belongs to that lease. Another server takes such a version over (marks it interrupted)
once the lease has lapsed for LEASE_S, or at once when the owner is known to be gone: on this host, in this pid
namespace, its pid is free, a zombie, or a newer process that reused it. Across hosts or pid namespaces a pid says
nothing, so there only the lapse counts.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

HEARTBEAT_S = 10.0
LEASE_S = 60.0  # six missed heartbeats: a busy or briefly stalled server keeps its versions


def host_key() -> str:
    """This host and pid namespace: two servers with the same key can look at each other's pids."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()} {namespace}".strip()


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks after boot) from /proc/<pid>/stat, or None where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # the command name, in parentheses, may hold spaces
    except (OSError, IndexError):
        return None
    return fields[0], fields[19]  # fields 3 and 22 of proc(5)


@dataclass(frozen=True)
class Process:
    pid: int
    host: str
    started: str  # the kernel's start time of the process, "" where unknown: tells a reused pid from its owner

    @classmethod
    def this(cls) -> Process:
        stat = _stat(os.getpid())
        return cls(pid=os.getpid(), host=host_key(), started=stat[1] if stat else "")

    def gone(self) -> bool:
        """Known to have ended. False where it cannot be known from here (another host or pid namespace)."""
        if self.host != host_key():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # there, under another user
            pass
        stat = _stat(self.pid)
        if stat is None:  # with /proc, it ended just now; without, kill said it is there
            return os.path.isdir("/proc/self")
        state, started = stat
        return state in ("Z", "X") or (bool(self.started) and started != self.started)
