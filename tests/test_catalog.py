"""The natural-transformation catalog: the shipped files, filters, resolution, and malformed user files."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from peak_mcp.catalog.transformations import SECTIONS, Catalog, DeviceDescriptor, builtin_transformations_dir
from peak_mcp.core.errors import InvalidInput, NotFound

H100 = {"name": "NVIDIA H100 80GB HBM3", "arch": "sm_90a", "family": "hopper"}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "arch": "sm_80", "family": "ampere"}
MI300 = {"name": "AMD Instinct MI300X", "arch": "gfx942", "family": "cdna3"}
UNKNOWN = {"name": "Mystery GPU 9000", "arch": "", "family": ""}

BODY = "\n".join(f"## {s}\n\ntext\n" for s in SECTIONS)


@pytest.fixture(scope="module")
def shipped() -> Catalog:
    return Catalog.load(builtin_transformations_dir())


def write(directory: Path, stem: str, front: str, body: str = BODY) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem}.md"
    path.write_text(f"---\n{front.strip()}\n---\n\n{body}", encoding="utf-8")
    return path


def front(id: str, **fields: str) -> str:
    values = {"id": id, "title": f"Title of {id}", "backends": "[cuda]", "summary": "one line", **fields}
    return "\n".join(f"{k}: {v}" for k, v in values.items())


# --- the shipped catalog ---------------------------------------------------------------------------------------


def test_shipped_catalog_loads_cleanly(shipped: Catalog) -> None:
    assert shipped.errors == [] and shipped.warnings == [] and shipped.notes == []
    matmul = shipped.list(problem="matmul", traits=["gemm"])
    assert len(matmul) >= 16
    assert len(list(builtin_transformations_dir().glob("*.md"))) == len(shipped)
    assert all(t.builtin for t in shipped.list())


def test_every_shipped_file_is_complete(shipped: Catalog) -> None:
    for t in shipped.list():
        headings = re.findall(r"^## (.+)$", t.body, re.MULTILINE)
        assert [h for h in headings if h in SECTIONS] == list(SECTIONS), (t.id, headings)
        assert 40 <= len(t.body.splitlines()) <= 120, (t.id, len(t.body.splitlines()))
        assert t.source.stem == t.id and "\n" not in t.summary and t.title
        assert t.raw_text().startswith("---") and t.body in t.raw_text()
        for name in t.after:
            assert name in shipped, (t.id, name)
        if t.extends:
            assert shipped.get(t.extends).extends is None, f"{t.id} should extend a portable text"
        # An agent sees only what the tools return: no pointer into this repository's files
        assert not re.search(r"\b(examples|tests|tools)/", t.body), (t.id, "names a repository path")


def test_required_coverage(shipped: Catalog) -> None:
    portable = ["coalesced-access", "shared-memory-tiling", "register-blocking-1d", "register-blocking-2d",
                "vectorized-loads", "bank-conflict-padding", "double-buffering", "warp-tiling",
                "loop-unrolling-and-launch-bounds", "grid-rasterization", "split-k", "tile-size-tuning",
                "transpose-a-tile-in-shared", "precompute-index-arithmetic"]
    for id in portable:
        assert set(shipped.get(id).backends) == {"cuda", "hip", "hlsl"}, id
        assert shipped.get(id).devices == [], id
    assert shipped.get("cuda-cp-async").extends == "double-buffering"
    assert shipped.get("hopper-wgmma").extends == "tensor-cores"
    assert shipped.get("hlsl-groupshared-tiling").extends == "shared-memory-tiling"
    assert shipped.get("amd-mfma").backends == ["hip"]


def test_f32_sessions_are_warned_off_tf32(shipped: Catalog) -> None:
    for id in ("tensor-cores", "hopper-wgmma", "mma-sync-ptx"):
        body = shipped.get(id).body
        assert "f32" in body and ("TF32" in body or "tensor-cores" in body), id


# --- filters ---------------------------------------------------------------------------------------------------


def test_filter_by_backend(shipped: Catalog) -> None:
    hlsl = {t.id for t in shipped.list(backend="hlsl")}
    assert "hlsl-groupshared-tiling" in hlsl and "shared-memory-tiling" in hlsl
    assert "tensor-cores" not in hlsl and "amd-mfma" not in hlsl
    assert all("hip" in t.backends for t in shipped.list(backend="HIP"))


def test_filter_by_device(shipped: Catalog) -> None:
    on_h100 = {t.id for t in shipped.list(device=H100)}
    on_mi300 = {t.id for t in shipped.list(device=MI300)}
    on_unknown = {t.id for t in shipped.list(device=UNKNOWN)}
    assert {"hopper-wgmma", "thread-block-clusters", "cuda-cp-async"} <= on_h100
    assert "amd-mfma" not in on_h100
    assert "amd-mfma" in on_mi300 and "hopper-wgmma" not in on_mi300
    assert "hopper-wgmma" not in on_unknown and "coalesced-access" in on_unknown
    assert {t.id for t in shipped.list(device=A100)} >= {"cuda-cp-async", "mma-sync-ptx"}
    assert "hopper-wgmma" not in {t.id for t in shipped.list(device=A100)}
    assert len(shipped.list()) == len(shipped)  # no device: no device filtering


def test_filter_by_problem_tag_and_text(shipped: Catalog) -> None:
    anywhere = {t.id for t in shipped.list() if t.for_any_problem}
    assert {"tile-size-tuning", "loop-unrolling-and-launch-bounds"} <= anywhere
    # written with A, B and C tiles: offered for GEMM-like problems only (an rmsnorm agent was sent to them)
    assert not {"coalesced-access", "vectorized-loads"} & anywhere
    assert {t.id for t in shipped.list(problem="conv3d")} == anywhere  # no traits: the texts for any problem
    conv = {t.id for t in shipped.list(problem="conv2d", traits=["convolution"])} - anywhere
    assert {"conv-implicit-gemm", "conv-gemm-smem-tiling", "conv-tensor-cores", "conv-filter-specialization",
            "conv-mma-swizzled", "conv-hopper-tma-wgmma", "register-blocking-2d"} <= conv
    assert "hopper-wgmma" not in conv and "online-softmax" not in conv  # a GEMM-only text, a row text
    tensor = {t.id for t in shipped.list(tag="Tensor-Cores")}
    assert {"tensor-cores", "mma-sync-ptx", "hopper-wgmma", "amd-mfma"} <= tensor
    assert "split-k" not in tensor
    assert [t.id for t in shipped.list(text="WGMMA.MMA_ASYNC")] == ["hopper-wgmma"]  # body text, any case
    assert "grid-rasterization" in {t.id for t in shipped.list(text="rasterization")}  # title
    combined = shipped.list(backend="cuda", device=H100, tag="tensor-cores")
    assert "amd-mfma" not in {t.id for t in combined} and "hopper-wgmma" in {t.id for t in combined}


def test_device_matching() -> None:
    h100 = DeviceDescriptor.of(H100)
    assert h100 is not None
    assert h100.matches("hopper") and h100.matches("SM_90") and h100.matches("sm_90a") and h100.matches("h100")
    assert h100.matches("sm_9*") and not h100.matches("sm_9") and not h100.matches("ampere")
    assert not DeviceDescriptor(arch="gfx90a").matches("gfx90")  # only NVIDIA feature suffixes are stripped
    assert DeviceDescriptor.of("NVIDIA H200").matches("h200")
    assert DeviceDescriptor.of(None) is None


# --- resolution ------------------------------------------------------------------------------------------------


def test_resolution_picks_the_most_specific_text(shipped: Catalog) -> None:
    assert shipped.resolve("tensor-cores", "cuda", H100).id == "hopper-wgmma"
    assert shipped.resolve("tensor-cores", "cuda", DeviceDescriptor(**H100)).id == "hopper-wgmma"
    assert shipped.resolve("tensor-cores", "cuda", UNKNOWN).id == "tensor-cores"
    assert shipped.resolve("tensor-cores", "cuda", None).id == "tensor-cores"
    assert shipped.resolve("tensor-cores", "cuda", A100).id == "tensor-cores"
    assert shipped.resolve("tensor-cores", "hip", MI300).id == "amd-mfma"
    assert shipped.resolve("double-buffering", "cuda", A100).id == "cuda-cp-async"
    assert shipped.resolve("double-buffering", "hip", MI300).id == "double-buffering"
    assert shipped.resolve("double-buffering", "cuda", UNKNOWN).id == "double-buffering"
    assert shipped.resolve("shared-memory-tiling", "hlsl", None).id == "hlsl-groupshared-tiling"
    assert shipped.resolve("shared-memory-tiling", "cuda", H100).id == "shared-memory-tiling"
    assert shipped.resolve("warp-tiling", "hip", MI300).id == "amd-lds-wave64-tiling"
    assert shipped.resolve("warp-tiling", "hip", H100).id == "warp-tiling"


def test_dtype_filters_listing_and_resolution(shipped: Catalog) -> None:
    """16-bit-only texts are listed and resolved only for f16/bf16 sessions."""
    hlsl_f32 = {t.id for t in shipped.list(backend="hlsl", dtype="f32")}
    assert "hlsl-16bit-types" not in hlsl_f32 and "hlsl-groupshared-tiling" in hlsl_f32
    assert "hlsl-16bit-types" in {t.id for t in shipped.list(backend="hlsl", dtype="f16")}
    assert "hlsl-16bit-types" in {t.id for t in shipped.list(backend="hlsl", dtype="bf16")}
    assert "hlsl-16bit-types" in {t.id for t in shipped.list(backend="hlsl")}  # no dtype: no dtype filtering
    assert shipped.resolve("tensor-cores", "cuda", H100, "f16").id == "hopper-wgmma"
    assert shipped.resolve("tensor-cores", "cuda", H100, "f32").id == "tensor-cores"  # wgmma is 16-bit only


def test_session_resolution_refuses_a_text_for_another_backend_or_dtype(shipped: Catalog) -> None:
    with pytest.raises(InvalidInput) as raised:
        shipped.resolve_for_session("tensor-cores", "hlsl", "f32", None)
    assert "written for cuda, not hlsl" in raised.value.message
    assert raised.value.hint and "list_transformations" in raised.value.hint
    with pytest.raises(InvalidInput) as raised:
        shipped.resolve_for_session("hlsl-16bit-types", "hlsl", "f32", None)
    assert "f16, bf16 sessions, not f32" in raised.value.message
    assert shipped.resolve_for_session("hlsl-16bit-types", "hlsl", "f16", None).id == "hlsl-16bit-types"
    assert shipped.resolve_for_session("shared-memory-tiling", "hlsl", "f32", None).id == "hlsl-groupshared-tiling"
    assert shipped.resolve_for_session("tensor-cores", "cuda", "bf16", A100).id == "tensor-cores"


def test_conv_and_attention_texts_serve_hlsl_sessions(shipped: Catalog) -> None:
    """Issue 23's agent session: an HLSL conv2d session had one text (then an empty suggest_next) and an HLSL
    attention session none, its listing a bare `[]`."""
    assert {"conv-implicit-gemm", "conv-gemm-smem-tiling"} <= {
        t.id for t in shipped.list("hlsl", problem="conv2d", traits=["convolution"])}
    assert "attention-online-tiling" in {
        t.id for t in shipped.list("hlsl", problem="attention_causal", traits=["attention"])}


def test_an_empty_listing_and_a_refusal_name_what_other_backends_have(tmp_path: Path) -> None:
    write(tmp_path, "att-cuda", front("att-cuda", problems="[attention]", tags="[attention]"))
    catalog = Catalog.load(tmp_path, [])
    assert catalog.list("hlsl", problem="attention") == []
    note = catalog.empty_note("hlsl", "attention")
    assert "no attention text is written for hlsl" in note and "att-cuda (cuda)" in note
    assert "submit_kernel" in note and "get_transformation" in note
    assert "nor for another backend" in catalog.empty_note("hlsl", "conv2d")
    # A filter that empties a backend's own texts is named, not the backend ("no attention text is written for cuda").
    assert catalog.list("cuda", problem="attention", tag="memory") == []
    note = catalog.empty_note("cuda", "attention", tag="memory", dtype="f32")
    assert "1 attention text(s) for cuda" in note and "tag='memory'" in note and "dtype" not in note
    with pytest.raises(InvalidInput) as raised:
        catalog.resolve_for_session("att-cuda", "hlsl", "f32", None, problem="attention")
    # Not "list_transformations shows what applies", which lists nothing here.
    assert "list_transformations" not in (raised.value.hint or "")
    assert "transformation='att-cuda'" in (raised.value.hint or "")


def test_unknown_id_has_a_hint(shipped: Catalog) -> None:
    with pytest.raises(NotFound) as raised:
        shipped.get("shared-memory-tilng")
    assert "shared-memory-tilng" in raised.value.message
    assert raised.value.hint and "shared-memory-tiling" in raised.value.hint
    with pytest.raises(NotFound):
        shipped.resolve("no-such-thing", "cuda", H100)


# --- user directories ------------------------------------------------------------------------------------------


def test_malformed_user_files_are_reported_and_skipped(tmp_path: Path) -> None:
    user = tmp_path / "user"
    bad_yaml = write(user, "bad-yaml", "id: bad-yaml\ntitle: [unclosed\nbackends: [cuda]")
    no_id = write(user, "no-id", "title: T\nbackends: [cuda]\nsummary: s")
    metal = write(user, "metal", front("metal", backends="[cuda, metal]"))
    orphan = write(user, "orphan", front("orphan", extends="no-such-base"))
    renamed = write(user, "renamed", front("other-name"))
    no_front = user / "no-front.md"
    no_front.write_text("# just markdown\n", encoding="utf-8")
    empty = write(user, "empty-body", front("empty-body"), body="")
    good = write(user, "my-trick", front("my-trick", after="[shared-memory-tiling, not-there]"))
    catalog = Catalog.load(builtin_transformations_dir(), [user])
    builtin_count = len(Catalog.load(builtin_transformations_dir()))

    errors = {(Path(e.file).name, e.field) for e in catalog.errors}
    assert errors == {(bad_yaml.name, "front matter"), (no_id.name, "id"), (metal.name, "backends"),
                      (orphan.name, "extends"), (renamed.name, "id"), (no_front.name, "front matter"),
                      (empty.name, "body")}
    messages = {Path(e.file).name: e.message for e in catalog.errors}
    assert "metal" in messages[metal.name] and "no-such-base" in messages[orphan.name]
    assert "line" in messages[bad_yaml.name]
    assert [(Path(w.file).name, w.field) for w in catalog.warnings] == [(good.name, "after")]
    assert "not-there" in catalog.warnings[0].message
    assert len(catalog) == builtin_count + 1
    assert not catalog.get("my-trick").builtin and "metal" not in catalog and "orphan" not in catalog
    info = catalog.info()
    assert info["user"] == ["my-trick"] and len(info["errors"]) == 7 and info["transformations"] == len(catalog)


def test_unknown_dtype_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "x", front("x", dtypes="[f64]"))
    catalog = Catalog.load(None, [tmp_path])
    assert "x" not in catalog
    assert any(e.field == "dtypes" and "f64" in e.message for e in catalog.errors), catalog.errors


def test_missing_sections_and_unknown_fields_only_warn(tmp_path: Path) -> None:
    write(tmp_path, "terse", front("terse", difficulty="hard"), body="Just do it.\n")
    catalog = Catalog.load(None, [tmp_path])
    assert catalog.errors == [] and "terse" in catalog
    fields = sorted(w.field or "" for w in catalog.warnings)
    assert fields == ["body", "difficulty"]


def test_user_file_overrides_a_builtin(tmp_path: Path) -> None:
    write(tmp_path, "shared-memory-tiling", front("shared-memory-tiling", backends="[cuda, hip, hlsl]",
                                                  title="'My own tiling'"))
    catalog = Catalog.load(builtin_transformations_dir(), [tmp_path])
    t = catalog.get("shared-memory-tiling")
    assert t.title == "My own tiling" and not t.builtin
    assert len(catalog) == len(Catalog.load(builtin_transformations_dir()))
    assert [(n.field, n.level) for n in catalog.notes] == [("id", "note")] and catalog.errors == []
    # Its shipped specialization still extends it.
    assert catalog.resolve("shared-memory-tiling", "hlsl", None).id == "hlsl-groupshared-tiling"


def test_user_specialization_and_duplicates(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    write(first, "my-h100-tiling", front("my-h100-tiling", extends="shared-memory-tiling", devices="[h100]"))
    write(second, "my-h100-tiling", front("my-h100-tiling", title="Second copy"))
    catalog = Catalog.load(builtin_transformations_dir(), [first, second])
    assert catalog.resolve("shared-memory-tiling", "cuda", H100).id == "my-h100-tiling"
    assert catalog.resolve("shared-memory-tiling", "cuda", A100).id == "shared-memory-tiling"
    assert catalog.get("my-h100-tiling").title == "Title of my-h100-tiling"
    assert [(Path(e.file).parent.name, e.field) for e in catalog.errors] == [("b", "id")]


def test_extends_cycle_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "ping", front("ping", extends="pong"))
    write(tmp_path, "pong", front("pong", extends="ping"))
    write(tmp_path, "base", front("base"))
    catalog = Catalog.load(None, [tmp_path])
    assert "ping" not in catalog and "pong" not in catalog and "base" in catalog
    assert {e.field for e in catalog.errors} == {"extends"}
    assert any("cycle" in e.message for e in catalog.errors)


def test_missing_directory_is_reported(tmp_path: Path) -> None:
    catalog = Catalog.load(builtin_transformations_dir(), [tmp_path / "nowhere"])
    assert [Path(e.file).name for e in catalog.errors] == ["nowhere"]
    assert len(catalog) >= 16


def test_directories_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from peak_mcp.core.config import Settings

    monkeypatch.setenv("PEAK_MCP_TRANSFORMATIONS", os.pathsep.join([str(tmp_path / "one"), "", str(tmp_path / "two")]))
    assert Settings.from_env().extra_catalog_dirs == [tmp_path / "one", tmp_path / "two"]
    monkeypatch.delenv("PEAK_MCP_TRANSFORMATIONS")
    assert Settings.from_env().extra_catalog_dirs == []


def test_builtin_directory_is_found() -> None:
    directory = builtin_transformations_dir()
    assert directory.is_dir() and (directory / "shared-memory-tiling.md").is_file()


def test_tuning_parameter_lines_in_texts_parse() -> None:
    """Texts that name tuning parameters write them as annotation lines the server accepts."""
    from peak_mcp.core.launch import parse_annotation

    catalog = Catalog.load(builtin_transformations_dir(), [])
    checked = 0
    for t in catalog.list():
        section = t.body.split("## Tuning parameters", 1)
        if len(section) < 2:
            continue
        text = section[1].split("\n## ", 1)[0]
        for line in text.splitlines():
            lines = re.findall(r"`(// peak: (?:params|where=)[^`]*)`", line)
            if not any(x.startswith("// peak: params") for x in lines):
                continue
            source = "// peak: entry=k grid=(1, 1, 1) block=(32, 1, 1)\n" + "\n".join(lines) + "\n"
            spec = parse_annotation(source, needs=("entry", "grid", "block"), symbols=("M", "N", "K"))
            assert spec.space_size() > 1 or len(spec.params) == 1, (t.id, line)
            checked += 1
    assert checked >= 12


def test_measured_speeds_are_read_and_matched_by_device(tmp_path: Path) -> None:
    """`measured`: a text's own measurement per device pattern; suggest_next ranks a text measured slower on the
    session's device after the rest."""
    from peak_mcp.catalog.transformations import DeviceDescriptor

    shipped = Catalog.load(builtin_transformations_dir())
    lavapipe = DeviceDescriptor(name="llvmpipe (LLVM 15.0.6, 256 bits)")
    assert shipped.get("row-per-block-reduction").measured_on(lavapipe) == ("llvmpipe", 0.29)
    h100 = DeviceDescriptor.of(H100)
    assert shipped.get("row-per-block-reduction").measured_on(h100) is None
    assert shipped.get("persistent-rows").measured_on(h100) == ("H100", 0.91)
    write(tmp_path, "bad", front("bad", measured="{llvmpipe: -1}"))
    catalog = Catalog.load(None, [tmp_path])
    assert "bad" not in catalog and [e.field for e in catalog.errors] == ["measured"]
