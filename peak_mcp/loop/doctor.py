"""doctor: what this machine can do for each backend (compiler, devices, what is missing and how to fix it), the
queues of the workers, and what confines the processes that run agent and problem text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from peak_mcp import __version__
from peak_mcp.backends.confined import CompileLimits
from peak_mcp.confine.sandbox import Protection, landlock_abi, probe_protections
from peak_mcp.core.config import Settings
from peak_mcp.core.devices import describe
from peak_mcp.loop.devices import Devices
from peak_mcp.loop.models import BackendStatus, DoctorReport, Missing
from peak_mcp.runner.pool import DevicePool

if TYPE_CHECKING:
    from peak_mcp.runner.ray_pool import RayDevicePool


def doctor(settings: Settings, machine: Devices, pool: DevicePool | RayDevicePool,
           catalog_info: dict[str, Any] | None = None) -> DoctorReport:
    """Every backend as the probe found it: usable (compiles), can run (a device too), its devices with their queues,
    what is missing with the fix; the workers' restarts and the sandbox."""
    statuses = []
    for name, report in machine.probe(refresh=True).items():
        devices = [describe(d, machine.profiles) for d in report.get("devices", [])]
        compiler_ok = bool(report.get("compiler", {}).get("available"))
        statuses.append(BackendStatus(
            backend=name, usable=compiler_ok, can_run=compiler_ok and bool(devices),
            devices=[{**d.model_dump(exclude_none=True),
                      "queued_jobs": pool.queue_length(name, int(d.index if d.index is not None else -1))}
                     for d in devices],
            compiler=report.get("compiler", {}), missing=[Missing(**m) for m in report.get("missing", [])]))
    return DoctorReport(version=__version__, data_dir=str(settings.data_dir), backends=statuses,
                        catalog=catalog_info or {}, workers={"restarts": pool.restarts},
                        sandbox=sandbox_summary(settings))


def sandbox_summary(settings: Settings) -> str:
    """What confines the processes that run agent and problem text here (measured by starting one: namespaces,
    read-only kernel knobs, cgroups, capabilities, Landlock and what it denies, or why each is missing), then
    the limits every compile runs under."""
    limits = CompileLimits(**settings.confinement())
    if not settings.sandbox:
        off = Protection(0, "switched off by PEAK_MCP_SANDBOX=0")
        return f"{off.describe()}; each compile: {limits.describe()}"
    found = probe_protections()
    missing = f"; missing: {'; '.join(found['missing'])}" if found["missing"] else ""
    return (f"{'; '.join(found['landlock'] or [landlock_abi().describe()])}; isolation: "
            f"{', '.join(found['held']) or 'none'}{missing}; each compile: {limits.describe()}")
