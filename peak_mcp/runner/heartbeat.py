"""Progress notes while work that cannot hang runs, so the pool's hang detector waits for it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

Progress = Callable[[str], None]
HEARTBEAT_S = 1.0


@contextlib.contextmanager
def heartbeat(progress: Progress, message: str, every_s: float = HEARTBEAT_S,
              limit_s: float = 120.0) -> Iterator[None]:
    """Send `message` now and every `every_s` seconds while the body runs, for at most `limit_s`: work that
    cannot hang, unless the device itself is wedged (then the silence after `limit_s` lets the pool say so)."""
    stop = threading.Event()
    progress(message)
    ends = time.monotonic() + limit_s

    def beat() -> None:
        while not stop.wait(every_s) and time.monotonic() < ends:
            progress(message)

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
