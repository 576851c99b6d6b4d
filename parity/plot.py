"""Per-layer error chart (``--plot FILE.png``); matplotlib is optional and imported here only."""
from __future__ import annotations

import math

from amptool.errors import UsageError


def _matplotlib():
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise UsageError("--plot needs matplotlib, which is not installed",
                         "pip install 'amptool[plot]' (or matplotlib), or drop --plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_plot_available() -> None:
    _matplotlib()


def _series(rows: list, key: str) -> list:
    values = []
    for row in rows:
        v = row.get(key)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            values.append(float("nan"))
        else:
            values.append(float(v))
    return values


def write_plot(path: str, report: dict) -> None:
    """One panel per candidate: 1 - cosine and max relative error of each cell, log scale."""
    from amptool.fileio import atomic_path

    plt = _matplotlib()
    cands = [c for c in report["candidates"] if c.get("per_layer")]
    if not cands:
        raise UsageError("--plot has no per-layer data to draw", "add --per-layer")
    fig, axes = plt.subplots(len(cands), 1, figsize=(max(8, 0.35 * max(
        len(c["per_layer"]["rows"]) for c in cands)), 3.6 * len(cands)), squeeze=False)
    for ax, cand in zip(axes[:, 0], cands):
        layer = cand["per_layer"]
        rows = layer["rows"]
        xs = list(range(len(rows)))
        err = [max(1.0 - c, 1e-12) if c == c else 1.0 for c in _series(rows, "cosine")]
        rel = [max(r, 1e-12) if r == r else float("nan") for r in _series(rows, "max_rel")]
        ax.semilogy(xs, err, "o-", label="1 - cosine")
        ax.semilogy(xs, rel, "s--", alpha=0.6, label="max relative error")
        ax.axhline(max(1.0 - layer["min_cosine"], 1e-12), color="red", lw=0.8,
                   label=f"cosine limit {layer['min_cosine']}")
        if layer["first_flagged"] is not None:
            idx = [r["path"] for r in rows].index(layer["first_flagged"])
            ax.axvline(idx, color="red", ls=":", lw=1.2,
                       label=f"first below: {layer['first_flagged']} ({layer['origin']})")
        ax.set_xticks(xs)
        ax.set_xticklabels([r["path"] for r in rows], rotation=60, ha="right", fontsize=7)
        verdict = "PASS" if cand["passed"] else "FAIL"
        ax.set_title(f"{cand['path'].rsplit('/', 1)[-1]} ({cand['precision']}, "
                     f"{layer['policy']}) vs fp32: {verdict}", fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(str(tmp), dpi=110)
    plt.close(fig)
