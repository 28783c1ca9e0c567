"""A PNG chart of performance along the version sequence."""

from __future__ import annotations

import io
from typing import Any


def history_chart(rows: list[dict[str, Any]], *, title: str, vendor_tflops: float | None,
                  peak_tflops: float | None) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    ok = [r for r in rows if r["tflops"] is not None]
    failed = [r for r in rows if r["tflops"] is None]
    ax.plot([r["version"] for r in ok], [r["tflops"] for r in ok], "o-", color="#1f77b4", label="kernel")
    for r in ok:
        label = r["transformation"] or r["origin"]
        ax.annotate(label[:18], (r["version"], r["tflops"]), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=7, rotation=20)
    if failed:
        ax.scatter([r["version"] for r in failed], [0] * len(failed), marker="x", color="#d62728",
                   label="failed attempt")
    if vendor_tflops:
        ax.axhline(vendor_tflops, color="#2ca02c", linestyle="--", label=f"vendor {vendor_tflops:.1f}")
    if peak_tflops:
        ax.axhline(peak_tflops, color="#7f7f7f", linestyle=":", label=f"peak {peak_tflops:.1f}")
    ax.set_xlabel("version")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
