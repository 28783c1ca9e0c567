"""Configuration, the phase before evaluation: the tuning parameters a new version is evaluated at, and where they
came from."""

from __future__ import annotations

from typing import NamedTuple

from peak_mcp.core.errors import PeakError
from peak_mcp.loop.context import LoopContext
from peak_mcp.store.records import SessionRow


class Configuration(NamedTuple):
    params: dict[str, int] | None  # None: the source declares no parameters (or its annotation does not parse)
    params_from: str | None  # "parent" or "defaults"
    inherited: list[str] | None  # the names whose values are the parent's
    tuned_on: int | None = None  # the version whose tune chose them: the parent, or the one it inherited from


def configuration(ctx: LoopContext, session: SessionRow, source: str,
                  parent: int | None) -> Configuration:
    """The configuration a new version is evaluated at, and where it came from: its parent's tuned one
    ("parent") for each parameter the source declares under the same name with that value among its
    candidates, when the whole meets `where` at the session's sizes; else the defaults. The third item: the names
    whose values are the parent's (the rest are defaults); the fourth, the version whose tune chose them.
    (None, None, None) for a source without parameters, or one whose annotation does not parse (the evaluation
    says why)."""
    try:
        spec = ctx.spec(session, source)
    except PeakError:
        return Configuration(None, None, None)
    if not spec.params:
        return Configuration(None, None, None)
    ran = ctx.store.version(session.id, parent).timing if parent is not None else None
    tuned = ran.params if ran and ran.params and ran.params_from != "defaults" else {}
    taken = {name: value for name, value in tuned.items() if value in spec.params.get(name, ())}
    if taken:
        config = spec.config(taken)
        try:
            if not spec.violated(session.sizes, config):
                assert ran is not None and parent is not None  # `taken` came from its timing
                tuned_on = (ran.params_tuned_on if ran.params_from == "parent" else None) or parent
                return Configuration(config, "parent", list(taken), tuned_on)
        except PeakError:
            pass
    return Configuration(spec.config(), "defaults", None)
