"""The limits a parity candidate is held to (``Thresholds``) and where they come from.

A breach of any limit fails: there is no warn-only mode. Limits start from the default of
the pair (fp32 vs fp32 across formats, or a low-precision candidate against fp32), then a
config file's ``[thresholds]`` table, then its pair table (``[thresholds.fp16_vs_fp32]`` or
``[thresholds.same_precision]``), then the output's own table
(``[thresholds.outputs.<name or index>]``), then flags. A limit set to ``off`` (or ``"off"``
in a file) is disabled. The metrics they bound: ``amptool.stats.metrics``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional

from amptool.errors import UsageError

DOCUMENT_RULES: Dict[str, Any] = {"extra": "forbid", "strict": True,
                                  "use_attribute_docstrings": True}
"""The rules of the documents that hold the types of this package (``amptool.documents.door``'s
``RULES``, which is this dict): a key no field names is refused, nothing is coerced."""


@dataclass(frozen=True)
class Thresholds:
    """Pass/fail limits; None disables a limit."""

    __pydantic_config__: ClassVar[Dict[str, Any]] = DOCUMENT_RULES

    min_cosine: Optional[float] = 0.999
    """Cosine similarity of flattened outputs must be at least this."""
    min_top1: Optional[float] = 0.99
    """Fraction of samples whose arg-max class agrees, near-tie flips counted as agreeing
    (``top1_agree_clear``; class logits only)."""
    max_acc_drop: Optional[float] = 0.005
    """Allowed accuracy drop of the candidate against the reference, as a fraction (0.005 =
    0.5 pp), near-tie flips left out (``acc_drop_clear``; class logits with labels only)."""
    max_abs: Optional[float] = None
    """Largest allowed absolute difference max|c - r|."""
    max_abs_scaled: Optional[float] = None
    """Largest allowed max|c - r| / max(1, max|r|): the absolute error in units of the
    reference's largest magnitude (plain absolute error where the reference stays in [-1, 1])."""
    max_p999_abs_scaled: Optional[float] = None
    """Largest allowed 99.9th percentile of |c - r| / max(1, max|r|) over the output's
    elements: the scaled error of all but its worst 0.1 %."""
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
    max_metric_drop: Optional[float] = 0.0
    """Allowed drop of the user task metric (``--metric``): reference minus candidate."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


CHECKS = (("min_cosine", "cosine", ">="), ("max_abs", "max_abs", "<="),
          ("max_abs_scaled", "max_abs_scaled", "<="),
          ("max_p999_abs_scaled", "p999_abs_scaled", "<="), ("max_rel", "max_rel", "<="),
          ("max_outside", "outside_frac", "<="), ("min_top1", "top1_agree_clear", ">="),
          ("max_acc_drop", "acc_drop_clear", "<="))
"""(limit, the figure it bounds, ``>=`` or ``<=``) of every limit an output is checked
against (``amptool.stats.metrics.check_metrics``)."""


FP16_VS_FP32 = Thresholds()
"""Default for a low-precision candidate against an fp32 reference."""
SAME_PRECISION = Thresholds(min_cosine=0.99999, min_top1=1.0, max_acc_drop=0.0,
                            max_abs_scaled=1e-4)
"""Default for fp32 against fp32 across formats (MindIR vs ONNX vs eager). The 1e-4 bound on
the scaled error equals the former absolute 1e-4 wherever outputs stay within [-1, 1]; it
sits above fp32 reordering noise (3e-7 to 7.5e-6 measured on seeded repvgg_a0 logits of
2,400 to 56,000) and below what fp16 storage leaves (2e-4 to 5e-4)."""


FP16_UNIT = 2.0 ** -11
"""fp16's unit roundoff u: one rounding to fp16 moves a value by at most u of itself."""
NOT_LOGITS_MAX_ABS_SCALED = 128 * FP16_UNIT
"""Default limit (2^-4 = 0.0625) on ``max_abs_scaled`` of an output that is no class logits,
between a low-precision candidate and fp32: the worst element, 128 u of the output's scale."""
NOT_LOGITS_MAX_P999_ABS_SCALED = 64 * FP16_UNIT
"""Default limit (2^-5 = 0.03125) on ``p999_abs_scaled`` of such an output: all but its
worst 0.1 % of elements within 64 u of the output's scale. Why these two and not one bound
on the max: docs/explanation/parity.md, "Outputs that are not class logits"."""
NOT_LOGITS_BOUNDS = {"max_abs_scaled": NOT_LOGITS_MAX_ABS_SCALED,
                     "max_p999_abs_scaled": NOT_LOGITS_MAX_P999_ABS_SCALED}
"""The limits a low-precision candidate gets by default on an output that is no class logits."""


def default_text(name: str, fp16_only: bool = False) -> str:
    """How the default of limit ``name`` reads in --help and the reference, from the pair
    defaults and ``NOT_LOGITS_BOUNDS``: ``fp16: 0.999; fp32: 0.99999``, or one value when the
    pairs agree (``fp16_only``: the low-precision pair's alone)."""
    fp16 = _value_text(getattr(FP16_VS_FP32, name))
    if name in NOT_LOGITS_BOUNDS:
        fp16 = f"{_value_text(NOT_LOGITS_BOUNDS[name])} on outputs that are no class logits, " \
               f"else {fp16}"
    fp32 = _value_text(getattr(SAME_PRECISION, name))
    if fp16_only or fp16 == fp32:
        return fp16
    return f"fp16: {fp16}; fp32: {fp32}"


def _value_text(value: Optional[float]) -> str:
    return "off" if value is None else format(value, "g")


def default_thresholds(ref_precision: Optional[str], cand_precision: Optional[str]) -> Thresholds:
    return SAME_PRECISION if ref_precision == cand_precision == "fp32" else FP16_VS_FP32


def thresholds_from_dict(data: dict, base: Thresholds, source: str = "thresholds") -> Thresholds:
    names = {f.name for f in dataclasses.fields(Thresholds)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise UsageError(f"{source}: unknown threshold(s) {', '.join(unknown)}",
                         f"known: {', '.join(sorted(names))}")
    return dataclasses.replace(base, **data)


PAIR_TABLES = ("fp16_vs_fp32", "same_precision")
OUTPUTS_TABLE = "outputs"
_TABLES = PAIR_TABLES + (OUTPUTS_TABLE,)
_OFFABLE = ("min_cosine", "min_top1", "max_acc_drop", "max_abs", "max_abs_scaled",
            "max_p999_abs_scaled", "max_rel", "max_outside", "max_metric_drop")


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
    general = {k: v for k, v in table.items() if k not in _TABLES}
    thresholds_from_dict(_clean(general, source), Thresholds(), source)
    for pair in PAIR_TABLES:
        if pair in table:
            if not isinstance(table[pair], dict):
                raise UsageError(f"{source}: thresholds.{pair} must be a table", "fix the file")
            thresholds_from_dict(_clean(table[pair], source), Thresholds(), source)
    outputs = table.get(OUTPUTS_TABLE, {})
    if not isinstance(outputs, dict):
        raise UsageError(f"{source}: thresholds.outputs must be a table of tables",
                         "write [thresholds.outputs.<name or index>] key = value")
    for key, sub in outputs.items():
        where = f"{source}: thresholds.outputs.{key}"
        if not isinstance(sub, dict):
            raise UsageError(f"{where} must be a table",
                             "write [thresholds.outputs.NAME] key = value")
        if "max_metric_drop" in sub:
            raise UsageError(f"{where}: max_metric_drop applies to the whole candidate, not "
                             "one output", "set it in [thresholds] or a pair table")
        thresholds_from_dict(_clean(sub, where), Thresholds(), where)
    return table


def check_output_tables(table: Optional[dict], names: list) -> None:
    """Every ``thresholds.outputs`` key must name one output (by name or index) of ``names``."""
    outputs = (table or {}).get(OUTPUTS_TABLE, {})
    known = ", ".join(f"{i} ({n})" for i, n in enumerate(names))
    for key in outputs:
        if not any(_matches(key, i, n) for i, n in enumerate(names)):
            raise UsageError(f"thresholds.outputs.{key}: no output is named or numbered {key}",
                             f"the reference's outputs are {known}")
    for i, name in enumerate(names):
        hits = [str(k) for k in outputs if _matches(k, i, name)]
        if len(hits) > 1:
            raise UsageError(f"thresholds.outputs: output {i} ({name}) has two tables "
                             f"({', '.join(hits)})", "keep one of them")


def _matches(key, index: int, name: str) -> bool:
    return str(key) == str(name) or str(key) == str(index)


def _output_table(table: dict, output: Optional[tuple]) -> dict:
    if output is None:
        return {}
    index, name = output
    return next((sub for key, sub in table.get(OUTPUTS_TABLE, {}).items()
                 if _matches(key, index, name)), {})


def resolve_thresholds(ref_precision: Optional[str], cand_precision: Optional[str],
                       file_table: Optional[dict] = None, flags: Optional[dict] = None,
                       output: Optional[tuple] = None, logits: bool = True,
                       bound_scaled: bool = False) -> Thresholds:
    """The limits one candidate (one output: ``(index, name)``) is held to: the pair's
    defaults, then a config file's ``thresholds`` table, its pair table and the output's
    table, then flags. ``logits=False`` (a run whose loss is no class cross-entropy):
    top-1 and accuracy are left out and the scaled error is bounded by default (its worst
    element and, against fp32, its 99.9th percentile);
    ``bound_scaled`` (an output that cannot be class logits) bounds the scaled error too."""
    th = default_thresholds(ref_precision, cand_precision)
    pair = "same_precision" if th == default_thresholds("fp32", "fp32") else "fp16_vs_fp32"
    if not logits or bound_scaled:
        th = dataclasses.replace(th, max_abs_scaled=min(
            th.max_abs_scaled or NOT_LOGITS_MAX_ABS_SCALED, NOT_LOGITS_MAX_ABS_SCALED))
        if pair == "fp16_vs_fp32":
            th = dataclasses.replace(th, max_p999_abs_scaled=NOT_LOGITS_MAX_P999_ABS_SCALED)
    if not logits:
        th = dataclasses.replace(th, min_top1=None, max_acc_drop=None)
    table = file_table or {}
    general = {k: v for k, v in table.items() if k not in _TABLES}
    th = thresholds_from_dict(_clean(general, "config thresholds"), th)
    th = thresholds_from_dict(_clean(table.get(pair, {}), f"config thresholds.{pair}"), th)
    th = thresholds_from_dict(_clean(_output_table(table, output),
                                     f"config thresholds.outputs.{output and output[1]}"), th)
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
    out: dict = {}
    for name, raw in values.items():
        if isinstance(raw, bool):
            if raw:
                out[name] = True
            continue
        parsed = parse_limit(raw, name)
        if parsed is not _UNSET:
            out[name] = parsed
    return out
