"""Worker replies are typed records (runner/replies.py) and a version's JSON columns are phases.py's records: the
pool parses every line, a reply that does not match is a clear internal error that leaves the server serving, and
what is stored reads back and dumps as the same JSON, rows from earlier releases included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from stand_in_worker import FINDING  # tests/ is on sys.path (no __init__.py: pytest's rootdir import)

from peak_mcp.api.responses import whole_answer
from peak_mcp.api.server import create_server
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from peak_mcp.core.config import Settings
from peak_mcp.core.launch import LaunchSpec
from peak_mcp.evaluation.phases import Baseline, CompileInfo, Generality, Timing, Verdict
from peak_mcp.loop.service import PeakService
from peak_mcp.runner.messages import EvaluateJob
from peak_mcp.runner.pool import DevicePool, JobFailed
from peak_mcp.runner.replies import (
    Done,
    EvaluateResult,
    Failed,
    Fatal,
    MalformedReply,
    ProgressNote,
    Ready,
    parse_reply,
)
from peak_mcp.store.records import Outcome, Status, VersionRow
from tests.conftest import stand_in_python

DEVICE = '{"backend": "cuda", "index": -1, "name": "x", "properties": {}}'
CUDA_ONLY = {"cuda": {"backend": "cuda", "devices": [], "compiler": {"available": True}, "missing": []}}
H100 = {"backend": "cuda", "index": 0, "name": "NVIDIA H100 80GB HBM3",
        "properties": {"compute_capability": "9.0", "sm_count": 132}}
CUDA_GPU = {"cuda": {**CUDA_ONLY["cuda"], "devices": [H100]}}


def test_each_event_parses_into_its_record() -> None:
    assert isinstance(parse_reply(f'{{"event": "ready", "device": {DEVICE}}}'.encode()), Ready)
    assert isinstance(parse_reply(b'{"event": "fatal", "error": "no device"}'), Fatal)
    assert parse_reply(b'{"id": 3, "event": "progress", "message": "compile"}') == ProgressNote(id=3, message="compile")
    failed = parse_reply(b'{"id": 3, "event": "result", "ok": false, "kind": "kernel_fault", "error": "x", '
                         b'"fatal": true}')
    assert isinstance(failed, Failed) and failed.fatal and failed.kind == "kernel_fault"
    done = parse_reply(f'{{"id": 3, "event": "result", "ok": true, "result": {{"type": "evaluate", "device": {DEVICE},'
                       f' "compile": {{"ok": true, "log": "", "seconds": 0.5}}}}}}'.encode())
    assert isinstance(done, Done) and isinstance(done.result, EvaluateResult)
    assert done.result.compile and done.result.compile.ok and done.result.validation is None


@pytest.mark.parametrize(("line", "named"), [
    (f'{{"id": 1, "event": "result", "ok": true, "result": {{"type": "evaluate", "device": {DEVICE}, '
     f'"validation": {{"passed": "perhaps"}}}}}}', "result.evaluate.validation.passed"),
    ('{"id": 1, "event": "result", "ok": true, "result": {"type": "painting"}}', "painting"),
    ('{"id": 1, "event": "result", "ok": false}', "kind"),
    ('{"event": "hello"}', "hello"),
    ("not json", "Invalid JSON"),
])
def test_a_malformed_reply_names_what_is_wrong(line: str, named: str) -> None:
    with pytest.raises(MalformedReply, match=named.replace(".", r"\.")):
        parse_reply(line.encode())


def _stand_in_python(tmp_path: Path) -> str:
    return stand_in_python(tmp_path, "stand_in_worker.py")


def _job(source: str) -> EvaluateJob:
    return EvaluateJob(problem="matmul", dtype="f32", sizes={"M": 8, "N": 8, "K": 8}, source=source,
                       spec=LaunchSpec(entry="k", line=1))


def test_the_pool_reports_a_malformed_reply_as_an_internal_error_and_restarts_the_worker(tmp_path: Path) -> None:
    pool = DevicePool(python=_stand_in_python(tmp_path))
    try:
        with pytest.raises(JobFailed) as failed:
            pool.run("cuda", -1, _job("// MALFORMED"), inactivity_s=30, total_s=30)
        assert failed.value.kind == "internal" and pool.restarts == 1
        message = str(failed.value)
        assert message.startswith("internal error: the worker's reply") and "does not match" in message
        assert "result.evaluate.compile.seconds" in message and "'soon'" in message
        assert "bug in peak-mcp" in (failed.value.hint or "")
        after = pool.run("cuda", -1, _job("// fine"), inactivity_s=30, total_s=30)  # a fresh worker serves
        assert isinstance(after, EvaluateResult) and after.compile and after.compile.seconds == 0.01
    finally:
        pool.close()


@pytest.mark.anyio
async def test_a_malformed_reply_fails_the_submission_not_the_server(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    pool = DevicePool(python=_stand_in_python(tmp_path), lock_dir=settings.data_dir / "locks")
    service = PeakService(settings, pool=pool, probe=lambda: CUDA_ONLY)
    server = create_server(service, Catalog.load(builtin_transformations_dir(), []))
    try:
        async with Client(server) as client:
            session = (await client.call_tool("start_session", {"backend": "cuda"})).structured_content
            assert session["version_0"]["status"] == "compiled"
            naive = service.store.version(session["session_id"], 0).source
            bad = await client.call_tool("submit_kernel", {"session_id": session["session_id"],
                                                           "source": naive + "// MALFORMED\n"})
            assert not bad.is_error  # a report, not a failed call
            report = bad.structured_content
            assert (report["status"], report["failure"]) == ("error", "internal"), report
            assert "does not match what this server reads" in report["message"]
            assert "compile.seconds" in report["message"]
            good = (await client.call_tool("submit_kernel", {"session_id": session["session_id"],
                                                             "source": naive + "// fine\n"})).structured_content
            assert good["status"] == "compiled" and pool.restarts == 1
    finally:
        service.close()


@pytest.mark.anyio
async def test_a_sanitizer_finding_fails_the_version_not_the_server(tmp_path: Path) -> None:
    """On an H100, compute-sanitizer caught a write 1.2 MB before the output buffer in the generality job, and the
    service then crashed turning the finding into the version's verdict (a dict read as a record): the client got
    a tool error and the version stayed pending. The stand-in worker of a GPU (device 0) replays that job."""
    settings = Settings(data_dir=tmp_path / "data", sanitizer=True)
    pool = DevicePool(python=_stand_in_python(tmp_path), lock_dir=settings.data_dir / "locks")
    service = PeakService(settings, pool=pool, probe=lambda: CUDA_GPU)
    server = create_server(service, Catalog.load(builtin_transformations_dir(), []))
    try:
        async with Client(server) as client:
            started = await client.call_tool("start_session", {"backend": "cuda"})
            assert not started.is_error, started.content
            session = started.structured_content
            sid = session["session_id"]
            assert session["version_0"]["status"] == "benchmarked", session["version_0"]
            assert session["head"] == 0 and session["baseline"]["available"] is False
            assert session["version_0"]["validation"]["sanitizer"]["passed"] is True  # clean: the sanitizer ran
            naive = service.store.version(sid, 0).source

            hostile = await client.call_tool("submit_kernel", {"session_id": sid,
                                                               "source": naive + "// SANITIZER_FINDING\n"})
            assert not hostile.is_error, hostile.content  # a report, not "Error executing tool submit_kernel"
            report = hostile.structured_content
            assert (report["version"], report["status"], report["failure"]) == (1, "failed", "sanitizer_memcheck")
            sanitizer = report["validation"]["sanitizer"]
            assert sanitizer["passed"] is False and min(sanitizer["sizes"].values()) >= 16
            assert sanitizer["failures"] == [{"check": "sanitizer_memcheck", "message": FINDING}]
            assert report["message"] == f"{FINDING} (at {sanitizer['sizes']})"
            assert "Invalid __global__ write of size 4" in report["message"]
            assert "1,200,000 bytes before the nearest allocation" in report["message"]
            assert report["generality"]["passed"] is True  # the generality itself passed: the sanitizer fails it
            assert report["head"] == 0

            history = (await client.call_tool("history", {"session_id": sid})).structured_content
            assert history["head"] == 0
            rows = {row["version"]: row for row in history["rows"]}
            assert (rows[1]["status"], rows[1]["failure"], rows[1]["head"]) == ("failed", "sanitizer_memcheck", False)
            detail = whole_answer("get_version", await client.call_tool("get_version", {"session_id": sid,
                                                                                         "version": 1}))
            assert detail["report"]["status"] == "failed" and detail["report"]["message"] == report["message"]
            assert "SANITIZER_FINDING" in detail["source"]
            assert service.store.version(sid, 1).status == "failed"  # recorded, not left pending

            good = (await client.call_tool("submit_kernel", {"session_id": sid,
                                                             "source": naive + "// fine\n"})).structured_content
            assert (good["version"], good["status"], good["head"]) == (2, "benchmarked", 2), good
            assert good["validation"]["sanitizer"]["passed"] is True and pool.restarts == 0
    finally:
        service.close()


STORED: list[tuple[type[Any], dict[str, Any]]] = [
    (Verdict, {"passed": True, "check": None, "trials": 3, "message": "all 3 trials passed", "rel_l2_error": 1e-7,
               "max_error_over_bound": 0.01, "checked_elements": 64, "total_elements": 64, "seconds": 0.2}),
    (Verdict, {"passed": False, "check": "out_of_bounds_write", "message": "12 bytes past the end", "buffer": "C",
               "side": "after", "offsets": [0, 4], "trials": 1}),
    (Verdict, {"passed": True, "check": None, "trials": 2, "message": "ok", "sanitizer": {
        "available": True, "passed": False, "sizes": {"M": 17, "N": 9, "K": 5}, "clean": ["racecheck"],
        "failures": [{"check": "sanitizer_memcheck", "message": "Invalid __global__ write"}],
        "unchecked": [{"tool": "initcheck", "message": "did not finish"}], "seconds": 3.0}}),
    (Timing, {"median_ms": 2.5}),  # the first release
    (Timing, {"reps": 40, "median_ms": 1.5, "min_ms": 1.4, "max_ms": 1.9, "mean_ms": 1.6, "cv": 0.05, "tflops": 2.0,
              "gbps": 10.0, "cold_cache": True, "wall_s": 0.1, "input_sets": 2,
              "recheck": {"passed": False, "check": "wrong_result", "input_set": 2, "message": "x"},
              "device_name": "llvmpipe", "seconds": 0.3, "params": {"BM": 64}}),
    (Generality, {"passed": False, "sizes_checked": [{"M": 7, "N": 9, "K": 5}],
                  "failures": [{"sizes": "M=7 N=9 K=5", "check": "timeout", "message": "hung"},
                               {"sizes": {"M": 7, "N": 9, "K": 5}, "check": "wrong_result", "message": "off"}],
                  "constraints": ["M % 8 == 0"], "seconds": 1.25}),
    (Generality, {"passed": None, "sizes_checked": [], "failures": [], "note": "unchecked"}),
    (Generality, {"seconds": 0.5}),  # the source did not compile at the generality job
    (Baseline, {"available": False, "reason": "no vendor library"}),
    (Baseline, {"available": True, "library": "numpy", "note": "warm", "reps": 3, "median_ms": 4.0,
                "cold_cache": False, "rel_l2_error": 1e-9}),
]


@pytest.mark.parametrize(("record", "stored"), STORED, ids=lambda x: x.__name__ if isinstance(x, type) else "")
def test_a_stored_record_reads_back_as_the_same_json(record: type[Any], stored: dict[str, Any]) -> None:
    assert record.model_validate(stored).model_dump(mode="json") == stored


def test_a_stored_version_row_keeps_its_columns() -> None:
    row = {"session_id": "s", "number": 1, "origin": "submit", "source": "x", "status": "failed",
           "created_at": 1.0, "compile": {"ok": True, "log": "", "resources": {"registers": 32}, "seconds": 0.1},
           "validation": STORED[1][1], "timing": STORED[4][1], "generality": STORED[5][1]}
    version = VersionRow.model_validate(row)
    assert version.median_ms == 1.5 and version.generality and version.generality.failures[0].check == "timeout"
    dumped = version.model_dump(mode="json")
    assert {k: dumped[k] for k in row} == row


def test_an_outcome_writes_only_the_fields_it_set() -> None:
    outcome = Outcome(status=Status.COMPILE_ERROR, failure="compile", message="compilation failed",
                      compile=CompileInfo(ok=False, log="kernel.cu(3): error", seconds=0.5))
    assert outcome.columns() == {"status": "compile_error", "failure": "compile", "message": "compilation failed",
                                 "compile": {"ok": False, "log": "kernel.cu(3): error", "seconds": 0.5}}
    # validation and timing are not written: they stay as stored
