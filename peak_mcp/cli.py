"""Command line: `peak-mcp serve` (stdio or --http), `peak-mcp doctor`, `peak-mcp demo`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from peak_mcp import __version__
from peak_mcp.logging import configure


def parse_sizes(text: str) -> dict[str, int]:
    """`M=1024,N=1024,K=1024` -> {'M': 1024, ...}; argparse turns the ValueError into a usage error."""
    sizes = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if not name.strip() or not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"{part!r} is not NAME=INTEGER (e.g. M=1024,N=1024,K=1024)")
        sizes[name.strip()] = int(value)
    return sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="peak-mcp", description=__doc__)
    parser.add_argument("--version", action="version", version=f"peak-mcp {__version__}")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where sessions are stored (default: $PEAK_MCP_DATA_DIR or $XDG_DATA_HOME/peak-mcp)")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING (logs go to stderr)")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the MCP server (stdio by default)")
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--token-file", type=Path, default=None,
                       help="file holding the bearer token every HTTP request must carry (or $PEAK_MCP_TOKEN); "
                            "required off loopback")
    serve.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       help="Host header to accept besides the loopback names (repeatable), e.g. gpu.example.org")
    serve.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                       help="Origin header to accept besides loopback (repeatable), e.g. https://gpu.example.org")
    commands.add_parser("doctor", help="print what this machine can compile and run, and how to fix the rest")
    demo = commands.add_parser("demo", help="drive the server through a real MCP client over stdio")
    demo.add_argument("--backend", default=None, help="cuda or hlsl (default: the first that can run)")
    demo.add_argument("--dtype", default="f32")
    demo.add_argument("--sizes", type=parse_sizes, default=None, help="e.g. M=1024,N=1024,K=1024")
    demo.add_argument("--kernels", type=Path, nargs="*", default=None,
                      help="kernel files to submit after version 0 (default: examples/matmul/<backend>/*)")
    args = parser.parse_args(argv)
    configure(args.log_level)

    if args.command == "serve":
        from peak_mcp.app import build

        options = None
        if args.http:  # checked before anything starts, so an unsafe exposure fails fast
            from peak_mcp.http_serve import ExposureError, HttpOptions, check_exposure, load_token

            try:
                options = HttpOptions(host=args.host, port=args.port, token=load_token(args.token_file),
                                      allowed_hosts=args.allowed_host, allowed_origins=args.allowed_origin)
                check_exposure(options)
            except ExposureError as exc:
                print(f"peak-mcp: {exc}", file=sys.stderr)
                sys.exit(2)
        server, service = build(data_dir=args.data_dir)
        try:
            if options is not None:
                from peak_mcp.http_serve import serve as serve_http

                serve_http(server, options)
            else:
                server.run()
        finally:
            service.close()
    elif args.command == "doctor":
        from peak_mcp.app import build

        _, service = build(data_dir=args.data_dir)
        print(json.dumps(service.doctor().model_dump(mode="json"), indent=2))
        service.close()
    elif args.command == "demo":
        from peak_mcp.demo import run_demo

        sys.exit(run_demo(args.backend, args.dtype, args.sizes, args.kernels, args.data_dir))
