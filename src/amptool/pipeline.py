"""``run_pipeline``: train -> export MINDIR (and ONNX) fp32 + fp16 -> parity -> summary.

Each stage runs through its one entry (``train.run.run_training``, ``export.api.export``,
``parity.compare.parity``) and is read through its typed result.

Layout of ``out``: ``train/`` (the training run), ``export/`` (artefacts and manifests),
``parity.json`` and ``parity.xml`` (the parity report as JSON and JUnit), ``summary.json``;
with a baseline, ``diff.json`` (the parity report compared with it: ``amptool.pipelinediff``).
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from amptool.artefact import onnx_installed
from amptool.artefact.files import total_size
from amptool.documents.diff import DiffReport
from amptool.documents.events import Overwrite, PipelineEvent, Stage, TrainEvent, Warned
from amptool.documents.summary import (SUMMARY, SUMMARY_VERSION, ArtefactRow, DeploymentRow,
                                       OutputRow, ParityFigures, PipelineSummary, TrainFigures)
from amptool.errors import CheckFailed, UsageError, problems_of, raise_problems
from amptool.export.api import ExportConfig, export
from amptool.export.onnx import OnnxUnsupported
from amptool.files.fileio import output_dir, write_json
from amptool.ledger.url import LedgerError, ledger_url
from amptool.parity.compare import parity, record
from amptool.parity.config import ParityConfig
from amptool.parity.report import ParityReport, breaches, fmt, write_junit, write_report_json
from amptool.pipelineconfig import PIPELINE_KEYS, PipelineConfig, build_pipeline_config
from amptool.pipelinediff import (Baseline, BaselineRefused, compare_with_baseline,
                                  diff_text, read_baseline, run_failure)
from amptool.report.html import ReportPage, write_report
from amptool.runs.rundir import RunDir
from amptool.train.checks import problems as train_problems
from amptool.train.run import run_training

__all__ = ["PIPELINE_KEYS", "BaselineRefused", "PipelineConfig", "PipelineResult",
           "build_pipeline_config", "diff_text", "format_summary", "measured_pipeline",
           "raise_if_failed", "run_pipeline", "validate", "write_html"]


@dataclass(frozen=True)
class PipelineResult:
    """What ``amptool run`` reports: training, artefacts and the parity verdict."""

    passed: bool
    """The parity verdict."""
    summary: PipelineSummary = field(repr=False)
    """summary.json's content."""
    parity: Optional[ParityReport] = field(repr=False, default=None)
    """The parity stage's report (parity.json's content as ``to_dict()``)."""
    diff: Optional[DiffReport] = field(repr=False, default=None)
    """That report compared with the baseline (diff.json's content; None without one):
    ``diff.passed`` False on a regression, which fails ``amptool run``."""

    @property
    def warnings(self) -> list:
        """What was skipped on the way (e.g. ONNX with ``--onnx auto``), one line each."""
        return list(self.summary.warnings or [])

    def to_dict(self) -> dict:
        return self.summary.to_dict()

    def document(self) -> dict:
        """summary.json's content, as written and as ``amptool run --json`` prints it."""
        return SUMMARY.json(self.summary)

def validate(cfg: PipelineConfig) -> None:
    """Raise one UsageError naming every mistake of ``cfg`` (its training run's too, but for
    its folder, which the pipeline makes); nothing when there is none."""
    problems = []
    if cfg.onnx not in ("auto", "on", "off"):
        problems.append((f"unknown --onnx '{cfg.onnx}'", "use auto, on or off"))
    if cfg.onnx == "on" and not onnx_installed():
        problems.append(("--onnx on needs onnx and onnxruntime, which are not installed",
                         "pip install 'amptool[onnx]', or pass --onnx off"))
    problems += train_problems(cfg.train_config(), folder=False)
    if cfg.samples is not None and (isinstance(cfg.samples, bool)
                                    or not isinstance(cfg.samples, int) or cfg.samples < 1):
        problems.append((f"samples must be a whole number >= 1 (got {cfg.samples!r})",
                         "give a positive --samples"))
    if isinstance(cfg.workers, bool) or not isinstance(cfg.workers, int) or cfg.workers < 1:
        problems.append((f"workers must be a whole number >= 1 (got {cfg.workers!r})",
                         "give a positive --workers"))
    if cfg.ledger is not None:  # a URL amptool cannot take is refused before any work
        problems += problems_of(ledger_url, cfg.ledger)
    problems += problems_of(read_baseline, cfg)  # read and held to its schema before training
    raise_problems(problems)


def export_formats(cfg: PipelineConfig) -> tuple:
    """The formats the pipeline exports: MINDIR, and ONNX when ``cfg.onnx`` asks for it."""
    with_onnx = cfg.onnx == "on" or (cfg.onnx == "auto" and onnx_installed())
    return ("MINDIR", "ONNX") if with_onnx else ("MINDIR",)


def run_pipeline(cfg: PipelineConfig,
                 on_event: Optional[Callable[[PipelineEvent], None]] = None) -> PipelineResult:
    """Run every stage, with ``cfg.out`` held by this process; return the result (``passed``
    is the parity verdict, ``diff`` the comparison with ``cfg.baseline``; a ``cfg.ledger``
    that fails: ``LedgerError``, a baseline of another model or inputs: ``BaselineRefused``,
    each ``measured`` the result); ``on_event`` is handed each ``PipelineEvent``
    (``amptool.documents.events``): the stages, warnings and training's events."""
    emit = on_event or (lambda event: None)
    validate(cfg)
    formats = export_formats(cfg)
    baseline = read_baseline(cfg)  # held in memory: BASE may be the run --overwrite replaces
    with output_dir(cfg.out) as out:
        claim_out_folder(cfg, out, emit)
        return _through_stages(cfg, out, formats, emit, on_event, baseline)


def claim_out_folder(cfg: PipelineConfig, out: Path,
                     emit: Callable[[PipelineEvent], None]) -> None:
    """Refuse a folder that holds a pipeline run (a trained run in train/, or summary.json)
    unless ``cfg.overwrite``; with it, say in one ``overwrite`` event what is replaced."""
    found = [p.relative_to(out) for p in RunDir(out / "train").trained_files()]
    found += [Path(n) for n in ("summary.json", "parity.json") if (out / n).is_file()]
    if not found:
        return
    names = ", ".join(str(p) for p in found)
    if not cfg.overwrite:
        raise UsageError(f"{cfg.out} already holds a pipeline run ({names})",
                         "pass --overwrite to replace it, or another --out")
    emit(Overwrite(str(cfg.out), [str(p) for p in found]))


def _through_stages(cfg: PipelineConfig, out: Path, formats: tuple,
                    emit: Callable[[PipelineEvent], None],
                    on_event: Optional[Callable[[PipelineEvent], None]],
                    baseline: Optional[Baseline]) -> PipelineResult:
    times = {}
    t0 = time.perf_counter()
    emit(Stage("train"))
    train_cfg = cfg.train_config()

    def said(event: TrainEvent) -> None:  # the pipeline said what it replaces
        if on_event is not None and not isinstance(event, Overwrite):
            on_event(event)

    train = run_training(train_cfg, on_event=said)
    times["train"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    emit(Stage("export", list(formats)))
    results, warnings = export_artefacts(cfg, out, train_cfg.device, formats, emit)
    times["export"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    emit(Stage("parity"))
    ref, cands = order_artefacts(results)
    report = parity(ParityConfig(reference=ref.path, candidates=tuple(c.path for c in cands),
                                 samples=cfg.samples, per_layer=cfg.per_layer, workers=cfg.workers,
                                 localize=cfg.localize, device=train_cfg.device))
    assert report is not None, "one host: parity returns its report"
    times["parity"] = time.perf_counter() - t2
    write_report_json(str(out / "parity.json"), report)
    write_junit(str(out / "parity.xml"), report)
    summary = summarize(cfg, train, ref, cands, report, times, warnings,
                        round(time.perf_counter() - t0, 2))
    write_summary(out / "summary.json", summary)
    result, refused = PipelineResult(report.passed, summary, report), None
    try:
        result = dataclasses.replace(result, diff=compare_with_baseline(baseline, report, cfg,
                                                                        out))
    except BaselineRefused as exc:  # said once the ledger has what was measured
        refused = exc
    if cfg.ledger:  # once every file is written; a ledger that fails hands back the result
        record(report, cfg.ledger, cfg.label, measured=result)
    if refused is not None:
        refused.measured = result
        raise refused
    return result


def write_html(path: Path, result: PipelineResult, cfg: PipelineConfig) -> None:
    """``amptool run``'s report.html at ``path``: the run's verdict (parity's, and the diff
    against the baseline's), the training run, every stage, the diff."""
    report = result.parity
    assert report is not None, "a pipeline's result holds its parity report"
    failed = run_failure(report, result.diff, cfg.out)
    line, fix = failed or (format_summary(result).splitlines()[-1], None)
    if failed is None and result.diff is not None:
        line += f"; {result.diff.verdict_line()}"
    seconds = {**result.summary.seconds_by_stage, "total": result.summary.seconds}
    write_report(path, ReportPage("run", failed is None, line, fix, str(Path(cfg.out) / "train"),
                                  report, seconds, result.diff))


def measured_pipeline(cfg: PipelineConfig,
                      on_event: Optional[Callable[[PipelineEvent], None]] = None) -> tuple:
    """(the result of ``run_pipeline(cfg)``, None; or, where ``cfg.ledger`` could not take
    it or ``cfg.baseline`` was of another model or inputs, the result and the
    ``LedgerError`` or ``BaselineRefused``): what was measured is never lost."""
    try:
        return run_pipeline(cfg, on_event), None
    except (LedgerError, BaselineRefused) as exc:  # measured: the reports are still written
        if exc.measured is None:
            raise
        return exc.measured, exc


def raise_if_failed(result: PipelineResult, cfg: PipelineConfig) -> None:
    """CheckFailed (exit 1) naming what failed and where its report is, when parity failed
    or the diff against the baseline regressed (``pipelinediff.run_failure``)."""
    assert result.parity is not None, "a pipeline's result holds its parity report"
    failed = run_failure(result.parity, result.diff, cfg.out)
    if failed is not None:
        raise CheckFailed(*failed)


def write_summary(path, summary: PipelineSummary) -> None:
    """summary.json, as ``amptool run --json`` prints it: a NaN or infinite figure written as
    the string "nan", "inf" or "-inf" (strict JSON, as the published schema says)."""
    write_json(path, SUMMARY.json(summary))


def export_artefacts(cfg: PipelineConfig, out: Path, device: str, formats: tuple,
                     emit: Callable[[PipelineEvent], None]) -> tuple:
    """(artefacts, warnings): MINDIR fp32 + fp16, then ONNX when asked. With ``--onnx auto`` an
    ONNX failure (an operator or dtype mix ONNX cannot carry) skips ONNX with one warning;
    with ``--onnx on`` every format is one export, all or nothing: such a failure writes
    none of them."""
    common: Dict[str, Any] = {"run": str(out / "train"), "precision": "both",
                              "out": str(out / "export"), "force": True, "device": device,
                              "dynamic_batch": True}
    if "ONNX" in formats and cfg.onnx == "on":
        results = list(export(ExportConfig(formats=formats, **common)).artefacts)
    else:
        results = list(export(ExportConfig(formats=("MINDIR",), **common)).artefacts)
        if "ONNX" not in formats:
            return results, []
        try:
            results += export(ExportConfig(formats=("ONNX",), **common)).artefacts
        except OnnxUnsupported as exc:
            message = f"ONNX skipped: {exc.problem}"
            emit(Warned(message))
            return results, [message]
    order = {("fp32", "MINDIR"): 0, ("fp32", "ONNX"): 1, ("fp16", "MINDIR"): 2}
    return sorted(results, key=lambda r: order.get((r.precision, r.format), 3)), []


def order_artefacts(results: list) -> tuple:
    """The MINDIR fp32 artefact is the reference; every other one is a candidate."""
    ref = next(r for r in results if r.format == "MINDIR" and r.precision == "fp32")
    return ref, [r for r in results if r is not ref]


def summarize(cfg, train, ref, cands: list, report, times: dict, warnings: list,
              seconds: float) -> PipelineSummary:
    """summary.json: the training (a ``TrainSummary``), one row per artefact (``ExportResult``)
    with its verdict in ``report`` (a ``ParityReport``), the verdict and each stage's time."""
    sizes = {(r.format, r.precision): total_size(r.path) for r in [ref] + cands}
    rows = [_row(ref, None, None, report.reference_accuracy)]
    for cand in cands:
        verdict = report.verdict(cand.path)
        rows.append(_row(cand, verdict, sizes.get((cand.format, "fp32")), verdict.accuracy))
    return PipelineSummary(
        schema_version=SUMMARY_VERSION, passed=report.passed, config=cfg.to_dict(),
        out=cfg.out, train=train_figures(train), artefacts=rows,
        parity=ParityFigures(report.passed, report.samples, report.culprits()),
        seconds_by_stage={k: round(v, 2) for k, v in times.items()}, warnings=warnings,
        seconds=seconds)


def train_figures(train):
    """The training's figures in the summary (``train``: a ``TrainSummary``)."""
    return TrainFigures(val_acc=train.val_acc, best_acc=train.best_acc, loss=train.loss,
                        steps=train.steps, overflow_steps=train.overflow_steps,
                        loss_scale=train.loss_scale, policy=train.policy, device=train.device,
                        seconds=train.seconds, score=train.score, val_score=train.val_score,
                        best_score=train.best_score, val_loss=train.val_loss)


def _row(result, verdict, fp32_size: Optional[int], accuracy: Optional[float]):
    """One artefact's row: an ``ExportResult`` and its ``CandidateVerdict`` (None: the
    reference). ``cosine`` is the lowest and ``max_abs`` the largest over every output;
    ``outputs`` has each one's verdict."""
    size = total_size(result.path)
    row = ArtefactRow(format=result.format, precision=result.precision, path=result.path,
                      size=size, size_ratio=round(size / fp32_size, 4) if fp32_size else None,
                      accuracy=accuracy, verdict="reference",
                      deployment=deployment_row(result, verdict))
    if verdict is None:
        return row
    return dataclasses.replace(
        row, cosine=verdict.cosine, max_abs=verdict.max_abs,
        verdict=("PASS" if verdict.passed else "FAIL") + "*" * bool(verdict.caveat),
        caveat=verdict.caveat, drop=verdict.drop, warnings=list(verdict.warnings),
        outputs=output_rows(verdict))


def deployment_row(result, verdict):
    """The artefact's deployment settings from its manifest and, with ``--emulate-settings``,
    what ignoring them does (None: its manifest records none)."""
    section = result.manifest.deployment
    if section is None:
        return None
    emulated = verdict.deployment if verdict is not None else None
    return DeploymentRow(needed=section.needed, files=[f.name for f in section.files],
                         kept_fp32=[c.path for c in section.kept_fp32],
                         depends=emulated.depends if emulated else None,
                         message=emulated.message if emulated else None)


def output_rows(verdict) -> list:
    """Each output of a candidate (a ``CandidateVerdict``) as judged: name, passed, cosine,
    scaled error and breaches."""
    return [OutputRow(o.name, o.passed, o.metrics.cosine, o.metrics.max_abs_scaled,
                      breaches(o)) for o in verdict.outputs]


def format_summary(result: PipelineResult) -> str:
    """The ``amptool run`` summary: artefacts, sizes, accuracy, parity verdict."""
    summary = result.summary
    train, rows = summary.train, summary.artefacts
    score = (f"val acc {_fixed(train.val_acc)}" if train.val_loss is None
             else f"val loss {train.val_loss:.4g}")
    lines = [f"trained   {summary.config['train']['model']} {train.policy} on {train.device}: "
             f"{score}, {train.steps} steps, {train.overflow_steps} overflow steps skipped",
             "",
             f"{'format':<7} {'precision':<9} {'size':>11} {'vs fp32':>8} {'accuracy':>9} "
             f"{'cosine':>10} {'parity':<9} artefact"]
    for row in rows:
        ratio = f"{row.size_ratio:.3f}" if row.size_ratio else "-"
        lines.append(f"{row.format:<7} {row.precision:<9} {row.size:>11,} {ratio:>8} "
                     f"{_fixed(row.accuracy):>9} {_fixed(row.cosine, 6):>10} "
                     f"{row.verdict:<9} {row.path}")
    lines.append("")
    lines.extend(f"* {row.format} {row.precision}: {row.caveat}" for row in rows if row.caveat)
    lines.extend(deployment_lines(rows) + breach_lines(rows) + drop_lines(rows))
    parity = summary.parity
    for culprit in parity.culprits:
        name = culprit.artefact.rsplit("/", 1)[-1]
        lines.append(f"culprit in {name}: {culprit.message}")
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in summary.seconds_by_stage.items())
    lines.append(f"parity {'PASSED' if parity.passed else 'FAILED'} on {parity.samples} "
                 f"samples ({stages}; total {summary.seconds:.1f} s) -> {summary.out}")
    return "\n".join(lines)


def breach_lines(rows: list) -> list:
    """Per artefact, each output that failed and its breaches (every output is judged: a
    detector's boxes as much as its class logits)."""
    return [f"FAIL {row.format} {row.precision} {out.name}: " + ", ".join(out.breaches)
            for row in rows for out in row.outputs or [] if not out.passed and out.breaches]


def drop_lines(rows: list) -> list:
    """Per artefact: its counted drop with the 95 % interval, and any warning that its
    budget is below one of the samples counted."""
    lines = []
    for row in rows:
        drop = row.drop
        if drop and drop.ci:
            lo, hi = drop.ci
            lines.append(f"{row.format} {row.precision}: {drop.metric} "
                         f"{drop.value:.4g} (95% CI {lo:.4g}..{hi:.4g}, "
                         f"{drop.samples} samples)")
        lines.extend(f"warning {row.format} {row.precision}: {w}" for w in row.warnings or [])
    return lines


def deployment_lines(rows: list) -> list:
    """Per artefact that keeps cells in fp32: its settings files and what ignoring them
    costs; one line when no artefact needs any."""
    needing = [r for r in rows if r.deployment and r.deployment.needed]
    if not needing:
        recorded = any(r.deployment for r in rows)
        return ["deployment settings: none needed (no artefact keeps cells in fp32)"] \
            if recorded else []
    lines = []
    for row in needing:
        dep = row.deployment
        cells = [p or "(network)" for p in dep.kept_fp32]
        more = f" and {len(cells) - 4} more" if len(cells) > 4 else ""
        lines.append(f"deployment {row.format} {row.precision}: keeps "
                     f"{', '.join(cells[:4])}{more} in fp32; "
                     f"deploy with {', '.join(dep.files)}")
        if dep.message:
            lines.append(f"  {dep.message}")
    return lines


def _fixed(value, digits: int = 4) -> str:
    """Fixed decimals for a summary column; '-' when absent."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.{digits}f}"
    return fmt(value)
