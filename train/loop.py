"""``train_model``: the whole training run, reported through a callback, never printed."""
from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

import amptool
from amptool.errors import DivergedError, UsageError
from amptool.fileio import ensure_out_dir, write_json

from .config import TrainConfig

Callback = Optional[Callable[[dict], None]]


@dataclass
class TrainSummary:
    """What a finished run reports."""

    val_acc: float
    best_acc: float
    steps: int
    overflow_steps: int
    loss_scale: float
    samples_per_s: float
    final_loss: float
    epochs: int
    workers: int
    seconds: float
    out: str
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d.update(d.pop("extra"))
        return d


def weights_digest(net) -> str:
    """sha256 over every parameter's name and bytes: equal digests mean bit-identical weights."""
    digest = hashlib.sha256()
    for param in sorted(net.get_parameters(), key=lambda p: p.name):
        digest.update(param.name.encode())
        digest.update(param.asnumpy().tobytes())
    return digest.hexdigest()


def ckpt_path(out: Path, which: str, fmt: str) -> Path:
    return out / f"{which}.{'safetensors' if fmt == 'safetensors' else 'ckpt'}"


def resolve_policy(cfg: TrainConfig):
    from amptool.convert.policy import load_policy, make_policy

    return load_policy(cfg.policy) if cfg.policy else make_policy(cfg.amp_level)


def versions() -> dict:
    import mindspore as ms

    return {"amptool": amptool.__version__, "mindspore": ms.__version__,
            "numpy": np.__version__, "python": platform.python_version()}


def check_config(cfg: TrainConfig) -> None:
    problems = []
    if cfg.epochs < 1:
        problems.append(f"epochs must be >= 1 (got {cfg.epochs})")
    if cfg.batch_size < 1:
        problems.append(f"batch size must be >= 1 (got {cfg.batch_size})")
    if not cfg.lr > 0:
        problems.append(f"learning rate must be > 0 (got {cfg.lr})")
    if cfg.max_skipped < 1:
        problems.append(f"max skipped steps must be >= 1 (got {cfg.max_skipped})")
    if cfg.ckpt_format not in ("ckpt", "safetensors"):
        problems.append(f"unknown checkpoint format '{cfg.ckpt_format}' (use ckpt or safetensors)")
    if cfg.workers < 1:
        problems.append(f"workers must be >= 1 (got {cfg.workers})")
    if problems:
        raise UsageError("; ".join(problems), "fix the options or config file")


class _Evaluator:
    def __init__(self, amp_net, batch_size: int):
        self.net = amp_net
        self.batch = max(64, batch_size)

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        import mindspore as ms

        self.net.set_train(False)
        correct = 0
        for start in range(0, len(x), self.batch):
            logits = self.net(ms.Tensor(x[start:start + self.batch])).asnumpy()
            correct += int((logits.argmax(axis=1) == y[start:start + self.batch]).sum())
        self.net.set_train(True)
        return correct / len(x)


def train_model(cfg: TrainConfig, on_event: Callback = None, rank: int = 0,
                world: int = 1) -> TrainSummary:
    """Train ``cfg.model`` on ``cfg.data`` under the AMP policy; write outputs to ``cfg.out``."""
    emit = on_event or (lambda event: None)
    check_config(cfg)
    from amptool.device import import_mindspore, resolve_device, set_device

    ms = import_mindspore()
    from mindspore import nn

    from amptool.convert.policy import apply_policy, check_dtype_on_device
    from amptool.samples.loader import resolve_model

    from . import checkpoint as ckpt
    from .data import epoch_batches, load_dataset
    from .engine import TrainStep, make_optimizer, parse_loss_scale

    last_path = ckpt_path(Path(cfg.out), "last", cfg.ckpt_format)
    if cfg.resume and not last_path.is_file():
        raise UsageError(f"--resume: no checkpoint {last_path.name} in {cfg.out}",
                         "train without --resume first, or point --out at an earlier run")
    out = ensure_out_dir(cfg.out)
    device = resolve_device(cfg.device)
    policy = resolve_policy(cfg)
    check_dtype_on_device(policy, device)
    loss_scale = parse_loss_scale(cfg.loss_scale or None, policy.level, cfg.scale_init,
                                  cfg.scale_factor, cfg.scale_window)
    set_device(device)
    spec = resolve_model(cfg.model)
    data = load_dataset(cfg.data, spec.input_shape, spec.num_classes, cfg.val_fraction)
    ms.set_seed(cfg.seed)
    net = spec.build()
    amp_net = apply_policy(net, policy)
    optimizer = make_optimizer(cfg.optimizer, net.trainable_params(), cfg.lr)
    trainer = TrainStep(amp_net, nn.CrossEntropyLoss(), optimizer, loss_scale,
                        reducer=world if world > 1 else None)
    scaler_params = trainer.scaler_state()
    items = ckpt.state_items(net, optimizer, scaler_params)
    return _run(cfg, emit, out, last_path, device, policy, loss_scale, spec, data, net, amp_net,
                optimizer, trainer, scaler_params, items, rank, world)


def _run(cfg, emit, out, last_path, device, policy, loss_scale, spec, data, net, amp_net,
         optimizer, trainer, scaler_params, items, rank, world):
    import mindspore as ms

    from . import checkpoint as ckpt
    from .data import epoch_batches

    start_epoch, step, best_acc, overflow = 0, 0, -1.0, 0
    resume = cfg.resume
    if resume:
        meta = ckpt.restore_state(net, optimizer, scaler_params, ckpt.read_checkpoint(last_path),
                                  f"checkpoint {last_path}")
        start_epoch, step = int(meta.get("epoch", 0)), int(meta.get("step", 0))
        best_acc = float(meta.get("best_acc", -1.0))
        overflow = int(meta.get("overflow", 0))
    lead = rank == 0
    run_info = {"config": cfg.to_dict(), "model": {"name": spec.name, "input_shape": list(spec.input_shape),
                "num_classes": spec.num_classes}, "data": {"source": data.source,
                "train_samples": len(data.train_x), "val_samples": len(data.val_x),
                "val_fraction": cfg.val_fraction, "preprocess": data.preprocess.to_dict()},
                "policy": policy.to_dict(), "loss_scale": loss_scale.to_dict(),
                "versions": versions(), "device": device, "seed": cfg.seed, "workers": world}
    if lead:
        write_json(out / "run.json", run_info)
    metrics = open(out / "metrics.jsonl", "a" if resume else "w", encoding="utf-8") if lead else None
    evaluator = _Evaluator(amp_net, cfg.batch_size)
    emit({"kind": "start", "epochs": cfg.epochs, "start_epoch": start_epoch,
          "steps_per_epoch": len(data.train_x) // (cfg.batch_size * world), "device": device,
          "policy": policy.describe(), "loss_scale": loss_scale.kind})
    t_start, consecutive, loss_value, val_acc = time.perf_counter(), 0, float("nan"), 0.0
    timed_samples, timed_seconds = 0, 0.0
    try:
        for epoch in range(start_epoch, cfg.epochs):
            for i, idx in enumerate(epoch_batches(len(data.train_x), cfg.batch_size, cfg.seed,
                                                  epoch, (rank, world))):
                t0 = time.perf_counter()
                loss, finite = trainer.step(ms.Tensor(data.train_x[idx]), ms.Tensor(data.train_y[idx]))
                loss_value, ok = float(loss.asnumpy()), bool(finite.asnumpy())
                dt = time.perf_counter() - t0
                if step > 0 and i > 0:  # the first step includes graph compilation
                    timed_samples += len(idx) * world
                    timed_seconds += dt
                step += 1
                overflow += (not ok)
                consecutive = 0 if ok else consecutive + 1
                record = {"step": step, "epoch": epoch + 1, "loss": loss_value,
                          "loss_scale": trainer.scale_value(), "overflow": not ok, "lr": cfg.lr,
                          "samples_per_s": len(idx) * world / dt if dt > 0 else None}
                if metrics:
                    metrics.write(json.dumps(record) + "\n")
                emit({"kind": "step", **record})
                if loss_scale.kind == "none" and not (ok and np.isfinite(loss_value)):
                    raise DivergedError(f"loss became {loss_value} at step {step} with loss scaling off",
                                        f"last good checkpoint kept in {out}; use --loss-scale "
                                        "dynamic or a lower --lr")
                if consecutive >= cfg.max_skipped:
                    raise DivergedError(f"{consecutive} consecutive overflow steps skipped at step "
                                        f"{step} (loss scale {trainer.scale_value():g})",
                                        f"last good checkpoint kept in {out}; lower --lr or use "
                                        "a policy that keeps the overflowing layers in fp32")
            val_acc = evaluator.accuracy(data.val_x, data.val_y)
            improved = val_acc > best_acc
            best_acc = max(best_acc, val_acc)
            meta = {"epoch": epoch + 1, "step": step, "best_acc": best_acc, "val_acc": val_acc,
                    "overflow": overflow, "model": spec.name}
            if lead:
                ckpt.save_state(last_path, items, meta, cfg.ckpt_format)
                if improved:
                    ckpt.save_state(ckpt_path(out, "best", cfg.ckpt_format), items, meta,
                                    cfg.ckpt_format)
                metrics.write(json.dumps({"epoch": epoch + 1, "val_acc": val_acc,
                                          "best_acc": best_acc, "step": step}) + "\n")
                metrics.flush()
            emit({"kind": "epoch", "epoch": epoch + 1, "val_acc": val_acc, "best_acc": best_acc,
                  "loss": loss_value})
    finally:
        if metrics:
            metrics.close()
    summary = TrainSummary(
        val_acc=val_acc, best_acc=best_acc, steps=step, overflow_steps=overflow,
        loss_scale=trainer.scale_value(), samples_per_s=timed_samples / timed_seconds if timed_seconds else 0.0,
        final_loss=loss_value, epochs=cfg.epochs, workers=world,
        seconds=time.perf_counter() - t_start, out=str(out),
        extra={"model": spec.name, "policy": policy.describe(), "device": device,
               "weights_sha256": weights_digest(net)})
    if lead:
        run_info["summary"] = summary.to_dict()
        write_json(out / "run.json", run_info)
    emit({"kind": "end", "summary": summary.to_dict()})
    return summary
