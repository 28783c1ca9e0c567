"""A session's history as the agent reads it: the table of its versions, the lineage chart, and the catalog's texts
ranked for its head."""

from __future__ import annotations

from peak_mcp.backends.registry import backend_spec
from peak_mcp.catalog.suggest import Suggestions, require_head, suggest_next
from peak_mcp.catalog.transformations import Catalog
from peak_mcp.evaluation.phases import dumped
from peak_mcp.loop.context import LoopContext
from peak_mcp.loop.models import HistoryReport
from peak_mcp.loop.versions import _number
from peak_mcp.store.reports import best_version, history_rows, markdown_table


class History:
    def __init__(self, ctx: LoopContext) -> None:
        self.ctx = ctx

    def history(self, session_id: str) -> HistoryReport:
        session = self.ctx.store.session(session_id)
        device = self.ctx.device_of(session)
        problem = self.ctx.problem(session.problem)
        versions = self.ctx.store.versions(session_id)
        rows = history_rows(session, versions, device, problem.peak_path(session.dtype, session.backend),
                            self.ctx.roofline(session, session.sizes))
        return HistoryReport(session_id=session_id, problem=session.problem, backend=session.backend,
                             dtype=session.dtype, sizes=session.sizes, device=session.device,
                             head=session.head, best=_number(best_version(versions)),
                             baseline=dumped(session.baseline), rows=rows, table=markdown_table(rows))

    def history_chart(self, session_id: str, compact: bool = False) -> bytes:
        """The lineage chart as PNG; `compact` for an MCP answer (charts.COMPACT), else to read on a screen."""
        from peak_mcp.store.charts import history_chart

        session = self.ctx.store.session(session_id)
        device = self.ctx.device_of(session)
        peak_path = self.ctx.problem(session.problem).peak_path(session.dtype, session.backend)
        timings = {v.number: v.timing for v in self.ctx.store.versions(session_id)}
        rows = []
        for row in self.history(session_id).rows:  # with the timing spread, for error bars
            timing = timings.get(row["version"])
            rows.append({**row, "min_ms": timing.min_ms if timing else None,
                         "max_ms": timing.max_ms if timing else None})
        vendor = backend_spec(session.backend).vendor_library or "vendor library"
        return history_chart(rows, session.model_dump(), peak_tflops=device.peak(peak_path),
                             vendor_name=vendor, compact=compact)

    def suggest_next(self, catalog: Catalog, session_id: str, limit: int = 5) -> Suggestions:
        """The catalog's texts ranked for the session's head (catalog.suggest)."""
        session = self.ctx.store.session(session_id)
        require_head(session)
        device = self.ctx.device_of(session)
        versions = self.ctx.store.versions(session_id)
        return suggest_next(catalog, session, versions, device, self.ctx.problem(session.problem),
                            _number(best_version(versions)), limit)
