"""``export``: checkpoint -> MINDIR/AIR/ONNX artefacts in fp32 and fp16, with manifests.

Every artefact and manifest of one call is staged under a temporary name in the target
folder and renamed into place only when all of them are written: a failure leaves
nothing behind.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from amptool.artefact import FORMATS, reader
from amptool.errors import UsageError
from amptool.files.configfile import decided_later
from amptool.files.fileio import check_out_dir, output_dir
from amptool.runtime.device import resolve_device, set_device

from .loader import load_trained
from .writer import ExportResult, format_module, other_forms, write_all

__all__ = ["ExportConfig", "ExportReport", "ExportResult", "export"]

PRECISIONS = ("fp32", "fp16")
IO_DTYPES = ("fp32", "fp16")


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


@dataclass
class ExportReport:
    """The artefacts one export wrote (each with its manifest)."""

    artefacts: list = field(default_factory=list)

    def __iter__(self):
        return iter(self.artefacts)

    def __len__(self) -> int:
        return len(self.artefacts)

    def __getitem__(self, index):
        return self.artefacts[index]

    def to_dict(self) -> dict:
        return {"artefacts": [a.to_dict() for a in self.artefacts]}


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


def check_config(cfg: ExportConfig) -> tuple:
    """Validate everything that needs no MindSpore; returns (formats, precisions)."""
    formats = normalize_formats(cfg.formats)
    precisions = normalize_precision(cfg.precision)
    problems = []
    if cfg.io_dtype not in IO_DTYPES:
        problems.append(f"unknown io dtype '{cfg.io_dtype}' (use fp32 or fp16)")
    if not cfg.dynamic_batch and cfg.batch_size < 1:
        problems.append(f"batch size must be >= 1 (got {cfg.batch_size})")
    if bool(cfg.run) == bool(cfg.ckpt):
        problems.append("give either --run DIR or --ckpt FILE --model NAME")
    if cfg.encrypt_key is not None and "ONNX" in formats:
        problems.append("an encryption key applies to MINDIR only (ONNX cannot be encrypted)")
    if cfg.encrypt_key is not None and len(cfg.encrypt_key) not in (16, 24, 32):
        problems.append("the encryption key must be 16, 24 or 32 bytes")
    if problems:
        raise UsageError("; ".join(problems), "fix the export options")
    return formats, precisions


def default_out(cfg: ExportConfig) -> str:
    if cfg.out:
        return cfg.out
    return str(Path(cfg.run) / "export") if cfg.run else "out/export"


def artefact_path(out: Path, model_name: str, precision: str, fmt: str) -> Path:
    base = model_name.rsplit(":", 1)[-1] if ".py:" in model_name else model_name
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(base).name)
    return out / f"{safe}_{precision}{reader(fmt).SUFFIX}"


def export(cfg: ExportConfig) -> ExportReport:
    """Write the artefacts ``cfg`` asks for (all or nothing) and their manifests."""
    formats, precisions = check_config(cfg)
    if "AIR" in formats:  # refuse before any other work
        format_module("AIR").check_available(cfg.device)
    for fmt in formats:
        format_module(fmt).check_available(cfg.device)
    check_out_dir(default_out(cfg))  # before the model is built
    trained, policy = load_trained(cfg)  # a run folder's mistakes before MindSpore loads
    device = resolve_device(cfg.device)

    with output_dir(default_out(cfg)) as out:
        jobs = [(p, f, artefact_path(out, trained.spec.name, p, f))
                for p in precisions for f in formats]
        _check_existing([path for _, _, path in jobs], cfg.force)
        set_device(device)
        return ExportReport(write_all(cfg, trained, policy, jobs))


def _check_existing(paths: list, force: bool) -> None:
    """Refuse (without --force) when any form of a planned artefact is there: its file, the
    split graph and weights MindSpore writes for a big one, or a manifest."""
    existing = [str(p.parent / n) for p in paths for n in other_forms(p)]
    if existing and not force:
        raise UsageError(f"{len(existing)} artefact file(s) already exist "
                         f"({', '.join(existing[:3])}); nothing was touched",
                         "pass --force to replace them, or choose another --out")
