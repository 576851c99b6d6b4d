"""What a sample count resolves: 95 % intervals of counted figures and the limits one
sample decides.

Top-1 agreement and accuracy count samples, so on ``n`` samples one sample is ``1/n`` of
the figure. ``wilson`` is the score interval of a rate; ``paired_drop_interval`` the
interval of an accuracy drop measured on the same samples (Newcombe's method 10);
``count_resolution`` says what a limit on such a figure can resolve, and
``resolution_finding`` names a budget below one sample with its fix.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

Z95 = 1.959963984540054
"""The normal quantile of a two-sided 95 % interval."""


def wilson(k: int, n: int, z: float = Z95) -> tuple:
    """Wilson's score interval of a rate of ``k`` in ``n`` (95 % by default)."""
    if n <= 0:
        return 0.0, 1.0
    p, zz = k / n, z * z
    center = (p + zz / (2 * n)) / (1 + zz / n)
    half = z * math.sqrt(p * (1 - p) / n + zz / (4 * n * n)) / (1 + zz / n)
    return max(0.0, center - half), min(1.0, center + half)


def paired_drop_interval(ref_right, cand_right, z: float = Z95) -> list:
    """95 % interval of an accuracy drop (reference minus candidate) measured on the same
    samples: Newcombe's hybrid score interval for paired proportions (his method 10,
    Statistics in Medicine 17:2635, 1998), built from each side's Wilson interval and the
    correlation of the two sides' right/wrong outcomes."""
    r, c = np.asarray(ref_right, bool), np.asarray(cand_right, bool)
    return paired_drop_from_counts(int((r & c).sum()), int((r & ~c).sum()),
                                   int((~r & c).sum()), int((~r & ~c).sum()), z)


def paired_drop_from_counts(a: int, b: int, cc: int, d: int, z: float = Z95) -> list:
    """``paired_drop_interval`` from its 2x2 table alone (all it reads of the samples):
    ``a`` both sides right, ``b`` only the reference, ``cc`` only the candidate, ``d``
    neither."""
    n = a + b + cc + d
    if not n:
        return [-1.0, 1.0]
    product = (a + b) * (cc + d) * (a + cc) * (b + d)
    phi = (a * d - b * cc) / math.sqrt(product) if product else 0.0
    return drop_interval(a + b, a + cc, n, phi, z)


def drop_interval(k_ref: int, k_cand: int, n: int, phi: float = 0.0, z: float = Z95) -> list:
    """Newcombe's interval of ``k_ref / n - k_cand / n`` from the two Wilson intervals;
    ``phi``: the correlation of paired outcomes (0: taken as independent, which widens the
    interval of positively correlated pairs, as two precisions of one model are)."""
    p1, p2 = k_ref / n, k_cand / n
    l1, u1 = wilson(k_ref, n, z)
    l2, u2 = wilson(k_cand, n, z)
    below = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    above = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return [max(-1.0, p1 - p2 - below), min(1.0, p1 - p2 + above)]


COUNTED = {"top1_agree_clear": ("min_top1", "clear top-1 flip"),
           "acc_drop_clear": ("max_acc_drop", "lost label"),
           "task_drop": ("max_metric_drop", "sample's worth of the metric")}
"""Checked metrics that count samples: the limit, what one sample of it is."""


def count_resolution(metric: str, limit: float, metrics: dict) -> dict:
    """For a limit on a count over ``n`` samples: its 95 % interval (``ci``), the samples
    counted and one sample's share (``resolution`` = 1/n), and ``under_resolved`` when the
    budget the limit leaves (1 - min_top1, max_acc_drop) is above 0 but below one sample:
    the gate then allows none at all. An exact budget of 0 resolves at any n."""
    n = metrics.get("counted")
    if metric not in COUNTED or not n:
        return {}
    budget = 1.0 - limit if metric == "top1_agree_clear" else limit
    out = {"ci": metrics.get(f"{metric}_ci"), "samples": n, "resolution": 1.0 / n}
    if 1e-12 < budget < 1.0 / n - 1e-12:
        out["under_resolved"] = True
    return out


def resolution_finding(where: str, row: dict) -> Optional[dict]:
    """The finding of a row whose budget is below one sample (``count_resolution``): what
    the gate can resolve and the fix, or None."""
    if not row.get("under_resolved"):
        return None
    n, name = row["samples"], row["metric"]
    limit_name, one = COUNTED[name]
    limit = float(row["limit"].split()[-1])
    budget = 1.0 - limit if name == "top1_agree_clear" else limit
    need = math.ceil(1.0 / budget - 1e-9)
    flag = "--" + limit_name.replace("_", "-")
    if name == "top1_agree_clear":
        change = f"lower {flag} to {math.floor((1 - 1 / n) * 1e4) / 1e4:g} or less"
        what = f"{limit_name} {limit:g} leaves {budget:.3g} ({budget:.2%})"
    else:
        change = f"raise {flag} to {math.ceil(1e4 / n) / 1e4:g} or more"
        what = f"{limit_name} {limit:g} ({budget:.2%})"
    return {"kind": "under_resolved", "where": f"{where}.{name}",
            "message": f"{where}: {what} is below one sample in {n} ({1 / n:.2%}): the gate "
                       f"allows no {one} at all, so it measures luck, not precision",
            "fix": f"use --samples >= {need} or {change}"}

