"""Property-based: any arguments to any tool, through a real in-process MCP client, give a result or a tool error
with a message; the server never crashes and stays responsive. No device work: sessions are compile-only CUDA."""

from __future__ import annotations

from typing import Any

import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import has_device

HOSTILE_SOURCES = ['#include "/etc/passwd"', "// peak: entry=k grid=(1,1,1) block=(1,1,1) shared=0\n#include P",
                   "// peak: entry=k grid=(cdiv(N, 0), 1, 1) block=(1,1,1) shared=0\nx", "\x00" * 10, "", "  "]
LEAF = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40))
VALUE = st.one_of(LEAF, st.lists(LEAF, max_size=3),
                  st.dictionaries(st.sampled_from(["M", "N", "K", "X", ""]), LEAF, max_size=4))
BACKENDS = st.sampled_from(["cuda", "hip", "metal", "", "CUDA"])  # never hlsl: that would run on lavapipe


def _arguments(tool: Any, session_id: str) -> st.SearchStrategy[dict[str, Any]]:
    """Values for the tool's own parameters (often of the wrong type), sometimes unknown extra keys."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for name in tool.input_schema.get("properties", {}):
        if name == "session_id":
            fields[name] = st.one_of(st.just(session_id), VALUE)
        elif name == "source":
            fields[name] = st.one_of(st.sampled_from(HOSTILE_SOURCES), st.text(max_size=200), VALUE)
        elif name == "backend" and tool.name == "start_session":
            fields[name] = BACKENDS
        elif name in ("sizes",):
            fields[name] = st.one_of(st.none(), st.dictionaries(st.sampled_from(["M", "N", "K", "Q"]),
                                                                LEAF, max_size=3))
        else:
            fields[name] = VALUE
    base = st.fixed_dictionaries({}, optional=fields)
    return st.one_of(base, st.builds(lambda a, b: {**a, **b}, base, st.dictionaries(st.text(max_size=5), LEAF,
                                                                                   max_size=2)))


@pytest.fixture
def live(make_client):
    with anyio.from_thread.start_blocking_portal() as portal, portal.wrap_async_context_manager(
            make_client()) as (client, service):
        yield portal, client, service


def test_any_arguments_to_any_tool_get_a_result_or_a_clear_tool_error(live) -> None:
    portal, client, _ = live
    started = portal.call(client.call_tool, "start_session", {"backend": "cuda", "sizes": {"M": 8, "N": 8, "K": 8}})
    assert not started.is_error, started.content[0].text
    if has_device("cuda"):
        pytest.skip("a CUDA device is present: these properties assume compile-only sessions")
    session_id = started.structured_content["session_id"]
    tools = portal.call(client.list_tools).tools
    assert len(tools) >= 15
    for tool in tools:
        examples = 5 if tool.name == "doctor" else 30  # doctor re-probes devices in a child process

        @settings(max_examples=examples, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
        @given(arguments=_arguments(tool, session_id))
        def check(arguments: dict[str, Any]) -> None:
            result = portal.call(client.call_tool, tool.name, arguments)  # noqa: B023
            if result.is_error:
                text = " ".join(getattr(c, "text", "") for c in result.content)
                name = tool.name  # noqa: B023
                assert text.strip(), (name, arguments)
                assert text.strip() != f"Error executing tool {name}", (name, arguments, "no reason")
                assert "Traceback" not in text and "root:" not in text, text
            alive = portal.call(client.call_tool, "list_problems", {})
            assert not alive.is_error

        check()
