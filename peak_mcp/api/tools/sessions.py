"""Sessions and versions: start, submit, re-check, history, profile."""

from __future__ import annotations

import base64
from typing import Annotated, Any

import mcp.types as types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from peak_mcp.api.host_paths import for_agent, problems_for_agent
from peak_mcp.api.responses import lean, result
from peak_mcp.api.summaries import summary
from peak_mcp.api.tools.common import (
    BACKEND,
    DTYPE,
    MOVES_HEAD,
    READ_ONLY,
    RECORDS,
    RUNS_ONLY,
    SessionId,
    Size,
    Version,
    VersionNumber,
    call,
)
from peak_mcp.catalog.transformations import Catalog
from peak_mcp.core.errors import PeakError
from peak_mcp.core.text import LABEL_MAX_CHARS
from peak_mcp.loop.apply import Applier
from peak_mcp.loop.models import (
    CheckReport,
    DiffReport,
    DoctorReport,
    HistoryReport,
    ProblemInfo,
    ProblemList,
    SessionInfo,
    SessionList,
    Submission,
    TuneAnswer,
    VersionDetail,
    VersionReport,
)
from peak_mcp.loop.service import PeakService
from peak_mcp.store.reports import markdown_table

VersionAnswer, DiffAnswer = VersionDetail, DiffReport
HISTORY_TEXT_ROWS = 20  # rows of history's text table; its structured rows hold every version


def register(mcp: MCPServer, service: PeakService, catalog: Catalog, applier: Applier) -> None:
    """The session and version tools."""

    @mcp.tool(annotations=READ_ONLY)
    async def doctor() -> Annotated[types.CallToolResult, DoctorReport]:
        """Backends and devices found on this machine, and for each one missing, why and how to fix it. Toolkit
        paths read as labels (`<cuda>/include`), not where this host keeps them."""
        return result(for_agent(await call(None, service.doctor, catalog.info())))

    @mcp.tool(annotations=READ_ONLY)
    async def list_problems(problem: Annotated[str | None, Field(
            description="one problem's name: it in full, with its kernel ABI for every backend and dtype")] = None
                            ) -> Annotated[types.CallToolResult, ProblemList]:
        """Problems the server can check and time, one line each: size symbols and defaults, dtypes per backend,
        traits. With problem, that one in full: its kernel ABI for every backend and dtype (start_session gives the
        session's own)."""
        return result(problems_for_agent(await call(None, service.problem_files.list_problems, problem)))

    @mcp.tool(annotations=RECORDS)
    async def define_problem(
        source: Annotated[str, Field(description="a problem file's text (docs/problems.md: NAME, SIZES, INPUTS, "
                                                 "OUTPUTS, reference, NAIVE kernels inline), or a KernelBench module "
                                                 "(class Model, get_inputs, get_init_inputs)")],
        name: Annotated[str | None, Field(description="the problem's name, for a KernelBench module (a problem "
                                                      "file names itself with NAME)")] = None,
    ) -> Annotated[types.CallToolResult, ProblemInfo]:
        """Define a problem for your own code: the source is read in a confined process (its reference tried at
        small sizes) and, if that succeeds, saved in the server's data directory, where it takes precedence over
        other problems of its name. Answers its symbols, dtypes and ABI per backend; start_session then takes it.
        Over HTTP only where the operator allows it."""
        info = await call(None, service.define_problem, source, name)
        return result(problems_for_agent(ProblemList(problems=[info], errors=[])).problems[0])

    @mcp.tool(annotations=RECORDS)
    async def start_session(
        ctx: Context,
        problem: Annotated[str, Field(description="problem name, e.g. matmul")] = "matmul",
        backend: Annotated[str, BACKEND] = "cuda",
        dtype: Annotated[str, DTYPE] = "f32",
        # Any values: the problem checks each one and says which is wrong, in words rather than a schema error.
        sizes: Annotated[dict[str, Any] | str | None, Field(
            description="{'M': 4096, 'N': 4096, 'K': 4096}, or 'M=4096,N=4096,K=4096'; symbols left out take the "
                        "problem's defaults (the answer's note says which); default: the problem's, less on a CPU "
                        "device")] = None,
        label: Annotated[str | None, Field(
            description=f"a name for the session, shown in list_sessions: one line of visible text, at most "
                        f"{LABEL_MAX_CHARS} characters", json_schema_extra={"maxLength": LABEL_MAX_CHARS})] = None,
        device: Annotated[int | str | None, Field(
            description="which device: an index, a name pattern such as 'H100', or 'auto' (default: the least "
                        "loaded of the backend's devices; doctor lists them with their queues)")] = None,
        constraints: Annotated[list[str] | None, Field(
            description="size conditions kernels may assume, e.g. ['M % 128 == 0', 'K >= 64']; generality checks "
                        "only sizes that meet them")] = None,
        reference_kernel: Annotated[str | None, Field(
            description="the user's current kernel (whole file, `// peak:` annotation included): it becomes v0, "
                        "validated against the problem's reference like any version; for a problem without a Python "
                        "reference (list_problems says so) it is the reference every candidate is checked "
                        "against")] = None,
    ) -> Annotated[types.CallToolResult, SessionInfo]:
        """Start a session: version 0 is the naive kernel (or reference_kernel), validated and benchmarked; the
        vendor library is timed in the same run. A problem with no naive kernel for the backend starts with no
        version: the first kernel submitted is v0."""
        return result(await call(ctx, service.start_session, problem, backend, dtype, sizes, label, progress=None,
                                 constraints=constraints, device=device, reference_kernel=reference_kernel))

    @mcp.tool(annotations=READ_ONLY)
    async def list_sessions(
        offset: Annotated[int, Field(strict=True, ge=0, description="sessions to skip")] = 0,
        limit: Annotated[int, Field(strict=True, ge=1, le=100, description="sessions per page")] = 20,
    ) -> Annotated[types.CallToolResult, SessionList]:
        """Sessions in the data directory, oldest first, one line each (start_session's answer has the details);
        `total` says how many there are, page with offset."""
        return result(await call(None, service.session_list, offset, limit))

    @mcp.tool(annotations=RECORDS)
    async def submit_kernel(
        ctx: Context,
        session_id: SessionId,
        source: Annotated[str, Field(description="the whole kernel file, with its `// peak:` annotation line")],
        parent: Annotated[VersionNumber | None,
                          Field(description="the version this derives from (default: head)")] = None,
        transformation: Annotated[str | None, Field(description="catalog id of the transformation applied")] = None,
        require_generality: Annotated[bool, Field(
            description="head moves to this version only if it also passes at the sampled other sizes")] = True,
    ) -> Annotated[types.CallToolResult, Submission]:
        """Compile, validate and benchmark a kernel as a new version of the session; then validate it at sampled
        other sizes (generality)."""
        if transformation is not None:  # statistics count only catalog transformations
            try:
                catalog.get(transformation)
            except PeakError as exc:
                raise ToolError(f"{exc}\nOmit transformation for a kernel written freely.") from None
        if transformation:
            attached = await call(ctx, applier.attach_submission, session_id, transformation, source, parent,
                                  progress=None)
            if attached is not None:
                return result(attached)
        return result(await call(ctx, service.submit_kernel, session_id, source, parent, transformation,
                                 progress=None, require_generality=require_generality))

    @mcp.tool(annotations=RUNS_ONLY)
    async def validate(
        ctx: Context, session_id: SessionId, version: Version = None,
        sizes: Annotated[dict[str, Size] | None, Field(description="other sizes to check generality")] = None,
        trials: Annotated[int | None, Field(strict=True, description="random input sets, 1-20")] = None,
    ) -> Annotated[types.CallToolResult, CheckReport]:
        """Re-check a version (default: head) for correctness, optionally at other sizes."""
        return result(await call(ctx, service.check, session_id, version, sizes, benchmark=False, trials=trials,
                          progress=None))

    @mcp.tool(annotations=RUNS_ONLY)
    async def benchmark(
        ctx: Context, session_id: SessionId, version: Version = None,
        sizes: Annotated[dict[str, Size] | None, Field(description="other sizes to time at (default: the session's)")]
        = None,
        time_budget_s: Annotated[float | None, Field(description="seconds of timed launches, 0.05-60")] = None,
    ) -> Annotated[types.CallToolResult, CheckReport]:
        """Validate and time a version (default: head), optionally at other sizes; the vendor library is timed
        in the same run."""
        return result(await call(ctx, service.check, session_id, version, sizes, benchmark=True,
                          time_budget_s=time_budget_s, progress=None))

    @mcp.tool(annotations=READ_ONLY)
    async def history(session_id: SessionId,
                      chart: Annotated[bool, Field(description="also a PNG of the lineage")] = False
                      ) -> Annotated[types.CallToolResult, HistoryReport]:
        """The version table (parent, transformation, status, time, TFLOP/s, speedups); with chart=true also a PNG
        of performance along the sequence."""
        report = await call(None, service.history, session_id)
        images = []
        if chart:
            png = await call(None, service.history_chart, session_id, compact=True)
            images.append(types.ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"))
        # The text: a line of standing and the table (it reads better than JSON), HISTORY_TEXT_ROWS rows at most.
        # Structured content has every row, lean like every answer (no empty fields), and not the table again.
        text = f"{summary('HistoryReport', lean(report))}\n{markdown_table(report.rows, keep=HISTORY_TEXT_ROWS)}"
        # ×v0's noise mark is the table's (get_version gives it per version): 50 rows of it outgrew the answer
        rows = [{k: v for k, v in row.items() if v is not None and k != "change_vs_v0"} for row in report.rows]
        return result(report.model_copy(update={"table": "", "rows": rows}), *images, text=text)

    @mcp.tool(annotations=READ_ONLY)
    async def get_version(session_id: SessionId,
                          version: Version = None) -> Annotated[types.CallToolResult, VersionAnswer]:
        """One version's source and report (default: head)."""
        return result(await call(None, service.get_version, session_id, version))

    @mcp.tool(annotations=READ_ONLY)
    async def diff(session_id: SessionId, a: Annotated[VersionNumber, Field(description="the older version")],
                   b: Annotated[VersionNumber | None, Field(description="the newer version (default: head)")] = None
                   ) -> Annotated[types.CallToolResult, DiffAnswer]:
        """Unified diff between two versions' sources (b defaults to head)."""
        return result(await call(None, service.diff, session_id, a, b))

    @mcp.tool(annotations=MOVES_HEAD)
    async def revert(
        session_id: SessionId, version: Annotated[VersionNumber, Field(description="the version to make head")],
        require_generality: Annotated[bool, Field(
            description="refuse a version that failed at other sizes (generality)")] = True,
    ) -> Annotated[types.CallToolResult, VersionReport]:
        """Make an earlier passing version the head again; nothing is deleted."""
        return result(await call(None, service.revert, session_id, version, require_generality))

    @mcp.tool(annotations=RECORDS)
    async def tune(
        ctx: Context, session_id: SessionId, version: Version = None,
        strategy: Annotated[str, Field(description="auto (exhaustive when the space fits max_configs, else optuna), "
                                                   "exhaustive, random or optuna",
                                       json_schema_extra={"enum": ["auto", "exhaustive", "random", "optuna"]})]
        = "auto",
        max_configs: Annotated[int, Field(strict=True, ge=1, le=4096, description="configurations to try")] = 64,
        budget_s: Annotated[float | None, Field(ge=1, le=3600, description="stop after this many seconds")] = None,
        again: Annotated[bool, Field(description="search again even where this version's space was already "
                                                 "searched in full at these sizes on this device (its record is "
                                                 "returned otherwise)")] = False,
    ) -> Annotated[types.CallToolResult, TuneAnswer]:
        """Search a version's tuning parameters (`// peak: params` / `where` lines): configurations compiled in
        parallel, invalid ones pruned with the reason, the rest validated and timed briefly; where the fastest few
        are within noise of each other they are timed again before choosing (chosen_by says how); the best is then
        validated and timed in full and becomes the version's performance. Every configuration is stored (history,
        get_version); this answer lists the 16 fastest and 10 pruned, and each failed configuration with its cause.
        A space already searched in full is not searched again unless again=true."""
        report = await call(ctx, service.tune, session_id, version, strategy=strategy, max_configs=max_configs,
                            budget_s=budget_s, again=again, progress=None)
        fastest = sorted(report.results, key=lambda r: (r.status != "ok", r.median_ms or 0.0))[:16]
        pruned, retimed = report.pruned[:10], report.retimed
        if len(report.devices) <= 1:  # one device measured them all: `devices` says which, once
            fastest, pruned, retimed = ([r.model_copy(update={"device": None}) for r in rows]
                                        for rows in (fastest, pruned, retimed))
        head, best = await call(None, service.head_and_best, session_id)
        trimmed = report.model_copy(update={"results": fastest, "pruned": pruned, "retimed": retimed})
        counts = {"passed_count": sum(r.status == "ok" for r in report.results),
                  "failed_count": sum(r.status == "failed" for r in report.results),
                  "pruned_count": len(report.pruned)}
        return result(TuneAnswer.model_validate({**trimmed.model_dump(), "head": head, "best_version": best,
                                                 **counts}))

    @mcp.tool(annotations=RUNS_ONLY)
    async def profile(session_id: SessionId, version: Version = None,
                      counters: Annotated[bool, Field(description="CUDA on a GPU: one launch under Nsight Compute")]
                      = True, ctx: Context | None = None) -> Annotated[types.CallToolResult, dict[str, Any]]:
        """Registers, shared/local memory, spills and occupancy (CUDA and HIP, from the compiled kernel); the static
        instruction mix (each instruction of the code counted once, not executed counts: SASS via nvdisasm on CUDA
        and HIP on NVIDIA, SPIR-V on HLSL); Nsight Compute counters where ncu works. Each part says when it is
        unavailable and why."""
        report = await call(ctx, service.profile, session_id, version, counters=counters, progress=None)
        return result(report, kind="profile")
