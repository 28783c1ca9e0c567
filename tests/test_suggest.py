"""suggest_next through a real in-process MCP client: rankings follow the head's lineage, its source, the catalog's
order hints and the session's backend, dtype and device."""

from __future__ import annotations

import re

import pytest

from peak_mcp.catalog.suggest import lineage, source_features
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from tests.conftest import EXAMPLES, has_device, skip_reason

pytestmark = pytest.mark.anyio
SMALL = {"M": 64, "N": 48, "K": 32}


async def _start(client, backend: str = "cuda", dtype: str = "f32", sizes=SMALL) -> str:
    result = await client.call_tool("start_session", {"backend": backend, "dtype": dtype, "sizes": sizes})
    assert not result.is_error, result.content[0].text
    return result.structured_content["session_id"]


async def _suggest(client, sid: str, limit: int = 25) -> dict:
    result = await client.call_tool("suggest_next", {"session_id": sid, "limit": limit})
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def test_naive_head_starts_with_tiling_and_tiled_head_moves_on(make_client) -> None:
    async with make_client() as (client, service):
        sid = await _start(client)
        first = await _suggest(client, sid)
        ids = [s["id"] for s in first["suggestions"]]
        assert first["head"] == 0 and first["applied"] == [] and "shared-memory tiles" not in first["features"]
        assert ids[0] == "shared-memory-tiling", first["suggestions"][:3]
        assert "shared memory" in first["suggestions"][0]["why"]
        assert all(s["why"] and "\n" not in s["why"] for s in first["suggestions"])
        # by score among the texts ready now; those that need another text first come after them
        scores = [s["score"] for s in first["suggestions"] if not s.get("first")]
        assert scores == sorted(scores, reverse=True) and not first["suggestions"][len(scores) - 1].get("first")
        # f32: tensor-core texts rank below every plain-FMA step, with the reason said.
        tensor = next(s for s in first["suggestions"] if s["id"] == "tensor-cores")
        assert "tolerance" in tensor["why"] and ids.index("tensor-cores") > ids.index("register-blocking-2d")

        tiled = (EXAMPLES / "cuda" / "smem_tiled.cu").read_text()
        report = (await client.call_tool("submit_kernel", {"session_id": sid, "source": tiled,
                                                           "transformation": "shared-memory-tiling"}))
        second = await _suggest(client, sid, limit=3)
        if not service.store.session(sid).runs:  # compiled only: head stays on v0, the ranking follows v1
            assert report.structured_content["head"] == 0, report.structured_content
            assert second["head"] == 0 and second["ranked_from"] == 1, second
        else:
            assert second["head"] == 1 and second.get("ranked_from") is None, second
        ids = [s["id"] for s in second["suggestions"]]
        assert second["applied"] == ["shared-memory-tiling"] and "shared-memory tiles" in second["features"]
        assert len(ids) == 3 and "shared-memory-tiling" not in ids and "coalesced-access" not in ids
        assert ids[0].startswith("register-blocking"), second["suggestions"]
        assert "usually follows shared-memory-tiling" in second["suggestions"][0]["why"]


async def test_sixteen_bit_session_on_hopper_gets_the_native_tensor_core_text(make_client, monkeypatch) -> None:
    import peak_mcp.backends.cuda as cuda_backend

    monkeypatch.setenv("PEAK_CUDA_ARCH", "sm_90a")
    monkeypatch.setattr(cuda_backend, "DEFAULT_ARCH", "sm_90a")
    async with make_client() as (client, _):
        sid = await _start(client, dtype="f16")
        ids = {s["id"]: s for s in (await _suggest(client, sid))["suggestions"]}
        assert "hopper-wgmma" in ids and "tensor-cores" not in ids  # resolved to the specialization, once
        assert "f16 inputs" in ids["hopper-wgmma"]["why"] and "written for this device" in ids["hopper-wgmma"]["why"]
        assert "hlsl-16bit-types" not in ids and "amd-mfma" not in ids


async def test_f32_session_on_hopper_is_offered_three_xtf32_without_the_tf32_warning(make_client,
                                                                                     monkeypatch) -> None:
    import peak_mcp.backends.cuda as cuda_backend

    monkeypatch.setenv("PEAK_CUDA_ARCH", "sm_90a")
    monkeypatch.setattr(cuda_backend, "DEFAULT_ARCH", "sm_90a")
    async with make_client() as (client, _):
        sid = await _start(client)
        ids = {s["id"]: s for s in (await _suggest(client, sid))["suggestions"]}
        assert "accuracy" in ids["three-xtf32"]["why"] and "tolerance" not in ids["three-xtf32"]["why"]
        assert ids["three-xtf32"]["score"] > ids["tensor-cores"]["score"]  # TF32 alone is still warned off
        assert "tolerance" in ids["tensor-cores"]["why"]


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
async def test_hlsl_f32_session_gets_hlsl_texts_only(make_client) -> None:
    async with make_client() as (client, _):
        sid = await _start(client, "hlsl", sizes={"M": 16, "N": 16, "K": 16})
        found = await _suggest(client, sid)
        ids = [s["id"] for s in found["suggestions"]]
        assert ids[0] == "hlsl-groupshared-tiling" and "shared-memory-tiling" not in ids
        assert not {"tensor-cores", "hlsl-16bit-types", "cuda-cp-async", "mma-sync-ptx"} & set(ids)


async def test_limit_is_checked(make_client) -> None:
    async with make_client() as (client, _):
        sid = await _start(client)
        assert len((await _suggest(client, sid, limit=2))["suggestions"]) == 2
        bad = await client.call_tool("suggest_next", {"session_id": sid, "limit": 0})
        assert bad.is_error
        missing = await client.call_tool("suggest_next", {"session_id": "nope"})
        assert missing.is_error


def test_source_features_of_the_shipped_examples() -> None:
    regblock = source_features((EXAMPLES / "cuda" / "regblock_2d.cu").read_text())
    assert {"shared-memory tiles", "128-bit vectors"} <= set(regblock)
    assert "register-blocking-2d" in {id for covers in regblock.values() for id in covers}
    wmma = source_features((EXAMPLES / "cuda" / "f16" / "wmma_tiled.cu").read_text())
    assert "WMMA" in wmma
    naive = source_features((EXAMPLES / "hlsl" / "naive.hlsl").read_text())
    assert set(naive) == {"coalesced (x threads along n)"}
    tiled = source_features((EXAMPLES / "hlsl" / "tiled_groupshared.hlsl").read_text())
    # its Bs[TILE][TILE + 1] is padded: bank-conflict-padding's work is seen done
    assert set(tiled) == {"shared-memory tiles", "coalesced (x threads along n)", "padded shared tiles"}
    rows = EXAMPLES.parent
    for problem in ("softmax", "rmsnorm"):
        for backend, ext in (("cuda", "cu"), ("hip", "hip")):
            hinted = (rows / problem / backend / f"7_cache_hints.{ext}").read_text()
            assert "cache-eviction hints" in source_features(hinted)
    assert "cache-eviction hints" not in source_features((rows / "rmsnorm" / "cuda" / "4_registers.cu").read_text())


def test_lineage_follows_parents_not_version_order() -> None:
    from peak_mcp.store.records import VersionRow

    versions = [VersionRow(session_id="s", number=n, parent=p, origin="submit", source="", status="compiled",
                           created_at=0.0) for n, p in ((0, None), (1, 0), (2, 0), (3, 2))]
    assert [v.number for v in lineage(versions, 3)] == [0, 2, 3]


@pytest.mark.skipif(not has_device("hlsl"), reason="no Vulkan device")
async def test_a_row_kernel_with_wave_reductions_is_not_sent_back_to_them(make_client) -> None:
    """An agent's HLSL softmax, one group per row reduced with wave intrinsics, was told to apply
    row-per-block-reduction and hlsl-wave-reduction: what its source already does."""
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"problem": "softmax", "backend": "hlsl",
                                                           "sizes": {"ROWS": 64, "COLS": 100}})
        sid = started.structured_content["session_id"]
        source = (EXAMPLES.parent / "softmax" / "hlsl" / "2_wave.hlsl").read_text()
        submitted = await client.call_tool("submit_kernel", {"session_id": sid, "source": source, "parent": 0})
        assert not submitted.is_error, submitted.content[0].text
        result = await client.call_tool("suggest_next", {"session_id": sid})
        got = result.structured_content
        if not got["suggestions"]:
            assert "in the head's lineage or visible in its source" in result.content[0].text
        assert {"wave reductions", "threads striding over a row"} <= set(got["features"])
        ids = [s["id"] for s in got["suggestions"]]
        assert not {"row-per-block-reduction", "hlsl-wave-reduction", "online-softmax"} & set(ids), got["suggestions"]


def test_row_kernel_features() -> None:
    features = {path.name: set(source_features(path.read_text()))
                for path in (EXAMPLES.parent / "softmax" / "cuda").glob("*.cu")}
    assert "warp shuffles" in features["2_warp_shuffle.cu"] and "warp shuffles" not in features["1_smem_tree.cu"]
    assert "a row per warp" in features["5_row_per_warp.cu"]
    assert "rows strided over the grid" in features["6_persistent.cu"]
    assert "online rescaling" in features["4_online_registers.cu"]
    assert "online rescaling" not in features["1_smem_tree.cu"]
    hip = source_features((EXAMPLES.parent / "softmax" / "hip" / "2_warp_shuffle.hip").read_text())
    assert "warp shuffles" in hip


@pytest.mark.vulkan
@pytest.mark.skipif(not has_device("hlsl"), reason=f"no Vulkan device: {skip_reason('hlsl')}")
async def test_an_hlsl_row_session_is_offered_hlsl_texts_and_no_measured_slowdown_first(make_client) -> None:
    """An agent's HLSL softmax was offered online-softmax "after vectorized-row-access or warp-shuffle-reduction",
    texts that do not exist for HLSL (apply_transformation refused them), and row-per-block-reduction first,
    though that text says it measured 0.29× on lavapipe."""
    async with make_client() as (client, _):
        started = await client.call_tool("start_session", {"problem": "softmax", "backend": "hlsl",
                                                           "sizes": {"ROWS": 16, "COLS": 100}})
        sid = started.structured_content["session_id"]
        got = await _suggest(client, sid)
        ids = [s["id"] for s in got["suggestions"]]
        assert {"online-softmax", "row-per-block-reduction", "hlsl-wave-reduction"} <= set(ids), got["suggestions"]
        shipped = Catalog.load(builtin_transformations_dir())
        hlsl = {t.id for t in shipped.list(backend="hlsl", problem="softmax", dtype="f32",
                                           traits=["softmax", "row_reduction"])}
        for s in got["suggestions"]:
            assert s["id"] in hlsl, s
            named = set(re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)+", s["why"])) & {t.id for t in shipped.list()}
            assert named <= hlsl, (s["id"], named - hlsl)  # no CUDA-only text named as what comes first
        # first only where every other text comes after it (the row kernel all the others build on), and then with
        # its measured slowdown said
        assert ids[0] != "row-per-block-reduction" or all(s["first"] for s in got["suggestions"][1:]), ids
        slower = next(s for s in got["suggestions"] if s["id"] == "row-per-block-reduction")
        assert "0.29× its parent on llvmpipe" in slower["why"]
        # Whatever is proposed applies: apply_transformation takes each id (this client cannot sample: a brief).
        for id in ids:
            step = await client.call_tool("apply_transformation", {"session_id": sid, "transformation": id})
            assert not step.is_error, (id, step.content[0].text)


def test_the_after_hint_names_only_texts_that_exist_for_the_session() -> None:
    """Without a device: the order hint of a text whose predecessors are CUDA-only says nothing for HLSL."""
    from types import SimpleNamespace

    from peak_mcp.catalog.suggest import _score
    from peak_mcp.problems.shipped import get_problem

    catalog = Catalog.load(builtin_transformations_dir())
    online = catalog.get("online-softmax")
    device = SimpleNamespace(name="llvmpipe", arch="", sm_count=None)
    problem = get_problem("softmax")
    for backend, expected in (("hlsl", "usually comes after hlsl-wave-reduction, which the head has not done"),
                              ("cuda", "usually comes after vectorized-row-access or warp-shuffle-reduction")):
        exists = {t.id for t in catalog.list(backend=backend, problem="softmax", dtype="f32", traits=problem.traits)}
        _, reasons = _score(online, set(), set(), {}, "f32", {"ROWS": 8, "COLS": 8}, device, problem, exists)
        assert reasons[0].startswith(expected), (backend, reasons)


def test_a_session_without_a_head_is_told_so_before_its_device_or_problem_is_looked_up(tmp_path) -> None:
    """suggest_next starts from head: a session without one is refused first, whether or not its problem still
    loads, and without probing the devices (found moving suggest_next out of the service)."""
    from peak_mcp.core.config import Settings
    from peak_mcp.core.errors import InvalidInput
    from peak_mcp.loop.service import PeakService

    probes: list[int] = []
    service = PeakService(Settings(data_dir=tmp_path / "data"), probe=lambda: probes.append(1) or {})
    try:
        sid = service.store.create_session(problem="a_problem_that_is_gone", backend="hlsl", dtype="f32",
                                           sizes={"N": 4}, device="somewhere", device_index=0, label=None)
        with pytest.raises(InvalidInput, match="has no passing version yet"):
            service.suggest_next(Catalog.load(builtin_transformations_dir(), []), sid)
        assert probes == []
    finally:
        service.close()
