"""The frames a device worker and a problem host exchange: a JSON header, then raw array bytes. No pickle.

A frame is the header's length (8 bytes, big-endian), the header (JSON, at most MAX_HEADER bytes) and the bytes of
the arrays it lists (`arrays`: dtype and shape of each, numeric dtypes only). The reader bounds the header and the
arrays' total before it reads them, so a problem host that lies cannot make its worker read or allocate without
end. Values that are neither arrays nor JSON (a function's result of the wrong type) travel as their type's name.
"""

from __future__ import annotations

import json
import re
import socket
import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

MAX_HEADER = 1 << 20
MAX_DEPTH = 4
PROGRESS_BYTES = 1 << 30  # a receiver hears the bytes arrive every GiB
_KINDS = "biuf"  # bool, integers, floats: what inputs, references and error scales are made of
_TYPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}")


class WireError(Exception):
    """The other side broke the protocol or went away."""


def _host_array(value: Any) -> np.ndarray | None:
    """`value` as a numpy array if it is one (numpy, cupy, a torch tensor), else None."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        if hasattr(value, "detach"):  # torch
            value = value.detach().cpu().numpy()
        elif hasattr(value, "get"):  # cupy
            value = value.get()
        try:
            return np.asarray(value)
        except Exception:
            return None
    if isinstance(value, np.generic):
        return np.asarray(value)
    return None


def encode(value: Any, arrays: list[np.ndarray], depth: int = 0) -> Any:
    """`value` as JSON, its arrays appended to `arrays` (numpy) and named by index."""
    array = _host_array(value)
    if array is not None:
        if array.dtype.kind not in _KINDS:
            return {"t": f"array of {array.dtype}"}
        arrays.append(array if array.flags.c_contiguous else np.array(array, order="C"))  # 0-d stays 0-d
        return {"a": len(arrays) - 1}
    if isinstance(value, bool) or value is None:
        return {"t": type(value).__name__}
    if isinstance(value, int | float):
        return {"n": value}
    if isinstance(value, str):
        return {"s": value[:256]}
    if depth < MAX_DEPTH and isinstance(value, Mapping):
        return {"m": [[str(k)[:256], encode(v, arrays, depth + 1)] for k, v in list(value.items())[:64]]}
    if depth < MAX_DEPTH and isinstance(value, tuple | list):
        return {"l": [encode(v, arrays, depth + 1) for v in value[:64]]}
    return {"t": type(value).__name__}


class Foreign:
    """A value of a type that did not travel; its class carries the original's name for error messages."""


def _foreign(name: Any) -> Any:
    name = name if isinstance(name, str) and _TYPE_NAME.fullmatch(name) else "object"
    return type(name, (Foreign,), {})()


def decode(value: Any, arrays: list[np.ndarray], depth: int = 0) -> Any:
    """The inverse of `encode` for data from the other side; anything malformed is WireError."""
    if not isinstance(value, dict) or len(value) != 1 or depth > MAX_DEPTH:
        raise WireError("a value in the frame is malformed")
    (kind, item), = value.items()
    if kind == "a" and isinstance(item, int) and 0 <= item < len(arrays):
        return arrays[item]
    if kind == "n" and isinstance(item, int | float) and not isinstance(item, bool):
        return item
    if kind == "s" and isinstance(item, str):
        return item
    if kind == "t":
        return _foreign(item)
    if kind == "m" and isinstance(item, list):
        if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in item):
            raise WireError("a mapping in the frame is malformed")
        return {k: decode(v, arrays, depth + 1) for k, v in item}
    if kind == "l" and isinstance(item, list):
        return tuple(decode(v, arrays, depth + 1) for v in item)
    raise WireError("a value in the frame is malformed")


def send(sock: socket.socket, header: dict[str, Any], arrays: list[np.ndarray] = ()) -> None:  # type: ignore[assignment]
    header = {**header, "arrays": [{"dtype": a.dtype.str, "shape": list(a.shape)} for a in arrays]}
    text = json.dumps(header).encode()
    if len(text) > MAX_HEADER:
        raise WireError(f"a header of {len(text)} bytes is over {MAX_HEADER}")
    try:
        sock.sendall(struct.pack(">Q", len(text)) + text)
        for array in arrays:
            contiguous = array if array.flags.c_contiguous else np.array(array, order="C")
            sock.sendall(memoryview(contiguous.reshape(-1)).cast("B"))
    except OSError as exc:
        raise WireError(f"the other side is gone ({exc.strerror or exc})") from None


def _read_exactly(sock: socket.socket, view: memoryview,
                  on_bytes: Callable[[int], None] | None = None) -> None:
    """Fill `view`; `on_bytes(n)` hears each read's byte count."""
    while len(view):
        try:
            got = sock.recv_into(view)
        except OSError as exc:
            raise WireError(f"the other side is gone ({exc.strerror or exc})") from None
        if got == 0:
            raise WireError("the other side closed the connection")
        view = view[got:]
        if on_bytes is not None:
            on_bytes(got)


def _dtype(text: Any) -> np.dtype[Any]:
    try:
        dtype = np.dtype(text) if isinstance(text, str) and len(text) <= 8 else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in _KINDS or dtype.itemsize > 8 or dtype.hasobject or not dtype.isnative:
        raise WireError(f"an array of dtype {str(text)[:16]!r} is not data this side reads")
    return dtype


def receive(sock: socket.socket, max_bytes: int,
            on_bytes: Callable[[int, int], None] | None = None) -> tuple[dict[str, Any], list[np.ndarray]]:
    """The next frame: its header and its arrays, at most `max_bytes` of them in all. `on_bytes(done, total)`
    hears the arrays' bytes arrive, every PROGRESS_BYTES."""
    size = bytearray(8)
    _read_exactly(sock, memoryview(size))
    (length,) = struct.unpack(">Q", size)
    if length > MAX_HEADER:
        raise WireError(f"a header of {length} bytes is over {MAX_HEADER}")
    text = bytearray(length)
    _read_exactly(sock, memoryview(text))
    try:
        header = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise WireError("a header that is no JSON, or nested past what this side reads") from None
    specs = header.get("arrays") if isinstance(header, dict) else None
    if not isinstance(specs, list) or len(specs) > 256:
        raise WireError("a header without its list of arrays")
    shapes = []
    total = 0
    for spec in specs:
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if not isinstance(shape, list) or len(shape) > 8 or \
                not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 40 for n in shape):
            raise WireError("an array of a malformed shape")
        dtype = _dtype(spec.get("dtype"))
        count = 1
        for n in shape:
            count *= n
        total += count * dtype.itemsize
        if total > max_bytes:
            raise WireError(f"arrays of more than {max_bytes} bytes, more than this call can hold")
        shapes.append((dtype, tuple(shape)))
    arrays = []
    done = reported = 0

    def arrived(n: int) -> None:  # a 12 GiB answer takes longer to cross than the pool's inactivity limit
        nonlocal done, reported
        done += n
        if on_bytes is not None and done - reported >= PROGRESS_BYTES:
            reported = done
            on_bytes(done, total)

    for dtype, shape in shapes:
        array = np.empty(shape, np.uint8 if dtype.kind == "b" else dtype)
        _read_exactly(sock, memoryview(array.reshape(-1)).cast("B"), arrived)
        arrays.append(array != 0 if dtype.kind == "b" else array)  # a bool is 0 or 1, whatever byte came
    return header, arrays
