"""Per-layer error chart (``--plot FILE.png``); matplotlib is optional and imported here only."""
from __future__ import annotations

import math

from amptool.errors import UsageError
from amptool.report.plotting import pyplot as _matplotlib
from amptool.report.plotting import save_figure


def check_plot_available() -> None:
    _matplotlib()


def _series(rows: list, key: str) -> list:
    values = []
    for row in rows:
        v = getattr(row, key)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            values.append(float("nan"))
        else:
            values.append(float(v))
    return values


FLOOR = 1e-12
"""Zero errors are drawn at this floor (a log scale has no zero)."""


def rel_l2_bound(min_cosine: float) -> float:
    """The relative L2 error below which cosine cannot fall under ``min_cosine``: an error
    e with |e| <= eps*|r| turns r by an angle whose sine is at most eps."""
    return math.sqrt(max(0.0, 1.0 - min_cosine ** 2))


def _panel(ax, xs: list, values: list, bad: list, style: str, label: str, limit: float,
           limit_label: str, color: str) -> None:
    """One metric per cell on a log scale, its own limit line, NaN/Inf cells marked."""
    shown = [max(v, FLOOR) if v == v and math.isfinite(v) else float("nan") for v in values]
    ax.set_ylabel(label.split(" |")[0] + (f"\n(0 drawn at {FLOOR:g})"
                                          if any(v <= 0 for v in values) else ""), fontsize=8)
    finite = [v for v in shown if v == v] + [max(limit, FLOOR)]
    top, low = max(finite) * 10, min(finite) / 10
    ax.semilogy(xs, shown, style, color=color, label=label)
    ax.axhline(max(limit, FLOOR), color=color, ls="--", lw=0.9, label=limit_label)
    marks = [x for x, b in zip(xs, bad) if b]
    if marks:
        ax.semilogy(marks, [top] * len(marks), "x", color="red", ms=8, label="NaN/Inf output")
    ax.set_ylim(low, top * 3)
    ax.legend(fontsize=7, loc="best", framealpha=0.6)


def _draw_candidate(ax_cos, ax_rel, cand) -> None:
    layer = cand.per_layer
    rows = layer.rows
    xs = list(range(len(rows)))
    bad = [bool(r.nonfinite) for r in rows]
    one_minus = [1.0 - c for c in _series(rows, "cosine")]
    limit = 1.0 - layer.min_cosine
    _panel(ax_cos, xs, one_minus, bad, "o-", "1 - cosine", limit,
           f"cosine limit {layer.min_cosine} (1 - cosine <= {limit:.3g})", "tab:blue")
    bound = rel_l2_bound(layer.min_cosine)
    _panel(ax_rel, xs, _series(rows, "rel_l2"), bad, "s-", "relative L2 error |c - r| / |r|",
           bound, f"below {bound:.3g}: cosine >= {layer.min_cosine} for sure", "tab:green")
    if layer.first_flagged is not None:
        idx = [r.path for r in rows].index(layer.first_flagged)
        for ax in (ax_cos, ax_rel):
            ax.axvline(idx, color="red", ls=":", lw=1.2,
                       label=f"first below: {layer.first_flagged} ({layer.origin})")
        ax_cos.legend(fontsize=7, loc="best", framealpha=0.6)
    ax_cos.tick_params(labelbottom=False)
    ax_rel.set_xticks(xs)
    ax_rel.set_xticklabels([r.path for r in rows], rotation=60, ha="right", fontsize=7)
    verdict = "PASS" if cand.passed else "FAIL"
    if cand.caveat:
        verdict += "* (onnxruntime CPU: fp16 not exercised)"
    ax_cos.set_title(f"{cand.path.rsplit('/', 1)[-1]} ({cand.precision}, "
                     f"{layer.policy}) vs fp32: {verdict}", fontsize=9)


def write_plot(path: str, report) -> None:
    """Per candidate, two panels over the cells: 1 - cosine with the cosine limit, and the
    relative L2 error with the bound that keeps cosine above that limit (log scales)."""
    plt = _matplotlib()
    cands = [c for c in report.candidates if c.per_layer]
    if not cands:
        raise UsageError("--plot has no per-layer data to draw", "add --per-layer")
    width = max(8, 0.35 * max(len(c.per_layer.rows) for c in cands))
    fig, axes = plt.subplots(2 * len(cands), 1, figsize=(width, 5.2 * len(cands)),
                             squeeze=False)
    for i, cand in enumerate(cands):
        ax_cos, ax_rel = axes[2 * i, 0], axes[2 * i + 1, 0]
        ax_rel.sharex(ax_cos)
        _draw_candidate(ax_cos, ax_rel, cand)
    fig.tight_layout()
    save_figure(fig, path)
