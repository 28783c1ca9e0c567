"""Nsight Compute counters: a few named metrics from ncu's raw CSV page."""

from __future__ import annotations

import csv
import io

# Raw metric name -> the name a response uses. Present on sm_70+ in ncu 2022 and later; absent ones are skipped.
NCU_METRICS = {
    "gpu__time_duration.sum": "duration",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "compute_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "dram__bytes_read.sum": "dram_read",
    "dram__bytes_write.sum": "dram_write",
    "l1tex__t_sector_hit_rate.pct": "l1_hit_rate_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "smsp__inst_executed.sum": "instructions_executed",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "ffma_thread_instructions",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "shared_load_bank_conflicts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "shared_store_bank_conflicts",
    "launch__registers_per_thread": "registers_per_thread",
}


def ncu_raw_csv(text: str) -> tuple[dict[str, float | str], dict[str, str]]:
    """The first kernel's metrics from `ncu --import ... --csv --page raw`: a header row of metric names, a row of
    units, then one row per profiled launch. Returns (readable name -> value, readable name -> unit)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    header_at = next((i for i, r in enumerate(rows) if r[0] == "ID"), None)
    if header_at is None or len(rows) < header_at + 3:
        return {}, {}
    header, units, values = rows[header_at], rows[header_at + 1], rows[header_at + 2]
    metrics: dict[str, float | str] = {}
    unit_of: dict[str, str] = {}
    for column, name in enumerate(header):
        if name not in NCU_METRICS or column >= len(values):
            continue
        readable = NCU_METRICS[name]
        raw = values[column].replace(",", "").strip()
        try:
            metrics[readable] = float(raw)
        except ValueError:
            metrics[readable] = raw
        if column < len(units) and units[column]:
            unit_of[readable] = units[column]
    return metrics, unit_of
