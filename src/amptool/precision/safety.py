"""Range safety: how close to fp16's largest value a cell's fp32 values may come before the
range pass keeps the cell in fp32 (``--range-safety``, ``range_safety``, ``safety=``), the
one check of that share (``check_range_safety``), and why the pass keeps a cell, in words
(``why_kept``). Imports no numpy: the command line checks and prints with it."""
from __future__ import annotations

import math
from typing import Optional

from amptool.errors import UsageError

FP16_MAX = 65504.0
"""Largest finite float16."""
FP16_TINY = 2.0 ** -14
"""Smallest normal float16 (6.1e-5): below it fp16 keeps fewer significant bits."""
SAFETY = 0.5
"""Default share of FP16_MAX an fp32 output may reach before its cell is kept in fp32."""
LOCAL_ERROR = 0.1
"""Relative L2 error of a cell computing in fp16 on fp32 inputs that makes it a candidate.
fp16 rounding alone gives about 1e-3 (a deep block a few times more); 0.1 is a cell that
no longer computes the same thing."""


def check_range_safety(value, name: str = "range safety", fix: str = "e.g. 0.5",
                       off: bool = False, shown: Optional[str] = None) -> None:
    """Refuse a range-safety share outside (0, 1] (``off``: None, written 'off', skips the
    pass and is allowed); ``name`` is the option as the user gave it, ``shown`` the value as
    they wrote it."""
    if off and value is None:
        return
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1:
        return
    either = " or 'off'" if off else ""
    raise UsageError(f"{name} must be a share in (0, 1]{either} (got "
                     f"{value if shown is None else shown})", fix)


def why_kept(row: dict, safety: float = SAFETY) -> str:
    """Why the range pass keeps the cell of ``row`` (a ``CellRange.to_dict()``), in words."""
    limit = safety * FP16_MAX
    if not math.isfinite(row["out_max"]) or row["out_max"] >= limit:
        return f"fp32 outputs up to {row['out_max']:.4g}"
    if row.get("in_max") is not None and (not math.isfinite(row["in_max"])
                                          or row["in_max"] >= limit):
        return f"fp32 inputs up to {row['in_max']:.4g}"
    if row.get("local_error") is not None and row["local_error"] >= LOCAL_ERROR:
        return f"computing alone in fp16 it is off by {row['local_error']:.3g} (relative L2)"
    if row.get("grad_overflow"):
        return "its gradient overflows in fp16 (finite in fp32)"
    return f"{row['subnormal']:.0%} of its outputs below fp16's smallest normal"
