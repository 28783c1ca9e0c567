"""Which server owns what in a data directory, by advisory file locks (fcntl.flock) under data_dir/locks/.

- `server.lock`: every live server holds it shared. A server that can take it exclusively at start-up is the only
  one alive on this data dir, so versions left `pending` can only be from a server that stopped mid-evaluation.
- `<backend>-<index>.lock`: held exclusively by the server whose worker owns that device, for the server's life
  (across worker restarts), so two servers on one data dir never time kernels on the same GPU at once.

flock locks belong to the open file and vanish when the process dies, kill -9 included: no stale-lock cleanup.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO


class DeviceOwned(Exception):
    """Another server holds the device's lock."""


def _open(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "a+")


def _holder_pid(handle: IO[str]) -> str:
    handle.seek(0)
    text = handle.read().strip()
    return text if text.isdigit() else "unknown"


class DeviceLocks:
    def __init__(self, lock_dir: Path) -> None:
        self.lock_dir = lock_dir
        self._held: dict[tuple[str, int], IO[str]] = {}

    def acquire(self, backend: str, index: int) -> None:
        """Take (or keep) the lock of one device; raise DeviceOwned naming the other server's pid."""
        key = (backend, index)
        if key in self._held:
            return
        handle = _open(self.lock_dir / f"{backend}-{index}.lock")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder_pid(handle)
            handle.close()
            raise DeviceOwned(f"device {backend}:{index} is owned by another peak-mcp server (pid {pid}) on this "
                              f"data dir ({self.lock_dir.parent})") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._held[key] = handle

    def release_all(self) -> None:
        for handle in self._held.values():
            with contextlib.suppress(OSError):
                handle.close()
        self._held.clear()


class ServerPresence:
    """The shared `server.lock`; `alone` says whether no other server was alive when this one started."""

    def __init__(self, lock_dir: Path) -> None:
        self._handle = _open(lock_dir / "server.lock")
        try:
            fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.alone = True
        except BlockingIOError:
            self.alone = False

    def settle(self) -> None:
        """After start-up recovery: share the data dir with servers that start later."""
        fcntl.flock(self._handle, fcntl.LOCK_SH)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._handle.close()
