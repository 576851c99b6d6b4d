"""The training part of an HTML report, read from a run folder: run.json (settings, policy,
versions, summary) and metrics.jsonl (a line per logged step and per epoch)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from amptool.documents.door import read_document
from amptool.documents.manifest import PolicyRecord
from amptool.documents.records import RUN, RunRecord
from amptool.documents.training import TrainSummary
from amptool.errors import UsageError
from amptool.precision.safety import SAFETY, why_kept
from amptool.report import page as hp
from amptool.report import svgchart as sc

BLUE, ORANGE, RED, GREEN = "#1f6feb", "#bc4c00", "#cf222e", "#1a7f37"


@dataclass(frozen=True)
class TrainingRecord:
    """What a run folder says of its training."""

    folder: str
    info: RunRecord
    """run.json's record."""
    steps: tuple
    """metrics.jsonl's step lines (step, epoch, loss, loss_scale, overflow, skipped, ...)."""
    epochs: tuple
    """metrics.jsonl's epoch lines (epoch, step, val_acc/best_acc or score/val_score...)."""

    @property
    def summary(self) -> Optional[TrainSummary]:
        """The finished run's summary; None for a run that stopped (the page then reads
        metrics.jsonl alone)."""
        return self.info.summary


def read_training(folder) -> Optional[TrainingRecord]:
    """The run in ``folder`` (None when it holds no run.json, or one that does not read)."""
    folder = Path(folder)
    path = folder / "run.json"
    try:
        info = read_document(RUN, path.read_text(encoding="utf-8"), path)
    except (OSError, ValueError, UsageError):
        return None
    steps: list = []
    epochs: list = []
    path = folder / "metrics.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:  # a line cut short by an interruption
            continue
        if isinstance(row, dict):
            (steps if "loss_scale" in row else epochs).append(row)
    return TrainingRecord(str(folder), info, tuple(steps), tuple(epochs))


def score_name(rec: TrainingRecord) -> str:
    """What the held-out score of each epoch is, in words."""
    if any("val_acc" in e for e in rec.epochs):
        return "validation accuracy"
    score = next((e.get("score") for e in rec.epochs if e.get("score")), "neg_val_loss")
    if score == "metric":
        metric = (rec.info.metric.name if rec.info.metric else None) or "task metric"
        return f"validation {metric}"
    return "minus the validation loss" if score == "neg_val_loss" else f"validation {score}"


def epoch_score(row: dict):
    return row.get("val_acc", row.get("val_score"))


def training_cards(rec: TrainingRecord) -> list:
    """Key figures: the held-out score, steps, skipped steps, last loss scale, throughput
    (from metrics.jsonl where run.json has no summary: a run that stopped)."""
    s = rec.summary
    last = rec.epochs[-1] if rec.epochs else {}
    step = rec.steps[-1] if rec.steps else {}
    score = epoch_score(last) if last else (s.val_acc if s else None)
    name = "val acc" if "val_acc" in last or (s and s.val_acc is not None) else "val score"
    skipped = sum(int(r.get("skipped") or 0) for r in rec.steps) if rec.steps else None
    scale = s.loss_scale if s else step.get("loss_scale")
    items = [(name, hp.number(score))] if score is not None else []
    items += [("steps", hp.number(s.steps if s else step.get("step"))),
              ("overflow steps skipped", hp.number(s.overflow_steps if s else skipped)),
              ("final loss scale", hp.number(scale) if _scaled(rec) else "none")]
    if s is not None:
        items.append(("samples/s", f"{hp.as_float(s.samples_per_s) or 0:.0f}"))
    return items


def training_section(rec: TrainingRecord) -> str:
    """Settings, then loss, loss scale with skipped steps, and the score per epoch."""
    parts = [facts_table(rec)]
    if rec.steps:
        parts += [loss_figure(rec), scale_figure(rec), skipped_figure(rec)]
    else:
        parts.append(hp.note("metrics.jsonl holds no logged step"))
    if rec.epochs:
        parts += [score_figure(rec), epoch_table(rec)]
    return hp.section("Training", parts, "training")


def facts_table(rec: TrainingRecord) -> str:
    info, cfg, s = rec.info, rec.info.settings, rec.summary
    data, scale = info.data, info.loss_scale
    scale_text = (scale.kind if scale else "-") + (
        f" (init {hp.number(scale.init)}, factor {scale.factor}, window {scale.window})"
        if scale and scale.kind == "dynamic" else "")
    rows = [("model", (info.model.spec if info.model else None) or cfg.model),
            ("data", f"{data.source or cfg.data}: {_shown(data.train_samples)} training, "
                     f"{_shown(data.val_samples)} held-out samples"),
            ("policy", (s.policy if s else None) or f"{info.policy.level}/{info.policy.dtype}"),
            ("loss scale", scale_text),
            ("optimizer", f"{_shown(cfg.optimizer)}, lr {_shown(cfg.lr)}, batch "
                          f"{_shown(cfg.batch_size)} x {_shown(info.workers, 1)} worker(s)"),
            ("epochs", f"{s.epochs if s else _shown(cfg.epochs)}"),
            ("device", info.device),
            ("run folder", hp.Cell(f"<code>{hp.h(rec.folder)}</code>"))]
    return hp.table(["setting", "value"], [list(r) for r in rows])


def _shown(value, otherwise="-"):
    """A recorded value, or ``otherwise`` where the record has none."""
    return otherwise if value is None else value


def loss_figure(rec: TrainingRecord) -> str:
    points = tuple((r["step"], hp.as_float(r.get("loss"))) for r in rec.steps)
    values = [y for _, y in points if sc.finite(y) and y > 0]
    log = bool(values) and len(values) == len(points) and max(values) / min(values) > 50
    chart = sc.Chart("step", "training loss" + (" (log)" if log else ""),
                     (sc.Series("loss", points, BLUE),), log_y=log, whole_x=True)
    last = points[-1][1] if points else None
    bad = sum(1 for _, y in points if not sc.finite(y))
    return hp.figure("loss", sc.render(chart),
                     f"Training loss at each logged step ({len(points)} lines of metrics.jsonl); "
                     f"last {hp.number(last)}" + (f"; {bad} not finite" if bad else "") + ".")


def scale_figure(rec: TrainingRecord) -> str:
    points = tuple((r["step"], hp.as_float(r.get("loss_scale"))) for r in rec.steps)
    overflow = tuple(p for p, r in zip(points, rec.steps) if r.get("skipped") or
                     r.get("overflow"))
    series = [sc.Series("loss scale", points, GREEN, "step")]
    if overflow:
        series.append(sc.Series("window with skipped steps", overflow, RED, "points"))
    positive = all(sc.finite(y) and y > 0 for _, y in points)
    chart = sc.Chart("step", "loss scale (log)" if positive else "loss scale", tuple(series),
                     log_y=positive, whole_x=True)
    values = [y for _, y in points]
    how = ("dynamic scaling lowers it when a gradient overflows (that step is skipped) and "
           "raises it after a window of clean steps" if _scaled(rec, "dynamic")
           else "a fixed scale" if _scaled(rec) else "no loss scaling (--loss-scale none)")
    return hp.figure("loss-scale", sc.render(chart),
                     f"Loss scale at each logged step, from {hp.number(values[0])} to "
                     f"{hp.number(values[-1])}: {how}.")


def _scaled(rec: TrainingRecord, kind: str = "") -> bool:
    """Whether the run scaled its loss (``kind``: in that way)."""
    found = rec.info.loss_scale.kind if rec.info.loss_scale else None
    return found == kind if kind else found not in (None, "none")


def skipped_figure(rec: TrainingRecord) -> str:
    total = sum(int(r.get("skipped") or 0) for r in rec.steps)
    if not total:
        return hp.note(f"No step was skipped: no gradient overflowed in "
                       f"{hp.number(rec.summary.steps if rec.summary else len(rec.steps))}"
                       " steps.")
    points = tuple((r["step"], int(r.get("skipped") or 0)) for r in rec.steps)
    chart = sc.Chart("step", "skipped steps", (sc.Series("skipped (overflow)", points, RED,
                                                         "bars"),), whole_x=True)
    return hp.figure("skipped", sc.render(chart),
                     f"Steps skipped for an overflowing gradient in each logged window: {total} "
                     "in all (their updates were not applied).")


def _rank(value: Optional[float]) -> float:
    return value if sc.finite(value) else float("-inf")


def score_figure(rec: TrainingRecord) -> str:
    name = score_name(rec)
    points = tuple((e["epoch"], hp.as_float(epoch_score(e))) for e in rec.epochs)
    chart = sc.Chart("epoch", name, (sc.Series(name, points, BLUE, "dots"),), whole_x=True)
    best = max(range(len(points)), key=lambda i: _rank(points[i][1]))
    return hp.figure("validation", sc.render(chart),
                     f"Held-out score after each epoch ({name}, higher is better): best "
                     f"{hp.number(points[best][1])} after epoch {points[best][0]}, whose "
                     "weights are kept as best.ckpt.")


def epoch_table(rec: TrainingRecord) -> str:
    rows = [[e.get("epoch"), e.get("step"), hp.number(epoch_score(e)),
             hp.number(e.get("best_acc", e.get("best_score"))), hp.number(e.get("val_loss"))]
            for e in rec.epochs]
    return hp.table(["epoch", "step", score_name(rec), "best", "val loss"], rows,
                    ["num"] * 5)


def policy_reasons(rec: Optional[TrainingRecord]) -> dict:
    """Cell path -> why the run's policy keeps it in fp32 (range pass findings first)."""
    if rec is None:
        return {}
    auto = rec.info.policy_auto
    safety = (auto.safety if auto else None) or rec.info.settings.range_safety or SAFETY
    reasons = {}
    for row in auto.kept if auto else []:
        try:
            reasons[row["path"]] = f"range pass: {why_kept(row, safety)}"
        except (KeyError, TypeError, ValueError):
            reasons[row.get("path", "?")] = "range pass"
    return reasons


def policy_part(policy: PolicyRecord, auto: dict) -> str:
    """The cells and types a training policy keeps in fp32 (``auto``: the range pass's
    reasons)."""
    rows = [[hp.Cell(f"<code>{hp.h(p)}</code>"), "cell",
             auto.get(p, "policy: listed in fp32_cells")] for p in policy.fp32_cells]
    rows += [[t, "type", "policy: fp32_types"] for t in policy.fp32_types]
    if policy.level == "O2":
        rows.append(["BatchNorm, LayerNorm", "types",
                     "level O2: MindSpore's black list keeps them in fp32"])
    head = hp.note(f"Training policy {policy.level}/{policy.dtype}: the export writes the "
                   "deployment settings (beside each fp16 artefact) that keep these in fp32.")
    if not rows:
        return head + hp.note("No cell is kept in fp32.")
    return head + hp.table(["cell or type", "kind", "why it stays fp32"], rows,
                           ["path", "", ""])
