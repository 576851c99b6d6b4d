"""``export``: checkpoint -> MINDIR/AIR/ONNX artefacts in fp32 and fp16, with manifests.

Every artefact and manifest of one call is staged under a temporary name in the target
folder and renamed into place only when all of them are written: a failure leaves
nothing behind.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from amptool.artefact.readers import reader
from amptool.errors import UsageError
from amptool.files.fileio import check_out_dir, output_dir
from amptool.runtime.device import resolve_device, set_device

from .config import ExportConfig, default_out, normalize_formats, normalize_precision, validate
from .loader import load_trained
from .writer import ExportResult, format_module, other_forms, write_all

__all__ = ["ExportConfig", "ExportReport", "ExportResult", "export"]


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


def artefact_path(out: Path, model_name: str, precision: str, fmt: str) -> Path:
    base = model_name.rsplit(":", 1)[-1] if ".py:" in model_name else model_name
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(base).name)
    return out / f"{safe}_{precision}{reader(fmt).SUFFIX}"


def export(cfg: ExportConfig) -> ExportReport:
    """Write the artefacts ``cfg`` asks for (all or nothing) and their manifests."""
    validate(cfg)
    formats, precisions = normalize_formats(cfg.formats), normalize_precision(cfg.precision)
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
