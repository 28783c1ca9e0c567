"""softmax, rmsnorm and row_sum (problem files), and an operator's own problem files, through a real MCP client.

On a Vulkan device (lavapipe in CI) each problem runs the loop at 64 x 100: start_session (the naive kernel passes
at the session's sizes and at the sampled ones), hostile kernels named by their failure (tests/hostile/<problem>/,
manifest entries with `problem:`), get_version, history and a tune over one parameter. Without one, the parts that
need no device still run: list_problems, bad problem files, and which processes import a problem file.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from peak_mcp.api.responses import whole_answer
from peak_mcp.core.config import Settings
from tests.conftest import has_device
from tests.hostile.harness import describe, judge, load_manifest, tagged

pytestmark = pytest.mark.anyio
VULKAN = pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
SIZES = {"ROWS": 64, "COLS": 100}
PROBLEMS = ("softmax", "rmsnorm", "row_sum")
TUNED = {  # one parameter: the threads of a group that reduces one row
    "softmax": "softmax/group_per_row.hlsl", "rmsnorm": "rmsnorm/group_per_row.hlsl",
    "row_sum": "row_sum/group_per_row.hlsl"}
VARIANTS = Path(__file__).resolve().parent.parent / "tools" / "data" / "problems"
SCALE2 = '''
"""Scale: y = 2 x."""
import os

NAME = "{name}"
SIZES = {{"N": 4096}}
INPUTS = {{"x": ("N",)}}
OUTPUTS = {{"y": ("N",)}}
NAIVE = {{"hlsl": """// peak: entry=main groups=(cdiv(N, 64), 1, 1)
struct Params {{ uint N; }};
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<T> x;
[[vk::binding(1)]] RWStructuredBuffer<T> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {{ if (id.x < p.N) y[id.x] = from_f32(2.0 * to_f32(x[id.x])); }}
"""}}
{extra}

def reference(x):
    {body}
'''
MARKER = '''
_markers = os.environ.get("PEAK_TEST_MARKERS")
if _markers:
    open(os.path.join(_markers, f"imported-by-{os.getpid()}"), "w").close()
'''


def write(folder: Path, stem: str, name: str, extra: str = "", body: str = "return 2 * x") -> Path:
    path = folder / f"{stem}.py"
    path.write_text(textwrap.dedent(SCALE2.format(name=name, extra=extra, body=body)).lstrip())
    return path


async def call(client: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return whole_answer(tool, result)  # the long parts (source, ABI, ...) back from the text


async def test_list_problems_shows_each_problem_with_its_abi_per_backend(make_client) -> None:
    async with make_client() as (client, _):
        listed = await call(client, "list_problems", {})
    problems = {p["name"]: p for p in listed["problems"]}
    assert {"matmul", *PROBLEMS} <= set(problems) and not listed.get("errors")
    softmax = problems["softmax"]
    assert softmax["sizes"] == ["ROWS", "COLS"] and softmax["default_sizes"] == {"ROWS": 8192, "COLS": 8192}
    assert softmax["source"] == "<peak-mcp>/problems/builtin/softmax.py"  # a label, not this host's path
    assert softmax["dtypes_by_backend"]["hlsl"] == ["f32", "f16"] and "abi" not in softmax  # one problem's ABI:
    assert "annotation" not in softmax
    async with make_client() as (client, _):  # list_problems(problem=...)
        problems = {name: (await call(client, "list_problems", {"problem": name}))["problems"][0]
                    for name in ("softmax", "rmsnorm", "row_sum")}
        text = (await client.call_tool("list_problems", {"problem": "matmul"})).content[0].text
    # An agent wrote `groups=(M / 16, ...)` from the ABI's "groups=(gx, gy, gz)" and was refused: how the values
    # are written is said once, beside the ABIs
    assert text.count("`/` is refused (write // or cdiv)") == 1 and "\n\nAnnotation:\n" in text
    assert "cdiv/min/max" in problems["softmax"]["annotation"]
    softmax = problems["softmax"]
    assert 'void <entry>(const float* x, float* y, int ROWS, int COLS)' in softmax["abi"]["cuda"]
    assert 'void <entry>(const float* x, float* y, int ROWS, int COLS)' in softmax["abi"]["hip"]
    assert 'void <entry>(const float* x, const float* w, float* y, int ROWS, int COLS)' in \
        problems["rmsnorm"]["abi"]["cuda"]
    assert "[[vk::binding(1)]] y (float, ROWS, read-write)" in problems["row_sum"]["abi"]["hlsl"]
    assert "[[vk::binding(2)]] y (float, ROWS×COLS, read-write)" in problems["rmsnorm"]["abi"]["hlsl"]


async def test_list_problems_names_a_long_problem_whole(make_client, settings, tmp_path: Path) -> None:
    """Agent46 #20: a name past 40 characters was cut without a word, and the agent passes the name back to
    start_session. A problem file's NAME and a KernelBench file's stem-made name are listed whole, and found by it."""
    folder = tmp_path / "problems"
    folder.mkdir()
    declared = "scale_by_two_over_a_vector_with_a_long_descriptive_name"
    write(folder, "long_name", declared)
    kernelbench = "kb_42_elementwise_relu_with_a_long_kernelbench_file_name"  # KernelBench names files by what they do
    shutil.copy(Path(__file__).resolve().parent / "data" / "kernelbench" / "np_relu.py",
                folder / "42_Elementwise_ReLU_with_a_long_KernelBench_file_name.py")
    settings.problem_dirs = [folder]
    async with make_client() as (client, _):
        answer = await client.call_tool("list_problems", {})
        listed = whole_answer("list_problems", answer)
        assert not listed.get("errors"), listed["errors"]
        names = {p["name"] for p in listed["problems"]}
        assert {declared, kernelbench} <= names and min(len(declared), len(kernelbench)) > 40
        text = answer.content[0].text
        assert f"\n{declared}: " in text and f"\n{kernelbench}: " in text  # the text's lines name them whole too
        for name in (declared, kernelbench):
            assert (await call(client, "list_problems", {"problem": name}))["problems"][0]["name"] == name


@VULKAN
@pytest.mark.parametrize("problem", PROBLEMS)
async def test_a_problem_session_on_vulkan(make_client, problem: str) -> None:
    # Four hostile kernels named by their failure; the problem's whole corpus runs in tests/test_hostile_hlsl.py.
    core = {"unwritten_last_row", "oob_read_past_row", "mutate_inputs", "lose_precision_half_accumulate"}
    entries = [e for e in load_manifest("hlsl", problem) if e.cls in core]
    assert {e.cls for e in entries} == core
    async with make_client() as (client, _):
        session = await call(client, "start_session", {"problem": problem, "backend": "hlsl", "dtype": "f32",
                                                       "sizes": SIZES})
        sid, v0 = session["session_id"], session["version_0"]
        assert v0["status"] == "benchmarked", v0["message"]
        assert v0["generality"]["passed"] is True and len(v0["generality"]["sizes_checked"]) >= 8
        assert "names no vendor library" in session["baseline"]["reason"]
        for entry in entries:
            expect = entry.expect(SIZES)
            report = await call(client, "submit_kernel", {"session_id": sid, "parent": 0,
                                                          "source": tagged(entry.source(), entry.file)})
            problems = judge(expect, report, 0)
            assert not problems, f"{entry.file}: expected {describe(expect)}: {problems}: {report['message'][:500]}"
        version = await call(client, "get_version", {"session_id": sid, "version": 0})
        assert "from_f32" in version["source"] and version["report"]["status"] == "benchmarked"
        tunable = (VARIANTS / TUNED[problem]).read_text().replace("#define THREADS 64\n", "").replace(
            "// peak: entry=main", "// peak: params THREADS=[64, 32]\n// peak: entry=main")
        from peak_mcp.problems.declared import prelude

        submitted = await call(client, "submit_kernel", {"session_id": sid, "source": prelude("hlsl", "f32") + tunable})
        assert submitted["status"] == "benchmarked", submitted["message"]
        tuned = await call(client, "tune", {"session_id": sid, "version": submitted["version"], "max_configs": 2})
        assert tuned["tried"] == 2 and tuned["best"] is not None, tuned
        history = await call(client, "history", {"session_id": sid})
        assert history["problem"] == problem and len(history["rows"]) == len(entries) + 2
        assert history["rows"][0]["status"] == "benchmarked" and history["head"] == submitted["version"]


@VULKAN
async def test_an_operator_problem_file_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "problems"
    folder.mkdir()
    write(folder, "scale", "scale2")
    write(folder, "late", "late_failure", body="if x.size > 64:\n        raise ValueError('only tiny inputs')\n"
                                                 "    return 2 * x")
    write(folder, "stuck", "late_hang", extra="import time\n", body="if x.size > 64:\n        time.sleep(3600)\n"
                                                                      "    return 2 * x")
    monkeypatch.setenv("PEAK_MCP_PROBLEMS", str(folder))
    settings = Settings(data_dir=tmp_path / "data")
    settings.benchmark_budget_s = 0.2
    settings.inactivity_timeout_s = 10
    from mcp import Client

    from peak_mcp.api.app import build

    server, service = build(settings)
    try:
        async with Client(server) as client:
            listed = await call(client, "list_problems", {})
            scale = next(p for p in listed["problems"] if p["name"] == "scale2")
            assert scale["source"] == str(folder / "scale.py") and scale["naive"] == ["hlsl"]
            session = await call(client, "start_session", {"problem": "scale2", "backend": "hlsl",
                                                           "sizes": {"N": 1000}})
            assert session["version_0"]["status"] == "benchmarked", session["version_0"]["message"]
            # A reference that fails at the session's sizes (not at the small ones the file was tried at): the
            # problem file is named and blamed, not the kernel.
            late = await call(client, "start_session", {"problem": "late_failure", "backend": "hlsl",
                                                        "sizes": {"N": 1000}})
            v0 = late["version_0"]
            assert v0["status"] == "error" and v0["failure"] == "problem_error", v0
            assert f"{folder / 'late.py'}:" in v0["message"] and "not the kernel" in v0["message"]
            assert "only tiny inputs" in v0["message"]
            # One that never returns there: stopped, and the file is blamed, not the kernel.
            stuck = (await call(client, "start_session", {"problem": "late_hang", "backend": "hlsl",
                                                          "sizes": {"N": 1000}}))["version_0"]
            assert stuck["status"] == "error" and stuck["failure"] == "problem_error", stuck
            assert "not the kernel" in stuck["message"] and str(folder / "stuck.py") in stuck["message"]
    finally:
        service.close()


async def test_bad_problem_files_leave_the_server_up(make_client, settings, tmp_path: Path) -> None:
    folder = tmp_path / "problems"
    folder.mkdir()
    (folder / "broken.py").write_text('NAME = "broken"\nSIZES = {"N": 4\n')
    (folder / "raising.py").write_text('NAME = "raising"\nraise ImportError("needs a license")\n')
    (folder / "hanging.py").write_text('import time\nNAME = "hanging"\ntime.sleep(3600)\n')
    write(folder, "shape", "shape", body="return x[:-1]")
    (folder / "huge.py").write_text('NAME = "huge"\nSIZES = {"N": 10**12}\nINPUTS = {"x": ("N",)}\n'
                                    'OUTPUTS = {"y": ("N",)}\n\n\ndef reference(x):\n    return x\n')
    write(folder, "clash_a", "clash")
    write(folder, "clash_b", "clash")
    settings.problem_dirs = [folder]
    async with make_client() as (client, service):
        service.problems.timeout_s = 5
        listed = await call(client, "list_problems", {})
        errors = {Path(e["file"]).stem: e for e in listed["errors"]}
        assert errors["broken"]["line"] == 2 and "syntax error" in errors["broken"]["message"]
        assert errors["raising"]["line"] == 2 and "ImportError: needs a license" in errors["raising"]["message"]
        assert "took more than 5 s" in errors["hanging"]["message"]
        assert "returned shape (4,) for output y" in errors["shape"]["message"] and errors["shape"]["line"]
        assert "over the limit" in errors["huge"]["message"] and errors["huge"]["line"] == 2
        assert "'clash' is already declared by" in errors["clash_b"]["message"]
        assert all(e["file"].startswith(str(folder)) for e in listed["errors"])
        names = {p["name"] for p in listed["problems"]}
        assert {"matmul", "softmax", "clash"} <= names and not names & {"broken", "raising", "shape", "huge"}
        failed = await client.call_tool("start_session", {"problem": "raising", "backend": "hlsl"})
        assert failed.is_error and f"{folder / 'raising.py'}:2" in failed.content[0].text
        again = await call(client, "list_problems", {})  # still serving, nothing read again
        assert len(again["problems"]) == len(listed["problems"])


@VULKAN
async def test_only_describe_and_problem_host_processes_import_a_problem_file(make_client, settings, tmp_path: Path,
                                                                              monkeypatch) -> None:
    """A problem file that leaves a marker named by its importer's pid: after reading it and a session, markers
    exist, from the describe subprocess and from the file's problem host, and none from this process (the server)
    or from the device worker, which serves every session."""
    folder, markers = tmp_path / "problems", tmp_path / "markers"
    folder.mkdir()
    markers.mkdir()
    write(folder, "marked", "marked", extra=MARKER)
    monkeypatch.setenv("PEAK_TEST_MARKERS", str(markers))
    monkeypatch.setenv("PEAK_MCP_CHILD_ENV", "PEAK_TEST_MARKERS")  # children get allowlisted variables only
    settings.problem_dirs = [folder]
    settings.sandbox = False  # the markers are written outside the processes' own folders
    async with make_client() as (client, service):
        listed = await call(client, "list_problems", {})
        assert "marked" in {p["name"] for p in listed["problems"]}, listed.get("errors")
        read = {int(p.name.rsplit("-", 1)[1]) for p in markers.iterdir()}
        assert read and os.getpid() not in read  # the describe process
        session = await call(client, "start_session", {"problem": "marked", "backend": "hlsl", "sizes": {"N": 100}})
        assert session["version_0"]["status"] == "benchmarked", session["version_0"]["message"]
        worker = service.pool._workers[("hlsl", session["device"]["index"])]
        hosts = {host.process.pid for host in worker.hosts.values()}
        pids = {int(p.name.rsplit("-", 1)[1]) for p in markers.iterdir()}
        assert hosts and hosts <= pids
        assert worker.process.pid not in pids and os.getpid() not in pids


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


@VULKAN
async def test_a_problem_host_is_stopped_between_the_jobs_that_need_it(make_client, settings, tmp_path: Path) -> None:
    """A file's code that keeps running in the background would disturb the timing of other sessions' kernels: once
    a job is done, its problem host's processes are stopped; the next job that needs the host resumes it."""
    folder = tmp_path / "problems"
    folder.mkdir()
    write(folder, "scaled", "scaled")
    settings.problem_dirs = [folder]
    async with make_client() as (client, service):
        session = await call(client, "start_session", {"problem": "scaled", "backend": "hlsl", "sizes": {"N": 100}})
        assert session["version_0"]["status"] == "benchmarked", session["version_0"]["message"]
        worker = service.pool._workers[("hlsl", session["device"]["index"])]
        (host,) = worker.hosts.values()
        members = host.members()
        assert members and all(_state(pid) == "T" for pid in members)
        again = await call(client, "submit_kernel", {"session_id": session["session_id"],
                                                     "source": service.store.version(session["session_id"], 0).source})
        assert again["status"] == "benchmarked", again["message"]
        assert all(_state(pid) == "T" for pid in host.members())
