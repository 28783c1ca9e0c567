"""Run the hostile problem corpus (tests/hostile_problems/) through a stdio MCP client against a server started
from a given tree, and print a Markdown table: probe | what came back | server up after?

    python tools/hostile_problems.py                        # the installed package (the venv's peak_mcp)
    python tools/hostile_problems.py --tree /work/before    # another checkout (PYTHONPATH=TREE for the server)
    python tools/hostile_problems.py --as-user nobody --python /opt/peak-unpriv/bin/python3
                                                            # the same, re-run as an unprivileged user (a Python
                                                            # that user can read: the venv's may be under /root)
    python tools/hostile_problems.py --only env_dump,kill_parent --via folder

Each probe variant gets a fresh server (a kill may take it down): define_problem with the variant's text (or, with
--via folder, the file in a --problems folder), list_problems, start_session (hlsl, N=1000) where the variant runs
in the worker, get_version of v0 for the naive variant, then list_problems again: up or not. Canary values (secret
environment variables, files under a fake HOME, a victim session's kernel) found in any answer are marked LEAKED.
Never writes core_pattern or sysrq-trigger (the probe only opens them); kills only processes of its own servers.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.hostile_problems import _harness as h  # noqa: E402


def readable_by(user: str, paths: list[Path]) -> list[str]:
    """Paths `user` cannot read (or traverse to)."""
    entry = pwd.getpwnam(user)
    bad = []
    for path in paths:
        probe = subprocess.run(["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups",
                                "test", "-r", str(path)], capture_output=True)
        if probe.returncode:
            bad.append(str(path))
    return bad


def reexec_as(user: str, argv: list[str], python: str) -> int:
    entry = pwd.getpwnam(user)
    needed = [Path(python), Path(python).resolve(), ROOT / "tests" / "hostile_problems" / "_harness.py",
              Path(__file__).resolve()]
    tree = next((argv[i + 1] for i, a in enumerate(argv) if a == "--tree" and i + 1 < len(argv)), None)
    if tree:
        needed.append(Path(tree) / "peak_mcp" / "__init__.py")
    import mcp
    needed.append(Path(mcp.__file__))
    bad = readable_by(user, needed)
    if bad:
        print(f"**{user} cannot read:** {', '.join(bad)}")
        return 2
    drop = ("--as-user", "--python")
    rest = [a for i, a in enumerate(argv) if a not in drop and (i == 0 or argv[i - 1] not in drop)]
    if shutil.which("setpriv"):
        command = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups",
                   "--reset-env"]
    else:
        command = ["runuser", "-u", user, "--"]
    env_keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "VK_ICD_FILENAMES",
                                                            "VK_DRIVER_FILES")}
    env_keep.update(HOME="/tmp", TMPDIR="/tmp", PEAK_HOSTILE_USER=user)
    command += ["env", *[f"{k}={v}" for k, v in env_keep.items()], python, str(Path(__file__).resolve()),
                *rest]
    return subprocess.run(command, cwd="/tmp").returncode


async def main_async(args: argparse.Namespace) -> int:
    run = h.Run()
    rows: list[h.Row] = []
    only = set(args.only.split(",")) if args.only else None
    started = time.monotonic()
    try:
        for probe in h.probes():
            if only and probe.name not in only:
                continue
            for variant in probe.variants:
                if args.variants and variant not in args.variants.split(","):
                    continue
                via = args.via
                if "kernelbench" in probe.flags:
                    via = "define"
                got = await h.probe_once(run, probe, variant, tree=args.tree, via=via,
                                         victim="victim" in probe.flags, timeout=args.timeout)
                up = got[-1].up
                for row in got:
                    row.up = up
                rows += got
                print(f"  {probe.name}:{variant} done ({time.monotonic() - started:.0f} s, up={up})",
                      file=sys.stderr)
        who = os.environ.get("PEAK_HOSTILE_USER") or pwd.getpwuid(os.getuid()).pw_name
        print(f"\n### {args.tree or 'installed package'} as {who} (uid {os.getuid()}), via {args.via}\n")
        print("| probe | step | what came back (first 120 chars) | server up after? |")
        print("|---|---|---|---|")
        for row in rows:
            up = {True: "yes", False: "**NO**", None: "?"}[row.up]
            print(f"| {row.probe} | {row.step} | {row.shown()} | {up} |")
        leaked = sorted({r.probe for r in rows if r.leaked})
        flagged = sorted({r.probe for r in rows if r.notes})
        down = sorted({r.probe for r in rows if r.up is False})
        print(f"\nleaked: {', '.join(leaked) or 'none'}  \nflagged: {', '.join(flagged) or 'none'}  \n"
              f"server down after: {', '.join(down) or 'none'}  \ncore_pattern unchanged: "
              f"{h.read_core_pattern() == run.core_pattern}  \n({time.monotonic() - started:.0f} s)")
    finally:
        run.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", default=None, help="a checkout whose peak_mcp the server runs (PYTHONPATH)")
    parser.add_argument("--as-user", default=None, help="re-run as this user (setpriv, else runuser)")
    parser.add_argument("--python", default=sys.executable,
                        help="with --as-user: a Python that user can run, with mcp and the server's dependencies "
                             "(e.g. a venv outside /root)")
    parser.add_argument("--only", default=None, help="comma-separated probe names")
    parser.add_argument("--variants", default=None, help="comma-separated: import,title,reference,naive")
    parser.add_argument("--via", default="define", choices=("define", "folder"))
    parser.add_argument("--timeout", type=float, default=60, help="seconds one call may take")
    args = parser.parse_args()
    if args.as_user and pwd.getpwuid(os.getuid()).pw_name != args.as_user:
        return reexec_as(args.as_user, sys.argv[1:], args.python)
    import anyio
    return anyio.run(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
