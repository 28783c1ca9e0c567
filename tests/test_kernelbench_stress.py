"""KernelBench draws many inputs with torch.rand, [0, 1): a kernel that skips what the model does to negative values
(an identity for a LeakyReLU) passed every trial. Where the reference stays finite on signed inputs, one trial draws
them in (-1, 1), and the definition says so; a model that needs non-negative inputs (a log) keeps its own draw."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from peak_mcp.problems.kernelbench.translate import declare_kernelbench
from tests.conftest import has_device
from tests.test_kernelbench import from_source

pytestmark = pytest.mark.anyio
LEAKY = """
import numpy as np
class Model:
    \"\"\"Simple model that performs a LeakyReLU activation.\"\"\"
    def __init__(self, negative_slope):
        self.negative_slope = negative_slope
    def forward(self, x):
        return np.where(x > 0, x, x * self.negative_slope)
batch_size = 8
dim = 200
negative_slope = 0.01
def get_inputs():
    return [np.random.rand(batch_size, dim)]
def get_init_inputs():
    return [negative_slope]
"""
LOG = LEAKY.replace("return np.where(x > 0, x, x * self.negative_slope)", "return np.log(x) * self.negative_slope")


def test_a_non_negative_draw_gets_a_signed_stress_trial_where_the_model_allows_it() -> None:
    leaky = declare_kernelbench(from_source(LEAKY, "leaky"), "leaky").declaration
    assert leaky["STRESS_RANGE"] == {"x": (-1.0, 1.0)}
    assert "one validation trial draws x in (-1, 1) instead" in leaky["DEFINITION"]
    log = declare_kernelbench(from_source(LOG, "logs"), "logs").declaration
    assert "STRESS_RANGE" not in log  # log of a negative value is NaN: the file's own draw alone
    normal = declare_kernelbench(from_source(LEAKY.replace("np.random.rand(", "np.random.randn("), "normal"),
                                 "normal").declaration
    assert "STRESS_RANGE" not in normal  # already signed


KERNEL = """// peak: entry=main groups=(1024, cdiv(BATCH_SIZE * DIM, 65536), 1)
struct Params { uint BATCH_SIZE; uint DIM; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[[vk::binding(0)]] StructuredBuffer<float> x;
[[vk::binding(1)]] RWStructuredBuffer<float> y;
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    uint i = id.y * 65536 + id.x;  // 1,024 groups across, rows of them down y: no 65,535-group limit to break
    if (i < p.BATCH_SIZE * p.DIM) y[i] = BODY;
}
"""


@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
async def test_an_identity_kernel_for_a_leaky_relu_on_rand_inputs_fails(make_client, settings,
                                                                         tmp_path: Path) -> None:
    folder = tmp_path / "problems"
    folder.mkdir()
    (folder / "leaky.py").write_text(textwrap.dedent(LEAKY))
    settings.problem_dirs = [folder]

    async def submit(client: Any, sid: str, body: str) -> dict[str, Any]:
        result = await client.call_tool("submit_kernel", {"session_id": sid, "source": KERNEL.replace("BODY", body)})
        assert not result.is_error, result.content[0].text
        return result.structured_content

    async with make_client() as (client, _):
        await client.call_tool("list_problems", {})
        started = await client.call_tool("start_session", {"problem": "leaky", "backend": "hlsl", "dtype": "f32",
                                                           "sizes": {"BATCH_SIZE": 8, "DIM": 200}})
        assert not started.is_error, started.content[0].text
        sid = started.structured_content["session_id"]
        identity = await submit(client, sid, "x[i]")
        assert identity["status"] == "failed" and identity["failure"] == "wrong_result", identity["message"]
        assert "x in (-1, 1)" in identity["message"]  # the verdict names the stress draw it failed on
        right = await submit(client, sid, "x[i] > 0.0 ? x[i] : x[i] * 0.01")
        assert right["status"] == "benchmarked", right["message"]


def test_kernelbench_s_own_leaky_relu_gets_the_signed_trial() -> None:
    pytest.importorskip("torch")
    source = (Path(__file__).resolve().parent / "data" / "kernelbench" / "kb_20_leakyrelu.py").read_text()
    declaration = declare_kernelbench(from_source(source, "kb_20_leakyrelu"), "kb_20_leakyrelu").declaration
    assert declaration["STRESS_RANGE"] == {"x": (-1.0, 1.0)}  # torch.rand, unedited


def test_the_definition_gives_init_defaults_and_hlsl_names_its_keyword_output(tmp_path: Path) -> None:
    """An agent found LeakyReLU's slope only in a failure report: get_init_inputs gives nothing and the slope is
    __init__'s default. And `out`, every KernelBench output's name, is an HLSL keyword it declared in vain."""
    from peak_mcp.problems.declared import DeclaredProblem
    from peak_mcp.problems.registry import describe_in_subprocess

    source = textwrap.dedent(LEAKY).replace("def __init__(self, negative_slope):",
                                            "def __init__(self, negative_slope=0.01):").replace(
        "return [negative_slope]", "return []")
    (tmp_path / "leaky_default.py").write_text(source)
    problem = DeclaredProblem(describe_in_subprocess(tmp_path / "leaky_default.py", timeout_s=60))
    assert "Built as Model(negative_slope=0.01)" in problem.definition
    assert "out is an HLSL keyword: give the binding another name" in problem.abi("hlsl", "f32")
    assert "HLSL keyword" not in problem.abi("cuda", "f32")
