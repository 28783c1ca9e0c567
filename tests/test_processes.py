"""Process hygiene: children that the client's cwd cannot shadow, workers that die with their server, cancelled
requests that stop their job, one server per device per data dir, and no `pending` left after a crash."""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import anyio
import pytest

from peak_mcp.api.responses import whole_answer
from peak_mcp.core.config import Settings
from peak_mcp.loop.service import PeakService
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.runner.pool import DevicePool, JobFailed
from peak_mcp.runner.replies import Done, EvaluateResult, Failed, Ready, parse_reply
from peak_mcp.store.database import Store
from tests.conftest import ROOT, has_device

PYTHONPATH = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
EVIL_MODULES = ("numpy", "cuda", "structlog", "yaml", "pydantic", "json")
HANG = (ROOT / "examples" / "faults" / "hang.hlsl").read_text()


def _evil_dir(tmp_path: Path) -> Path:
    evil = tmp_path / "evil"
    evil.mkdir()
    for name in EVIL_MODULES:
        (evil / f"{name}.py").write_text(f"open({str(evil / (name + '.imported'))!r}, 'w').close()\n")
    return evil


def _imported(evil: Path) -> list[str]:
    return sorted(p.name for p in evil.glob("*.imported"))


def test_doctor_run_from_a_hostile_cwd_imports_nothing_from_it(tmp_path: Path) -> None:
    evil = _evil_dir(tmp_path)
    # -P: the test's own `python -m` must not put the cwd on the path either (the console script never does)
    done = subprocess.run([sys.executable, "-P", "-m", "peak_mcp", "--data-dir", str(tmp_path / "data"), "doctor"],
                          cwd=evil, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {b["backend"] for b in report["backends"]} >= {"cuda", "hlsl"}  # the probe child ran and answered
    assert _imported(evil) == []


# A job with nothing to compile: the worker answers with its device facts.
NO_OP = EvaluateJob(problem="matmul", dtype="f32", sizes={"M": 1, "N": 1, "K": 1})


def test_workers_ignore_the_cwd_even_when_it_is_on_the_parent_path(tmp_path: Path, monkeypatch) -> None:
    evil = _evil_dir(tmp_path)
    monkeypatch.chdir(evil)
    monkeypatch.syspath_prepend(str(evil))  # as `python -m` would do; numpy is already imported here
    pool = DevicePool()
    try:
        result = pool.run("cuda", -1, NO_OP, inactivity_s=60, total_s=60)
        assert isinstance(result, EvaluateResult) and result.device.backend == "cuda"
        worker = pool._workers[("cuda", -1)].process
        assert worker is not None and worker.args[1] == "-I"
        assert Path(f"/proc/{worker.pid}/cwd").resolve() != evil.resolve()
    finally:
        pool.close()
    assert _imported(evil) == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def test_a_worker_exits_when_its_server_is_killed(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import sys, time
        from peak_mcp.runner.messages import EvaluateJob
        from peak_mcp.runner.pool import DevicePool
        pool = DevicePool()
        pool.run("cuda", -1, EvaluateJob(problem="matmul", dtype="f32", sizes={"M": 1, "N": 1, "K": 1}),
                 inactivity_s=60, total_s=60)
        print("WORKER", pool._workers[("cuda", -1)].process.pid, flush=True)
        time.sleep(600)
    """)
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": PYTHONPATH})
    try:
        line = ""
        while not line.startswith("WORKER"):  # structlog's default prints to stdout too
            line = server.stdout.readline()
            assert line, "the server script ended early"
        worker_pid = int(line.split()[1])
        assert _alive(worker_pid)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(worker_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker_pid), "the worker outlived its server"
    finally:
        server.kill()
        server.wait()


def test_a_second_server_on_the_data_dir_cannot_take_an_owned_device(tmp_path: Path) -> None:
    first, second = DevicePool(lock_dir=tmp_path / "locks"), DevicePool(lock_dir=tmp_path / "locks")
    try:
        first.device_locks.acquire("cuda", 0)  # what _start does before spawning the worker
        with pytest.raises(JobFailed) as refused:
            second.run("cuda", 0, NO_OP, inactivity_s=10, total_s=10)
        assert refused.value.kind == "device_busy"
        assert f"device cuda:0 is owned by another peak-mcp server (pid {os.getpid()}) on this data dir" in str(
            refused.value)
        second.device_locks.acquire("cuda", 1)  # other devices stay free
    finally:
        first.close()
        second.close()
    third = DevicePool(lock_dir=tmp_path / "locks")
    third.device_locks.acquire("cuda", 0)  # released with its owner
    third.close()


def test_pending_versions_are_marked_interrupted_when_no_server_is_left(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    store = Store(settings.database)
    sid = store.create_session(problem="matmul", backend="cuda", dtype="f32", sizes={"M": 8, "N": 8, "K": 8},
                               device="x", device_index=-1, label=None)
    store.add_version(sid, parent=None, origin="submit", transformation=None, source="x", status="pending")
    alive = PeakService(settings)  # a live server holds the data dir: a second one must not touch its work
    store.add_version(sid, parent=None, origin="submit", transformation=None, source="y", status="pending")
    second = PeakService(settings)
    assert [v.status for v in second.store.versions(sid)] == ["error", "pending"]
    alive.close()
    second.close()
    third = PeakService(settings)
    versions = third.store.versions(sid)
    third.close()
    store.close()
    assert [(v.status, v.failure) for v in versions] == [("error", "interrupted")] * 2
    assert "server stopped while this version was being evaluated" in versions[1].message


needs_vulkan = pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")

# A real server process that records a version as pending, as submit_kernel does before its job starts, and then
# stays in the middle of evaluating it until it is killed.
ABANDONING_SERVER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from peak_mcp.core.config import Settings
    from peak_mcp.loop.service import PeakService
    service = PeakService(Settings(data_dir=Path(sys.argv[1])), probe=dict)
    number = service.store.add_version(sys.argv[2], parent=0, origin="submit", transformation=None,
                                       source="// mine", status="pending")
    print("PENDING", number, flush=True)
    time.sleep(600)
""")


async def _report(client, sid: str, number: int) -> dict:
    answer = await client.call_tool("get_version", {"session_id": sid, "version": number})
    assert not answer.is_error, answer.content[0].text
    return whole_answer("get_version", answer)


@pytest.mark.anyio
async def test_a_survivor_takes_over_the_pending_versions_of_a_killed_server(make_client, settings) -> None:
    """Two servers on one data dir, one killed: its pending version used to stay pending until a server started
    alone. Now it belongs to the killed server's lease, which the survivor sees is gone."""
    async with make_client() as (client, service):  # up first, so the one killed is never alone
        started = await client.call_tool("start_session", {"backend": "cuda", "sizes": {"M": 16, "N": 16, "K": 16},
                                                           "label": "shared"})
        sid = started.structured_content["session_id"]
        other = subprocess.Popen([sys.executable, "-c", ABANDONING_SERVER, str(settings.data_dir), sid],
                                 stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": PYTHONPATH})
        try:
            line = ""
            while not line.startswith("PENDING"):
                line = other.stdout.readline()
                assert line, "the other server ended early"
            number = int(line.split()[1])
            assert (await _report(client, sid, number))["report"]["status"] == "pending"  # its server is alive
            other.send_signal(signal.SIGKILL)
            other.wait(timeout=10)
        finally:
            other.kill()
            other.wait()
        detail = await _report(client, sid, number)  # read at once, before any heartbeat
        report = detail["report"]
        assert (report["status"], report.get("failure")) == ("error", "interrupted"), report
        assert "server stopped while this version was being evaluated" in report["message"]
        # Nothing recorded is lost: the session, version 0 and the source of the version cut off.
        assert detail["source"] == "// mine"
        history = (await client.call_tool("history", {"session_id": sid})).structured_content
        assert [(r["version"], r["status"]) for r in history["rows"]] == [(0, "compiled"), (number, "error")]
        listed = (await client.call_tool("list_sessions", {})).structured_content["sessions"]
        assert [(s["session_id"], s["label"]) for s in listed] == [(sid, "shared")]
        assert service.store.version(sid, 0).status == "compiled" and service.store.session(sid).head == 0


@pytest.mark.anyio
async def test_a_lease_that_lapsed_gives_its_pending_versions_up(make_client, settings, monkeypatch) -> None:
    """A server on another host cannot be checked by pid: its versions wait out its lease, then the heartbeat of a
    live server takes them over, read or not."""
    from peak_mcp.loop import service as service_module
    from peak_mcp.store.lease import LEASE_S

    monkeypatch.setattr(service_module, "HEARTBEAT_S", 0.1)
    async with make_client() as (client, service):
        started = await client.call_tool("start_session", {"backend": "cuda", "sizes": {"M": 16, "N": 16, "K": 16}})
        sid = started.structured_content["session_id"]
        db = sqlite3.connect(settings.database)
        now = time.time()
        db.executemany("INSERT INTO servers (id, pid, host, started, created_at, heartbeat) VALUES (?, 1, "
                       "'elsewhere', '', ?, ?)", [("lapsed", now - 600, now - LEASE_S - 1), ("live", now, now)])
        db.commit()
        db.close()
        numbers = {owner: service.store.add_version(sid, parent=0, origin="submit", transformation=None,
                                                    source=f"// {owner}", status="pending", owner=owner)
                   for owner in ("lapsed", "live")}
        db = sqlite3.connect(settings.database)
        deadline = time.monotonic() + 10
        while db.execute("SELECT status FROM versions WHERE owner = 'lapsed'").fetchone()[0] == "pending":
            assert time.monotonic() < deadline, "no heartbeat took the lapsed lease's version over"
            await anyio.sleep(0.05)
        assert {row[0] for row in db.execute("SELECT id FROM servers")} == {"live", service.store.server_id}
        db.close()
        assert (await _report(client, sid, numbers["lapsed"]))["report"]["failure"] == "interrupted"
        assert (await _report(client, sid, numbers["live"]))["report"]["status"] == "pending"


@needs_vulkan
@pytest.mark.anyio
async def test_a_server_killed_mid_evaluation_leaves_nothing_pending_beside_a_survivor(make_client,
                                                                                        settings) -> None:
    """The same with `peak-mcp serve` itself, killed while its worker runs a kernel that never ends."""
    async with make_client() as (client, service):
        server = subprocess.Popen([sys.executable, "-m", "peak_mcp", "--data-dir", str(settings.data_dir), "serve"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  env={**os.environ, "PYTHONPATH": PYTHONPATH, "PEAK_MCP_BENCH_SECONDS": "0.1"})
        replies: queue.Queue[dict] = queue.Queue()
        threading.Thread(target=lambda: [replies.put(json.loads(line)) for line in server.stdout], daemon=True).start()

        def send(message: dict) -> None:
            server.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
            server.stdin.flush()

        def answer(request_id: int) -> dict:
            while (reply := replies.get(timeout=180)).get("id") != request_id:
                pass
            return reply

        try:
            send({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                              "clientInfo": {"name": "raw", "version": "0"}}})
            answer(1)
            send({"method": "notifications/initialized"})
            send({"id": 2, "method": "tools/call", "params": {"name": "start_session", "arguments": {
                "backend": "hlsl", "sizes": {"M": 64, "N": 64, "K": 64}}}})
            sid = answer(2)["result"]["structuredContent"]["session_id"]
            send({"id": 3, "method": "tools/call", "params": {"name": "submit_kernel", "arguments": {
                "session_id": sid, "source": HANG}}})
            deadline = time.monotonic() + 60
            while len(service.store.versions(sid)) < 2:
                assert time.monotonic() < deadline, "the submission was never recorded"
                await anyio.sleep(0.05)
            assert service.store.version(sid, 1).status == "pending"
            server.send_signal(signal.SIGKILL)
            server.wait(timeout=10)
        finally:
            server.kill()
            server.wait()
        detail = await _report(client, sid, 1)
        assert (detail["report"]["status"], detail["report"].get("failure")) == ("error", "interrupted")
        assert detail["source"] == HANG
        v0 = await _report(client, sid, 0)
        assert v0["report"]["status"] == "benchmarked" and v0["report"]["head"] == 0


@needs_vulkan
def test_cancel_token_stops_a_running_job_and_restarts_the_worker(settings: Settings) -> None:
    service = PeakService(settings)
    try:
        info = service.start_session("matmul", "hlsl", "f32", {"M": 64, "N": 64, "K": 64})
        session = service.store.session(info.session_id)
        cancel = threading.Event()
        threading.Timer(1.5, cancel.set).start()
        started = time.monotonic()
        from peak_mcp.runner.pool import cancellation

        with cancellation(cancel):
            report = service.submit_kernel(session.id, HANG)
        assert time.monotonic() - started < 10
        assert (report.status, report.failure) == ("error", "cancelled"), report.message
        assert service.pool.restarts == 1
    finally:
        service.close()


@needs_vulkan
@pytest.mark.anyio
async def test_a_cancelled_mcp_call_cancels_its_job(make_client, settings) -> None:
    async with make_client() as (client, service):
        started = await client.call_tool("start_session", {"backend": "hlsl", "sizes": {"M": 64, "N": 64, "K": 64}})
        sid = started.structured_content["session_id"]
        with anyio.move_on_after(2):
            await client.call_tool("submit_kernel", {"session_id": sid, "source": HANG})
            pytest.fail("the hanging kernel returned")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            versions = service.store.versions(sid)
            if len(versions) == 2 and versions[1].status != "pending":
                break
            await anyio.sleep(0.2)
        assert (versions[1].status, versions[1].failure) == ("error", "cancelled"), versions[1].message
        assert time.monotonic() < deadline  # well before the 30 s fence timeout


def test_a_malformed_job_is_refused_by_the_worker_with_its_field_named() -> None:
    """Jobs are typed records (runner/messages.py); the worker validates each one before running it. The pool only
    sends valid ones, so the job goes to a worker process directly, as one raw JSON line."""
    read_fd, write_fd = os.pipe()
    worker = subprocess.Popen([sys.executable, "-m", "peak_mcp.runner.worker", "--backend", "cuda", "--device", "-1",
                               "--result-fd", str(write_fd)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              pass_fds=(write_fd,), cwd=ROOT, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    os.close(write_fd)
    replies = os.fdopen(read_fd, "rb")
    assert worker.stdin is not None

    def send(job: dict) -> Done | Failed:
        worker.stdin.write(json.dumps(job).encode() + b"\n")
        worker.stdin.flush()
        while not isinstance(reply := parse_reply(replies.readline()), Done | Failed):
            pass
        return reply

    try:
        assert isinstance(parse_reply(replies.readline()), Ready)
        refused = send({"id": 1, "type": "evaluate", "problem": "matmul", "dtype": "f32", "sizes": {"M": "many"},
                        "stepz": ["compile"]})
        assert isinstance(refused, Failed) and refused.id == 1 and not refused.fatal
        assert "malformed job" in refused.error and "sizes" in refused.error and "stepz" in refused.error
        # The worker is still there for the next job.
        done = send({"id": 2, **NO_OP.model_dump(mode="json"), "steps": ["baseline"]})
        assert isinstance(done, Done) and done.id == 2 and isinstance(done.result, EvaluateResult)
        assert done.result.baseline is not None
    finally:
        worker.kill()
        worker.wait(timeout=30)
        replies.close()
