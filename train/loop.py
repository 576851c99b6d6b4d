"""``train_model``: one process's training run, reported through a callback, never printed.

The stage's entry, ``run.run_training``, calls it in its own process; each msrun worker
(``worker.py``) calls it in its own.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from amptool.data.dataset import epoch_batches
from amptool.data.rows import target_columns
from amptool.data.sources import skipped_note
from amptool.documents.events import (Epoch, Finished, Step, TrainEnd, TrainEvent, TrainStart,
                                      Warned)
from amptool.documents.door import from_json
from amptool.documents.records import RUN_VERSION, PolicyAuto, RunRecord
from amptool.errors import DivergedError, UsageError
from amptool.files.fileio import LineLog, ensure_out_dir, output_dir
from amptool.network import checkpoint as ckpt
from amptool.network.taskmetric import check_metric_spec
from amptool.network.trust import keep_code_file, keep_model_file
from amptool.precision.policy import save_policy
from amptool.precision.safety import why_kept
from amptool.runs.rundir import RunDir

from .checks import validate
from .config import TrainConfig
from .folder import claim_out_folder, replace_run
from .metrics_log import loss_at, trim_after
from .overflow import (
    check_skipped,
    check_updates,
    forward_overflow,
    forward_overflowed,
)
from .parts import RunParts, build_parts
from .sink import sink_calls
from .state import RunState
from .summary import TrainSummary, versions, weights_digest

Callback = Optional[Callable[[TrainEvent], None]]


def train_model(cfg: TrainConfig, on_event: Callback = None, rank: int = 0,
                world: int = 1) -> TrainSummary:
    """Train ``cfg.model`` on ``cfg.data`` under the AMP policy; write outputs to ``cfg.out``,
    held as this process's for the run (one worker of several: its launcher holds it)."""
    validate(cfg)  # before the model, the data and a range pass take their time
    emit = on_event or (lambda event: None)
    created = not Path(cfg.out).exists()
    try:
        with output_dir(cfg.out) if world == 1 else contextlib.nullcontext():
            replaced = claim_out_folder(cfg) if world == 1 else []
            run = start_run(cfg, emit, rank, world, created)
            replace_run(cfg, replaced, emit)
            return run.train()
    finally:  # the run's compiled graphs: ~40 MB a run in a process that trains again
        recycle = getattr(sys.modules.get("mindspore"), "ms_memory_recycle", None)
        if recycle is not None:  # None: MindSpore was never imported, nothing to free
            recycle()


def start_run(cfg: TrainConfig, emit, rank: int, world: int, created_out: bool):
    """The training run of ``cfg`` for process ``rank`` of ``world``, its parts built and its
    output folder made (last: a mistake found in the parts leaves nothing behind)."""
    parts = build_parts(cfg, world)
    out = ensure_out_dir(cfg.out)
    run_dir = RunDir(out)
    return _TrainingRun(cfg, parts, emit, rank, world, out, run_dir,
                        run_dir.checkpoint_path("last", cfg.ckpt_format), created_out)


@dataclass
class _TrainingRun:
    """One training run: its parts, its output folder, and its counters in ``state``."""

    cfg: TrainConfig
    parts: RunParts
    emit: Callable[[TrainEvent], None]
    rank: int
    world: int
    out: Path
    run_dir: RunDir
    last_path: Path
    """The ``last`` checkpoint's path."""
    created_out: bool
    """The run made its output folder (a failed fresh run removes it)."""
    state: RunState = field(default_factory=RunState)
    stream: Any = None
    """The training data pipeline, read on across epochs."""
    info: Optional[RunRecord] = None
    """run.json's record, once made."""

    @property
    def lead(self) -> bool:
        """The process that writes the run folder (rank 0)."""
        return self.rank == 0

    def restore(self) -> None:
        parts = self.parts
        meta = ckpt.restore_state(parts.net, parts.optimizer, parts.trainer.scaler_state(),
                                  ckpt.read_checkpoint(self.last_path),
                                  f"checkpoint {self.last_path}")
        # A checkpoint written before text metadata survived safetensors names no optimizer:
        # the run's run.json then says which one made its state.
        saved = meta.get("optimizer")
        if not saved:
            info = self.run_dir.read_optional()
            saved = (info.settings.optimizer if info else None) or self.cfg.optimizer
        if saved != self.cfg.optimizer:
            raise UsageError(f"--resume: {self.last_path.name} holds {saved} state, not "
                             f"{self.cfg.optimizer}", f"resume with --optimizer {saved}")
        state = self.state
        state.epoch, state.step = int(meta.get("epoch", 0)), int(meta.get("step", 0))
        if state.epoch > self.cfg.epochs:
            raise UsageError(f"--resume: {self.last_path.name} already holds {state.epoch} "
                             f"epochs, more than --epochs {self.cfg.epochs}",
                             f"pass --epochs {state.epoch} or more (--epochs is the total)")
        if self.parts.evaluator.score == "accuracy":
            # accuracies are stored as float32: back to the exact fraction of the split
            n = len(self.parts.data.val_idx)
            best, val = float(meta.get("best_acc", -1.0)), float(meta.get("val_acc", 0.0))
            state.best_score = (round(best * n) / n if n and best >= 0 else best) \
                if best >= 0 else float("-inf")
            state.val_score = round(val * n) / n if n else val
        else:
            state.best_score = float(meta.get("best_score", float("-inf")))
            state.val_score = float(meta.get("val_score", 0.0))
        state.overflow = state.overflow_before = int(meta.get("overflow", 0))

    def run_info(self) -> RunRecord:
        """run.json's record of this run, built once (the lead's copies the user's model,
        loss and metric files into the run folder and records them)."""
        cfg, spec, data, parts = self.cfg, self.parts.spec, self.parts.data, self.parts
        model, loss = spec.describe(), parts.loss.describe()
        metric = {"name": cfg.metric} if cfg.metric else None
        if self.lead:  # a model, loss or metric file travels with the run
            model.update(keep_model_file(spec, self.out))
            if parts.loss.file:
                loss.update(keep_code_file(parts.loss.file, self.out, "loss"))
            if metric is not None and cfg.metric:
                metric.update(keep_code_file(check_metric_spec(cfg.metric)[0], self.out,
                                             "metric"))
        info = from_json(RunRecord, {
            "schema_version": RUN_VERSION, "config": cfg.to_dict(), "model": model,
            "data": {"source": data.source, "train_samples": len(data.train_idx),
                     "val_samples": len(data.val_idx), "val_fraction": cfg.val_fraction,
                     "skipped_files": len(data.skipped),
                     "augment": list(parts.augment.kinds) if parts.augment else [],
                     "preprocess": asdict(data.preprocess) if data.preprocess else None},
            "loss": loss, "metric": metric, "policy": parts.policy.to_dict(),
            "loss_scale": parts.loss_scale.to_dict(), "versions": versions(),
            "device": parts.device, "seed": cfg.seed, "workers": self.world}, "run record")
        # the range pass's rows as measured (a float, not the JSON's "inf", until written)
        return replace(info, policy_auto=PolicyAuto(**parts.auto)) if parts.auto else info

    def train(self) -> TrainSummary:
        cfg = self.cfg
        if cfg.resume:
            self.restore()
            if self.state.epoch >= cfg.epochs:
                return self.finished()
        self.info = self.run_info()
        auto = self.info.policy_auto
        if self.lead:
            if auto is not None:
                notes = {r["path"]: f"{r['where']}; range pass: {why_kept(r, cfg.range_safety)}"
                         for r in auto.kept}
                save_policy(self.parts.policy, self.out / auto.file, force=True, notes=notes)
            self.run_dir.write(self.info)
        if cfg.resume and self.lead:
            trim_after(self.out / "metrics.jsonl", self.state.step)
        metrics = (LineLog(self.out / "metrics.jsonl", append=cfg.resume) if self.lead
                   else None)  # whole lines, each written at once: tail -f works
        data = self.parts.data
        if data.skipped:
            self.emit(Warned(skipped_note(data.skipped, len(data.skipped) + len(data.rows))))
        self.emit(TrainStart(cfg.epochs, self.state.epoch,
                             len(data.train_idx) // (cfg.batch_size * self.world),
                             self.parts.device, self.parts.policy.describe(),
                             self.parts.loss_scale.kind))
        t_start = time.perf_counter()
        try:
            for epoch in range(self.state.epoch, cfg.epochs):
                self.train_epoch(epoch, metrics)
                self.end_epoch(epoch, metrics)
        except BaseException as exc:
            if metrics:
                metrics.close()
            # nothing to keep: the network failed before its first step, or a mistake in
            # the user's data was found before the first checkpoint (the fixed run starts
            # afresh in the same folder)
            if self.lead and not cfg.resume and (self.state.step == 0 or (
                    isinstance(exc, UsageError) and self.state.epoch == 0)):
                self.discard()
            raise
        finally:
            if self.stream is not None:  # it reads ahead: stop its pipeline and workers
                self.stream.close()
                self.stream = None
            if metrics and not metrics.closed:
                metrics.close()
        summary = self.summary(time.perf_counter() - t_start)
        self.info = replace(self.info, summary=summary)
        if self.lead:
            self.run_dir.write(self.info)
        self.emit(TrainEnd(summary))
        return summary

    def finished(self) -> TrainSummary:
        """A resumed run whose checkpoint already holds ``cfg.epochs`` epochs: nothing is
        trained and nothing rewritten; the summary is the run's own (checkpoint figures,
        and the loss, throughput and time run.json recorded when it finished)."""
        self.state.loss = loss_at(self.out / "metrics.jsonl", self.state.step)
        summary = self.summary(0.0)
        info = self.run_dir.read_optional() if self.lead else None
        previous = info.summary if info is not None else None
        if previous is not None and previous.steps == self.state.step:
            summary = replace(summary, final_loss=previous.final_loss,
                              samples_per_s=previous.samples_per_s, seconds=previous.seconds)
        summary = replace(summary, already_finished=True)
        self.emit(Finished(self.state.epoch, str(self.out)))
        self.emit(TrainEnd(summary))
        return summary

    def discard(self) -> None:
        """Remove what this fresh run wrote: the folder it created, else its run.json and
        metrics.jsonl."""
        if self.created_out:
            shutil.rmtree(self.out, ignore_errors=True)
            return
        for name in ("run.json", "metrics.jsonl"):
            (self.out / name).unlink(missing_ok=True)

    def train_epoch(self, epoch: int, metrics) -> None:
        """One epoch of steps. The host reads the step's results back only on logged steps:
        the first of the epoch, every ``--log-every``-th and the last; the device counts
        skipped steps in between, so every count stays exact. With data sinking, each
        host call runs ``sink`` steps on the device and is read back."""
        import mindspore as ms

        if self.parts.sink:
            return self.sink_epoch(epoch, metrics)
        cfg, data, state = self.cfg, self.parts.data, self.state
        if self.stream is None or self.stream.next_epoch != epoch:  # one pipeline a run
            if self.stream is not None:
                self.stream.close()
            self.stream = data.train_stream(self.epoch_order, epoch, cfg.epochs, self.parts.augment)
        steps = self.stream.epochs.steps
        state.open_window(time.perf_counter())
        for i, (inputs, labels) in enumerate(self.stream.epoch(epoch)):
            tensors = [ms.Tensor(a) for a in inputs + target_columns(labels)]
            loss, finite = self.parts.trainer.step(*tensors)
            if state.step == 0 and self.parts.loss_scale.kind == "dynamic":
                loss, finite = self.settle_scale(tensors, loss, finite)
            state.advance(1, len(inputs[0]) * self.world)
            if i == 0 or state.step % cfg.log_every == 0 or i == steps - 1:
                self.log_step(epoch, loss, finite, metrics, i > 0, lambda batch=inputs: batch)

    def sink_epoch(self, epoch: int, metrics) -> None:
        """One epoch through ``mindspore.data_sink``: each host call's advance is counted,
        then read back."""
        order = self.epoch_order(epoch)
        pipeline = self.parts.data.train_pipeline(order, self.parts.augment, epoch)
        self.state.open_window(time.perf_counter())
        for call in sink_calls(self.parts.trainer.step, pipeline, order, self.parts.sink,
                               self.cfg.batch_size * self.world):
            self.state.advance(call.steps, call.samples)
            batch = partial(self.parts.data.train_inputs, call.first, self.parts.augment, epoch)
            self.log_step(epoch, call.loss, call.finite, metrics, call.index > 0, batch)

    def settle_scale(self, tensors: list, loss, finite) -> tuple:
        """The run's first batch is tried again while its gradients overflow and its loss is
        finite, until it updates the weights, the scale reaches 1 or ``--max-skipped`` tries
        overflowed: ``AmpStep.settle_scale``'s settling, the same code."""
        loss, finite = self.parts.amp.retry_overflow(tensors, loss, finite,
                                                     self.parts.loss_scale.init,
                                                     self.cfg.max_skipped)
        self.state.first_batch_tries = self.parts.amp.settle_tries
        return loss, finite

    def epoch_order(self, epoch: int) -> list:
        """This rank's batches of positions in the training split for ``epoch``."""
        return list(epoch_batches(len(self.parts.data.train_idx), self.cfg.batch_size,
                                  self.cfg.seed, epoch, (self.rank, self.world)))

    def log_step(self, epoch: int, loss, finite, metrics, timed: bool, inputs) -> None:
        """Read the step's results and the device's counters back, write the metrics line,
        report it and check for divergence; ``timed``: the window since the last read
        counts towards throughput (not the epoch's first, which holds compilation and the
        pipeline's start); ``inputs()`` gives the last batch's inputs for forensics."""
        state = self.state
        state.loss, ok = float(loss.asnumpy()), bool(finite.asnumpy())
        skipped, state.consecutive, state.forward_bad = self.parts.trainer.counters()
        samples, dt = state.close_window(time.perf_counter(), timed)
        window_skipped = skipped - (state.overflow - state.overflow_before)
        state.overflow = state.overflow_before + skipped
        step = Step(state.step, epoch + 1, state.loss, self.parts.trainer.scale_value(), not ok,
                    window_skipped, self.cfg.lr, samples / dt if dt > 0 else None)
        if metrics:
            metrics.write(json.dumps(step.record()) + "\n")
        self.emit(step)
        self.check_divergence(ok, window_skipped, inputs)

    def check_divergence(self, ok: bool, skipped: int, inputs) -> None:
        """After a logged step: ``skipped`` steps of its window overflowed; the device's
        counters (``consecutive``, ``forward_bad``) say how many in a row up to it."""
        if forward_overflowed(self.state, self.cfg.max_skipped):
            self.stop_forward_overflow(inputs())
        check_skipped(self.state, self.parts.loss_scale.kind, self.cfg.max_skipped,
                      self.parts.trainer.scale_value, skipped, self.kept())

    def stop_forward_overflow(self, inputs: list) -> None:
        """The loss itself is not finite: record the forensics in run.json and stop."""
        parts = self.parts
        forensics, problem, fix = forward_overflow(parts.spec.build, parts.net, parts.policy,
                                                   inputs, self.state.forward_bad,
                                                   self.state.step)
        if self.info is not None:
            self.info = replace(self.info, forensics=forensics)
            if self.lead:
                self.run_dir.write(self.info)
        kept = f"last good checkpoint kept in {self.out}" if self.last_path.is_file() else \
            "no checkpoint had been written yet"
        raise DivergedError(problem, f"{fix}; {kept}")

    def kept(self) -> str:
        """``last good checkpoint kept in OUT; `` when one was written, else nothing."""
        return f"last good checkpoint kept in {self.out}; " if self.last_path.is_file() else ""

    def end_epoch(self, epoch: int, metrics) -> None:
        cfg, state = self.cfg, self.state
        check_updates(state, self.parts.loss_scale, self.parts.trainer.scale_value,
                      str(self.out) if self.last_path.is_file() else "")
        score = self.parts.evaluator.evaluate(self.parts.data)
        state.val_score, state.val_loss = score["value"], score.get("val_loss")
        improved = state.val_score > state.best_score
        state.best_score = max(state.best_score, state.val_score)
        scores = self.scores()
        meta = {"epoch": epoch + 1, "step": state.step, **scores, "overflow": state.overflow,
                "model": self.parts.spec.name, "optimizer": cfg.optimizer}
        if self.lead:
            ckpt.write_checkpoint(self.last_path, self.parts.items, meta, cfg.ckpt_format)
            if improved:
                ckpt.write_checkpoint(self.run_dir.checkpoint_path("best", cfg.ckpt_format),
                                      self.parts.items, meta, cfg.ckpt_format)
            loss = {} if state.val_loss is None else {"val_loss": state.val_loss}
            metrics.write(json.dumps({"epoch": epoch + 1, **loss, **scores,
                                      "step": state.step}) + "\n")
            metrics.flush()
        self.emit(Epoch(epoch + 1, val_loss=state.val_loss, loss=state.loss, **scores))

    def scores(self) -> dict:
        """The held-out figures a checkpoint, metrics.jsonl and the events carry: val_acc and
        best_acc for accuracy (as before), else the score's name, val_score and best_score."""
        state = self.state
        if self.parts.evaluator.score == "accuracy":
            return {"val_acc": state.val_score, "best_acc": state.best_score}
        return {"score": self.parts.evaluator.score, "val_score": state.val_score,
                "best_score": state.best_score}

    def summary(self, seconds: float) -> TrainSummary:
        state = self.state
        tries = state.first_batch_tries
        accuracy = self.parts.evaluator.score == "accuracy"
        best = state.best_score if state.best_score > float("-inf") else None
        task: Dict[str, Any] = {} if accuracy else {"score": self.parts.evaluator.score,
                                    "val_score": state.val_score, "best_score": best,
                                    "val_loss": state.val_loss}
        model, policy = self.parts.spec.name, self.parts.policy.describe()
        return TrainSummary(
            val_acc=state.val_score if accuracy else None,
            best_acc=(best if best is not None else -1.0) if accuracy else None,
            steps=state.step,
            overflow_steps=state.overflow, loss_scale=self.parts.trainer.scale_value(),
            samples_per_s=state.samples_per_s(), final_loss=state.loss, epochs=self.cfg.epochs,
            workers=self.world, seconds=seconds, out=str(self.out),
            model=model, policy=policy, device=self.parts.device,
            weights_sha256=weights_digest(self.parts.net), loss=self.parts.loss.name,
            first_batch_tries=tries, **task)
