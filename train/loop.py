"""``train_model``: the whole training run, reported through a callback, never printed."""
from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from amptool.data import augmenting
from amptool.errors import DivergedError, UsageError
from amptool.fileio import LineLog, check_out_dir, ensure_out_dir, output_dir, write_text
from amptool.models import keep_model_file
from amptool.rundir import RunDir

from .config import AUTO, TrainConfig, check_config, claim_out_folder, replace_run
from .overflow import auto_policy, forward_overflow
from .summary import Evaluator, TrainSummary, versions, weights_digest

Callback = Optional[Callable[[dict], None]]


FORWARD_STEPS = 10
"""A run whose first this-many steps all overflow in the forward pass stops there."""
MIN_UPDATED = 0.1
"""An epoch ends the run as diverged when fewer than this share of its steps so far
updated the weights (the rest overflowed and were skipped)."""


def resolve_policy(cfg: TrainConfig):
    from amptool.policy import policy_for

    return policy_for(None if cfg.policy == AUTO else cfg.policy, cfg.amp_level)


def train_model(cfg: TrainConfig, on_event: Callback = None, rank: int = 0,
                world: int = 1) -> TrainSummary:
    """Train ``cfg.model`` on ``cfg.data`` under the AMP policy; write outputs to ``cfg.out``,
    held as this process's for the run (one worker of several: its launcher holds it)."""
    check_config(cfg)
    check_out_dir(cfg.out)  # before the model, the data and a range pass take their time
    last_path = RunDir(cfg.out).checkpoint_path("last", cfg.ckpt_format)
    if cfg.resume and not last_path.is_file():
        raise UsageError(f"--resume: no checkpoint {last_path.name} in {cfg.out}",
                         "train without --resume first, or point --out at an earlier run")
    emit = on_event or (lambda event: None)
    created = not Path(cfg.out).exists()
    try:
        with output_dir(cfg.out) if world == 1 else contextlib.nullcontext():
            replaced = claim_out_folder(cfg) if world == 1 else []
            run = _Run(cfg, emit, rank, world, created)
            replace_run(cfg, replaced, emit)
            return run.train()
    finally:  # the run's compiled graphs: ~40 MB a run in a process that trains again
        recycle = getattr(sys.modules.get("mindspore"), "ms_memory_recycle", None)
        if recycle is not None:  # None: MindSpore was never imported, nothing to free
            recycle()


class _Run:
    """One training run: the set-up objects and the progress counters."""

    def __init__(self, cfg: TrainConfig, emit, rank: int, world: int, created_out: bool):
        from amptool.device import import_mindspore, resolve_device, set_device

        ms = import_mindspore()
        from mindspore import nn

        from amptool import checkpoint as ckpt
        from amptool.data import load_model_data
        from amptool.feed import check_workers
        from amptool.models import resolve_model
        from amptool.policy import check_dtype_on_device
        from amptool.precision import apply_policy

        from .engine import TrainStep, make_optimizer, parse_loss_scale

        self.cfg, self.emit, self.rank, self.world = cfg, emit, rank, world
        self.device = resolve_device(cfg.device)
        from .sink import resolve_sink_size

        self.sink = resolve_sink_size(cfg.sink_size, self.device, cfg.log_every)
        self.policy = resolve_policy(cfg)
        check_dtype_on_device(self.policy, self.device)
        self.loss_scale = parse_loss_scale(cfg.loss_scale or None, self.policy.level,
                                           cfg.scale_init, cfg.scale_factor, cfg.scale_window)
        set_device(self.device)
        self.spec = resolve_model(cfg.model, cfg.model_args, cfg.input_spec)
        if self.spec.num_classes is None:
            raise UsageError(f"model {cfg.model} has no class-logits output to train on",
                             "its (first) output must be (batch, classes)")
        self.data = load_model_data(cfg.data, self.spec, cfg.val_fraction,
                                    workers=check_workers(cfg.data_workers))
        self.augment = augmenting(cfg.augment, cfg.seed, self.data)
        ms.set_seed(cfg.seed)
        self.net = self.spec.build()
        self.auto = auto_policy(self) if cfg.policy == AUTO else None
        amp_net = apply_policy(self.net, self.policy)
        self.optimizer = make_optimizer(cfg.optimizer, self.net.trainable_params(), cfg.lr)
        self.trainer = TrainStep(amp_net, nn.CrossEntropyLoss(), self.optimizer, self.loss_scale,
                                 reducer=world if world > 1 else None)
        self.items = ckpt.state_items(self.net, self.optimizer, self.trainer.scaler_state())
        self.evaluator = Evaluator(amp_net)
        # cells start in inference mode: train mode, so BatchNorm updates its statistics
        # and Dropout drops, in the step graph compiled next
        self.trainer.step.set_train(True)
        self.lead = rank == 0
        self.epoch = self.step = self.overflow = self.consecutive = 0
        self.overflow_before = 0  # skipped steps of the run before this process's counters
        self.window = (0.0, 0)  # (time of the last read-back, samples since)
        self.stream = None  # the training data pipeline, read on across epochs
        self.best_acc, self.val_acc, self.loss = -1.0, 0.0, float("nan")
        self.timed_samples, self.timed_seconds = 0, 0.0
        self.forward_bad, self.info = 0, None
        self.first_batch_tries = None  # tries of the first batch (dynamic scale, fresh run)
        # the output folder last: a mistake found above leaves nothing behind
        self.created_out = created_out
        self.out = ensure_out_dir(cfg.out)
        self.run_dir = RunDir(self.out)
        self.last_path = self.run_dir.checkpoint_path("last", cfg.ckpt_format)

    def restore(self) -> None:
        from amptool import checkpoint as ckpt

        meta = ckpt.restore_state(self.net, self.optimizer, self.trainer.scaler_state(),
                                  ckpt.read_checkpoint(self.last_path),
                                  f"checkpoint {self.last_path}")
        # A checkpoint written before text metadata survived safetensors names no optimizer:
        # the run's run.json then says which one made its state.
        saved = (meta.get("optimizer") or self.run_dir.previous_config().get("optimizer")
                 or self.cfg.optimizer)
        if saved != self.cfg.optimizer:
            raise UsageError(f"--resume: {self.last_path.name} holds {saved} state, not "
                             f"{self.cfg.optimizer}", f"resume with --optimizer {saved}")
        self.epoch, self.step = int(meta.get("epoch", 0)), int(meta.get("step", 0))
        if self.epoch > self.cfg.epochs:
            raise UsageError(f"--resume: {self.last_path.name} already holds {self.epoch} epochs, "
                             f"more than --epochs {self.cfg.epochs}",
                             f"pass --epochs {self.epoch} or more (--epochs is the total)")
        # accuracies are stored as float32: back to the exact fraction of the split
        n = len(self.data.val_idx)
        best, val = float(meta.get("best_acc", -1.0)), float(meta.get("val_acc", 0.0))
        self.best_acc = round(best * n) / n if n and best >= 0 else best
        self.val_acc = round(val * n) / n if n else val
        self.overflow = self.overflow_before = int(meta.get("overflow", 0))

    def trim_metrics(self) -> None:
        """Drop metric lines written after the checkpoint (an interrupted epoch's steps)."""
        path = self.out / "metrics.jsonl"
        if not path.is_file():
            return
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # a line cut short by the interruption
                continue
            if row.get("step", 0) <= self.step:  # step and epoch lines both carry a step
                kept.append(line)
        write_text(path, "".join(k + "\n" for k in kept))

    def run_info(self) -> dict:
        cfg, spec, data = self.cfg, self.spec, self.data
        return {"config": cfg.to_dict(), "model": spec.describe(),
                "data": {"source": data.source, "train_samples": len(data.train_idx),
                         "val_samples": len(data.val_idx), "val_fraction": cfg.val_fraction,
                         "skipped_files": len(data.skipped),
                         "augment": list(self.augment.kinds) if self.augment else [],
                         "preprocess": data.preprocess.to_dict() if data.preprocess else None},
                "policy": self.policy.to_dict(), "loss_scale": self.loss_scale.to_dict(),
                "versions": versions(), "device": self.device, "seed": cfg.seed,
                "workers": self.world}

    def train(self) -> TrainSummary:
        cfg = self.cfg
        if cfg.resume:
            self.restore()
            if self.epoch >= cfg.epochs:
                return self.finished()
        info = self.info = self.run_info()
        if self.auto is not None:
            info["policy_auto"] = self.auto
        if self.lead:
            info["model"].update(keep_model_file(self.spec, self.out))
            if self.auto is not None:
                from amptool.policy import save_policy
                from amptool.ranges import why_kept

                notes = {r["path"]: f"{r['where']}; range pass: {why_kept(r, cfg.range_safety)}"
                         for r in self.auto["kept"]}
                save_policy(self.policy, self.out / self.auto["file"], force=True, notes=notes)
            self.run_dir.write(info)
        if cfg.resume and self.lead:
            self.trim_metrics()
        metrics = (LineLog(self.out / "metrics.jsonl", append=cfg.resume) if self.lead
                   else None)  # whole lines, each written at once: tail -f works
        if self.data.skipped:
            from amptool.sources import skipped_note

            self.emit({"kind": "warning", "message": skipped_note(
                self.data.skipped, len(self.data.skipped) + len(self.data.labels))})
        self.emit({"kind": "start", "epochs": cfg.epochs, "start_epoch": self.epoch,
                   "steps_per_epoch": len(self.data.train_idx) // (cfg.batch_size * self.world),
                   "device": self.device, "policy": self.policy.describe(),
                   "loss_scale": self.loss_scale.kind})
        t_start = time.perf_counter()
        try:
            for epoch in range(self.epoch, cfg.epochs):
                self.train_epoch(epoch, metrics)
                self.end_epoch(epoch, metrics)
        except BaseException:
            if metrics:
                metrics.close()
            if self.lead and not cfg.resume and self.step == 0:
                self.discard()  # the network failed before its first step: nothing to keep
            raise
        finally:
            if self.stream is not None:  # it reads ahead: stop its pipeline and workers
                self.stream.close()
                self.stream = None
            if metrics and not metrics.closed:
                metrics.close()
        summary = self.summary(time.perf_counter() - t_start)
        if self.lead:
            info["summary"] = summary.to_dict()
            self.run_dir.write(info)
        self.emit({"kind": "end", "summary": summary.to_dict()})
        return summary

    def finished(self) -> TrainSummary:
        """A resumed run whose checkpoint already holds ``cfg.epochs`` epochs: nothing is
        trained and nothing rewritten; the summary is the run's own (checkpoint figures,
        and the loss, throughput and time run.json recorded when it finished)."""
        self.loss = self.logged_loss()
        summary = self.summary(0.0)
        previous = (self.run_dir.read_optional().get("summary") if self.lead else None) or {}
        if previous.get("steps") == self.step:
            for name in ("final_loss", "samples_per_s", "seconds"):
                if isinstance(previous.get(name), (int, float)):
                    setattr(summary, name, previous[name])
        summary.extra["already_finished"] = True
        self.emit({"kind": "finished", "epochs": self.epoch, "out": str(self.out)})
        self.emit({"kind": "end", "summary": summary.to_dict()})
        return summary

    def logged_loss(self) -> float:
        """The loss metrics.jsonl holds for the checkpoint's last step (NaN when none)."""
        path = self.out / "metrics.jsonl"
        loss = float("nan")
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if row.get("step") == self.step and "loss" in row:
                    loss = float(row["loss"])
        return loss

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

        cfg, data = self.cfg, self.data
        if self.sink:
            from .sink import sink_epoch

            return sink_epoch(self, epoch, metrics, self.epoch_order(epoch))
        if self.stream is None or self.stream.next_epoch != epoch:  # one pipeline a run
            if self.stream is not None:
                self.stream.close()
            self.stream = data.train_stream(self.epoch_order, epoch, cfg.epochs, self.augment)
        steps = self.stream.epochs.steps
        self.window = (time.perf_counter(), 0)
        for i, (inputs, labels) in enumerate(self.stream.epoch(epoch)):
            tensors = [ms.Tensor(a) for a in inputs] + [ms.Tensor(labels)]
            loss, finite = self.trainer.step(*tensors)
            if self.step == 0 and self.loss_scale.kind == "dynamic":
                loss, finite = self.settle_scale(tensors, loss, finite)
            self.step += 1
            self.window = (self.window[0], self.window[1] + len(labels) * self.world)
            if i == 0 or self.step % cfg.log_every == 0 or i == steps - 1:
                self.log_step(epoch, loss, finite, metrics, i > 0, lambda batch=inputs: batch)

    def settle_scale(self, tensors: list, loss, finite) -> tuple:
        """The run's first batch is tried again while its gradients overflow and its loss is
        finite, each try at the scale the last overflow halved, until the batch updates the
        weights, the scale reaches 1 or ``--max-skipped`` tries overflowed. A run's first
        gradients are often its largest: the scale settles on them instead of by skipping
        the first steps' updates. The tries are one step: it counts as one skipped step if
        its last try overflowed, and its overflowing tries count as skipped in a row.
        BatchNorm's running statistics see the batch once per try."""
        tries, tried_at = 1, self.loss_scale.init
        while (not bool(finite.asnumpy()) and np.isfinite(float(loss.asnumpy()))
               and tries < self.cfg.max_skipped):
            scale = self.trainer.scale_value()
            if scale >= tried_at:  # at its floor of 1: another try would overflow again
                break
            loss, finite = self.trainer.step(*tensors)
            tries, tried_at = tries + 1, scale
        if tries > 1:
            overflowed = not bool(finite.asnumpy())
            self.trainer.set_skip_counters(int(overflowed), tries if overflowed else 0)
        self.first_batch_tries = tries
        return loss, finite

    def epoch_order(self, epoch: int) -> list:
        """This rank's batches of positions in the training split for ``epoch``."""
        from amptool.data import epoch_batches

        return list(epoch_batches(len(self.data.train_idx), self.cfg.batch_size, self.cfg.seed,
                                  epoch, (self.rank, self.world)))

    def log_step(self, epoch: int, loss, finite, metrics, timed: bool, inputs) -> None:
        """Read the step's results and the device's counters back, write the metrics line,
        report it and check for divergence; ``timed``: the window since the last read
        counts towards throughput (not the epoch's first, which holds compilation and the
        pipeline's start); ``inputs()`` gives the last batch's inputs for forensics."""
        self.loss, ok = float(loss.asnumpy()), bool(finite.asnumpy())
        skipped, self.consecutive, self.forward_bad = self.trainer.counters()
        now = time.perf_counter()
        start, samples = self.window
        dt = now - start
        if timed:
            self.timed_samples += samples
            self.timed_seconds += dt
        window_skipped = skipped - (self.overflow - self.overflow_before)
        self.overflow = self.overflow_before + skipped
        record = {"step": self.step, "epoch": epoch + 1, "loss": self.loss,
                  "loss_scale": self.trainer.scale_value(), "overflow": not ok,
                  "skipped": window_skipped, "lr": self.cfg.lr,
                  "samples_per_s": samples / dt if dt > 0 else None}
        self.window = (now, 0)
        if metrics:
            metrics.write(json.dumps(record) + "\n")
        self.emit({"kind": "step", **record})
        self.check_divergence(ok, window_skipped, inputs)

    def check_divergence(self, ok: bool, skipped: int, inputs) -> None:
        """After a logged step: ``skipped`` steps of its window overflowed; the device's
        counters (``consecutive``, ``forward_bad``) say how many in a row up to it."""
        if self.forward_bad and ((self.forward_bad == self.step >= FORWARD_STEPS)
                                 or self.consecutive >= self.cfg.max_skipped):
            forward_overflow(self, inputs())
        if self.loss_scale.kind == "none" and (skipped or not np.isfinite(self.loss)):
            what = (f"loss became {self.loss}" if not np.isfinite(self.loss) else
                    f"{skipped} step(s) had non-finite gradients")
            raise DivergedError(f"{what} by step {self.step} with loss scaling off",
                                f"{self.kept()}use --loss-scale dynamic or a lower --lr")
        if self.consecutive >= self.cfg.max_skipped:
            tries = (" (the first batch's tries, each at a halved scale)"
                     if self.step == 1 and (self.first_batch_tries or 0) > 1 else "")
            raise DivergedError(f"{self.consecutive} consecutive overflow steps skipped by step "
                                f"{self.step}{tries}, --max-skipped is {self.cfg.max_skipped} (loss "
                                f"scale {self.trainer.scale_value():g})",
                                f"{self.kept()}lower --lr or use a policy that keeps the "
                                "overflowing layers in fp32")

    def kept(self) -> str:
        """``last good checkpoint kept in OUT; `` when one was written, else nothing."""
        return f"last good checkpoint kept in {self.out}; " if self.last_path.is_file() else ""

    def end_epoch(self, epoch: int, metrics) -> None:
        from amptool import checkpoint as ckpt

        cfg = self.cfg
        updated = self.step - self.overflow
        # a dynamic scale backs off one factor per skipped step: judge only after it could
        # have reached 1 from its initial value
        scale = self.loss_scale
        backoff = (math.ceil(math.log(max(scale.init, 1.0), max(scale.factor, 2)))
                   if scale.kind == "dynamic" else 0)
        if self.step > backoff and updated < max(1.0, MIN_UPDATED * self.step):
            raise DivergedError(f"only {updated} of {self.step} steps updated the weights: the "
                                f"others overflowed and were skipped (loss scale "
                                f"{self.trainer.scale_value():g})",
                                "lower --lr, or keep the overflowing cells in fp32 (--policy auto)"
                                + ("; last good checkpoint kept in " + str(self.out)
                                   if self.last_path.is_file() else ""))
        self.val_acc = self.evaluator.accuracy(self.data)
        improved = self.val_acc > self.best_acc
        self.best_acc = max(self.best_acc, self.val_acc)
        meta = {"epoch": epoch + 1, "step": self.step, "best_acc": self.best_acc,
                "val_acc": self.val_acc, "overflow": self.overflow, "model": self.spec.name,
                "optimizer": cfg.optimizer}
        if self.lead:
            ckpt.write_checkpoint(self.last_path, self.items, meta, cfg.ckpt_format)
            if improved:
                ckpt.write_checkpoint(self.run_dir.checkpoint_path("best", cfg.ckpt_format),
                                      self.items, meta, cfg.ckpt_format)
            metrics.write(json.dumps({"epoch": epoch + 1, "val_acc": self.val_acc,
                                      "best_acc": self.best_acc, "step": self.step}) + "\n")
            metrics.flush()
        self.emit({"kind": "epoch", "epoch": epoch + 1, "val_acc": self.val_acc,
                   "best_acc": self.best_acc, "loss": self.loss})

    def summary(self, seconds: float) -> TrainSummary:
        rate = self.timed_samples / self.timed_seconds if self.timed_seconds else 0.0
        return TrainSummary(
            val_acc=self.val_acc, best_acc=self.best_acc, steps=self.step,
            overflow_steps=self.overflow, loss_scale=self.trainer.scale_value(),
            samples_per_s=rate, final_loss=self.loss, epochs=self.cfg.epochs, workers=self.world,
            seconds=seconds, out=str(self.out),
            extra={"model": self.spec.name, "policy": self.policy.describe(),
                   "device": self.device, "weights_sha256": weights_digest(self.net),
                   **({"first_batch_tries": self.first_batch_tries}
                      if self.first_batch_tries is not None else {})})
