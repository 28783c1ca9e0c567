"""What `serve --http` lets clients hold, so that slow, many or hostile clients cannot take it down (issue 19).

uvicorn alone accepts every connection and waits for request headers forever: h11 is sans-I/O and has no timeouts,
uvicorn's timeout_keep_alive starts only after a response, and limit_concurrency answers 503 only once a request has
been read. A client that dribbles headers thus holds a file descriptor for good; at RLIMIT_NOFILE asyncio's accept
loop logs a traceback per attempt (675,000 in a 30 s flood, tools/http_flood.py) and nobody gets in. Here:

- GuardedH11Protocol, uvicorn's h11 protocol subclassed: a request's headers must arrive within header_timeout and
  its body within body_timeout; a peer address holds at most max_client_connections and all together at most
  max_connections, fitted under RLIMIT_NOFILE with a reserve. When all are taken, a client holding few still gets
  in: the connection that has waited longest for its headers (from an address that holds many, first) makes room,
  so slow clients cannot lock out one that sends its request at once.
- LogThrottle: at most one line a second from each logging call site; the next one says how many were dropped.
- AccessLog: one line per response without the query string (uvicorn's access log prints it, token and all).

Limits are per peer address: behind a reverse proxy every connection comes from the proxy's.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from peak_mcp.core.config import HttpLimits

log = logging.getLogger("peak_mcp.http")
access_log = logging.getLogger("peak_mcp.http.access")

REFUSED = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 5\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
# The listen backlog, which is also how many connections asyncio accepts in one loop turn. Under a flood of
# reconnecting slow clients (tools/http_flood.py) 128 served a client best: 1024 made each turn long and the queue a
# wait behind the flood; 64 dropped more of the client's SYNs, each retried only a second later.
MAX_BACKLOG = 128
# Descriptors opened after the budget is taken besides connections: device workers' pipes, the store, compilers.
FD_MARGIN = 64
# An address holding fewer connections looks like a client, not a flood: when all are taken, it may make room and
# is evicted last. A new connection waits a loop turn or two for its first bytes, while a flood's batches may
# evict hundreds.
FEW = 8


def fd_budget(wanted: int) -> tuple[int, int]:
    """(connections, listen backlog) that fit under RLIMIT_NOFILE, raising the soft limit towards the hard one first.

    A refused or evicted connection holds its descriptor until the event loop closes it a few turns later, and
    asyncio accepts up to `backlog` connections a turn: about four backlogs are in flight beyond those counted, so
    they are kept free, with FD_MARGIN and what is open now. Under a small limit the backlog shrinks first."""
    if sys.platform == "win32":
        return wanted, MAX_BACKLOG
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fixed = _open_fds() + FD_MARGIN
    if soft == resource.RLIM_INFINITY:
        return wanted, MAX_BACKLOG
    needed = fixed + wanted + 4 * MAX_BACKLOG
    if soft < needed and (hard == resource.RLIM_INFINITY or soft < hard):
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    floor = max(8, min(128, soft // 16))  # a small limit (a test's) keeps most of it for connections
    backlog = min(MAX_BACKLOG, max(floor, (soft - fixed - wanted) // 4))
    return min(wanted, soft - fixed - 4 * backlog), backlog


def _open_fds() -> int:
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return len(os.listdir(folder))
    return 32


class Guard:
    """The connections open now, in all and per peer address, and those waiting for request headers, oldest first."""

    def __init__(self, limits: HttpLimits, max_connections: int) -> None:
        self.limits = limits
        self.max_connections = max_connections
        self.total = 0
        self.per_address: dict[str, int] = {}
        self.waiting: dict[GuardedH11Protocol, None] = {}  # a dict keeps insertion order: the first waited longest

    def admit(self, conn: GuardedH11Protocol) -> bool:
        held = self.per_address.get(conn.address, 0)
        if held >= self.limits.max_client_connections:
            log.warning("refused a connection from %s, which has %d open (PEAK_MCP_HTTP_MAX_CLIENT_CONNECTIONS)",
                        conn.address, held)
            return False
        if self.total >= self.max_connections:
            # Only an address holding few may make room: a flood's own connections would only evict each other,
            # two closes a connection, each evicted one coming back at once.
            if not self.waiting or held >= FEW:
                log.warning("refused a connection from %s: %d are open (PEAK_MCP_HTTP_MAX_CONNECTIONS, and the file "
                            "limit)", conn.address, self.total)
                return False
            # Counted until its transport is gone, so the total may pass the cap by the evictions in flight.
            victim = self._victim()
            del self.waiting[victim]
            log.warning("closed a connection from %s that waited long for its request headers: %d are open "
                        "(PEAK_MCP_HTTP_MAX_CONNECTIONS, and the file limit)", victim.address, self.total)
            victim.drop(REFUSED)
        self.total += 1
        self.per_address[conn.address] = held + 1
        return True

    def _victim(self) -> GuardedH11Protocol:
        """The oldest connection waiting for headers from an address with FEW or more open, else the oldest."""
        for looked, conn in enumerate(self.waiting):
            if self.per_address[conn.address] >= FEW:
                return conn
            if looked == 32:  # a wide flood of few connections an address: no need to look further
                break
        return next(iter(self.waiting))

    def release(self, conn: GuardedH11Protocol) -> None:
        self.total -= 1
        self.waiting.pop(conn, None)
        held = self.per_address.pop(conn.address) - 1
        if held:
            self.per_address[conn.address] = held


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol behind the Guard, with a deadline for each request's headers and then its body."""

    guard: ClassVar[Guard]  # set on the subclass that protocol_class() makes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.address = ""
        self._admitted = False
        self._phase: str | None = None  # "header" or "body" while a request is being read
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peer = transport.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) else "local"
        if not self.guard.admit(self):
            transport.write(REFUSED)  # before uvicorn sees it: no task, no request, no log line of its own
            transport.close()
            return
        self._admitted = True
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._admitted:
            return
        self._admitted = False
        if self._deadline is not None:
            self._deadline.cancel()
        self.guard.release(self)
        super().connection_lost(exc)

    def drop(self, answer: bytes) -> None:
        if not self.transport.is_closing():
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(answer)
            self.transport.close()

    def _watch(self) -> None:
        """Start the clock when h11 starts waiting for a request's headers (IDLE) or its body (SEND_BODY).

        Idle keep-alive connections are uvicorn's: they are in IDLE too, but timed by timeout_keep_alive until a
        byte of the next request arrives (data_received), from which the header deadline runs."""
        state = self.conn.their_state
        phase = "header" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if phase == self._phase or self.transport.is_closing():
            return
        self._phase = phase
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if phase == "header":
            self.guard.waiting[self] = None
        else:
            self.guard.waiting.pop(self, None)
        if phase is not None:
            seconds = self.guard.limits.header_timeout if phase == "header" else self.guard.limits.body_timeout
            self._deadline = self.loop.call_later(seconds, self._expire, phase, seconds)

    def _expire(self, phase: str, seconds: float) -> None:
        self._deadline = None
        log.warning("closed the connection from %s: the request's %s took over %g s (PEAK_MCP_HTTP_%s_TIMEOUT)",
                    self.address, phase, seconds, phase.upper(), extra={"throttle": phase})
        self.guard.waiting.pop(self, None)
        self.drop(TIMED_OUT)


def protocol_class(guard: Guard) -> type[GuardedH11Protocol]:
    """The class uvicorn instantiates per connection (its `http` setting), bound to one server's Guard."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"guard": guard})


@dataclass(slots=True)
class _Site:
    last: float  # when a line from it was last let through
    dropped: int = 0  # records dropped since
    sample: logging.LogRecord | None = None  # the last of them


class LogThrottle(logging.Filter):
    """At most one line a second from each call site (file, line, level, and a `throttle` extra where given, e.g. a
    status code): a line let through says how many were dropped before it, and a site that falls quiet gets its
    count on a line of its own a second later, or at exit. A traceback is printed once per site and exception;
    later ones are shortened to their last line."""

    def __init__(self, interval_s: float = 1.0) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._lock = threading.Lock()  # threads log too, and the reporter reads the sites
        self._sites: dict[tuple[object, ...], _Site] = {}
        self._tracebacks: set[tuple[object, ...]] = set()
        threading.Thread(target=self._report_every, name="log-throttle", daemon=True).start()
        atexit.register(self.report, quiet_for_s=0.0)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "throttle_report", False):
            return True
        key = (record.name, record.levelno, record.pathname, record.lineno, getattr(record, "throttle", None))
        now = time.monotonic()
        with self._lock:
            site = self._sites.setdefault(key, _Site(last=-self.interval_s))
            if now - site.last < self.interval_s:
                site.dropped, site.sample = site.dropped + 1, record
                return False
            dropped, since = site.dropped, now - site.last
            site.last, site.dropped, site.sample = now, 0, None
            exc = record.exc_info[1] if record.exc_info else None
            seen = (key, type(exc), str(exc))
            shorten = exc is not None and (seen in self._tracebacks or len(self._tracebacks) >= 1000)
            if exc is not None:
                self._tracebacks.add(seen)
        if shorten or dropped:
            message = record.getMessage()
            if shorten:
                message += f" ({type(exc).__name__}: {exc})"
                record.exc_info, record.exc_text = None, None
            if dropped:
                message += f" [{dropped} more like this dropped in the last {since:.1f} s]"
            record.msg, record.args = message, ()
        return True

    def _report_every(self) -> None:
        while True:
            time.sleep(self.interval_s / 4)
            self.report()

    def report(self, quiet_for_s: float | None = None) -> None:
        """Log the count of each site that dropped lines and has let none through for `quiet_for_s` (a second)."""
        quiet_for_s = self.interval_s if quiet_for_s is None else quiet_for_s
        now = time.monotonic()
        with self._lock:
            quiet = [site for site in self._sites.values()
                     if site.sample is not None and now - site.last >= quiet_for_s]
            reports = [(site.sample, site.dropped, now - site.last) for site in quiet]
            for site in quiet:
                site.last, site.dropped, site.sample = now, 0, None
        for sample, dropped, since in reports:
            if sample is not None:
                logging.getLogger(sample.name).log(
                    sample.levelno, "%s [%d like this in the last %.1f s, this one the last]", sample.getMessage(),
                    dropped, since, extra={"throttle_report": True})


def throttle_logging() -> None:
    """Every record reaching the root logger's handlers goes through one LogThrottle, with a time stamp."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(stream=sys.stderr)
    throttle = LogThrottle()
    for handler in root.handlers:
        handler.addFilter(throttle)
        handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(name)s: %(message)s"))


class AccessLog:
    """One line per response: client, method, path and status; never the query string nor any header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                client = scope.get("client")
                raw = scope.get("raw_path") or scope["path"].encode()
                path = raw.partition(b"?")[0].decode("ascii", "backslashreplace")[:200]  # %0A stays escaped
                access_log.info("%s %s %s %d", client[0] if client else "-", scope["method"], path,
                                message["status"], extra={"throttle": message["status"]})
            await send(message)

        await self.app(scope, receive, send_logged)
