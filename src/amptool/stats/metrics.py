"""Parity metrics between a reference output and a candidate output, and the check of
them against a candidate's limits (``amptool.stats.limits``).

A limit that does not apply to an output (top-1 on an output that is not class logits,
accuracy without labels) gives an ``n/a`` row, never a pass.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from amptool.errors import UsageError
from amptool.stats.counts import count_resolution, paired_drop_interval, wilson
from amptool.stats.limits import CHECKS, Thresholds


def compute_metrics(ref: np.ndarray, cand: np.ndarray, labels: Optional[np.ndarray] = None,
                    atol: float = 1e-3, rtol: float = 1e-2, logits: bool = True) -> dict:
    """All parity metrics of one output pair (computed in float64).

    Top-1 metrics only for class logits (2-D, more than one column, and ``logits``: the
    caller knows which output of a network holds them); accuracy only when the labels fit
    those logits (one per sample, each a column index).
    """
    if ref.shape != cand.shape:
        raise UsageError(f"output shapes differ: reference {ref.shape}, candidate {cand.shape}",
                         "compare artefacts of the same model and batch size")
    r = ref.astype(np.float64)
    c = cand.astype(np.float64)
    finite = np.isfinite(c)
    nonfinite = int(np.size(c) - finite.sum())
    c_clean = np.where(finite, c, 0.0)
    diff = np.where(finite, np.abs(c_clean - r), np.inf)
    metrics = _error_metrics(r, c_clean, diff, nonfinite, atol, rtol)
    if logits and is_class_logits(r) and len(r):
        metrics.update(top1_metrics(r, c_clean, diff.max(axis=1), labels))
    return metrics


def _cosine(r: np.ndarray, c: np.ndarray, nonfinite: int) -> float:
    rn, cn = np.linalg.norm(r), np.linalg.norm(c)
    if nonfinite:
        return float("nan")
    if rn == 0.0 and cn == 0.0:
        return 1.0
    if rn == 0.0 or cn == 0.0:
        return 0.0
    return float(np.dot(r.ravel(), c.ravel()) / (rn * cn))


def _error_metrics(r, c, diff, nonfinite: int, atol: float, rtol: float) -> dict:
    if not diff.size:
        return {k: 0.0 for k in ("max_abs", "max_abs_scaled", "p999_abs_scaled", "ref_absmax",
                                 "max_rel", "mean_abs", "rmse", "rel_l2", "outside_frac")} | {
            "cosine": 1.0, "nonfinite": nonfinite}
    rn = np.linalg.norm(r)
    max_abs = float(diff.max())
    absmax = float(np.abs(r).max())
    p999 = float(np.quantile(diff, 0.999, method="higher"))  # an element's own error
    return {
        "max_abs": max_abs,
        "max_abs_scaled": max_abs / max(1.0, absmax),
        "p999_abs_scaled": p999 / max(1.0, absmax),
        "ref_absmax": absmax,
        "max_rel": float((diff / (np.abs(r) + 1e-6)).max()),
        "mean_abs": float(diff.mean()),
        "rmse": float(np.sqrt((diff ** 2).mean())),
        "cosine": _cosine(r, c, nonfinite),
        "rel_l2": float(np.linalg.norm(diff) / rn) if rn > 0 else float(np.linalg.norm(diff)),
        "outside_frac": float((diff > atol + rtol * np.abs(r)).mean()),
        "nonfinite": nonfinite,
    }


def is_class_logits(ref: np.ndarray) -> bool:
    """Class logits: one row per sample, more than one column."""
    return ref.ndim == 2 and ref.shape[1] > 1


def labels_fit(labels: Optional[np.ndarray], ref: np.ndarray) -> bool:
    """Labels usable for accuracy on these logits: one whole column index per sample."""
    if labels is None or not is_class_logits(ref):
        return False
    y = np.asarray(labels)
    return bool(y.ndim == 1 and len(y) == len(ref) and len(y) > 0 and np.all(y == np.round(y))
                and y.min() >= 0 and y.max() < ref.shape[1])


TIE_SHARE = 0.01
"""Largest margin, as a share of the reference sample's logit range, that can be a near tie."""


def top1_metrics(r: np.ndarray, c: np.ndarray, row_err: np.ndarray,
                 labels: Optional[np.ndarray] = None) -> dict:
    """Top-1 agreement with near ties told apart, and accuracy when labels fit.

    A disagreement on a sample is a near tie when the reference's margin between its top
    class and the class the candidate picked is at most ``tie_tol`` — twice the median, over
    the samples whose top-1 agrees, of the sample's largest error max_j |c_j - r_j| (two
    logits move toward each other by at most twice that) — and at most ``TIE_SHARE`` of the
    reference sample's logit range (max - min), so a candidate whose errors are large
    everywhere cannot pass its flips off as ties. A sample with NaN/Inf is never a near tie.
    ``top1_agree_clear`` counts near-tie flips as agreeing and ``acc_drop_clear`` leaves
    them out of the candidate's accuracy (it keeps the reference's class there); the limits
    apply to these two, while ``top1_agree`` and ``acc_drop`` report the raw figures.
    """
    ref_top, cand_top = r.argmax(axis=1), c.argmax(axis=1)
    agree = ref_top == cand_top
    calm = row_err[agree & np.isfinite(row_err)]
    tol = 2.0 * float(np.median(calm)) if calm.size else 0.0
    flips = np.flatnonzero(~agree)
    gap = r[flips, ref_top[flips]] - r[flips, cand_top[flips]]
    spread = r[flips].max(axis=1) - r[flips].min(axis=1)
    tied = np.isfinite(row_err[flips]) & (gap <= tol) & (gap <= TIE_SHARE * spread)
    ties = int(tied.sum())
    n = len(r)
    clear = int(agree.sum()) + ties
    lo, hi = wilson(n - clear, n)
    out: Dict[str, Any] = {"top1_agree": float(agree.mean()),
                           "top1_agree_clear": float(clear / n),
                           "near_tie_flips": ties, "tie_tol": tol, "counted": n,
                           "top1_agree_clear_ci": [1.0 - hi, 1.0 - lo]}
    if labels_fit(labels, r):
        y = np.asarray(labels).astype(np.int64)
        out["ref_acc"] = float((ref_top == y).mean())
        out["cand_acc"] = float((cand_top == y).mean())
        out["acc_drop"] = out["ref_acc"] - out["cand_acc"]
        out["acc_drop_ci"] = paired_drop_interval(ref_top == y, cand_top == y)
        settled = cand_top.copy()
        settled[flips[tied]] = ref_top[flips[tied]]
        out["acc_drop_clear"] = out["ref_acc"] - float((settled == y).mean())
        out["acc_drop_clear_ci"] = paired_drop_interval(ref_top == y, settled == y)
    return out


def degenerate_reference(ref: np.ndarray) -> Optional[str]:
    """Why the reference's outputs cannot support a verdict, or None when they can.

    Degenerate: NaN/Inf in them, near-zero spread (std < 1e-6 * (1 + max|ref|)), or the same
    output for every input (largest per-element spread across samples below that bound).
    """
    r = np.asarray(ref, dtype=np.float64)
    if not r.size:
        return None
    bad = int(r.size - np.isfinite(r).sum())
    if bad:
        return degenerate_reason(bad, 0.0, 0.0, None)
    across = r.std(axis=0).max() if r.ndim >= 2 and len(r) > 1 else None
    return degenerate_reason(0, float(np.abs(r).max()), float(r.std()), across)


def degenerate_reason(bad: int, absmax: float, std: float,
                      across: Optional[float]) -> Optional[str]:
    """``degenerate_reference``'s rule on its figures: the NaN/Inf count, the largest
    magnitude, the std of every value and the largest per-element std across samples (None
    when there is no such spread: one sample, or one value a sample)."""
    if bad:
        return f"the reference's outputs hold {bad} NaN/Inf value(s)"
    floor = 1e-6 * (1.0 + absmax)
    if std < floor:
        return (f"the reference's outputs are near-constant (std {std:.3g}, largest "
                f"magnitude {absmax:.3g})")
    if across is not None and across < floor:
        return (f"the reference gives the same output for every input (largest spread across "
                f"samples {across:.3g})")
    return None


_CHECKS = CHECKS


def _not_applicable(metric: str, metrics: dict) -> str:
    if metric == "acc_drop_clear" and "top1_agree" in metrics:
        return "no labels that fit this output"
    return "not class logits (2-D, more than one column)"


def check_metrics(metrics: dict, th: Thresholds) -> list:
    """One row per set limit: metric, value, limit text and passed (True, False, or None
    with a ``note`` when the limit does not apply to this output: "n/a", never a pass)."""
    rows = []
    if not th.allow_nonfinite:
        rows.append({"metric": "nonfinite", "value": metrics["nonfinite"], "limit": "== 0",
                     "passed": metrics["nonfinite"] == 0})
    for field_name, metric, op in _CHECKS:
        limit = getattr(th, field_name)
        if limit is None:
            continue
        value = metrics.get(metric)
        row = {"metric": metric, "value": value, "limit": f"{op} {limit}"}
        if value is None:
            rows.append({**row, "passed": None, "note": _not_applicable(metric, metrics)})
            continue
        ok = value >= limit if op == ">=" else value <= limit + 1e-12
        rows.append({**row, "passed": bool(value == value and ok),
                     **count_resolution(metric, limit, metrics)})
    return rows


def passed(rows: list) -> bool:
    """No row failed (rows whose limit does not apply count neither way)."""
    return all(row["passed"] is not False for row in rows)
