"""define_problem over MCP: a problem file's text read confined and saved in the data directory, then a session
on it (lavapipe); bad sources (syntax error, raises, hangs) are errors that save nothing; over HTTP refused unless the
operator allows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from peak_mcp.api.responses import whole_answer
from tests.conftest import has_device

pytestmark = pytest.mark.anyio
VULKAN = pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
NEGATE = '''"""Negate: y = -x."""
NAME = "negate"
SIZES = {"N": 4096}
INPUTS = {"x": ("N",)}
OUTPUTS = {"y": ("N",)}


def reference(x):
    return -x
'''
KERNEL = """// peak: entry=main groups=(cdiv(N, 64), 1, 1)
struct Params { uint N; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) { if (id.x < p.N) y[id.x] = BODY; }
"""


async def call(client: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return whole_answer(tool, result)  # the long parts (source, ABI, ...) back from the text


async def refused(client: Any, args: dict[str, Any]) -> str:
    result = await client.call_tool("define_problem", args)
    assert result.is_error
    return result.content[0].text


@VULKAN
async def test_define_then_start_a_session_and_submit(make_client, settings) -> None:
    async with make_client() as (client, _):
        info = await call(client, "define_problem", {"source": NEGATE})
        assert info["name"] == "negate" and info["sizes"] == ["N"] and info["naive"] == []
        assert "[[vk::binding(1)]] y (float, N, read-write)" in info["abi"]["hlsl"]
        assert (settings.defined_problems / "negate.py").read_text() == NEGATE
        session = await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 1000}})
        assert session.get("head") is None and "Submit your first kernel" in session["brief"]
        good = await call(client, "submit_kernel", {"session_id": session["session_id"],
                                                    "source": KERNEL.replace("BODY", "-x[id.x]")})
        assert good["version"] == 0 and good["status"] == "benchmarked", good["message"]
        bad = await call(client, "submit_kernel", {"session_id": session["session_id"],
                                                   "source": KERNEL.replace("BODY", "x[id.x]")})
        assert bad["failure"] == "wrong_result"


async def test_bad_sources_are_errors_and_nothing_is_saved(make_client, settings) -> None:
    async with make_client() as (client, service):
        service.problems.timeout_s = 5
        text = await refused(client, {"source": NEGATE.replace('SIZES = {"N": 4096}', 'SIZES = {"N": 4096')})
        assert "line 3" in text and "syntax error" in text
        text = await refused(client, {"source": NEGATE.replace('INPUTS =', 'raise ValueError("nope")\nINPUTS =')})
        assert "line 4" in text and "ValueError: nope" in text
        text = await refused(client, {"source": "import time\n" + NEGATE.replace('INPUTS =',
                                                                                    'time.sleep(3600)\nINPUTS =')})
        assert "took more than 5 s" in text
        text = await refused(client, {"source": NEGATE.replace("return -x", "return x[:-1]")})
        assert "not saved" in text and "shape" in text
        assert "over" in await refused(client, {"source": "#" * (300 * 1024)})
        assert "needs the name argument" in await refused(client, {"source": "X = 1\n"})
    folder: Path = settings.defined_problems
    assert not folder.exists() or not list(folder.iterdir())


async def test_refused_over_http_unless_the_operator_allows_it(make_client, settings) -> None:
    async with make_client() as (client, service):
        service.http = True  # as `serve --http` sets it
        text = await refused(client, {"source": NEGATE})
        assert "off on this HTTP server" in text and "PEAK_MCP_ALLOW_DEFINE_PROBLEM" in text
        assert not settings.defined_problems.exists() or not list(settings.defined_problems.iterdir())
        settings.allow_define_problem = True
        assert (await call(client, "define_problem", {"source": NEGATE}))["name"] == "negate"


def test_the_setting_reads_from_the_environment(monkeypatch) -> None:
    from peak_mcp.core.config import Settings

    monkeypatch.setenv("PEAK_MCP_ALLOW_DEFINE_PROBLEM", "true")
    assert Settings().allow_define_problem is True


@VULKAN
async def test_a_reference_kernel_becomes_v0_and_is_validated(make_client) -> None:
    async with make_client() as (client, _):
        await call(client, "define_problem", {"source": NEGATE})
        mine = KERNEL.replace("BODY", "-x[id.x]")
        session = await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 1000},
                                                       "reference_kernel": mine})
        v0 = session["version_0"]
        assert v0["origin"] == "reference" and v0["status"] == "benchmarked" and session["head"] == 0, v0
        wrong = await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 1000},
                                                     "reference_kernel": KERNEL.replace("BODY", "x[id.x]")})
        assert wrong["version_0"]["failure"] == "wrong_result" and wrong.get("head") is None


@VULKAN
async def test_a_problem_defined_after_the_worker_started_is_readable_there(make_client, settings) -> None:
    """An agent's first define_problem came after a session had started the device worker: the worker, confined
    before <data dir>/problems existed, could not read the file ("Permission denied") until the server restarted."""
    async with make_client() as (client, _):
        first = await call(client, "start_session", {"problem": "softmax", "backend": "hlsl",
                                                     "sizes": {"ROWS": 8, "COLS": 16}})
        assert first["version_0"]["status"] == "benchmarked"
        await call(client, "define_problem", {"source": NEGATE})
        session = await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 1000}})
        good = await call(client, "submit_kernel", {"session_id": session["session_id"],
                                                    "source": KERNEL.replace("BODY", "-x[id.x]")})
        assert good["status"] == "benchmarked", good["message"]


LAYERNORM = '''"""Row layer norm without weights: y = (x - mean) / sqrt(var + 1e-5) along each row."""
NAME = "plain_layernorm"
SIZES = {"ROWS": 64, "COLS": 100}
INPUTS = {"x": ("ROWS", "COLS")}
OUTPUTS = {"y": ("ROWS", "COLS")}
SCALARS = ("ROWS", "COLS")
FLOPS = "8 * ROWS * COLS"
EXTRA


def reference(x):
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / (var + 1e-5) ** 0.5
'''
# One thread per row, sequential f32 sums: the naive kernel an agent writes first.
SEQUENTIAL = """// peak: entry=main groups=(cdiv(ROWS, 64), 1, 1)
struct Params { uint ROWS; uint COLS; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    if (id.x >= p.ROWS) return;
    uint base = id.x * p.COLS;
    float s = 0.0;
    for (uint c = 0; c < p.COLS; ++c) s += x[base + c];
    float mean = s / p.COLS;
    float v = 0.0;
    for (uint c = 0; c < p.COLS; ++c) { float d = x[base + c] - mean; v += d * d; }
    float inv = 1.0 / sqrt(v / p.COLS + 1e-5);
    for (uint c = 0; c < p.COLS; ++c) y[base + c] = (x[base + c] - mean) * inv;
}
"""


@VULKAN
@pytest.mark.parametrize("extra", ["", 'BATCH = "ROWS"', 'REDUCTION = "COLS"'])
async def test_a_sequential_row_reduction_is_within_the_default_bound_or_told_how_to_declare_it(make_client,
                                                                                                 extra) -> None:
    """An agent's correct naive layer norm (sequential f32 sums) was not_general at COLS=4101 and told to 'handle the
    edges': the default bound grows with the reduction's length where the file says it (BATCH or REDUCTION); where
    it cannot tell, the verdict says what to declare instead of blaming the edges alone."""
    async with make_client() as (client, _):
        await call(client, "define_problem", {"source": LAYERNORM.replace("EXTRA", extra)})
        session = await call(client, "start_session", {"problem": "plain_layernorm", "backend": "hlsl",
                                                       "sizes": {"ROWS": 64, "COLS": 100}})
        report = await call(client, "submit_kernel", {"session_id": session["session_id"], "source": SEQUENTIAL})
        if extra:
            assert report["status"] == "benchmarked" and report["generality"]["passed"], report["message"]
        elif report["status"] == "not_general":
            assert "REDUCTION" in report["message"] and "error_scale" in report["message"]
        else:
            assert report["status"] == "benchmarked", report["message"]


@VULKAN
async def test_a_problem_redefined_under_a_live_session_is_said_in_its_next_versions(make_client) -> None:
    """An agent redefined its problem (adding an error scale) and the same kernel that had failed passed in the same
    session, with nothing said."""
    async with make_client() as (client, _):
        await call(client, "define_problem", {"source": NEGATE})
        session = await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 1000}})
        sid, kernel = session["session_id"], KERNEL.replace("BODY", "-x[id.x]")
        first = await call(client, "submit_kernel", {"session_id": sid, "source": kernel})
        assert "problem file changed" not in first["message"]
        await call(client, "define_problem", {"source": NEGATE.replace("Negate: y = -x.", "Negate (redefined).")})
        second = await call(client, "submit_kernel", {"session_id": sid, "source": kernel})
        assert second["status"] == "benchmarked" and "the problem file changed since this session started" in \
            second["message"]


async def test_define_problem_answers_a_summary_not_raw_json(make_client) -> None:
    async with make_client() as (client, _):
        result = await client.call_tool("define_problem", {"source": NEGATE})
        text = result.content[0].text
        assert text.startswith("defined negate: Negate: y = -x.") and not text.lstrip().startswith("{")
        assert "first submission is its v0" in text and "\n\nABI hlsl f32:\n" in text
        # each ABI once in each view: in the text under its header, and in the record
        abi = result.structured_content["abi"]["hlsl"]
        assert text.count(abi) == 1 and json.dumps(result.structured_content).count("[[vk::binding(0)]]") == 1


KB_RELU = (Path(__file__).resolve().parent / "data" / "kernelbench" / "np_relu.py").read_text()


async def test_a_shipped_or_built_in_name_cannot_be_defined(make_client, settings) -> None:
    """A defined file that declared `softmax` replaced the shipped softmax for every client of the data dir."""
    async with make_client() as (client, _):
        for taken in ("softmax", "attention_causal", "matmul"):
            text = await refused(client, {"source": NEGATE.replace('"negate"', f'"{taken}"')})
            assert f"the name {taken!r} is taken by" in text and "choose a different NAME" in text, text
        text = await refused(client, {"source": KB_RELU, "name": "row_sum"})  # KernelBench, named by the argument
        assert "'row_sum' is taken by the shipped problem row_sum" in text
        assert not settings.defined_problems.exists() or not list(settings.defined_problems.iterdir())
        listed = await call(client, "list_problems", {})
        softmax = next(p for p in listed["problems"] if p["name"] == "softmax")
        assert "/problems/builtin/softmax.py" in softmax["source"]


async def test_a_folder_file_with_a_shipped_name_is_left_out(make_client, settings, tmp_path: Path) -> None:
    """Operator folders and files already in the data dir alike: a shipped or built-in name is an error on the
    file, and the shipped problem is served; between defined and operator files precedence is as before."""
    folder = tmp_path / "operator"
    folder.mkdir()
    (folder / "softmax.py").write_text(NEGATE.replace('"negate"', '"softmax"'))
    (folder / "kb.py").write_text(KB_RELU)  # a KernelBench file is named after its file: kb
    (folder / "negate.py").write_text(NEGATE.replace("Negate: y = -x.", "Negate (operator)."))
    settings.defined_problems.mkdir(parents=True)
    (settings.defined_problems / "matmul.py").write_text(NEGATE.replace('"negate"', '"matmul"'))
    (settings.defined_problems / "negate.py").write_text(NEGATE)
    (folder / "conv2d.py").write_text(KB_RELU)
    settings.problem_dirs = [folder]
    async with make_client() as (client, _):
        listed = await call(client, "list_problems", {})
        errors = {e["file"]: e for e in listed["errors"]}
        softmax = errors[str(folder / "softmax.py")]
        assert softmax["level"] == "error" and softmax["line"] == 2, softmax
        assert "NAME 'softmax' is taken by the shipped problem softmax" in softmax["message"]
        assert "'conv2d' is taken by the shipped problem conv2d" in errors[str(folder / "conv2d.py")]["message"]
        assert str(settings.defined_problems / "matmul.py") not in errors  # a defined file's error: its client's
        problems = {p["name"]: p for p in listed["problems"]}
        assert problems["softmax"]["source"].endswith("/problems/builtin/softmax.py")
        assert problems["conv2d"]["source"].endswith("/problems/builtin/conv2d.py")
        assert problems["matmul"].get("source") in (None, "built-in")
        assert problems["kb"]["source"] == str(folder / "kb.py")
        assert problems["negate"]["source"] == str(settings.defined_problems / "negate.py")  # defined wins
        assert errors[str(folder / "negate.py")]["level"] == "warning"
        assert not any("builtin" in e["file"] for e in listed["errors"])  # no "replaced" note on a shipped file


async def test_a_server_that_refuses_define_problem_never_reads_defined_files(make_client, settings,
                                                                              tmp_path: Path) -> None:
    """Two servers on one data dir: one over stdio defined a problem; an HTTP server without
    PEAK_MCP_ALLOW_DEFINE_PROBLEM neither imports that file (not even confined) nor serves it."""
    markers = tmp_path / "markers"
    markers.mkdir()
    settings.sandbox = False  # the marker is written outside the describe process's own folders
    settings.defined_problems.mkdir(parents=True)
    (settings.defined_problems / "negate.py").write_text(NEGATE + f"\nopen({str(markers / 'read')!r}, 'w').close()\n")
    async with make_client() as (client, service):
        service.http = True  # as `serve --http` sets it
        listed = await call(client, "list_problems", {})
        assert "negate" not in {p["name"] for p in listed["problems"]}
        assert not any("negate" in e["file"] for e in listed.get("errors", []))
        failed = await client.call_tool("start_session", {"problem": "negate", "backend": "hlsl"})
        assert failed.is_error and "unknown problem 'negate'" in failed.content[0].text
        assert not list(markers.iterdir()), "the defined file was imported"
        settings.allow_define_problem = True  # the operator's consent: the folder is a source again
        listed = await call(client, "list_problems", {})
        assert "negate" in {p["name"] for p in listed["problems"]} and list(markers.iterdir())


async def test_a_defined_files_error_is_not_shown_to_other_clients(make_client, settings, tmp_path: Path) -> None:
    """list_problems showed every client the errors of files other clients defined (their text, quoted): only the
    operator's folders' errors are listed; start_session on such a name says it failed without quoting it."""
    folder = tmp_path / "operator"
    folder.mkdir()
    (folder / "broken.py").write_text('NAME = "broken"\nraise ImportError("operator-visible")\n')
    settings.problem_dirs = [folder]
    settings.defined_problems.mkdir(parents=True)  # as another client's define_problem left it, then broken
    (settings.defined_problems / "private.py").write_text(
        NEGATE.replace('"negate"', '"private"').replace("INPUTS =", 'raise ValueError("client-secret-42")\nINPUTS ='))
    async with make_client() as (client, _):
        listed = await call(client, "list_problems", {})
        assert "client-secret-42" not in str(listed)
        assert not any(e["file"].startswith(str(settings.defined_problems)) for e in listed["errors"])
        assert any("operator-visible" in e["message"] for e in listed["errors"])  # the operator's: still listed
        failed = await client.call_tool("start_session", {"problem": "private", "backend": "hlsl"})
        text = failed.content[0].text
        assert failed.is_error and "saved by define_problem, failed to load" in text, text
        assert "client-secret-42" not in text and "ValueError" not in text
        operator = await client.call_tool("start_session", {"problem": "broken", "backend": "hlsl"})
        assert operator.is_error and "operator-visible" in operator.content[0].text
        # The client that defines it is told, as before.
        text = await refused(client, {"source": NEGATE.replace('"negate"', '"private"').replace(
            "INPUTS =", 'raise ValueError("client-secret-42")\nINPUTS =')})
        assert "client-secret-42" in text


NASTY = "\\x1b[2J\\x1b]0;pwn\\x07"  # as written in a problem file's source: clear the screen, retitle the terminal
HUGE = f'"{NASTY}" + "A" * (10 << 20)'  # an exception message of 10 MB


def assert_clean(text: str, limit: int = 5000) -> None:
    assert not any(c in text for c in "\x1b\x07\x00\x9b"), repr(text[:200])
    assert "pwn" not in text and len(text) < limit, len(text)


async def test_problem_text_reaches_clients_without_terminal_control(make_client, settings, tmp_path: Path) -> None:
    """TITLE, the docstring and exception messages of a problem file, through define_problem, list_problems and
    start_session: escape sequences and control characters stripped, 10 MB cut to a few thousand characters."""
    titled = NEGATE.replace('NAME = "negate"', f'NAME = "negate"\nTITLE = "Negate{NASTY} me\\x9b31m"')
    titled = titled.replace('"""Negate: y = -x."""', f'"""Negate: y = -x.{NASTY}\n\nMore\\x00 text."""')
    folder = tmp_path / "operator"
    folder.mkdir()
    (folder / "loud.py").write_text(f'NAME = "loud"\nraise ValueError({HUGE})\n')
    settings.problem_dirs = [folder]
    async with make_client() as (client, _):
        info = await call(client, "define_problem", {"source": titled})
        assert info["title"] == "Negate me", info["title"]
        listed = await call(client, "list_problems", {})
        negate = next(p for p in listed["problems"] if p["name"] == "negate")
        assert negate["title"] == "Negate me"
        loud = next(e for e in listed["errors"] if e["file"] == str(folder / "loud.py"))
        assert "ValueError" in loud["message"] and "more characters cut" not in loud["message"]
        assert_clean(loud["message"])
        failed = await client.call_tool("start_session", {"problem": "loud", "backend": "hlsl"})
        assert failed.is_error and "ValueError" in failed.content[0].text
        assert_clean(failed.content[0].text)
        text = await refused(client, {"source": NEGATE.replace("INPUTS =", f"raise ValueError({HUGE})\nINPUTS =")})
        assert "ValueError" in text
        assert_clean(text)
        text = await refused(client, {"source": NEGATE.replace("return -x", f"raise ValueError({HUGE})")})
        assert_clean(text)


@VULKAN
async def test_a_problem_error_from_a_worker_reaches_the_client_clean(make_client) -> None:
    """A reference that raises at the session's sizes (not at the small ones define_problem tried) with escape
    sequences in a 10 MB message: the problem_error names the file, without terminal control, a few thousand
    characters long, and so it is kept."""
    source = NEGATE.replace("return -x", f"if x.size > 64:\n        raise ValueError({HUGE})\n    return -x")
    async with make_client() as (client, _):
        await call(client, "define_problem", {"source": source})
        session = await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 1000},
                                                       "reference_kernel": KERNEL.replace("BODY", "-x[id.x]")})
        v0 = session["version_0"]
        assert v0["failure"] == "problem_error" and "ValueError" in v0["message"], v0
        assert_clean(v0["message"])
        again = await client.call_tool("get_version", {"session_id": session["session_id"], "version": 0})
        assert "ValueError" in str(again.content[0].text)
        assert_clean(str(again.structured_content), 20000)


async def test_a_workers_problem_error_is_cleaned_by_the_server(tmp_path: Path) -> None:
    """The server does not trust the worker's reply to be printable or short: a problem_error with terminal escapes
    and 10 MB of text (a stand-in worker sends it) is kept and returned clean and cut."""
    from tests.test_truth import CUDA_GPU, _call, _served

    async with _served(tmp_path, "stand_in_worker.py", CUDA_GPU) as (client, service):
        sid = (await _call(client, "start_session", {"backend": "cuda", "sizes": {"M": 64, "N": 64, "K": 64}})
               ).structured_content["session_id"]
        naive = service.store.version(sid, 0).source
        report = (await _call(client, "submit_kernel", {"session_id": sid, "source": naive + "// PROBLEM_ERROR\n"})
                  ).structured_content
        assert report["failure"] == "problem_error" and "the problem's own code failed" in report["message"], report
        assert_clean(report["message"])
        assert "more characters cut" in report["message"]
        assert_clean(service.store.version(sid, report["version"]).message or "")


GROUPSHARED = """// peak: entry=main groups=(cdiv(N, 64), 1, 1)
struct Params { uint N; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
groupshared float tile[64];
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID, uint3 lid : SV_GroupThreadID) {
    tile[lid.x] = 0.0;
    if (id.x < p.N) tile[lid.x] = x[id.x];
    GroupMemoryBarrierWithGroupSync();
    if (id.x < p.N) y[id.x] = -float(asuint(tile[READ]) & 0xFFFFu);  // finite whatever the bits
}
"""


@VULKAN
async def test_values_read_past_groupshared_on_a_cpu_device_are_not_quoted(make_client) -> None:
    """On lavapipe a shader's groupshared array lives in the worker's heap: a kernel reading far past it wrote the
    worker's own memory into y, and the wrong_result message quoted it back as `got` values. Such a kernel's values
    are withheld (where and how many are still said); a kernel without groupshared still gets its values quoted."""
    async with make_client() as (client, _):
        await call(client, "define_problem", {"source": NEGATE})
        session = await call(client, "start_session", {"problem": "negate", "backend": "hlsl", "sizes": {"N": 1000}})
        if session["device"].get("device_type") != "cpu" and "llvmpipe" not in str(session["device"]).lower():
            pytest.skip("not a CPU Vulkan device")
        sid = session["session_id"]
        right = await call(client, "submit_kernel", {"session_id": sid,
                                                     "source": GROUPSHARED.replace("READ", "lid.x").replace(
                                                         "-float(asuint(tile[lid.x]) & 0xFFFFu)", "-tile[lid.x]")})
        assert right["status"] == "benchmarked", right["message"]
        far = await call(client, "submit_kernel", {"session_id": sid,
                                                   "source": GROUPSHARED.replace("READ", "lid.x + 300")})
        assert far["failure"] == "wrong_result", far["message"]
        message = far["message"]
        assert "withheld" in message and "CPU Vulkan device" in message and "elements over their bound" in message
        assert "'got'" not in message and "'at'" in message and "'expected'" in message, message
        report = await call(client, "get_version", {"session_id": sid, "version": far["version"]})
        assert "'got'" not in str(report) and '"got"' not in str(report)
        plain = await call(client, "submit_kernel", {"session_id": sid, "source": KERNEL.replace("BODY", "x[id.x]")})
        assert plain["failure"] == "wrong_result" and "'got'" in plain["message"] and "withheld" not in \
            plain["message"]


async def test_a_session_carries_its_own_abi_and_what_the_problem_computes(make_client) -> None:
    """start_session answers with the session's ABI (its backend and dtype) and the problem's own definition: for a
    problem file, its reference's source. list_problems promised them there; an agent found neither."""
    async with make_client() as (client, _):
        row_sum = (await call(client, "list_problems", {"problem": "row_sum"}))["problems"][0]
        assert row_sum["definition"].startswith("reference, the file's own source:\ndef reference(x, *, xp):")
        session = await call(client, "start_session", {"problem": "row_sum", "backend": "cuda", "dtype": "bf16",
                                                       "sizes": {"ROWS": 4, "COLS": 8}})
        assert "const __nv_bfloat16* x" in session["abi"] and "return x.sum(axis=1)" in session["definition"]
        text = await client.call_tool("get_version", {"session_id": session["session_id"], "version": 0})
        assert not text.is_error


FIVE_D = '''"""y = 2x over a 5-D tensor."""
NAME = "scale5d"
TITLE = "y = 2x (x, y: A x B x C x D x E)"
SIZES = {"A": 3, "B": 4, "C": 5, "D": 6, "E": 7}
DTYPES = ("f32",)
INPUTS = {"x": ("A", "B", "C", "D", "E")}
OUTPUTS = {"y": ("f32", ("A", "B", "C", "D", "E"))}
SCALARS = ("A", "B", "C", "D", "E")
FLOPS = "A * B * C * D * E"


def reference(x, *, xp):
    return 2 * x
'''
FIVE_D_KERNEL = """// peak: entry=main groups=(min(cdiv(A * B * C * D * E, 64), 1024), 1, 1)
struct Params { uint A; uint B; uint C; uint D; uint E; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    uint n = p.A * p.B * p.C * p.D * p.E;
    for (uint i = id.x; i < n; i += 1024 * 64) y[i] = BODY;
}
"""


@VULKAN
async def test_a_five_dimensional_problem_runs_the_loop(make_client) -> None:
    """Ranks up to 6 (KernelBench's 3-D convolutions and poolings are 5-D): checked, sampled at other sizes and
    judged like any other; a wrong element is located along its five axes."""
    async with make_client() as (client, _):
        info = await call(client, "define_problem", {"source": FIVE_D})
        assert "y (float, A×B×C×D×E, read-write)" in info["abi"]["hlsl"]
        session = await call(client, "start_session", {"problem": "scale5d", "backend": "hlsl"})
        sid = session["session_id"]
        good = await call(client, "submit_kernel", {"session_id": sid,
                                                    "source": FIVE_D_KERNEL.replace("BODY", "2.0 * x[i]")})
        assert good["status"] == "benchmarked" and good["generality"]["passed"], good["message"]
        bad = await call(client, "submit_kernel", {"session_id": sid, "source": FIVE_D_KERNEL.replace(
            "BODY", "(i == 17 ? 0.0 : 2.0 * x[i])")})
        assert bad["failure"] == "wrong_result" and "along dimension 4" in bad["message"], bad["message"]


TOTAL = '''"""The sum of every element: one value out (a loss, a total)."""
NAME = "total"
TITLE = "y = sum of x (x: N; y: one value)"
SIZES = {"N": 1000}
DTYPES = ("f32",)
INPUTS = {"x": ("N",)}
OUTPUTS = {"y": ("f32", ())}
SCALARS = ("N",)
FLOPS = "N"
REDUCTION = "N"
RANGE = {"x": (0.5, 1.5)}  # no cancellation: one value's relative L2 error is its relative error
TOLERANCE = {"rel_l2": 1e-3}  # a sequential f32 sum; this test is about the shape ()


def reference(x, *, xp):
    return x.sum()
'''
TOTAL_KERNEL = """// peak: entry=main groups=(1, 1, 1)
struct Params { uint N; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
[numthreads(1, 1, 1)]
void main() {
    float acc = 0.0;
    for (uint i = 0; i < p.N - SKIP; ++i) acc += x[i];
    y[0] = acc;
}
"""


@VULKAN
async def test_a_problem_with_one_value_out_runs_the_loop(make_client) -> None:
    """A 0-d output (KernelBench's losses): declared with the shape (), said as one value in the ABI, checked."""
    async with make_client() as (client, _):
        info = await call(client, "define_problem", {"source": TOTAL})
        assert "y (float, one value, read-write)" in info["abi"]["hlsl"] and "y: one value" in info["abi"]["hlsl"]
        session = await call(client, "start_session", {"problem": "total", "backend": "hlsl"})
        sid = session["session_id"]
        good = await call(client, "submit_kernel", {"session_id": sid, "source": TOTAL_KERNEL.replace("SKIP", "0")})
        assert good["status"] == "benchmarked" and good["generality"]["passed"], good["message"]
        bad = await call(client, "submit_kernel", {"session_id": sid,
                                                   "source": TOTAL_KERNEL.replace("SKIP", "p.N / 2")})
        assert bad["failure"] == "wrong_result", bad["message"]
