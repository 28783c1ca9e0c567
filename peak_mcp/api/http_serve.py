"""Streamable HTTP, safe to expose: a bearer token off loopback, Host and Origin allowlists on every bind, and
limits on what clients hold (http_limits.py).

Host/Origin checks are the MCP SDK's own (TransportSecuritySettings, DNS-rebinding protection), switched on for
every bind rather than only loopback ones. The SDK's auth hook is OAuth-shaped (issuer, resource metadata); a static
shared token needs none of that, so it is a small ASGI middleware around the SDK's Starlette app.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from peak_mcp.core.config import HttpLimits

log = structlog.get_logger("peak_mcp.http")
TOKEN_ENV = "PEAK_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
FAILURE_WINDOW_S = 60.0
TRACKED_CLIENTS = 10_000  # clients whose failures are remembered; beyond, the oldest windows are forgotten


class ExposureError(Exception):
    """The HTTP server would be unsafe to start as configured; the message says how to fix it."""


@dataclass
class HttpOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = field(default=None, repr=False)  # never printed
    allowed_hosts: list[str] = field(default_factory=list)
    allowed_origins: list[str] = field(default_factory=list)
    limits: HttpLimits = field(default_factory=HttpLimits)


def is_loopback(host: str) -> bool:
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def load_token(token_file: Path | None) -> str | None:
    """The token from --token-file, else $PEAK_MCP_TOKEN, else None. Errors never include the token. The variable
    leaves the environment once read: nothing this process starts, and nothing that reads os.environ later (an
    error, a debug dump), can see it."""
    from_environment = os.environ.pop(TOKEN_ENV, "")
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise ExposureError(f"cannot read the token file {token_file}: {exc.strerror}") from None
        source = f"the token file {token_file}"
    else:
        token = from_environment.strip()
        source = f"${TOKEN_ENV}"
        if not token:
            return None
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise ExposureError(f"{source} must hold one token of at least {MIN_TOKEN_CHARS} characters without "
                            "spaces (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
    return token


def security_settings(options: HttpOptions) -> TransportSecuritySettings:
    hosts: list[str] = []
    for name in [*LOOPBACK_NAMES, *options.allowed_hosts]:
        hosts += [name, f"{name}:*"]  # a Host header may or may not carry the port
    origins = [f"http://{name}:*" for name in LOOPBACK_NAMES] + [f"http://{name}" for name in LOOPBACK_NAMES]
    origins += [o.rstrip("/") for o in options.allowed_origins]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


class BearerToken:
    """Every HTTP request must carry `Authorization: Bearer <token>`; anything else gets 401 before the app.

    A client (its address, or X-Forwarded-For's from a trusted proxy: uvicorn's proxy_headers) with
    `failures_per_minute` failures in its current minute gets 429 until the minute ends, token or not. Both answers
    close the connection, so each further try is a new connection, counted by the connection limits."""

    def __init__(self, app: ASGIApp, token: str, failures_per_minute: int = 30) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._limit = failures_per_minute
        self._failures: dict[str, tuple[float, int]] = {}  # client -> (its window's start, failures); oldest first

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            client = scope["client"][0] if scope.get("client") else "-"
            now = time.monotonic()
            start, failures = self._failures.get(client, (now, 0))
            if failures >= self._limit and now - start < FAILURE_WINDOW_S:
                retry = str(math.ceil(FAILURE_WINDOW_S - (now - start))).encode()
                await _refuse(send, 429, b"too many failed attempts; retry later\n", [(b"retry-after", retry)])
                return
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self._expected):
                self._failed(client, now)
                await _refuse(send, 401, b"missing or wrong bearer token\n",
                              [(b"www-authenticate", b'Bearer realm="peak-mcp"')])
                return
        await self.app(scope, receive, send)

    def _failed(self, client: str, now: float) -> None:
        start, failures = self._failures.get(client, (now, 0))
        if now - start >= FAILURE_WINDOW_S or not failures:
            self._failures.pop(client, None)  # a new window goes last: the dict stays ordered by window start
            start, failures = now, 0
        self._failures[client] = (start, failures + 1)
        while self._failures:  # forget windows that are over, and the oldest beyond TRACKED_CLIENTS
            oldest, (started, _) = next(iter(self._failures.items()))
            if now - started < FAILURE_WINDOW_S and len(self._failures) <= TRACKED_CLIENTS:
                break
            del self._failures[oldest]


async def _refuse(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def check_exposure(options: HttpOptions) -> None:
    if not is_loopback(options.host) and not options.token:
        raise ExposureError(
            f"refusing to serve HTTP on {options.host}, which is not loopback, without a bearer token: anyone who "
            f"can reach the port could compile and run code on this machine. Pass --token-file PATH or set "
            f"${TOKEN_ENV}, and put TLS in front (see 'Exposing the server' in the README); or bind 127.0.0.1.")


def build_app(server: MCPServer, options: HttpOptions) -> ASGIApp:
    from peak_mcp.api.http_limits import AccessLog

    check_exposure(options)
    app: ASGIApp = server.streamable_http_app(transport_security=security_settings(options), host=options.host)
    if options.token:
        app = BearerToken(app, options.token, options.limits.auth_failures_per_minute)
    return AccessLog(app)


def serve(server: MCPServer, options: HttpOptions) -> None:
    import uvicorn

    from peak_mcp.api.http_limits import Guard, fd_budget, protocol_class, throttle_logging

    app = build_app(server, options)
    limits = options.limits
    connections, backlog = fd_budget(limits.max_connections)
    if connections < 8:
        raise ExposureError(f"the file limit (ulimit -n) leaves room for {max(connections, 0)} HTTP connections; "
                            f"raise it, or lower PEAK_MCP_HTTP_MAX_CONNECTIONS")
    throttle_logging()
    log.info("serving streamable HTTP", host=options.host, port=options.port, token=bool(options.token),
             allowed_hosts=options.allowed_hosts, allowed_origins=options.allowed_origins,
             max_connections=connections, max_client_connections=limits.max_client_connections,
             header_timeout=limits.header_timeout, body_timeout=limits.body_timeout,
             auth_failures_per_minute=limits.auth_failures_per_minute)
    # log_config=None: uvicorn's records go to the root handlers, through the throttle; its access log is replaced
    # by AccessLog (it printed query strings). ws="none": a WebSocket upgrade would hand the connection to another
    # protocol, out of the Guard's count (MCP does not use WebSockets). Keep-alive stays uvicorn's 5 s.
    uvicorn.run(app, host=options.host, port=options.port, http=protocol_class(Guard(limits, connections)),
                ws="none", backlog=backlog, log_config=None, access_log=False, log_level="info",
                server_header=False)
