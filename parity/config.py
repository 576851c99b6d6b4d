"""The resolved configuration of one parity check, and how thresholds are chosen.

Thresholds start from the default of the pair (fp32 vs fp32 across formats, or a
low-precision candidate against fp32), then a config file's ``[thresholds]`` table, then
its pair table (``[thresholds.fp16_vs_fp32]`` or ``[thresholds.same_precision]``), then
flags. A limit set to ``off`` (or ``"off"`` in a file) is disabled.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from amptool.errors import UsageError
from amptool.parity.metrics import Thresholds, default_thresholds, thresholds_from_dict

PAIR_TABLES = ("fp16_vs_fp32", "same_precision")
_OFFABLE = ("min_cosine", "min_top1", "max_acc_drop", "max_abs", "max_rel", "max_outside")


@dataclass(frozen=True)
class ParityConfig:
    """Everything ``amptool parity`` needs."""

    reference: str = ""
    """Artefact, checkpoint or training run folder; empty when ``load_outputs`` is given."""
    candidates: tuple = ()
    """Artefacts compared against the reference."""
    data: str = ""
    """Data source of real samples; empty means the manifest's, else the bundled digits."""
    samples: Optional[int] = None
    """How many held-out samples (all when None)."""
    val_fraction: Optional[float] = None
    """Held-out fraction of the data; None means the manifest's (else 0.2)."""
    inputs: str = ""
    """An .npz of ready inputs fed as they are (instead of ``data``)."""
    save_outputs: str = ""
    """Write the reference's outputs, inputs and labels to this .npz."""
    load_outputs: str = ""
    """Compare against outputs stored by ``save_outputs`` instead of running a reference."""
    model: str = ""
    """Model for per-layer localization when a manifest does not name one."""
    ckpt: str = ""
    """Checkpoint for per-layer localization when weights cannot be read from an artefact."""
    key: Optional[bytes] = None
    """Decryption key of encrypted MindIR artefacts."""
    per_layer: bool = False
    """Localize the first diverging cell of each candidate."""
    layer_samples: int = 32
    """Samples used by the per-layer pass."""
    layer_min_cosine: Optional[float] = None
    """Per-cell cosine limit; None means the candidate's min_cosine."""
    thresholds: dict = field(default_factory=dict)
    """Overrides for every pair (from flags): threshold name -> value (None = off)."""
    file_thresholds: dict = field(default_factory=dict)
    """A config file's ``thresholds`` table (may hold the pair tables)."""
    device: str = "auto"
    """auto, CPU, GPU or Ascend."""
    batch_size: int = 512
    """Samples per call for artefacts with a dynamic batch dimension (each new batch shape
    costs a graph compilation, so few large calls are fastest)."""


def _off(value):
    return None if isinstance(value, str) and value.lower() in ("off", "none") else value


def _clean(data: dict, source: str) -> dict:
    out = {}
    for key, value in data.items():
        value = _off(value)
        if value is None and key not in _OFFABLE:
            raise UsageError(f"{source}: threshold {key} cannot be off", "give a number")
        if value is not None and not isinstance(value, (int, float)):
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
                       cfg: ParityConfig) -> Thresholds:
    """The limits one candidate is held to."""
    th = default_thresholds(ref_precision, cand_precision)
    pair = "same_precision" if th == default_thresholds("fp32", "fp32") else "fp16_vs_fp32"
    table = cfg.file_thresholds or {}
    general = {k: v for k, v in table.items() if k not in PAIR_TABLES}
    th = thresholds_from_dict(_clean(general, "config thresholds"), th)
    th = thresholds_from_dict(_clean(table.get(pair, {}), f"config thresholds.{pair}"), th)
    th = thresholds_from_dict(_clean(cfg.thresholds, "flags"), th, "flags")
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


def replace(cfg: ParityConfig, **changes) -> ParityConfig:
    return dataclasses.replace(cfg, **changes)
