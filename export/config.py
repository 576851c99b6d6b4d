"""``ExportConfig``: what ``amptool export`` is asked to write, and ``validate``: every
mistake in it at once, before any work. Imports neither numpy nor MindSpore: the command
line builds and checks it."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from amptool.artefact import FORMATS
from amptool.errors import UsageError, problems_of, raise_problems
from amptool.files.configfile import decided_later

PRECISIONS = ("fp32", "fp16")
"""The precisions an export writes (``both``: each)."""
IO_DTYPES = ("fp32", "fp16")
"""The input/output dtypes of an fp16 artefact."""


@dataclass(frozen=True)
class ExportConfig:
    """Everything ``amptool export`` needs."""

    run: Optional[str] = None
    """Training run folder (run.json + best/last checkpoint); or use ``ckpt`` + ``model``."""
    ckpt: Optional[str] = None
    """Checkpoint file (.ckpt or .safetensors) when no run folder is given."""
    model: Optional[str] = None
    """Model reference, with ``ckpt``; with ``run``, replaces the run's model."""
    model_args: Optional[dict] = None
    """Keyword arguments for the model factory, with ``ckpt``."""
    input_spec: Optional[str] = None
    """The model's input signature, with ``ckpt`` (when the model declares none)."""
    which: str = "best"
    """Which checkpoint of the run: best or last."""
    formats: tuple = ("MINDIR",)
    """MINDIR, AIR and/or ONNX (case-insensitive)."""
    precision: str = "both"
    """fp32, fp16 or both."""
    batch_size: int = 1
    """Fixed batch dimension of the traced inputs (ignored with ``dynamic_batch``)."""
    dynamic_batch: bool = False
    """Export with a dynamic batch dimension (-1)."""
    io_dtype: str = "fp32"
    """Input/output dtype of the fp16 artefact: fp32 (drop-in for the fp32 one) or fp16."""
    out: Optional[str] = decided_later("RUN/export, or out/export with --ckpt")
    """Output folder; default: <run>/export, or out/export with ``ckpt``."""
    force: bool = False
    """Replace existing artefacts."""
    policy: Optional[str] = None
    """Precision policy file overriding the run's (or the O2 default with ``ckpt``)."""
    amp_level: Optional[str] = None
    """AMP level overriding the run's policy (O0..O3)."""
    data: str = "digits"
    """With ``ckpt``: the training data, to record its preprocessing ("none" to skip)."""
    val_fraction: float = 0.2
    """With ``ckpt``: the validation fraction used in training."""
    device: str = "auto"
    """Backend to export on: auto, CPU, GPU or Ascend."""
    audit: bool = True
    """Audit each written graph's precision against its policy before it counts as written:
    an export whose graph contradicts its policy fails and writes nothing."""
    encrypt_key: bytes | None = field(default=None, repr=False)
    """AES-GCM key (16/24/32 bytes) for MINDIR; never printed or written."""


def normalize_formats(formats) -> tuple:
    found, bad = [], []
    for item in formats:
        for name in str(item).split(","):
            name = name.strip().upper()
            if not name:
                continue
            if name not in FORMATS:
                bad.append(name)
            elif name not in found:
                found.append(name)
    if bad or not found:
        raise UsageError(f"unknown format {', '.join(bad) or '(none)'}",
                         f"use {', '.join(FORMATS)} (several allowed)")
    return tuple(found)


def normalize_precision(precision: str) -> tuple:
    value = str(precision).lower()
    if value == "both":
        return PRECISIONS
    if value not in PRECISIONS:
        raise UsageError(f"unknown precision '{precision}'", "use fp32, fp16 or both")
    return (value,)


VALUE_FIX = "fix the export options"
"""The fix of an option out of its range."""


def validate(cfg: ExportConfig) -> None:
    """Raise one UsageError naming every mistake of ``cfg`` (each with its fix); nothing
    when there is none."""
    bad_formats = problems_of(normalize_formats, cfg.formats)
    formats = () if bad_formats else normalize_formats(cfg.formats)
    problems = bad_formats + problems_of(normalize_precision, cfg.precision)
    values = []
    if cfg.io_dtype not in IO_DTYPES:
        values.append(f"unknown io dtype '{cfg.io_dtype}' (use fp32 or fp16)")
    if not cfg.dynamic_batch and cfg.batch_size < 1:
        values.append(f"batch size must be >= 1 (got {cfg.batch_size})")
    if bool(cfg.run) == bool(cfg.ckpt):
        values.append("give either --run DIR or --ckpt FILE --model NAME")
    if cfg.encrypt_key is not None and "ONNX" in formats:
        values.append("an encryption key applies to MINDIR only (ONNX cannot be encrypted)")
    if cfg.encrypt_key is not None and len(cfg.encrypt_key) not in (16, 24, 32):
        values.append("the encryption key must be 16, 24 or 32 bytes")
    raise_problems(problems + [(problem, VALUE_FIX) for problem in values])


def default_out(cfg: ExportConfig) -> str:
    if cfg.out:
        return cfg.out
    return str(Path(cfg.run) / "export") if cfg.run else "out/export"
