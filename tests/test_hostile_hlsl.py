"""Hostile HLSL kernels (tests/hostile/manifest.yaml) through a real in-process MCP client on a Vulkan device.

One session per problem and size (matmul: 128^3 and 100x77x53; softmax, rmsnorm, row_sum: ROWS x COLS 64x128 and
64x100; harness.SESSION_SIZES); every manifest entry for hlsl is submitted to its problem's session once and each
(entry, size) is its own test, so a failure names the class. An entry with a known `gap` (the server is known to
miss it) is a strict xfail. After every fault (hang) a good shader must benchmark in the same session: the server
stays up. Many of these fail on a validator that lacks guards before
buffers, NaN guards, rotating timed input sets, scaled elementwise bounds or generality checks; that is their job.

The client is built like conftest's make_client (same `build` and `Client`), but once per module rather than once
per test: the whole file has to fit in ~3 minutes on lavapipe with 2 CPU cores.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.conftest import has_device, skip_reason
from tests.hostile.harness import Outcome, load_manifest, params, run_in_process

pytestmark = [pytest.mark.vulkan]
if not has_device("hlsl"):
    pytestmark.append(pytest.mark.skip(reason=f"no Vulkan device: {skip_reason('hlsl')}"))

ENTRIES = load_manifest("hlsl", problem=None)
SIZES = ("aligned", "unaligned")  # harness.session_sizes: per problem
FENCE_TIMEOUT_S = "3"  # a hung dispatch is noticed after 3 s instead of 30


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Outcome]]:
    saved = os.environ.get("PEAK_MCP_VK_FENCE_TIMEOUT_S")
    os.environ["PEAK_MCP_VK_FENCE_TIMEOUT_S"] = FENCE_TIMEOUT_S  # workers inherit it when they start
    try:
        return {label: run_in_process(tmp_path_factory.mktemp(f"hostile-hlsl-{label}") / "data", "hlsl", label,
                                      ENTRIES, 20)
                for label in SIZES}
    finally:
        if saved is None:
            os.environ.pop("PEAK_MCP_VK_FENCE_TIMEOUT_S", None)
        else:
            os.environ["PEAK_MCP_VK_FENCE_TIMEOUT_S"] = saved


def test_manifest_covers_every_hlsl_file() -> None:
    from tests.hostile.harness import HOSTILE

    on_disk = {str(p.relative_to(HOSTILE)) for p in HOSTILE.glob("*/*.hlsl")}
    assert on_disk == {e.file for e in ENTRIES}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("entry", params(ENTRIES, ".hlsl"))
def test_hostile_hlsl(outcomes: dict[str, dict[str, Outcome]], entry: Any, size: str) -> None:
    outcome = outcomes[size][entry.file]
    assert outcome.ok, f"{entry.cls} ({entry.file}) at {size}: {outcome.why()}"
