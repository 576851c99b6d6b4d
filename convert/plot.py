"""``convert search --plot FILE.png``: each cell's fp32 magnitudes against fp16's range."""
from __future__ import annotations

import math

from amptool.precision.ranges import FP16_MAX, FP16_TINY, LOCAL_ERROR
from amptool.report.plotting import pyplot, save_figure

FLOOR = 1e-12
"""Zeros are drawn at this floor (a log scale has no zero)."""


def _shown(values) -> list:
    return [float("nan") if v is None or v != v else max(min(v, 1e38), FLOOR) for v in values]


def write_range_plot(path: str, ranges: list, kept: list, safety) -> None:
    """Two panels over the cells in execution order (the network itself left out): the
    largest |output| and |input| in fp32 against 65504, the safety line and fp16's smallest
    normal; and each cell's relative error computing alone in fp16 against LOCAL_ERROR.
    Cells kept by the range pass are marked in red."""
    plt = pyplot()
    rows = [r for r in ranges if r["path"]]
    xs = list(range(len(rows)))
    marked = set(kept)
    width = max(8.0, 0.3 * len(rows))
    fig, (top, low) = plt.subplots(2, 1, figsize=(width, 7.5), sharex=True)
    top.semilogy(xs, _shown([r["out_max"] for r in rows]), "o-", ms=3, lw=0.8,
                 color="tab:blue", label="largest |output| (fp32)")
    top.semilogy(xs, _shown([r["in_max"] for r in rows]), ".", ms=4, color="tab:gray",
                 label="largest |input| (fp32)")
    top.axhline(FP16_MAX, color="red", lw=1.0, label="fp16 largest value 65504")
    if safety is not None:
        top.axhline(safety * FP16_MAX, color="red", ls="--", lw=0.9,
                    label=f"range safety {safety:g} x 65504")
    top.axhline(FP16_TINY, color="tab:purple", ls=":", lw=0.9,
                label="fp16 smallest normal 6.1e-5")
    top.set_ylabel("fp32 magnitude")
    errors = _shown([r.get("local_error") for r in rows])
    low.semilogy(xs, errors, "s-", ms=3, lw=0.8, color="tab:green",
                 label="relative L2 error computing alone in fp16")
    low.axhline(LOCAL_ERROR, color="tab:green", ls="--", lw=0.9,
                label=f"kept at {LOCAL_ERROR:g} and above")
    infinite = [x for x, r in zip(xs, rows) if r.get("local_error") == math.inf]
    if infinite:
        low.semilogy(infinite, [1e3] * len(infinite), "x", color="red", ms=8,
                     label="not finite in fp16")
    low.set_ylabel("fp16 error")
    for x, r in zip(xs, rows):
        if r["path"] in marked:
            for ax in (top, low):
                ax.axvspan(x - 0.4, x + 0.4, color="red", alpha=0.12, lw=0)
    top.set_title(f"range pass: {len(rows)} cells, kept in fp32 (shaded): "
                  f"{', '.join(sorted(marked)) or 'none'}", fontsize=9)
    low.set_xticks(xs)
    low.set_xticklabels([r["path"] for r in rows], rotation=60, ha="right", fontsize=7)
    for ax in (top, low):
        ax.legend(fontsize=7, loc="best", framealpha=0.6)
    fig.tight_layout()
    save_figure(fig, path)
