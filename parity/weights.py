"""A check that an artefact's stored weights are the reference's weights.

Stored weights are read by the core (``amptool.artefact.readers.stored_weights`` for MindIR and
ONNX, ``amptool.network.checkpoint`` for checkpoints); an encrypted MindIR cannot be read.
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
        count, largest = 0, None
        flat_ref, flat_cand = ref.reshape(-1), cand.reshape(-1)
        for start in range(0, flat_cand.size, CHUNK):  # float64 copies of a chunk at a time
            expected = flat_ref[start:start + CHUNK].astype(cand.dtype).astype(np.float64)
            got = flat_cand[start:start + CHUNK].astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.abs(got - expected)
                off = ~(diff <= 1e-3 * np.abs(expected) + 1e-7)
            count += int(off.sum())
            finite = diff[np.isfinite(diff)]
            if finite.size:
                largest = max(largest or 0.0, float(finite.max()))
        if count:
            bad.append({"name": name, "mismatched": count, "size": int(cand.size),
                        "max_abs": largest if largest is not None else float("inf"),
                        "note": ""})
    return bad


CHUNK = 1 << 20
"""Elements compared at a time."""
