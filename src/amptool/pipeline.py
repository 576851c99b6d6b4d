"""``run_pipeline``: train -> export MINDIR (and ONNX) fp32 + fp16 -> parity -> summary.

Layout of ``out``: ``train/`` (the training run), ``export/`` (artefacts and manifests),
``parity.json`` and ``parity.xml`` (the parity report as JSON and JUnit), ``summary.json``.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from amptool.errors import UsageError

if TYPE_CHECKING:
    from amptool.train.config import TrainConfig


@dataclass(frozen=True)
class PipelineConfig:
    """Everything ``amptool run`` needs; the defaults are the bundled quick pipeline."""

    train: Optional["TrainConfig"] = None
    """The training run (its ``out`` is replaced by ``<out>/train``); None: the defaults."""
    out: str = "runs/pipeline"
    """Output folder (train/, export/, parity.json, parity.xml, summary.json)."""
    onnx: str = "auto"
    """ONNX artefacts too: auto (when the onnx extra is installed; skipped with one warning
    when the network cannot be written as ONNX), on (such a failure fails the run) or off."""
    samples: Optional[int] = None
    """Held-out samples in the parity check (all when None)."""
    per_layer: bool = False
    """Add per-layer localization to the parity report."""
    overwrite: bool = False
    """Replace the pipeline run ``out`` holds (its trained run, artefacts and reports);
    without it such a folder is refused."""

    def to_dict(self) -> dict:
        train = self.train_config()
        return {"train": train.to_dict(), "out": self.out, "onnx": self.onnx,
                "samples": self.samples, "per_layer": self.per_layer,
                "overwrite": self.overwrite}

    def train_config(self):
        from amptool.train.config import TrainConfig

        base = self.train if self.train is not None else TrainConfig()
        return dataclasses.replace(base, out=str(Path(self.out) / "train"), resume=False,
                                   overwrite=self.overwrite, workers=1)


PIPELINE_KEYS = ("out", "onnx", "samples", "per_layer", "overwrite")
_NOT_IN_PIPELINE = ("out", "resume", "workers", "overwrite")


def build_pipeline_config(file_values: dict, flags: dict, source: str) -> PipelineConfig:
    """Flat keys (a config file, then flags) into a PipelineConfig: the pipeline's own keys
    plus any training setting except out, resume and workers."""
    from amptool.config import build_config
    from amptool.train.config import TrainConfig

    train_keys = {f.name for f in dataclasses.fields(TrainConfig)} - set(_NOT_IN_PIPELINE)
    norm = {k.replace("-", "_"): v for k, v in file_values.items()}
    unknown = sorted(k for k in norm if k not in train_keys and k not in PIPELINE_KEYS)
    if unknown:
        raise UsageError(f"{source}: unknown key(s) {', '.join(unknown)}",
                         f"known keys: {', '.join(sorted(train_keys | set(PIPELINE_KEYS)))}")
    split = lambda values, keys: {k: v for k, v in values.items() if k in keys}  # noqa: E731
    train = build_config(TrainConfig, split(norm, train_keys), split(flags, train_keys), source)
    own = build_config(PipelineConfig, split(norm, PIPELINE_KEYS), split(flags, PIPELINE_KEYS),
                       source)
    return dataclasses.replace(own, train=train)


def check_config(cfg: PipelineConfig) -> tuple:
    """Validate before any work; return the export formats."""
    from amptool.hostinfo import onnx_available

    if cfg.onnx not in ("auto", "on", "off"):
        raise UsageError(f"unknown --onnx '{cfg.onnx}'", "use auto, on or off")
    if cfg.onnx == "on" and not onnx_available():
        raise UsageError("--onnx on needs onnx and onnxruntime, which are not installed",
                         "pip install 'amptool[onnx]', or pass --onnx off")
    from amptool.train.config import check_config as check_train_config

    check_train_config(cfg.train_config())
    if cfg.samples is not None and (isinstance(cfg.samples, bool)
                                    or not isinstance(cfg.samples, int) or cfg.samples < 1):
        raise UsageError(f"samples must be a whole number >= 1 (got {cfg.samples!r})",
                         "give a positive --samples")
    with_onnx = cfg.onnx == "on" or (cfg.onnx == "auto" and onnx_available())
    return ("MINDIR", "ONNX") if with_onnx else ("MINDIR",)


def run_pipeline(cfg: PipelineConfig, on_event: Optional[Callable[[dict], None]] = None) -> dict:
    """Run every stage, with ``cfg.out`` held by this process; return the summary
    (``summary["passed"]`` is the parity verdict)."""
    emit = on_event or (lambda event: None)
    formats = check_config(cfg)
    from amptool.fileio import output_dir

    with output_dir(cfg.out) as out:
        claim_out_folder(cfg, out, emit)
        return _run_stages(cfg, out, formats, emit, on_event)


def claim_out_folder(cfg: PipelineConfig, out: Path, emit: Callable[[dict], None]) -> None:
    """Refuse a folder that holds a pipeline run (a trained run in train/, or summary.json)
    unless ``cfg.overwrite``; with it, say in one ``overwrite`` event what is replaced."""
    from amptool.rundir import RunDir

    found = [p.relative_to(out) for p in RunDir(out / "train").trained_files()]
    found += [Path(n) for n in ("summary.json", "parity.json") if (out / n).is_file()]
    if not found:
        return
    names = ", ".join(str(p) for p in found)
    if not cfg.overwrite:
        raise UsageError(f"{cfg.out} already holds a pipeline run ({names})",
                         "pass --overwrite to replace it, or another --out")
    emit({"kind": "overwrite", "out": str(cfg.out), "replaced": [str(p) for p in found]})


def _run_stages(cfg: PipelineConfig, out: Path, formats: tuple, emit: Callable[[dict], None],
                on_event: Optional[Callable[[dict], None]]) -> dict:
    from amptool.fileio import write_json
    from amptool.parity.compare import check_parity
    from amptool.parity.config import ParityConfig
    from amptool.parity.report import write_junit, write_report_json
    from amptool.train.loop import train_model

    times = {}
    t0 = time.perf_counter()
    emit({"kind": "stage", "stage": "train"})
    train_cfg = cfg.train_config()
    said = (lambda e: e["kind"] != "overwrite" and on_event(e)) if on_event else None  # noqa: E731
    train = train_model(train_cfg, on_event=said)  # the pipeline said what it replaces
    times["train"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    emit({"kind": "stage", "stage": "export", "formats": list(formats)})
    results, warnings = export_artefacts(cfg, out, train_cfg.device, formats, emit)
    times["export"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    emit({"kind": "stage", "stage": "parity"})
    ref, cands = order_artefacts(results)
    report = check_parity(ParityConfig(reference=ref.path, candidates=tuple(c.path for c in cands),
                                       samples=cfg.samples, per_layer=cfg.per_layer,
                                       device=train_cfg.device))
    times["parity"] = time.perf_counter() - t2
    write_report_json(str(out / "parity.json"), report)
    write_junit(str(out / "parity.xml"), report)
    summary = summarize(cfg, train.to_dict(), ref, cands, report, times)
    summary["warnings"] = warnings
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    write_json(out / "summary.json", summary)
    return summary


def export_artefacts(cfg: PipelineConfig, out: Path, device: str, formats: tuple,
                     emit: Callable[[dict], None]) -> tuple:
    """(artefacts, warnings): MINDIR fp32 + fp16, then ONNX when asked. With ``--onnx auto`` an
    ONNX failure (an operator or dtype mix ONNX cannot carry) skips ONNX with one warning."""
    from amptool.export.api import ExportConfig, export_model
    from amptool.export.onnx import OnnxUnsupported

    common = {"run": str(out / "train"), "precision": "both", "out": str(out / "export"),
              "force": True, "device": device, "dynamic_batch": True}
    results = list(export_model(ExportConfig(formats=("MINDIR",), **common)))
    if "ONNX" not in formats:
        return results, []
    try:
        results += export_model(ExportConfig(formats=("ONNX",), **common))
    except OnnxUnsupported as exc:
        if cfg.onnx == "on":
            raise
        message = f"ONNX skipped: {exc.problem}"
        emit({"kind": "warning", "message": message})
        return results, [message]
    order = {("fp32", "MINDIR"): 0, ("fp32", "ONNX"): 1, ("fp16", "MINDIR"): 2}
    return sorted(results, key=lambda r: order.get((r.precision, r.format), 3)), []


def order_artefacts(results: list) -> tuple:
    """The MINDIR fp32 artefact is the reference; every other one is a candidate."""
    ref = next(r for r in results if r.format == "MINDIR" and r.precision == "fp32")
    return ref, [r for r in results if r is not ref]


def summarize(cfg, train: dict, ref, cands: list, report: dict, times: dict) -> dict:
    by_path = {c["path"]: c for c in report["candidates"]}
    rows = [_row(ref, None, None)]
    sizes = {(r.format, r.precision): Path(r.path).stat().st_size for r in [ref] + cands}
    for cand in cands:
        rows.append(_row(cand, by_path.get(cand.path), sizes.get((cand.format, "fp32"))))
    ref_acc = next((o["metrics"].get("ref_acc") for c in report["candidates"]
                    for o in c["outputs"]), None)
    rows[0]["accuracy"] = ref_acc
    return {"passed": report["passed"], "config": cfg.to_dict(), "out": cfg.out,
            "train": {k: train.get(k) for k in ("val_acc", "best_acc", "steps", "overflow_steps",
                                                "loss_scale", "policy", "device", "seconds")},
            "artefacts": rows, "parity": {"passed": report["passed"],
                                          "samples": report["inputs"]["samples"],
                                          "culprits": [dict(c["culprit"], artefact=c["path"])
                                                       for c in report["candidates"]
                                                       if c.get("culprit")]},
            "seconds_by_stage": {k: round(v, 2) for k, v in times.items()}}


def _row(result, judged: Optional[dict], fp32_size: Optional[int]) -> dict:
    size = Path(result.path).stat().st_size
    row = {"format": result.format, "precision": result.precision, "path": result.path,
           "size": size, "size_ratio": round(size / fp32_size, 4) if fp32_size else None,
           "accuracy": None, "verdict": "reference"}
    if judged is not None:
        metrics = judged["outputs"][0]["metrics"]
        row["accuracy"] = metrics.get("cand_acc")
        row["cosine"] = metrics.get("cosine")
        row["max_abs"] = metrics.get("max_abs")
        row["verdict"] = ("PASS" if judged["passed"] else "FAIL") + "*" * bool(judged.get("caveat"))
        row["caveat"] = judged.get("caveat")
    return row
