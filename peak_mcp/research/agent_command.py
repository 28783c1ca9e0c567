"""`peak-mcp agent`: a configured LLM drives one session of the server (a stdio child, or a running server at --url)
to a budget; the report is printed and, with --report-dir, written (agent-report.json and .md) beside the run's
exchanges.jsonl, which `--model replay:FILE` replays. Turn by turn: with `--exchange-wait 0` the run stops at the
first reply not there yet (exit 3, its state saved) and `--resume STATE` goes on from there in a later process."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# pydantic-ai (the `agent` extra) is imported by agent() alone: the command line builds its parser without it.

WAITING = 3  # the exit status of a run stopped to wait for a reply (0: ended, 1: failed, 2: refused)


def add_arguments(parser: argparse.ArgumentParser, parse_sizes: object) -> None:
    parser.add_argument("--problem", default="matmul")
    parser.add_argument("--backend", default="cuda", help="cuda, hip or hlsl (default cuda)")
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--sizes", type=parse_sizes, default=None, help="e.g. M=1024,N=1024,K=1024")
    parser.add_argument("--model", default=None,
                        help="a pydantic-ai model string ('openai:gpt-4o', 'anthropic:claude-sonnet-4-5', ...), "
                             "'test' (TestModel), 'exchange:DIR' (request-<n>.json answered by reply-<n>.txt) or "
                             "'replay:FILE' (an earlier run's exchanges.jsonl); required unless --resume")
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
    parser.add_argument("--exchange-wait", "--exchange-timeout", dest="exchange_wait", type=float, default=3600.0,
                        metavar="S", help="exchange: seconds to wait for each reply file (default 3600); 0: do not "
                                          "wait: save the run's state and exit 3, to be resumed with --resume")
    parser.add_argument("--no-sampling", action="store_true",
                        help="do not answer the server's sampling requests (apply_transformation then returns its "
                             "brief and the model submits the kernel); implied by --exchange-wait 0")
    parser.add_argument("--state", type=Path, default=None, metavar="FILE",
                        help="where a run that stops to wait saves its state (default: the exchange folder's "
                             "state.json; resumed: the state it was resumed from)")
    parser.add_argument("--resume", type=Path, default=None, metavar="STATE",
                        help="go on with the run saved in STATE (same --data-dir or --url as before): its session, "
                             "plan, model, budget and history; the run flags above are not read again")
    parser.add_argument("--report-dir", type=Path, default=None, metavar="DIR",
                        help="write agent-report.json, agent-report.md and exchanges.jsonl here (resumed: the "
                             "first part's, unless given)")


def agent(args: argparse.Namespace) -> int:
    try:
        import anyio

        from peak_mcp.research.agent_budget import Budget
        from peak_mcp.research.agent_models import Recording, make_model
        from peak_mcp.research.agent_report import write
        from peak_mcp.research.agent_run import AgentError, AgentPlan, run_agent, stdio_toolset, url_toolset
        from peak_mcp.research.agent_state import AgentState, load, save
    except ImportError as exc:
        print(f"peak-mcp: agent needs pydantic-ai ({exc}): pip install 'peak-mcp[agent]'", file=sys.stderr)
        return 2
    resumed: AgentState | None = None
    try:
        if args.resume:
            resumed = load(args.resume)
            plan, report_dir = resumed.plan, args.report_dir or (Path(resumed.report_dir)
                                                                 if resumed.report_dir else None)
            model = make_model(plan.model, None, plan.exchange_wait_s, resumed.pending, resumed.turns,
                               run=plan.run)
        elif not args.model:
            raise ValueError("--model is required (or --resume STATE)")
        else:
            plan = AgentPlan(problem=args.problem, backend=args.backend, dtype=args.dtype, sizes=args.sizes,
                             model=args.model, max_requests=args.max_requests, sampling=not args.no_sampling,
                             base_url=args.base_url, exchange_wait_s=args.exchange_wait,
                             budget=Budget(max_versions=args.max_versions, max_minutes=args.max_minutes,
                                           target_percent=args.target_percent))
            model = make_model(args.model, args.base_url, args.exchange_wait, run=plan.run)
            report_dir = args.report_dir
    except Exception as exc:  # a bad budget, an unknown provider, a missing API key, recording or state
        print(f"peak-mcp: agent: {exc}", file=sys.stderr)
        return 2
    if resumed is not None and not resumed.reply_file.exists():  # nothing to go on with: no server is started
        print(f"still waiting for {resumed.reply_file}")
        return WAITING
    recorded = Recording(model, report_dir / "exchanges.jsonl" if report_dir else None,
                         resumed.turns if resumed else 0)
    if args.url:
        token = args.token_file.read_text().strip() if args.token_file else os.environ.get("PEAK_MCP_TOKEN")
        connect = url_toolset(args.url, token or None)
    else:
        connect = stdio_toolset(args.data_dir)
    try:
        outcome = anyio.run(run_agent, plan, recorded, connect, lambda line: print(line, file=sys.stderr), resumed)
    except Exception as exc:  # no server, start_session refused (an unknown problem, backend or size), no session
        print(f"peak-mcp: agent: {type(exc).__name__}: {exc}" if not isinstance(exc, AgentError)
              else f"peak-mcp: agent: {exc}", file=sys.stderr)
        return 1
    if isinstance(outcome, AgentState):
        path = args.state or args.resume or Path(outcome.exchange) / "state.json"
        outcome.report_dir = str(report_dir.resolve()) if report_dir else None
        save(outcome, path)
        print(f"waiting for {outcome.reply_file}\nstate: {path} (part {outcome.parts}: {outcome.requests} model "
              f"request(s) answered, {len(outcome.tried)} call(s), {outcome.seconds:.0f} s); once the reply is "
              f"there: peak-mcp agent --resume {path}, with the same --data-dir or --url")
        return WAITING
    if resumed is not None:  # the state is kept as the run's record, closed against a second resume
        save(resumed.model_copy(update={"done": outcome.stop_reason}), args.resume)
    print(outcome.markdown())
    if report_dir:
        for kind, path in write(outcome, report_dir).items():
            print(f"{kind}: {path}")
    return 0
