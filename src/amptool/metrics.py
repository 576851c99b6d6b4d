"""Parity metrics between a reference output and a candidate output, and thresholds.

A breach of any threshold fails: there is no warn-only mode. Thresholds start from the
default of the pair (fp32 vs fp32 across formats, or a low-precision candidate against
fp32), then a config file's ``[thresholds]`` table, then its pair table
(``[thresholds.fp16_vs_fp32]`` or ``[thresholds.same_precision]``), then flags. A limit
set to ``off`` (or ``"off"`` in a file) is disabled.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .errors import UsageError


@dataclass(frozen=True)
class Thresholds:
    """Pass/fail limits; None disables a limit."""

    min_cosine: Optional[float] = 0.999
    """Cosine similarity of flattened outputs must be at least this."""
    min_top1: Optional[float] = 0.99
    """Fraction of samples whose arg-max class agrees (classifiers)."""
    max_acc_drop: Optional[float] = 0.005
    """Allowed accuracy drop of the candidate against the reference, as a fraction (0.005 = 0.5 pp)."""
    max_abs: Optional[float] = None
    """Largest allowed absolute difference."""
    max_rel: Optional[float] = None
    """Largest allowed relative difference |c - r| / (|r| + 1e-6)."""
    max_outside: Optional[float] = None
    """Largest allowed fraction of elements outside atol + rtol*|ref|."""
    atol: float = 1e-3
    """Absolute tolerance used by ``max_outside``."""
    rtol: float = 1e-2
    """Relative tolerance used by ``max_outside``."""
    allow_nonfinite: bool = False
    """Whether NaN/Inf in the candidate is tolerated."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


FP16_VS_FP32 = Thresholds()
"""Default for a low-precision candidate against an fp32 reference."""
SAME_PRECISION = Thresholds(min_cosine=0.99999, min_top1=1.0, max_acc_drop=0.0, max_abs=1e-4)
"""Default for fp32 against fp32 across formats (MindIR vs ONNX vs eager)."""


def default_thresholds(ref_precision: str, cand_precision: str) -> Thresholds:
    return SAME_PRECISION if ref_precision == cand_precision == "fp32" else FP16_VS_FP32


def thresholds_from_dict(data: dict, base: Thresholds, source: str = "thresholds") -> Thresholds:
    names = {f.name for f in dataclasses.fields(Thresholds)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise UsageError(f"{source}: unknown threshold(s) {', '.join(unknown)}",
                         f"known: {', '.join(sorted(names))}")
    return dataclasses.replace(base, **data)


PAIR_TABLES = ("fp16_vs_fp32", "same_precision")
_OFFABLE = ("min_cosine", "min_top1", "max_acc_drop", "max_abs", "max_rel", "max_outside")


def _off(value):
    return None if isinstance(value, str) and value.lower() in ("off", "none") else value


def _clean(data: dict, source: str) -> dict:
    out = {}
    for key, value in data.items():
        value = _off(value)
        if value is None and key not in _OFFABLE:
            raise UsageError(f"{source}: threshold {key} cannot be off", "give a number")
        if key == "allow_nonfinite":
            if not isinstance(value, bool):
                raise UsageError(f"{source}: {key} must be true or false, got {value!r}",
                                 "fix the value")
        elif value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UsageError(f"{source}: threshold {key} must be a number or off, got {value!r}",
                             "fix the value")
        out[key] = value
    return out


def validate_file_thresholds(table: dict, source: str) -> dict:
    """Check a config file's thresholds table now, so every error shows before any work."""
    if not isinstance(table, dict):
        raise UsageError(f"{source}: thresholds must be a table", "write [thresholds] key = value")
    general = {k: v for k, v in table.items() if k not in PAIR_TABLES}
    thresholds_from_dict(_clean(general, source), Thresholds(), source)
    for pair in PAIR_TABLES:
        if pair in table:
            if not isinstance(table[pair], dict):
                raise UsageError(f"{source}: thresholds.{pair} must be a table", "fix the file")
            thresholds_from_dict(_clean(table[pair], source), Thresholds(), source)
    return table


def resolve_thresholds(ref_precision: Optional[str], cand_precision: Optional[str],
                       file_table: Optional[dict] = None, flags: Optional[dict] = None) -> Thresholds:
    """The limits one candidate is held to: the pair's defaults, then a config file's
    ``thresholds`` table and its pair table, then flags."""
    th = default_thresholds(ref_precision, cand_precision)
    pair = "same_precision" if th == default_thresholds("fp32", "fp32") else "fp16_vs_fp32"
    table = file_table or {}
    general = {k: v for k, v in table.items() if k not in PAIR_TABLES}
    th = thresholds_from_dict(_clean(general, "config thresholds"), th)
    th = thresholds_from_dict(_clean(table.get(pair, {}), f"config thresholds.{pair}"), th)
    th = thresholds_from_dict(_clean(flags or {}, "flags"), th, "flags")
    return th


def parse_limit(value: Optional[str], name: str) -> object:
    """A flag value: a number, or off. Returns a sentinel-free value for the overrides dict."""
    if value is None:
        return _UNSET
    if value.lower() in ("off", "none"):
        if name not in _OFFABLE:
            raise UsageError(f"--{name.replace('_', '-')} cannot be off", "give a number")
        return None
    try:
        return float(value)
    except ValueError:
        raise UsageError(f"--{name.replace('_', '-')} takes a number or 'off', got {value!r}",
                         "e.g. 0.999") from None


_UNSET = object()


def flag_overrides(**values) -> dict:
    """Threshold flags given on the command line (unset ones dropped)."""
    out = {}
    for name, raw in values.items():
        if isinstance(raw, bool):
            if raw:
                out[name] = True
            continue
        parsed = parse_limit(raw, name)
        if parsed is not _UNSET:
            out[name] = parsed
    return out


def compute_metrics(ref: np.ndarray, cand: np.ndarray, labels: Optional[np.ndarray] = None,
                    atol: float = 1e-3, rtol: float = 1e-2) -> dict:
    """All parity metrics of one output pair (computed in float64)."""
    if ref.shape != cand.shape:
        raise UsageError(f"output shapes differ: reference {ref.shape}, candidate {cand.shape}",
                         "compare artefacts of the same model and batch size")
    r = ref.astype(np.float64)
    c = cand.astype(np.float64)
    nonfinite = int(np.size(c) - np.isfinite(c).sum())
    c_clean = np.where(np.isfinite(c), c, 0.0)
    diff = np.abs(c_clean - r)
    if nonfinite:
        diff = np.where(np.isfinite(c), diff, np.inf)
    rn, cn = np.linalg.norm(r), np.linalg.norm(c_clean)
    if nonfinite:
        cosine = float("nan")
    elif rn == 0.0 and cn == 0.0:
        cosine = 1.0
    elif rn == 0.0 or cn == 0.0:
        cosine = 0.0
    else:
        cosine = float(np.dot(r.ravel(), c_clean.ravel()) / (rn * cn))
    metrics = {
        "max_abs": float(diff.max()) if diff.size else 0.0,
        "max_rel": float((diff / (np.abs(r) + 1e-6)).max()) if diff.size else 0.0,
        "mean_abs": float(diff.mean()) if diff.size else 0.0,
        "rmse": float(np.sqrt((diff ** 2).mean())) if diff.size else 0.0,
        "cosine": cosine,
        "rel_l2": float(np.linalg.norm(diff) / rn) if rn > 0 else float(np.linalg.norm(diff)),
        "outside_frac": float((diff > atol + rtol * np.abs(r)).mean()) if diff.size else 0.0,
        "nonfinite": nonfinite,
    }
    if r.ndim == 2 and r.shape[1] > 1:
        ref_top = r.argmax(axis=1)
        cand_top = c_clean.argmax(axis=1)
        metrics["top1_agree"] = float((ref_top == cand_top).mean())
        if labels is not None:
            metrics["ref_acc"] = float((ref_top == labels).mean())
            metrics["cand_acc"] = float((cand_top == labels).mean())
            metrics["acc_drop"] = metrics["ref_acc"] - metrics["cand_acc"]
    return metrics


def check_metrics(metrics: dict, th: Thresholds) -> list:
    """One row per applicable limit: (metric, value, limit text, passed)."""
    rows = []

    def add(name, value, limit, ok):
        rows.append({"metric": name, "value": value, "limit": limit, "passed": bool(ok)})

    if not th.allow_nonfinite:
        add("nonfinite", metrics["nonfinite"], "== 0", metrics["nonfinite"] == 0)
    if th.min_cosine is not None:
        cos = metrics["cosine"]
        add("cosine", cos, f">= {th.min_cosine}", cos == cos and cos >= th.min_cosine)
    if th.max_abs is not None:
        add("max_abs", metrics["max_abs"], f"<= {th.max_abs}", metrics["max_abs"] <= th.max_abs)
    if th.max_rel is not None:
        add("max_rel", metrics["max_rel"], f"<= {th.max_rel}", metrics["max_rel"] <= th.max_rel)
    if th.max_outside is not None:
        add("outside_frac", metrics["outside_frac"], f"<= {th.max_outside}",
            metrics["outside_frac"] <= th.max_outside)
    if th.min_top1 is not None and "top1_agree" in metrics:
        add("top1_agree", metrics["top1_agree"], f">= {th.min_top1}",
            metrics["top1_agree"] >= th.min_top1)
    if th.max_acc_drop is not None and "acc_drop" in metrics:
        add("acc_drop", metrics["acc_drop"], f"<= {th.max_acc_drop}",
            metrics["acc_drop"] <= th.max_acc_drop + 1e-12)
    return rows


def passed(rows: list) -> bool:
    return all(row["passed"] for row in rows)
