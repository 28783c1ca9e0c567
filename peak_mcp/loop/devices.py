"""The devices a server offers: the backends' probe (in a child process), each device described from its profile,
a session placed on the least loaded one, and the devices a tune of a session may fan out to."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from peak_mcp.backends.registry import BACKENDS
from peak_mcp.core.config import Settings
from peak_mcp.core.devices import Device, cuda_family, describe, load_profiles
from peak_mcp.core.errors import InvalidInput, Unavailable
from peak_mcp.loop.tuning.fanout import tuning_devices
from peak_mcp.runner.pool import DevicePool
from peak_mcp.store.database import Store
from peak_mcp.store.records import SessionRow

if TYPE_CHECKING:
    from peak_mcp.runner.ray_pool import RayDevicePool


class TwinLedger:
    """Which idle twins a submission's checks beside hold (loop/pipeline/beside.py), and which were set aside: a
    pick and its hold are one step, so two submissions never take one twin."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._held: set[tuple[str, int]] = set()
        self._aside: set[tuple[str, int]] = set()

    def take(self, backend: str, idle: list[int], homes: Counter[int]) -> int | None:
        """Of the idle twins, the one fewest sessions call home (another session's own device is its to time on),
        held until release(); None where every one is held or set aside."""
        with self._guard:
            free = [d for d in idle if (backend, d) not in self._held | self._aside]
            if not free:
                return None
            device = min(free, key=lambda d: (homes[d], d))
            self._held.add((backend, device))
            return device

    def release(self, backend: str, device: int) -> None:
        with self._guard:
            self._held.discard((backend, device))

    def set_aside(self, backend: str, device: int) -> None:
        """A twin whose job failed where the session's own device did not: not taken again by this server."""
        with self._guard:
            self._aside.add((backend, device))


class Devices:
    def __init__(self, settings: Settings, store: Store, pool: DevicePool | RayDevicePool,
                 probe: Callable[[], dict[str, Any]]) -> None:
        self.settings, self.store, self.pool = settings, store, pool
        self.twins = TwinLedger()
        self._probe_fn = probe
        self._probe: dict[str, Any] | None = None
        self.profiles = load_profiles()
        self._devices: dict[str, Device] = {}  # session id -> described device

    def probe(self, refresh: bool = False) -> dict[str, Any]:
        if self._probe is None or refresh:
            self._probe = self._probe_fn()
        return self._probe

    def device_for(self, backend: str, device: str | int | None = None) -> tuple[Device, int]:
        """A device of `backend` (see `place`), or a compile-only target where a backend can compile without one."""
        if backend not in BACKENDS:
            raise InvalidInput(f"unknown or unavailable backend {backend!r}", f"choose one of {sorted(BACKENDS)}.")
        report = self.probe().get(backend, {})
        if report.get("devices"):
            chosen = self.place(backend, report["devices"], device)
            return describe(chosen, self.profiles), int(chosen["index"])
        if device not in (None, "auto"):
            raise InvalidInput(f"device={device!r}: this machine has no {backend} device",
                               "omit device (a compile-only session), or run the doctor tool.")
        if not report.get("compiler", {}).get("available"):
            why = "; ".join(f"{m['what']}: {m['why']} (fix: {m['fix']})" for m in report.get("missing", []))
            raise Unavailable(f"the {backend} backend cannot compile on this machine: {why}",
                              "run the doctor tool for details.")
        if backend == "cuda":  # the target the compiler really uses ($PEAK_CUDA_ARCH), so resolution matches it
            arch = self.settings.cuda_arch
            return Device(name="compile-only (no GPU)", backend="cuda", index=-1, arch=arch,
                          family=cuda_family(arch)), -1
        if report.get("compile_target"):  # a backend that names its own compile-only target (hip: gfx90a or sm_)
            return describe(report["compile_target"], self.profiles), -1
        why = "; ".join(f"{m['what']}: {m['why']} (fix: {m['fix']})" for m in report.get("missing", []))
        raise Unavailable(f"no {backend} device on this machine: {why}", "run the doctor tool for details.")

    def place(self, backend: str, devices: list[dict[str, Any]], device: str | int | None) -> dict[str, Any]:
        """`device`: an index, a name pattern (case-insensitive substring), or None/"auto". Among the candidates,
        the least loaded: fewest jobs queued, then fewest sessions, then the lowest index."""
        candidates = devices
        if isinstance(device, bool):
            raise InvalidInput(f"device={device!r} is not a device", "pass an index, a name pattern or 'auto'.")
        if isinstance(device, int) or (isinstance(device, str) and device.strip().isdigit()):
            candidates = [d for d in devices if int(d["index"]) == int(device)]
        elif isinstance(device, str) and device.strip().lower() not in ("", "auto"):
            candidates = [d for d in devices if device.strip().lower() in str(d.get("name", "")).lower()]
        if not candidates:
            listed = ", ".join(f"{d['index']}: {d.get('name')}" for d in devices)
            raise InvalidInput(f"no {backend} device matches device={device!r}", f"this machine has {listed}.")
        sessions = Counter(s.device_index for s in self.store.sessions() if s.backend == backend)
        return min(candidates, key=lambda d: (self.pool.queue_length(backend, int(d["index"])),
                                              sessions[int(d["index"])], int(d["index"])))

    def remember(self, session_id: str, device: Device) -> None:
        """The device a session was just placed on, as device_of will answer for it."""
        self._devices[session_id] = device

    def device_of(self, session: SessionRow) -> Device:
        """The device as described when the session started (stored with it, so everything resolved by device
        answers the same after a restart); sessions from before that was stored are described again."""
        cached = self._devices.get(session.id)
        if cached is None and session.device_info:
            cached = Device.model_validate(session.device_info)
        if cached is None:
            report = self.probe().get(session.backend, {})
            found = [d for d in report.get("devices", []) if d.get("name") == session.device]
            cached = describe(found[0], self.profiles) if found else describe({"name": session.device},
                                                                              self.profiles)
        self._devices[session.id] = cached
        return cached

    def warm_twins(self, session: SessionRow) -> None:
        """Start, in the background, the workers of the devices a tune of this session would spread over (same
        model, idle), so that its first batch does not wait for them."""
        for index in self.tuning_devices(session)[1:]:
            threading.Thread(target=self.pool.warm, args=(session.backend, index), name=f"warm-{index}",
                             daemon=True).start()

    def tuning_devices(self, session: SessionRow) -> list[int]:
        """The devices a tune of this session measures on now: its own, and every idle one of the same model."""
        report = self.probe().get(session.backend, {})
        devices = [(int(d["index"]), describe(d, self.profiles)) for d in report.get("devices", [])]
        return tuning_devices(self.device_of(session), session.device_index, devices,
                              lambda index: self.pool.queue_length(session.backend, index))
