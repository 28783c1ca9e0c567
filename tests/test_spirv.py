"""SPIR-V reflection on checked-in modules (tests/data/spirv, made from the .hlsl next to them: see README.md there)
and on hand-assembled ones for what glslang never emits. Pure parsing: no compiler, no Vulkan device."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from peak_mcp.backends.spirv import MAGIC, Binding, reflect

DATA = Path(__file__).resolve().parent / "data" / "spirv"


def spv(name: str) -> bytes:
    return (DATA / f"{name}.spv").read_bytes()


# --- modules glslang made from HLSL --------------------------------------------------------------------------


def test_matmul_module() -> None:
    info = reflect(spv("matmul_naive"), "main")
    assert info.entry_points == ["main"] and info.local_size == (16, 16, 1)
    assert info.push_constant_bytes == 12 and info.groupshared_bytes == 0
    assert info.bindings == [Binding(0, 0, "storage_buffer", "A", 1), Binding(0, 1, "storage_buffer", "B", 1),
                             Binding(0, 2, "storage_buffer", "C", 1)]
    assert info.capability_names() == []  # Shader (1) is not a device feature


def test_groupshared_half_module() -> None:
    info = reflect(spv("groupshared_half"), "main")
    assert info.local_size == (256, 1, 1)
    assert info.groupshared_bytes == 2 * 8 * 32 * 16 + 4  # two float4[8][32] tiles and a uint
    assert info.push_constant_bytes == 20
    assert info.capability_names() == ["Float16", "StorageBuffer16BitAccess"]
    assert [(b.binding, b.name, b.kind) for b in info.bindings] == [
        (0, "A", "storage_buffer"), (1, "B", "storage_buffer"), (2, "C", "storage_buffer")]


def test_descriptors_outside_the_abi_are_told_apart() -> None:
    info = reflect(spv("non_abi"), "main")
    assert info.local_size == (8, 4, 2) and info.push_constant_bytes == 0
    by_name = {b.name: b for b in info.bindings}
    assert by_name["Extra"] == Binding(0, 3, "uniform_buffer", "Extra", 1)  # cbuffer: named by its block
    assert by_name["$Global"].kind == "uniform_buffer"  # the global without `static`
    assert by_name["OtherSet"] == Binding(1, 0, "storage_buffer", "OtherSet", 1)
    assert by_name["Many"] == Binding(0, 4, "texture_or_sampler", "Many", 3)
    assert by_name["Tex"] == Binding(0, 6, "texture_or_sampler", "Tex", 1)
    assert by_name["Plain"].kind == "storage_buffer"
    assert [(b.set, b.binding) for b in info.bindings] == sorted((b.set, b.binding) for b in info.bindings)


def test_another_entry_name_has_no_local_size() -> None:
    info = reflect(spv("matmul_naive"), "matmul")
    assert info.entry_points == ["main"] and info.local_size is None


@pytest.mark.parametrize("name", ["matmul_naive", "groupshared_half", "non_abi"])
def test_truncated_or_foreign_bytes_are_refused(name: str) -> None:
    data = spv(name)
    with pytest.raises(ValueError, match="not a SPIR-V module"):
        reflect(data[:-2], "main")  # not whole words
    with pytest.raises(ValueError, match="bad magic"):
        reflect(b"\x00" * 4 + data[4:], "main")
    with pytest.raises(ValueError, match="not a SPIR-V module"):
        reflect(data[:16], "main")  # shorter than the header


# --- hand-assembled modules ----------------------------------------------------------------------------------


def words_of(text: str) -> list[int]:
    raw = text.encode() + b"\0"
    raw += b"\0" * (-len(raw) % 4)
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))


def op(code: int, *operands: int) -> list[int]:
    return [(len(operands) + 1) << 16 | code, *operands]


def module(*instructions: list[int]) -> bytes:
    words = [MAGIC, 0x00010500, 0, 100, 0] + [w for inst in instructions for w in inst]
    return struct.pack(f"<{len(words)}I", *words)


# ids: 1 entry function, 2 uint, 3-5 constants, 6 float, 7 runtime array, 8 struct, 9 pointer, 10 variable,
# 11 push struct, 12 push pointer, 13 push variable
DXC_STYLE = [
    op(15, 5, 1, *words_of("cs_main")),  # OpEntryPoint GLCompute %1 "cs_main"
    op(331, 1, 38, 3, 4, 5),  # OpExecutionModeId LocalSizeId %3 %4 %5
    op(71, 7, 6, 4), op(71, 10, 34, 0), op(71, 10, 33, 2),  # ArrayStride 4; DescriptorSet 0; Binding 2
    op(5, 10, *words_of("out_buf")),
    op(21, 2, 32, 0), op(43, 2, 3, 64), op(43, 2, 4, 2), op(50, 2, 5, 1),  # uint; 64, 2, spec constant 1
    op(22, 6, 32), op(29, 7, 6), op(30, 8, 7), op(32, 9, 12, 8), op(59, 9, 10, 12),  # StorageBuffer class
    op(30, 11, 2, 2, 2, 2, 2), op(72, 11, 4, 35, 16), op(72, 11, 0, 35, 0),  # Offsets for 2 of 5 members only
    op(32, 12, 9, 11), op(59, 12, 13, 9),
]


def test_dxc_style_module() -> None:
    """dxc writes storage buffers in the StorageBuffer class and may give LocalSize through constant ids."""
    info = reflect(module(*DXC_STYLE), "cs_main")
    assert info.entry_points == ["cs_main"] and info.local_size == (64, 2, 1)
    assert info.bindings == [Binding(0, 2, "storage_buffer", "out_buf", 1)]
    assert info.push_constant_bytes == 20  # without an Offset on every member: the members' sizes summed


def test_push_constant_size_follows_member_offsets() -> None:
    # struct { uint a (offset 0); uint b (offset 8) } -> 12 bytes, not 8; a 6-byte block rounds up to 8.
    info = reflect(module(op(21, 2, 32, 0), op(30, 3, 2, 2), op(72, 3, 0, 35, 0), op(72, 3, 1, 35, 8),
                          op(32, 4, 9, 3), op(59, 4, 5, 9)), "main")
    assert info.push_constant_bytes == 12
    info = reflect(module(op(21, 2, 16, 0), op(30, 3, 2, 2, 2), op(32, 4, 9, 3), op(59, 4, 5, 9)), "main")
    assert info.push_constant_bytes == 8


def test_buffer_without_binding_and_buffer_arrays() -> None:
    head = [op(21, 2, 32, 0), op(29, 3, 2), op(30, 4, 3), op(43, 2, 7, 4)]
    unbound = reflect(module(*head, op(32, 5, 12, 4), op(59, 5, 6, 12)), "main")
    assert unbound.bindings == [Binding(0, -1, "storage_buffer", "", 1)]
    arrays = reflect(module(*head, op(28, 8, 4, 7), op(32, 9, 12, 8), op(59, 9, 10, 12), op(5, 10, *words_of("fixed")),
                            op(29, 11, 4), op(32, 12, 12, 11), op(59, 12, 13, 12), op(71, 13, 33, 1)), "main")
    assert [(b.name, b.count) for b in arrays.bindings] == [("fixed", 4), ("", 0)]  # runtime-sized: count 0


def test_zero_length_instruction_is_refused() -> None:
    with pytest.raises(ValueError, match="zero-length"):
        reflect(module([0]), "main")
