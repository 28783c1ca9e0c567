"""Command line: `peak-mcp serve` (stdio or --http), `peak-mcp doctor`, `peak-mcp demo`, `peak-mcp batch` (KernelBench's
metric over a folder of problems and one of kernels: peak_mcp.loop.batch), and the read-only views of a data dir:
`peak-mcp sessions`, `peak-mcp show SESSION`, `peak-mcp export SESSION VERSION`.

The views print what agents wrote (labels, messages, compile logs quoting their sources) on the operator's
terminal: every control character in it is printed as its escape, so none of it can retitle, clear or forge lines
of that terminal, whatever an old data dir holds."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from peak_mcp import __version__
from peak_mcp.core.logging import configure
from peak_mcp.core.text import clipped, printable
from peak_mcp.core.units import rate
from peak_mcp.store.records import SessionRow
from peak_mcp.store.reports import best_version, markdown_table


def parse_sizes(text: str) -> dict[str, int]:
    """`M=1024,N=1024,K=1024` -> {'M': 1024, ...}; argparse turns the ValueError into a usage error."""
    sizes = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if not name.strip() or not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"{part!r} is not NAME=INTEGER (e.g. M=1024,N=1024,K=1024)")
        sizes[name.strip()] = int(value)
    return sizes


SOURCE_SUFFIX = {"cuda": ".cu", "hip": ".hip", "hlsl": ".hlsl"}


def _common_options(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument("--data-dir", type=Path, default=default,
                        help="where sessions are stored (default: $PEAK_MCP_DATA_DIR or $XDG_DATA_HOME/peak-mcp)")
    parser.add_argument("--log-level", default=default, help="DEBUG, INFO, WARNING (logs go to stderr)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="peak-mcp", description=__doc__)
    parser.add_argument("--version", action="version", version=f"peak-mcp {__version__}")
    _common_options(parser, None)
    # The same options after the command (`peak-mcp serve --data-dir X`); SUPPRESS keeps one given before it.
    common = argparse.ArgumentParser(add_help=False)
    _common_options(common, argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", parents=[common], help="run the MCP server (stdio by default)")
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--ray", default=None, metavar="ADDRESS",
                       help="run device workers as Ray actors on the cluster at ADDRESS (or `auto`); needs the ray "
                            "extra (default: $PEAK_MCP_RAY, else the embedded single-host pool)")
    serve.add_argument("--problems", action="append", type=Path, default=[], metavar="DIR",
                       help="a folder of problem files (docs/problems.md), repeatable; before those of "
                            "$PEAK_MCP_PROBLEMS")
    serve.add_argument("--token-file", type=Path, default=None,
                       help="file holding the bearer token every HTTP request must carry (or $PEAK_MCP_TOKEN); "
                            "required off loopback")
    serve.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       help="Host header to accept besides the loopback names (repeatable), e.g. gpu.example.org")
    serve.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                       help="Origin header to accept besides loopback (repeatable), e.g. https://gpu.example.org")
    commands.add_parser("doctor", parents=[common],
                        help="print what this machine can compile and run, and how to fix the rest")
    demo = commands.add_parser("demo", parents=[common], help="drive the server through a real MCP client over stdio")
    demo.add_argument("--backend", default=None, help="cuda or hlsl (default: the first that can run)")
    demo.add_argument("--dtype", default="f32")
    demo.add_argument("--sizes", type=parse_sizes, default=None, help="e.g. M=1024,N=1024,K=1024")
    demo.add_argument("--kernels", type=Path, nargs="*", default=None,
                      help="kernel files to submit after version 0 (default: examples/matmul/<backend>/*)")
    commands.add_parser("sessions", parents=[common], help="list the sessions of the data dir, one line each")
    show = commands.add_parser("show", parents=[common], help="print a session's history; --out writes its chart")
    show.add_argument("session")
    show.add_argument("--out", type=Path, default=None, metavar="PNG", help="write the lineage chart here")
    export = commands.add_parser("export", parents=[common],
                                 help="write a version's kernel source and its report (JSON and Markdown)")
    export.add_argument("session")
    export.add_argument("version", help="a version number, or `head`")
    export.add_argument("--out", type=Path, default=Path("."), metavar="DIR", help="folder to write to (default .)")
    batch = commands.add_parser("batch", parents=[common],
                                help="KernelBench's metric over a suite: each problem's kernel through every check, "
                                     "its speedup over torch, and fast_p (JSON and Markdown under --out)")
    batch.add_argument("--problems", type=Path, default=None, metavar="DIR",
                       help="a folder of problem files or KernelBench files (every *.py in it is a problem)")
    batch.add_argument("--kernels", type=Path, default=None, metavar="DIR",
                       help="kernels by the problem file's stem or the problem's name: <stem>.cu, .hip or .hlsl")
    batch.add_argument("--map", type=Path, default=None, metavar="FILE",
                       help='JSON: {"problem": "kernel file" or {"kernel": FILE, "sizes": {...}}}; without '
                            "--problems, its problems (built-in ones too) are the suite")
    batch.add_argument("--backend", default="cuda", help="cuda, hip or hlsl (default cuda)")
    batch.add_argument("--dtype", default="f32")
    batch.add_argument("--p", type=float, nargs="+", default=[0.0, 1.0, 1.5, 2.0], metavar="P",
                       help="the p of fast_p (default 0 1 1.5 2)")
    batch.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                       help="writes batch.json and batch.md here (default .)")
    experiment = commands.add_parser("experiment", parents=[common],
                                     help="run a plan of transformations x repeats through apply_transformation, "
                                          "the model answered by a folder exchange or a replay (README: Experiments)")
    experiment.add_argument("spec", type=Path, metavar="SPEC.json")
    experiment.add_argument("--out", type=Path, default=None, metavar="DIR",
                            help="results.jsonl, exchanges.jsonl and the reports (default: SPEC without .json); a "
                                 "re-run skips the cells finished there")
    from peak_mcp.research.agent_command import add_arguments

    add_arguments(commands.add_parser("agent", parents=[common],
                                      help="let an LLM drive one session to a budget through the server's tools and "
                                           "print what it reached (README: An agent run)"), parse_sizes)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    configure(args.log_level)

    if args.command == "serve":
        from peak_mcp.api.app import build
        from peak_mcp.core.errors import PeakError

        options = None
        if args.http:  # checked before anything starts, so an unsafe exposure or a bad limit fails fast
            from peak_mcp.api.http_serve import ExposureError, HttpOptions, check_exposure, load_token
            from peak_mcp.core.config import HttpLimits

            try:
                options = HttpOptions(host=args.host, port=args.port, token=load_token(args.token_file),
                                      allowed_hosts=args.allowed_host, allowed_origins=args.allowed_origin,
                                      limits=HttpLimits.from_env())
                check_exposure(options)
            except (ExposureError, PeakError) as exc:
                print(f"peak-mcp: {exc}", file=sys.stderr)
                sys.exit(2)

        try:
            server, service = build(data_dir=args.data_dir, ray=args.ray, problems=args.problems)
        except PeakError as exc:  # a bad setting, or --ray without Ray: say so and stop
            print(f"peak-mcp: {exc}", file=sys.stderr)
            sys.exit(2)
        if options is not None:
            service.http = True  # set before the reading below looks at the defined folder (define_problem's)
        service.problems.refresh_in_background()  # the folders read while the client connects, not when it asks
        try:
            if options is not None:
                service.http = True  # define_problem only where PEAK_MCP_ALLOW_DEFINE_PROBLEM says so
                from peak_mcp.api.http_serve import ExposureError
                from peak_mcp.api.http_serve import serve as serve_http

                try:
                    serve_http(server, options)
                except ExposureError as exc:  # the file limit leaves no room for connections
                    print(f"peak-mcp: {exc}", file=sys.stderr)
                    sys.exit(2)
            else:
                import anyio

                from peak_mcp.api.stdio import serve_stdio

                anyio.run(serve_stdio, server)
        finally:
            service.close()
    elif args.command == "doctor":
        from peak_mcp.api.app import build

        _, service = build(data_dir=args.data_dir)
        print(json.dumps(service.doctor().model_dump(mode="json"), indent=2))
        service.close()
    elif args.command == "demo":
        from peak_mcp.api.demo import run_demo

        sys.exit(run_demo(args.backend, args.dtype, args.sizes, args.kernels, args.data_dir))
    elif args.command == "batch":
        sys.exit(_batch(args))
    elif args.command == "experiment":
        from peak_mcp.api.app import build
        from peak_mcp.research.command import experiment

        def in_process() -> tuple[Any, Any]:
            server, service = build(data_dir=args.data_dir)
            return server, service.close

        sys.exit(experiment(args.spec, args.out, args.data_dir, in_process))
    elif args.command == "agent":
        from peak_mcp.research.agent_command import agent

        sys.exit(agent(args))
    else:
        sys.exit(_view(args))


def _view(args: argparse.Namespace) -> int:
    """sessions / show / export: read the data dir through a service that never probes devices or starts workers
    (workers start only when a job runs; the probe is replaced by an empty one)."""
    from peak_mcp.core.config import Settings
    from peak_mcp.core.errors import PeakError
    from peak_mcp.loop.service import PeakService

    settings = Settings.from_env(args.data_dir)
    if not settings.database.exists():  # opening the store would create an empty one
        print(f"peak-mcp: no sessions in {settings.data_dir} (no {settings.database.name}); pass --data-dir or set "
              f"$PEAK_MCP_DATA_DIR", file=sys.stderr)
        return 0 if args.command == "sessions" else 1
    service = PeakService(settings, probe=dict)
    try:
        if args.command == "sessions":
            for line in session_lines(service):
                print(line)
        elif args.command == "show":
            history = service.history(args.session)
            print(session_lines(service, args.session)[0])
            print(markdown_table([_escaped(row) for row in history.rows]))
            if args.out is not None:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_bytes(service.history_chart(args.session))
                print(f"chart: {args.out}")
        else:
            for path in export_version(service, args.session, args.version, args.out):
                print(path)
        return 0
    except PeakError as exc:
        hint = cli_hint(exc.hint, getattr(args, "session", None))
        print(f"peak-mcp: {exc.message}" + (f"\nHint: {hint}" if hint else ""), file=sys.stderr)
        return 1
    finally:
        service.close()


def _batch(args: argparse.Namespace) -> int:
    """`peak-mcp batch`: the suite evaluated (peak_mcp.loop.batch), batch.json and batch.md written under --out, the
    table printed."""
    from peak_mcp.core.config import Settings
    from peak_mcp.core.errors import PeakError
    from peak_mcp.loop.batch import BatchRunner, plan, read_map
    from peak_mcp.loop.batch_table import markdown
    from peak_mcp.loop.service import PeakService

    if args.problems is None and args.map is None:
        print("peak-mcp: batch needs --problems DIR, --map FILE, or both", file=sys.stderr)
        return 2
    settings = Settings.from_env(args.data_dir)
    if args.problems is not None:
        settings.problem_dirs = [args.problems, *settings.problem_dirs]
    service = PeakService(settings)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = args.out / "rows.jsonl"  # each problem's row as it finishes
    rows.write_text("")

    def keep(row: Any) -> None:
        with rows.open("a") as out:
            out.write(row.model_dump_json() + "\n")

    try:
        items = plan(service, args.backend, args.problems, args.kernels, read_map(args.map) if args.map else None)
        result = BatchRunner(service).run(items, args.backend, args.dtype, ps=args.p, on_row=keep,
                                          progress=lambda line: print(printable(line), file=sys.stderr))
    except PeakError as exc:
        print(f"peak-mcp: {exc.message}" + (f"\nHint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 1
    finally:
        service.close()
    (args.out / "batch.json").write_text(result.model_dump_json(indent=2) + "\n")
    table = markdown(result)
    (args.out / "batch.md").write_text(table)
    print(table)
    return 0


def cli_hint(hint: str | None, session: str | None) -> str | None:
    """An error's hint as the command line says it: the service's hints name MCP tools (list_sessions, history),
    which a terminal user cannot call; these name the peak-mcp commands that show the same."""
    if not hint:
        return hint
    show = f"peak-mcp show {session}" if session else "peak-mcp show SESSION"
    for pattern, replacement in (
            (r"call list_sessions to see the sessions, or start_session to begin one\.",
             "`peak-mcp sessions` lists the sessions in this data dir (--data-dir names another one; "
             "`peak-mcp demo` starts one)."),
            (r"call list_sessions", "run `peak-mcp sessions`"),
            (r"call history", f"run `{show}`"),
            (r"\(see history\)", f"(see `{show}`)")):
        hint = re.sub(pattern, replacement, hint)
    return hint


def session_lines(service: Any, only: str | None = None) -> list[str]:
    """One line per session: id, label, problem, backend, dtype, sizes, head, and the best version (the fastest
    general one)."""
    lines = []
    sessions = [service.store.session(only)] if only else service.store.sessions()
    for s in sessions:
        best = best_version(service.store.versions(s.id))
        fastest = (f"best v{best.number} {best.median_ms:.4g} ms "
                   f"{rate(best.timing.tflops if best.timing else None)}" if best else "best -")
        sizes = ",".join(f"{k}={v}" for k, v in s.sizes.items())
        head = f"v{s.head}" if s.head is not None else "-"
        label = clipped(s.label) if s.label else "-"
        lines.append(printable(f"{s.id}  {label}  {s.problem} {s.backend} {s.dtype} {sizes}  head {head}  "
                               f"{fastest}"))
    return lines


def _escaped(value: Any) -> Any:
    """A history row (or any part of one) with its text escaped, so that a newline in a stored field cannot forge
    a row of the table."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(k)): _escaped(v) for k, v in value.items()}
    return value


def export_version(service: Any, session_id: str, version: str, out: Path) -> list[Path]:
    """`<session>-v<N>.<cu|hlsl>` plus `.json` (the version report and session) and `.md` (a readable summary)."""
    from peak_mcp.core.errors import InvalidInput

    if version != "head" and not (version.isascii() and version.isdigit()):  # "²".isdigit(), but int() refuses it
        raise InvalidInput(f"version {version!r} is not a number", "pass a version number from `show`, or head.")
    detail = service.get_version(session_id, None if version == "head" else int(version))
    session = service.store.session(session_id)
    report = detail.report
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{session_id}-v{report.version}"
    source = stem.with_suffix(SOURCE_SUFFIX.get(session.backend, ".txt"))
    source.write_text(detail.source)
    meta = {"session": service.session_info(session_id).model_dump(mode="json"),
            "report": report.model_dump(mode="json"), "source_file": source.name}
    stem.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    # Meant to be read (cat, less): escaped like the terminal views. The source and the JSON keep every character.
    summary = _markdown_report(session, report, source.name, detail.configuration)
    stem.with_suffix(".md").write_text(printable(summary, keep="\n\t"))
    return [source, stem.with_suffix(".json"), stem.with_suffix(".md")]


def _markdown_report(session: SessionRow, report: Any, source_name: str, configuration: str | None = None) -> str:
    perf = report.performance or {}
    sizes = " × ".join(f"{k}={v}" for k, v in session.sizes.items())
    lines = [f"# {session.problem} {session.dtype} v{report.version} ({session.backend})", "",
             f"- session: `{session.id}`{' (' + clipped(session.label) + ')' if session.label else ''}",
             f"- device: {session.device}", f"- sizes: {sizes}",
             f"- parent: {'v' + str(report.parent) if report.parent is not None else '-'}; origin: {report.origin}; "
             f"transformation: {report.transformation or '-'}",
             f"- status: **{report.status}**" + (f" ({report.failure})" if report.failure else ""),
             f"- source: `{source_name}`"]
    if configuration:
        lines.append(f"- configuration: {configuration}")
    lines.append("")
    if perf:
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in perf.items()]
        lines.append("")
    if report.generality:
        checked = ", ".join("×".join(str(v) for v in sizes.values())
                            for sizes in report.generality.get("sizes_checked") or [])
        lines += [f"Generality: {'passed' if report.generality.get('passed') else 'FAILED'} at {checked}."]
        lines += [f"- {f.get('sizes')}: {f.get('check')}: {f.get('message')}"
                  for f in report.generality.get("failures") or []]
        lines.append("")
    lines += ["## Message", "", report.message or "-", ""]
    if report.compile is not None and not report.compile.ok:
        lines += ["## Compile log", "", "```", report.compile.log, "```", ""]
    return "\n".join(lines)
