"""`peak-mcp agent`: a configured LLM drives one session of the server (a stdio child, or a running server at --url)
to a budget; the report is printed and, with --report-dir, written (agent-report.json and .md) beside the run's
exchanges.jsonl, which `--model replay:FILE` replays."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# pydantic-ai (the `agent` extra) is imported by agent() alone: the command line builds its parser without it.


def add_arguments(parser: argparse.ArgumentParser, parse_sizes: object) -> None:
    parser.add_argument("--problem", default="matmul")
    parser.add_argument("--backend", default="cuda", help="cuda, hip or hlsl (default cuda)")
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--sizes", type=parse_sizes, default=None, help="e.g. M=1024,N=1024,K=1024")
    parser.add_argument("--model", required=True,
                        help="a pydantic-ai model string ('openai:gpt-4o', 'anthropic:claude-sonnet-4-5', ...), "
                             "'test' (TestModel), 'exchange:DIR' (request-<n>.json answered by reply-<n>.txt) or "
                             "'replay:FILE' (an earlier run's exchanges.jsonl)")
    parser.add_argument("--base-url", default=None,
                        help="an OpenAI-compatible server's /v1 URL (vLLM, llama.cpp, Ollama) for an openai: or "
                             "openai-chat: model: chat completions there; the key is $OPENAI_API_KEY, if any")
    parser.add_argument("--url", default=None,
                        help="a running `peak-mcp serve --http` (e.g. http://127.0.0.1:8000/mcp) instead of a "
                             "stdio child")
    parser.add_argument("--token-file", type=Path, default=None,
                        help="the bearer token for --url (default: $PEAK_MCP_TOKEN)")
    parser.add_argument("--max-versions", type=int, default=10, help="versions to make at most (default 10)")
    parser.add_argument("--max-minutes", type=float, default=60.0, help="minutes at most (default 60)")
    parser.add_argument("--target-percent", type=float, default=None,
                        help="stop once the best version reaches this %% of the roofline (else of the vendor "
                             "library), as history reports it")
    parser.add_argument("--max-requests", type=int, default=60, help="model requests at most (default 60)")
    parser.add_argument("--exchange-timeout", type=float, default=3600.0, metavar="S",
                        help="exchange: seconds to wait for each reply file (default 3600)")
    parser.add_argument("--report-dir", type=Path, default=None, metavar="DIR",
                        help="write agent-report.json, agent-report.md and exchanges.jsonl here")


def agent(args: argparse.Namespace) -> int:
    try:
        import anyio

        from peak_mcp.research.agent_budget import Budget
        from peak_mcp.research.agent_models import Recording, make_model
        from peak_mcp.research.agent_report import write
        from peak_mcp.research.agent_run import AgentError, AgentPlan, run_agent, stdio_toolset, url_toolset
    except ImportError as exc:
        print(f"peak-mcp: agent needs pydantic-ai ({exc}): pip install 'peak-mcp[agent]'", file=sys.stderr)
        return 2
    try:
        plan = AgentPlan(problem=args.problem, backend=args.backend, dtype=args.dtype, sizes=args.sizes,
                         model=args.model, max_requests=args.max_requests,
                         budget=Budget(max_versions=args.max_versions, max_minutes=args.max_minutes,
                                       target_percent=args.target_percent))
        model = make_model(args.model, args.base_url, args.exchange_timeout)
    except Exception as exc:  # a bad budget, an unknown provider, a missing API key or recording
        print(f"peak-mcp: agent: {exc}", file=sys.stderr)
        return 2
    recorded = Recording(model, args.report_dir / "exchanges.jsonl" if args.report_dir else None)
    if args.url:
        token = args.token_file.read_text().strip() if args.token_file else os.environ.get("PEAK_MCP_TOKEN")
        connect = url_toolset(args.url, token or None)
    else:
        connect = stdio_toolset(args.data_dir)
    try:
        report = anyio.run(run_agent, plan, recorded, connect, lambda line: print(line, file=sys.stderr))
    except Exception as exc:  # no server, or start_session refused (an unknown problem, backend or size)
        print(f"peak-mcp: agent: {type(exc).__name__}: {exc}" if not isinstance(exc, AgentError)
              else f"peak-mcp: agent: {exc}", file=sys.stderr)
        return 1
    print(report.markdown())
    if args.report_dir:
        for kind, path in write(report, args.report_dir).items():
            print(f"{kind}: {path}")
    return 0
