"""`peak-mcp batch`: KernelBench's metric over a suite, on lavapipe. One folder holds a KernelBench-form file with a
right kernel (found by the file's stem), a problem file of this server with a wrong one (found by the problem's
NAME), a problem without a kernel, and a file that fails to load; a map adds a built-in problem. Each is named with
its outcome, none dropped, and fast_p says what it cannot compute: torch's yardsticks are timed on CUDA only. Then
fast_p's arithmetic, the table's escaping, and problems spread over four stand-in GPUs at once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from peak_mcp.core.config import Settings
from peak_mcp.core.errors import InvalidInput
from peak_mcp.loop.batch import BatchItem, BatchResult, BatchRunner, ProblemResult, fast_p, read_map
from peak_mcp.loop.batch_table import markdown
from peak_mcp.loop.service import PeakService
from peak_mcp.problems.registry import ProblemRegistry
from peak_mcp.runner.pool import DevicePool
from tests.conftest import has_device, stand_in_python
from tests.test_cli import cli

DATA = Path(__file__).resolve().parent / "data" / "kernelbench"
# 1,024 groups across, rows of them down y: a 1-D dispatch of cdiv(SIZE, 64) groups breaks the 65,535-group limit at
# sizes the problem allows (generality evaluates the launch line there)
ELEMENTWISE = """// peak: entry=main groups=(1024, cdiv(SIZE, 65536), 1)
struct Params { PARAMS };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    uint i = id.y * 65536 + id.x;
    if (i < SIZE) y[i] = max(x[i], 0.0);
}
"""
LEAKY = '''"""Leaky ReLU: y = x where x > 0, else x / 100."""

NAME = "leaky_test"
TITLE = "Leaky ReLU"
SIZES = {"N": 4096}
DTYPES = ("f32",)
INPUTS = {"x": ("N",)}
OUTPUTS = {"y": ("f32", ("N",))}
SCALARS = ("N",)
FLOPS = "N"


def reference(x, *, xp):
    return xp.where(x > 0, x, x / 100)
'''


def relu_kernel(params: str, size: str, bound: str) -> str:
    """ReLU over `size` elements (the annotation's expression; `bound`, the same read from the push constants)."""
    return ELEMENTWISE.replace("PARAMS", params).replace("cdiv(SIZE", f"cdiv({size}").replace("< SIZE", f"< {bound}")


@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
def test_batch_names_every_outcome_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PEAK_MCP_BENCH_SECONDS", "0.1")
    problems, kernels = tmp_path / "problems", tmp_path / "kernels"
    problems.mkdir()
    kernels.mkdir()
    shutil.copy(DATA / "np_relu.py", problems / "relu.py")  # KernelBench form: the problem is named relu
    shutil.copy(DATA / "np_relu.py", problems / "absent.py")  # no kernel for it
    (problems / "leaky.py").write_text(LEAKY)  # a problem file: NAME leaky_test
    (problems / "broken.py").write_text("NAME = 'broken'\nSIZES = {\n")  # fails to load
    relu = relu_kernel("uint BATCH_SIZE; uint DIM;", "BATCH_SIZE * DIM", "p.BATCH_SIZE * p.DIM")
    (kernels / "relu.hlsl").write_text(relu)  # by the file's stem
    (kernels / "leaky_test.hlsl").write_text(relu_kernel("uint N;", "N", "p.N"))  # by the problem's name: ReLU, wrong
    # the shipped naive kernel, as its sessions start from it: right
    (tmp_path / "rows.hlsl").write_text(ProblemRegistry().get("row_sum").naive_kernel("hlsl", "f32"))
    (tmp_path / "map.json").write_text(json.dumps({"row_sum": {"kernel": "rows.hlsl",
                                                               "sizes": {"ROWS": 64, "COLS": 256}}}))
    out = tmp_path / "out"
    code, printed, _ = cli("--data-dir", str(tmp_path / "data"), "batch", "--problems", str(problems), "--kernels",
                           str(kernels), "--map", str(tmp_path / "map.json"), "--backend", "hlsl", "--p", "0", "1",
                           "--out", str(out), capsys=capsys)
    assert code == 0
    result = BatchResult.model_validate_json((out / "batch.json").read_text())
    rows = {r.problem: r for r in result.problems}
    assert list(rows) == ["absent", "broken", "leaky_test", "relu", "row_sum"]  # the folder's files, then the map's
    kept = [json.loads(line)["problem"] for line in (out / "rows.jsonl").read_text().splitlines()]
    assert sorted(kept) == sorted(rows)  # every row also written as it finished
    assert {k: r.outcome for k, r in rows.items()} == {
        "absent": "missing_kernel", "broken": "error", "leaky_test": "incorrect", "relu": "correct",
        "row_sum": "correct"}
    assert "absent.hlsl" in rows["absent"].message and rows["absent"].session_id is None
    assert rows["broken"].message and rows["broken"].correct is False
    assert rows["leaky_test"].failure == "wrong_result" and rows["leaky_test"].correct is False
    for name in ("relu", "row_sum"):  # the kernel given is v0: no naive version was submitted before it
        r = rows[name]
        assert r.correct and r.status == "benchmarked" and r.version == 0 and r.kernel_ms and r.kernel_ms > 0
        assert r.speedup_eager is None and "CUDA devices only" in (r.yardstick_note or "")
    assert rows["row_sum"].sizes == {"ROWS": 64, "COLS": 256}
    fast = {f.p: f for f in result.fast_p}
    assert fast[0].value == pytest.approx(2 / 5) and fast[0].faster == 2 and fast[0].total == 5
    assert fast[1].value is None and fast[1].unknown == 2 and fast[1].high == pytest.approx(2 / 5)
    assert "cannot be computed" in (fast[1].note or "")
    table = (out / "batch.md").read_text()
    assert table in printed
    assert "| relu | yes | correct |" in table and "| absent | no | missing kernel:" in table
    assert "| leaky_test | no | incorrect: wrong_result" in table and "n/a [1]" in table
    assert "[1] torch yardsticks are timed on CUDA devices only" in table
    assert "| fast_0 | 0.40 | 2 of 5 |" in table and "| fast_1 | n/a | 0 of 5 |" in table


def row(name: str, correct: bool | None, speedup: float | None, **extra: object) -> ProblemResult:
    outcome = "correct" if correct else "not_run" if correct is None else "incorrect"
    return ProblemResult(problem=name, outcome=outcome, correct=correct, speedup_eager=speedup,
                         kernel_ms=1.0 if correct is not None else None, **extra)


def test_fast_p_counts_every_problem_and_strictly_faster() -> None:
    rows = [row("a", True, 2.0), row("b", True, 1.0), row("c", False, 5.0), row("d", True, 0.5)]
    assert [fast_p(rows, p).value for p in (0, 1, 1.5, 2)] == [0.75, 0.25, 0.25, 0.0]  # > p, as KernelBench
    unknown = [*rows, row("e", True, None, yardstick_note="no torch"), row("f", None, None)]
    f1 = fast_p(unknown, 1)
    assert f1.value is None and (f1.faster, f1.unknown, f1.total) == (1, 2, 6)
    assert (f1.low, f1.high) == (pytest.approx(1 / 6), pytest.approx(3 / 6))
    assert "1 not run" in (f1.note or "") and "1 correct without a speedup over torch eager (no torch)" in f1.note
    assert fast_p(unknown, 0).unknown == 1  # correct rows count for p = 0 without a yardstick; unrun ones do not


def test_markdown_keeps_text_from_kernels_on_its_row() -> None:
    forged = row("x", False, None, failure="wrong_result", status="failed",
                 message="bad | value\n| forged | yes | correct |\x1b[2J")
    result = BatchResult(backend="cuda", dtype="f32", devices=["#0 H200"], problems=[forged],
                         fast_p=[fast_p([forged], 0)], counts={"incorrect": 1}, seconds=1.0)
    table = markdown(result)
    lines = [line for line in table.splitlines() if line.startswith("| x |")]
    assert len(lines) == 1 and "bad \\| value" in lines[0] and "\x1b" not in table
    assert not any(line.startswith("| forged") for line in table.splitlines())


def test_batch_spreads_problems_over_every_device(tmp_path: Path) -> None:
    """Four stand-in GPUs (tests/stand_in_devices.py, through the real DevicePool and service): four problems run one
    per device, at the same time."""
    log = tmp_path / "jobs.jsonl"
    devices = [{"backend": "cuda", "index": i, "name": "NVIDIA H200", "properties": {}} for i in range(4)]
    settings = Settings(data_dir=tmp_path / "data")
    pool = DevicePool(python=stand_in_python(tmp_path, "stand_in_devices.py"), lock_dir=settings.data_dir / "locks",
                      options=lambda _backend, index: {"name": "NVIDIA H200", "log": str(log), "eval_s": 0.5})
    service = PeakService(settings, pool=pool, probe=lambda: {
        "cuda": {"backend": "cuda", "devices": devices, "compiler": {"available": True}, "missing": []}})
    kernel = ("// peak: entry=k grid=(1, 1, 1) block=(32, 1, 1)\n"
              'extern "C" __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {}\n')
    try:
        items = [BatchItem(problem="matmul", source=kernel, sizes={"M": 64, "N": 64, "K": 64}) for _ in range(4)]
        result = BatchRunner(service).run(items, "cuda")
    finally:
        service.close()
    assert len(result.devices) == 4 and [r.outcome for r in result.problems] == ["correct"] * 4, result.problems[0]
    assert sorted(r.device or "" for r in result.problems) == [f"NVIDIA H200 (#{i})" for i in range(4)]
    assert all(r.speedup_eager is None and r.yardstick_note for r in result.problems)  # no torch time: said why
    jobs = [json.loads(line) for line in log.read_text().splitlines()]
    first = {d: min(j["start"] for j in jobs if j["device"] == d) for d in range(4)}
    last = {d: max(j["end"] for j in jobs if j["device"] == d) for d in range(4)}
    assert max(first.values()) < min(last.values())  # every device started before any finished: at once


def test_a_map_names_kernels_beside_it_and_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"19_ReLU": "relu.cu", "kb_1": {"kernel": "sub/mm.cu", "sizes": {"N": 512}}}))
    root = tmp_path.resolve()
    assert read_map(path) == {"19_ReLU": {"kernel": str(root / "relu.cu")},
                              "kb_1": {"kernel": str(root / "sub" / "mm.cu"), "sizes": {"N": 512}}}
    # a map is data: it may not pull host files into the store as "kernels" (a hostile review read the environ)
    for bad, said in (([1], "not a JSON object"), ({"a": 3}, "names no kernel file"),
                      ({"a": {"kernel": "k.cu", "sizes": {"N": "big"}}}, "has sizes"),
                      ({"a": "/proc/self/environ"}, "outside the map's folder"),
                      ({"a": "../secret.cu"}, "outside the map's folder")):
        path.write_text(json.dumps(bad))
        with pytest.raises(InvalidInput, match=said):
            read_map(path)


def test_a_kernel_file_that_is_not_a_regular_small_file_is_not_read(tmp_path: Path) -> None:
    import os

    from peak_mcp.loop.batch import read_kernel

    fifo = tmp_path / "k.cu"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        read_kernel(fifo)
    big = tmp_path / "big.cu"
    big.write_text("x" * (300 * 1024))
    with pytest.raises(ValueError, match="over the"):
        read_kernel(big)
