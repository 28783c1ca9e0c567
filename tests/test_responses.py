"""What an agent reads: lean results, schemas with enums and hints, sizes written the way prompts write them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peak_mcp.errors import InvalidInput
from peak_mcp.problems.matmul import Matmul
from peak_mcp.responses import rate, rounded

pytestmark = pytest.mark.anyio
SMALL = {"M": 64, "N": 48, "K": 32}


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e30, max_value=1e30))
def test_rounding_keeps_four_significant_digits(x: float) -> None:
    r = rounded(x)
    assert r == 0 if x == 0 else abs(r - x) <= abs(x) * 5e-4
    assert len(repr(abs(r)).replace(".", "").lstrip("0").split("e")[0].rstrip("0")) <= 4


def test_rates_read_in_the_unit_that_fits() -> None:
    assert rate(43.4) == "43.4 TFLOP/s" and rate(0.5) == "500 GFLOP/s" and rate(6.33e-5) == "63.3 MFLOP/s"
    assert rate(None) == "n/a"


@pytest.mark.parametrize(("text", "sizes"), [("M=128,N=64,K=32", {"M": 128, "N": 64, "K": 32}),
                                             ("M=128 N=64", {"M": 128, "N": 64}),
                                             ("128x64x32", {"M": 128, "N": 64, "K": 32})])
def test_sizes_as_prompts_write_them(text: str, sizes: dict) -> None:
    assert Matmul().parse_sizes(text) == sizes


@pytest.mark.parametrize("text", ["M=big", "128x64", "M"])
def test_unreadable_sizes_say_how_to_write_them(text: str) -> None:
    with pytest.raises(InvalidInput, match="M=4096,N=4096,K=4096"):
        Matmul().parse_sizes(text)


async def test_tools_carry_hints_and_enums(make_client) -> None:
    async with make_client() as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["history"].annotations.read_only_hint is True
        assert tools["submit_kernel"].annotations.read_only_hint is False
        assert tools["submit_kernel"].annotations.destructive_hint is False
        assert tools["revert"].annotations.idempotent_hint is True
        props = tools["start_session"].input_schema["properties"]
        assert set(props["backend"]["enum"]) == {"cuda", "hip", "hlsl"}
        assert props["dtype"]["enum"] == ["f32", "f16", "bf16"]
        undocumented = [(name, p) for name, t in tools.items() for p, s in t.input_schema["properties"].items()
                        if "description" not in s]
        assert undocumented == []


async def test_results_are_lean_and_valid(make_client) -> None:
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"backend": "cuda", "sizes": "M=64,N=48"})
        assert not started.is_error, started.content[0].text
        info = started.structured_content
        assert info["sizes"] == {"M": 64, "N": 48, "K": 4096}
        assert "K=4096" in info["note"]  # partial sizes are filled, and the answer says so
        assert "max_compute_workgroup_count" not in info["device"]  # the device in brief
        assert json.loads(started.content[0].text) == info  # text = the same object, compact
        assert "\n  " not in started.content[0].text and len(started.content[0].text) < 4000
        listed = (await client.call_tool("list_sessions", {"limit": 1})).structured_content
        assert listed["total"] == 1 and len(listed["sessions"]) == 1 and "device" in listed["sessions"][0]
        empty = (await client.call_tool("list_sessions", {"offset": 5})).structured_content
        assert empty["sessions"] == [] and empty["total"] == 1


async def test_schemas_carry_no_titles_and_stay_small(make_client) -> None:
    async with make_client() as (client, _):
        tools = (await client.list_tools()).tools
        listed = json.dumps([t.model_dump(mode="json", exclude_none=True, by_alias=True) for t in tools])
        assert '"title": "' not in listed  # pydantic's respelled property names, dropped
        assert '"anyOf"' not in listed and '"default": null' not in listed  # optional arguments read plainly
        assert all("\n" not in t.description and "  " not in t.description for t in tools)  # no docstring indent
        assert len(listed) <= 16_000, len(listed)  # issue 20's bar; 18 tools; each added tool must earn its schema
        # Output schemas are served as a resource, not in tools/list; every answer is still checked against them.
        assert all(t.output_schema is None for t in tools)
        schemas = json.loads((await client.read_resource("peak://output-schemas")).contents[0].text)
        assert {"start_session", "submit_kernel", "get_transformation"} <= set(schemas)
        assert "status" in json.dumps(schemas["submit_kernel"])
        assert '"title": {' in json.dumps(schemas)  # a property named title (catalog models) is kept
        started = await client.call_tool("list_problems", {})
        assert started.structured_content["problems"]  # structured content still comes without an advertised schema
