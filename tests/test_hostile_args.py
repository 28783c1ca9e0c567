"""Arguments an untrusted agent may send: each gets a clear refusal, nothing is recorded, nothing hangs."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from peak_mcp.core.errors import InvalidInput
from peak_mcp.loop.apply import Applier
from peak_mcp.problems.matmul import Matmul
from tests.conftest import has_device

pytestmark = pytest.mark.anyio
SMALL = {"M": 16, "N": 16, "K": 16}


async def _session(client) -> str:
    started = await client.call_tool("start_session", {"backend": "cuda", "sizes": SMALL})
    assert not started.is_error, started.content[0].text
    return started.structured_content["session_id"]


async def _refused(client, tool: str, args: dict, *expected: str) -> str:
    result = await client.call_tool(tool, args)
    text = result.content[0].text
    assert result.is_error, text
    assert text.strip() != f"Error executing tool {tool}", "a bare error says nothing"
    for part in expected:
        assert part in text, text
    return text


async def test_version_numbers_past_int64_are_a_clear_error(make_client) -> None:
    async with make_client() as (client, service):
        sid = await _session(client)
        for tool, args in (("get_version", {"version": 2**70}), ("diff", {"a": 2**70}), ("revert", {"version": 2**63}),
                           ("validate", {"version": 2**70}), ("submit_kernel", {"source": "x", "parent": 2**70})):
            await _refused(client, tool, {"session_id": sid, **args}, "less than or equal to")
        assert len(service.store.versions(sid)) == 1


async def test_negative_parent_is_refused(make_client) -> None:
    async with make_client() as (client, service):
        sid = await _session(client)
        await _refused(client, "submit_kernel", {"session_id": sid, "source": "x", "parent": -1}, "parent")
        with pytest.raises(InvalidInput, match="parent=-1 is not a version number"):
            service.submit_kernel(sid, "x", parent=-1)
        assert len(service.store.versions(sid)) == 1


async def test_boolean_sizes_are_refused(make_client) -> None:
    async with make_client() as (client, service):
        text = await _refused(client, "start_session", {"backend": "cuda", "sizes": {"M": True, "N": 8, "K": 8}},
                              "M=True", "positive integer")
        assert "pydantic" not in text
        sid = await _session(client)
        await _refused(client, "validate", {"session_id": sid, "sizes": {"M": False}}, "sizes.M")
        assert [s.id for s in service.store.sessions()] == [sid]
    with pytest.raises(InvalidInput, match="must be a positive integer"):
        Matmul().check_sizes({"M": True})


async def test_zero_max_attempts_is_refused_not_defaulted(make_client) -> None:
    async with make_client() as (client, service):
        sid = await _session(client)
        await _refused(client, "apply_transformation", {"session_id": sid, "transformation": "smem_tiling",
                                                        "max_attempts": 0}, "max_attempts")
        applier = Applier(service, Catalog.load(builtin_transformations_dir()))
        with pytest.raises(InvalidInput, match="max_attempts=0 is out of range"):
            applier.begin(sid, next(iter(applier.catalog.list())).id, max_attempts=0)
        assert service.store.apply_runs(sid) == []


async def test_unknown_transformation_on_submit_is_refused(make_client) -> None:
    async with make_client() as (client, service):
        sid = await _session(client)
        source = service.store.version(sid, 0).source
        await _refused(client, "submit_kernel", {"session_id": sid, "source": source,
                                                 "transformation": "no-such-transformation"}, "no-such-transformation")
        assert len(service.store.versions(sid)) == 1  # neither history nor statistics see it
        stats = (await client.call_tool("get_transformation_stats", {})).structured_content["transformations"]
        assert all(s.get("id") != "no-such-transformation" for s in stats)


TERMINAL_TRICK = "\x1b]0;pwned\x07\x1b[2J"  # retitles the operator's terminal and clears it


async def test_a_label_is_one_short_line_of_visible_text(make_client) -> None:
    """A 5 MB label used to be stored, and then filled every list_sessions page; escapes and newlines went to the
    operator's terminal through `peak-mcp sessions`."""
    async with make_client() as (client, service):
        text = await _refused(client, "start_session", {"backend": "cuda", "sizes": SMALL, "label": "x" * 5_000_000},
                              "5000000 characters", "100-character limit")
        assert len(text) < 500
        for label, shown in ((TERMINAL_TRICK, "\\x1b at position 0"), ("mine\nabc123  forged", "\\n at position 4"),
                             ("\u202eevil", "\\u202e"), ("a\tb", "\\t")):
            await _refused(client, "start_session", {"backend": "cuda", "sizes": SMALL, "label": label},
                           "control character", shown)
        assert service.store.sessions() == []
        started = await client.call_tool("start_session", {"backend": "cuda", "sizes": SMALL, "label": "é" * 100})
        assert not started.is_error, started.content[0].text
        listed = (await client.call_tool("list_sessions", {})).structured_content
        assert [s["label"] for s in listed["sessions"]] == ["é" * 100]


async def test_a_label_stored_before_the_limit_is_clipped_in_listings(make_client) -> None:
    async with make_client() as (client, service):
        service.store.create_session(problem="matmul", backend="cuda", dtype="f32", sizes=SMALL, device="x",
                                     device_index=-1, label="y" * 5_000_000)  # as an older release stored it
        listed = await client.call_tool("list_sessions", {})
        [label] = [s["label"] for s in listed.structured_content["sessions"]]
        assert label == "y" * 99 + "…"
        assert len(listed.content[0].text) < 2000


async def test_instructions_and_constraints_are_bounded(make_client) -> None:
    async with make_client() as (client, service):
        sid = await _session(client)
        transformation = next(iter(Catalog.load(builtin_transformations_dir()).list())).id
        await _refused(client, "apply_transformation", {"session_id": sid, "transformation": transformation,
                                                        "instructions": "x" * 1_000_000},
                       "1000000 characters", "4000-character limit")
        assert service.store.apply_runs(sid) == []
        await _refused(client, "start_session", {"backend": "cuda", "sizes": SMALL,
                                                 "constraints": ["M >= 1"] * 10_000}, "10000 constraints", "16")
        assert len(service.store.sessions()) == 1


def test_a_fifo_in_a_catalog_dir_does_not_hang_loading(tmp_path: Path) -> None:
    extra = tmp_path / "catalog"
    extra.mkdir()
    os.mkfifo(extra / "x.md")
    loaded: list[Catalog] = []
    loader = threading.Thread(target=lambda: loaded.append(Catalog.load(builtin_transformations_dir(), [extra])),
                              daemon=True)
    loader.start()
    loader.join(timeout=20)
    if not loaded:  # unblock the stuck open() so the thread can end, then fail
        with open(extra / "x.md", "w"):
            pass
        pytest.fail("loading a catalog with a FIFO named x.md hung")
    errors = [e for e in loaded[0].errors if e.file.endswith("x.md")]
    assert errors and "not a regular file" in errors[0].message
    assert loaded[0].list()  # the shipped catalog still loads


@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
async def test_hlsl_on_a_cpu_device_defaults_to_sizes_it_can_do(make_client) -> None:
    async with make_client() as (_, service):
        device, _ = service.devices.device_for("hlsl")
        if not device.is_cpu:
            pytest.skip(f"the Vulkan device is a {device.device_type}, not a CPU one")
        sizes, note = service.session_sizes(Matmul(), device, None)
        assert sizes == {"M": 1024, "N": 1024, "K": 1024} and "CPU device" in note and device.name in note
        assert service.session_sizes(Matmul(), device, {"M": 64}) == ({"M": 64}, None)  # asked for: kept
