"""A check that an artefact's stored weights are the reference's weights.

Stored weights are read by the core (``amptool.artefact.stored_weights`` for MindIR and
ONNX, ``amptool.checkpoint`` for checkpoints); an encrypted MindIR cannot be read.
"""
from __future__ import annotations

import numpy as np


def compare_weights(reference: dict, candidate: dict, names: list) -> list:
    """Parameters (in ``names`` order) whose candidate values are not the reference's.

    The reference value is first rounded to the candidate's dtype, so an exact fp16
    cast of fp32 weights compares equal; an element is a mismatch when
    |c - r| > 1e-3 |r| + 1e-7 (one fp16 ulp off always passes, most of two or more do).
    """
    bad = []
    for name in names:
        if name not in reference or name not in candidate:
            continue
        ref, cand = reference[name], candidate[name]
        if ref.shape != cand.shape:
            bad.append({"name": name, "mismatched": int(cand.size), "size": int(cand.size),
                        "max_abs": float("inf"), "note": f"shape {cand.shape} vs {ref.shape}"})
            continue
        expected = ref.astype(cand.dtype).astype(np.float64)
        got = cand.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(got - expected)
            off = ~(diff <= 1e-3 * np.abs(expected) + 1e-7)
        count = int(off.sum())
        if count:
            finite = diff[np.isfinite(diff)]
            bad.append({"name": name, "mismatched": count, "size": int(cand.size),
                        "max_abs": float(finite.max()) if finite.size else float("inf"),
                        "note": ""})
    return bad
