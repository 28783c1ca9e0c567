"""Hostile problem files (tests/hostile_problems/) through a real MCP client: what the file's code can reach where
the server reads it (define_problem, a --problems folder) and where a worker runs its reference.

The server's environment holds canaries (PEAK_MCP_TOKEN, SECRET_CANARY, AWS_SECRET_ACCESS_KEY), its HOME a planted
key and secret file, and another session's kernel (row_sum, a reference_kernel) and defined problem hold canaries
too. Asserted, for the secure behaviour: no canary in any answer (text or structured content), no terminal control
characters and no flood in answers, no file written outside the scratch, core_pattern never opened for writing
(and unchanged), no listener of the host reached, fork and memory bombs bounded, shipped names not taken over, and
the server still answering after kill, hang and daemon probes (those run only against servers this test starts in
a subprocess: their kills reach only processes under this run's mark).

These fail on the code before the problem-host rework; that is expected.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import has_device
from tests.hostile_problems import _harness as h

pytestmark = pytest.mark.anyio
VULKAN = pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (what a root server exposes)")
MEMORY_MB = 2048  # what problem code may take here (PEAK_MCP_PROBLEM_MEMORY_MB): less than the memory probe's 3 GiB
DEFINE = [("env_dump", "import"), ("env_dump", "title"), ("proc_environ", "import"), ("proc_environ", "title"),
          ("host_files", "import"), ("host_files", "title"), ("data_dir", "title"), ("siblings", "title"),
          ("proc_write", "import"), ("sockets", "import"), ("escapes", "import"), ("escapes", "title"),
          ("memory", "title"), ("fork_bomb", "title"), ("kernelbench_env", "import")]
IN_WORKER = [("env_dump", "reference"), ("env_dump", "naive"), ("proc_environ", "reference"),
             ("host_files", "reference"), ("data_dir", "reference"), ("worker_memory", "reference"),
             ("proc_write", "reference"), ("sockets", "reference"), ("escapes", "reference")]
SUCCESS = ("KILLED", "FORKED 300", "ALLOCATED", "WROTE", "OPENED-FOR-WRITE", "CONNECTED", "READ ")


@pytest.fixture
def run(tmp_path: Path, monkeypatch) -> Any:
    """This run's canaries, planted in this process's environment (the in-process server's)."""
    run = h.Run(tmp_path)
    for key, value in run.env().items():
        if key.isupper() and (key in ("HOME",) or "CANARY" in key or "TOKEN" in key or "SECRET" in key):
            monkeypatch.setenv(key, value)
    yield run
    run.close()


def problems_of(run: h.Run, rows: list[h.Row]) -> list[str]:
    """Everything insecure the rows and the host show."""
    found = []
    for row in rows:
        where = f"{row.probe} {row.step}"
        if row.leaked:
            found.append(f"{where}: leaked {row.leaked}: {row.shown()}")
        if h.CONTROL.search(row.text):
            found.append(f"{where}: control characters reached the client")
        if len(row.text) > h.MAX_ANSWER_CHARS:
            found.append(f"{where}: an answer of {len(row.text)} chars")
        hits = [s.strip() for s in SUCCESS if s in row.text]
        if hits:
            found.append(f"{where}: the probe reports {hits}: {row.shown()}")
        if row.up is False:
            found.append(f"{where}: the server no longer answers")
    if run.listener.hits:
        found.append(f"listeners reached: {run.listener.hits}")
    if run.pwned_files():
        found.append(f"files written outside the scratch: {run.pwned_files()}")
    if h.read_core_pattern() != run.core_pattern:
        found.append("core_pattern changed")
    return found


async def test_define_problem_reads_a_hostile_file_without_leaks(make_client, settings, run) -> None:
    """Each probe's import-time and TITLE variants through define_problem, then list_problems: nothing of the
    host comes back, nothing is written, and the server answers after all of them."""
    rows: list[h.Row] = []
    async with make_client() as (client, service):
        service.problems.timeout_s = 8
        service.problems.memory_bytes = MEMORY_MB << 20  # the memory probe's 3 GiB must not fit
        if has_device("hlsl"):
            await h.start_victim(run, client)
        for name, variant in DEFINE:
            rows += await h.exercise(run, client, h.probe(name), variant, via="define", timeout=60, session=False)
        rows[-1].up = await h.is_up(client)
    run.cleanup()
    problems = problems_of(run, rows)
    assert not problems, "\n".join(problems)


async def test_a_defined_problem_never_takes_a_shipped_name(make_client, run) -> None:
    """A client's define_problem of `matmul` or `softmax` must not replace what every other session of that name
    gets (refused, or kept apart from the shipped one)."""
    async with make_client() as (client, service):
        service.problems.timeout_s = 8
        service.problems.memory_bytes = MEMORY_MB << 20  # the memory probe's 3 GiB must not fit
        for name in ("shadow_matmul", "shadow_softmax"):
            await h.call(client, "define_problem", {"source": run.render(h.probe(name), "title")}, 60)
        listed = (await client.call_tool("list_problems", {})).structured_content
    titles = {p["name"]: p.get("title", "") for p in listed["problems"]}
    assert not titles["matmul"].startswith("SHADOWED") and not titles["softmax"].startswith("SHADOWED"), titles


@VULKAN
async def test_a_hostile_reference_in_the_worker_reaches_nothing(make_client, settings, run, tmp_path) -> None:
    """The same probes from a --problems folder, their attack in reference() at the session's sizes (the device
    worker), and a naive kernel built from the environment: the answers of start_session and get_version hold no
    canary, and another session's kernel (in that same worker) is not read."""
    folder = tmp_path / run.mark / "problems"
    folder.mkdir(parents=True)
    for name, variant in IN_WORKER:
        (folder / f"{name}_{variant}.py").write_text(run.render(h.probe(name), variant))
    settings.problem_dirs = [folder]
    settings.inactivity_timeout_s = 15
    settings.problem_memory_mb = MEMORY_MB
    rows: list[h.Row] = []
    async with make_client() as (client, service):
        service.problems.timeout_s = 8
        service.problems.memory_bytes = MEMORY_MB << 20  # the memory probe's 3 GiB must not fit
        await h.start_victim(run, client)
        first = True
        for name, variant in IN_WORKER:
            rows += await h.exercise(run, client, h.probe(name), variant, via="folder", timeout=90)
            if first:  # one list_problems is enough
                first = False
        rows[-1].up = await h.is_up(client)
    run.cleanup()
    problems = problems_of(run, rows)
    assert not problems, "\n".join(problems)


STDIO = [("kill_parent", "import"), ("kill_group", "import"), ("kill_all", "import"), ("hang_import", "import"),
         ("daemon", "title"), ("env_dump", "title")]
STDIO_WORKER = [("kill_parent", "reference"), ("kill_all", "reference")]


@pytest.mark.parametrize(("name", "variant"), STDIO)
async def test_a_hostile_file_over_stdio_leaves_the_server_up(run, name: str, variant: str) -> None:
    """A server of its own (a subprocess over stdio, as a desktop client runs it) per probe: after a file that
    kills its parent, its process group or every process of the server's tree, hangs, or leaves a daemon holding
    its output, the server still answers list_problems within the time asked."""
    rows = await h.probe_once(run, h.probe(name), variant, tree=None, via="define", timeout=25)
    problems = problems_of(run, rows)
    assert not problems, "\n".join(problems)


@VULKAN
@pytest.mark.parametrize(("name", "variant"), STDIO_WORKER)
async def test_a_hostile_reference_over_stdio_leaves_the_server_up(run, name: str, variant: str) -> None:
    rows = await h.probe_once(run, h.probe(name), variant, tree=None, via="folder", timeout=60)
    problems = problems_of(run, rows)
    assert not problems, "\n".join(problems)


@ROOT_ONLY
async def test_a_root_server_keeps_host_secrets(make_client, run) -> None:
    """Run as root, a problem file must still not read /etc/shadow or open core_pattern for writing."""
    async with make_client() as (client, service):
        service.problems.timeout_s = 8
        service.problems.memory_bytes = MEMORY_MB << 20  # the memory probe's 3 GiB must not fit
        rows = []
        for name in ("host_files", "proc_write"):
            rows += await h.exercise(run, client, h.probe(name), "import", via="define", timeout=60, session=False)
    text = "\n".join(r.text for r in rows)
    assert "READ /etc/shadow" not in text and "OPENED-FOR-WRITE /proc/sys/kernel/core_pattern" not in text, text
    assert h.read_core_pattern() == run.core_pattern
