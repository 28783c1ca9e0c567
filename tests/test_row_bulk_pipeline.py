"""The row-bulk-pipeline step (rmsnorm step 8, softmax step 9): on sm_90 its rows move by bulk asynchronous copies
on mbarriers, older devices compile its generic path alone, its launch fits an SM's shared memory in every
configuration, and the catalog offers its text to the row problems on Hopper."""

from __future__ import annotations

import collections
import importlib.util
import itertools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from peak_mcp.backends import cuda as cuda_backend
from peak_mcp.backends.registry import launch_spec
from peak_mcp.catalog.transformations import Catalog, builtin_transformations_dir
from peak_mcp.core.launch import with_params

ROOT = Path(__file__).resolve().parent.parent
STEPS = [ROOT / "examples" / "rmsnorm" / "cuda" / "8_bulk_pipeline.cu",
         ROOT / "examples" / "softmax" / "cuda" / "9_bulk_pipeline.cu"]
SM_SHARED = 233472  # bytes of shared memory per SM on an H100 / H200, 1024 of them reserved per resident block


def _opcodes(source: str, arch: str, config: dict[str, int]) -> collections.Counter[str]:
    spec = importlib.util.find_spec("nvidia")
    wheels = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    nvdisasm = shutil.which("nvdisasm") or next((str(p) for w in wheels for p in w.glob("cu*/bin/nvdisasm")), None)
    if nvdisasm is None:
        pytest.skip("no nvdisasm")
    source = source.replace("typedef float T;", "typedef __nv_bfloat16 T;")
    spec = launch_spec(source, "cuda", ("ROWS", "COLS"))
    binary = cuda_backend.CudaExecutor(None, arch=arch).compile(with_params(source, spec.config(config)), spec).binary
    path = Path(tempfile.mkdtemp()) / "k.cubin"
    path.write_bytes(binary)
    sass = subprocess.run([nvdisasm, "-c", str(path)], capture_output=True, text=True, check=True).stdout
    return collections.Counter(op.split(".")[0] for op in
                               re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass))


@pytest.mark.parametrize("path", STEPS, ids=lambda p: p.parts[-3])
def test_rows_move_by_bulk_copies_on_hopper_and_by_plain_loads_elsewhere(path: Path) -> None:
    source = path.read_text()
    for store in (0, 1):
        hopper = _opcodes(source, "sm_90a", {"STORE": store})
        # w's copy (rmsnorm), the first rows, the refill; STORE=1 adds the bulk stores and waits on them
        assert hopper["UBLKCP"] >= 2 + 2 * store and hopper["SYNCS"] > 0, (store, hopper)
        assert bool(hopper["UTMACMDFLUSH"]) == bool(store)
        ampere = _opcodes(source, "sm_80", {"STORE": store})
        assert not ampere["UBLKCP"] and not ampere["SYNCS"] and ampere["LDG"] > 0, (store, ampere)


@pytest.mark.parametrize("path", STEPS, ids=lambda p: p.parts[-3])
def test_every_configuration_fits_the_shared_memory_of_an_sm(path: Path) -> None:
    spec = launch_spec(path.read_text(), "cuda", ("ROWS", "COLS"))
    for values in itertools.product(*spec.params.values()):
        config = dict(zip(spec.params, values, strict=True))
        if spec.violated({"ROWS": 8192, "COLS": 8192}, config) is not None:
            continue
        geometry = spec.evaluate({"ROWS": 8192, "COLS": 8192}, config)
        per_sm = -(-config["GRID"] // 132)
        assert per_sm * (geometry["shared"] + 1024) <= SM_SHARED, config
        assert geometry["shared"] >= 1024 + 2 * 128, config  # the header and the smallest two slots
        assert spec.evaluate({"ROWS": 1, "COLS": 1}, config)["grid"] == (1, 1, 1)


def test_the_text_is_offered_to_row_problems_on_hopper() -> None:
    text = Catalog.load(builtin_transformations_dir()).get("row-bulk-pipeline")
    assert text.backends == ["cuda"] and {"softmax", "normalization"} <= set(text.traits)
    assert {"hopper", "h200"} <= set(text.devices)
    assert "persistent-rows" in text.after
