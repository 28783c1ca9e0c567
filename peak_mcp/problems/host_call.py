"""`HostCall`: one function a worker asks a problem host to run on inputs it sends once (problem_link's
`RemoteCode.calls`): the float64 and float32 references and the error scale of one input set."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HostCall:
    """The function's name, the precision its inputs are given at (float64 or float32: each call its own fresh
    copy), and its keywords (`xp` among them where it computes with the host's array module)."""

    function: str
    precision: str
    kwargs: dict[str, Any] = field(default_factory=dict)
