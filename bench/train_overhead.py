"""``amptool train``'s per-step path against MindSpore's ``Model.train`` and a bare step.

Like with like, on SimpleCNN and the ResNet sample, each at O2 and O0:

- ``amptool_train``: one epoch of the training loop ``amptool train`` runs
  (``train/loop.py``: batches streamed through the ``mindspore.dataset`` pipeline, tensors,
  the compiled step, and every ``--log-every`` (10) steps the read-back of loss, overflow
  flag, device-side skip counters and loss scale, the metrics.jsonl line and the step event
  to the CLI's reporter).
- ``amptool_in_memory``: the same loop with the batches sliced from the training split read
  into memory beforehand: the pipeline's cost is the ratio of the two.
- ``model_train``: ``Model.train(1, ...)`` over exactly the same batches, fed the same way
  (the loop's ``epoch_batches`` order, numpy slices turned into tensors per step, through
  the dataset interface ``Model.train`` iterates). At O2 both scale the loss dynamically
  with the same settings (init 2**16, factor 2, window 2000): ``Model`` gets MindSpore's
  ``TrainOneStepWithLossScaleCell`` driven by ``DynamicLossScaleManager``'s update cell,
  its overflow check ``mindspore.amp.all_finite`` (the stock check reads Ascend status
  registers off GPU, and ``Model`` refuses a dynamic manager on CPU). At O0 neither
  scales (MindSpore's ``TrainOneStepCell``; amptool still skips non-finite steps).
- ``model_train_pipeline`` against ``amptool_fixed_scale``: the seed's two lines,
  ``Model(net, loss, opt, amp_level=...)`` with ``FixedLossScaleManager(1024,
  drop_overflow_update=False)`` (all ``Model`` accepts on CPU; none at O0), fed the loop's
  own ``mindspore.dataset`` pipeline of the epoch, against ``amptool train --loss-scale
  static:1024`` (which still skips non-finite steps).
- ``bare_step``: the limit. amptool's compiled step alone over tensors made before the
  clock starts, nothing else per step, one read-back at the end.

On SimpleCNN at O2, the price of loss scaling: the bare step with dynamic scaling, with
scaling off (overflow check and conditional update still on) and with no overflow check
at all (plain forward, backward, unconditional update). Per network and level every
variant is set up and compiled first (one uncounted epoch), then rounds alternate the
variants, one epoch of each per round; medians count. Epochs are short (a small training
split) to keep the benchmark within minutes on a 2-core CPU. Per-epoch evaluation and
checkpoints are left out of all.
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

# network: (held-out fraction of the digits, levels). Each round is one epoch of the rest:
# SimpleCNN 22 steps; the ResNet, whose CPU step takes about twenty times SimpleCNN's,
# 4 steps. The price of loss scaling is measured on SimpleCNN, where it weighs most.
MODELS = {"simplecnn": (0.6, ("O2", "O0")), "resnet": (0.92, ("O2", "O0"))}
PRICED = "simplecnn"
ROUNDS = 3
BATCH, LR, OPTIMIZER = 32, 0.01, "momentum"
SCALE = (2.0 ** 16, 2, 2000)  # init, factor, window: amptool's defaults, given to both


def _loop(model: str, level: str, out: Path, loss_scale=None):
    """The training run ``amptool train`` would set up (``train/loop.py``), not started."""
    val_fraction = MODELS[model][0]
    from amptool.train.cli import _Reporter
    from amptool.train.config import TrainConfig
    from amptool.train.loop import start_run

    cfg = TrainConfig(model=model, amp_level=level, loss_scale=loss_scale, batch_size=BATCH,
                      lr=LR, optimizer=OPTIMIZER, out=str(out), scale_init=SCALE[0],
                      scale_factor=SCALE[1], scale_window=SCALE[2], val_fraction=val_fraction)
    return start_run(cfg, _Reporter(quiet=False).on_event, 0, 1, not out.exists())


def _in_memory(run) -> tuple:
    """The run's training split read once into memory: (input arrays, labels)."""
    import numpy as np

    data = run.parts.data
    return data.train_inputs(np.arange(len(data.train_idx))), data.train_y


class _MemoryStream:
    """``feed.Stream``'s interface over arrays in memory: batches sliced on the host."""

    def __init__(self, arrays: list, y, order_of, first: int):
        self.arrays, self.y, self.order_of, self.next_epoch = arrays, y, order_of, first
        self.epochs = type("Steps", (), {"steps": len(order_of(first))})()

    @classmethod
    def maker(cls, arrays: list, y):
        return lambda order_of, first, last, augment=None: cls(arrays, y, order_of, first)

    def epoch(self, epoch: int):
        for idx in self.order_of(epoch):
            yield [a[idx] for a in self.arrays], self.y[idx]
        self.next_epoch = epoch + 1

    def close(self) -> None:
        pass


def amptool_train(model: str, level: str, out: Path, stack, streaming: bool = True,
                  loss_scale=None):
    """Each call: one epoch of the loop's per-step path, metrics file and events included;
    batches stream through the data pipeline, or (``streaming`` off) are sliced from
    arrays read into memory beforehand."""
    run = _loop(model, level, out, loss_scale)
    if not streaming:
        run.parts.data.train_stream = _MemoryStream.maker(*_in_memory(run))
    metrics = open(run.out / "metrics.jsonl", "w", buffering=1, encoding="utf-8")  # noqa: SIM115
    stack.callback(metrics.close)  # opened as the loop opens it, closed after the rounds

    def prepare(epoch: int):
        return lambda: run.train_epoch(epoch, metrics)
    return prepare, len(run.parts.data.train_y) // BATCH


class _Batches:
    """The loop's batches through the interface ``Model.train`` iterates (a dataset's)."""

    def __init__(self, arrays: list, y, seed: int):
        self.arrays, self.y, self.seed, self.epoch = arrays, y, seed, 0

    def get_dataset_size(self) -> int:
        return len(self.y) // BATCH

    def create_tuple_iterator(self, num_epochs=-1, do_copy=True):
        import mindspore as ms

        from amptool.data.dataset import epoch_batches

        for idx in epoch_batches(len(self.y), BATCH, self.seed, self.epoch):
            yield [ms.Tensor(a[idx]) for a in self.arrays] + [ms.Tensor(self.y[idx])]

    def reset(self) -> None:
        pass


def _loss_scale_cell(net_with_loss, optimizer):
    """MindSpore's loss-scale training cell with ``DynamicLossScaleManager``'s update cell."""
    from mindspore import amp, nn, ops
    from mindspore.train import DynamicLossScaleManager

    class LossScaleStep(nn.TrainOneStepWithLossScaleCell):
        def get_overflow_status(self, status, compute_output):
            return ops.logical_not(amp.all_finite(compute_output))

    manager = DynamicLossScaleManager(*SCALE)
    return LossScaleStep(net_with_loss, optimizer, scale_sense=manager.get_update_cell())


def model_train(model: str, level: str, out: Path, stack):
    """Each call: ``Model.train`` over one epoch of the loop's batches."""
    import mindspore as ms
    from mindspore import amp, nn
    from mindspore.train import Model

    from amptool.train.engine import make_optimizer

    run = _loop(model, level, out)  # the same network, data and seed as the loop's
    ms.set_seed(run.cfg.seed)
    net = run.parts.spec.build()
    opt = make_optimizer(OPTIMIZER, net.trainable_params(), LR)
    if level == "O0":
        trainer = Model(net, nn.CrossEntropyLoss(), opt)
    else:
        plain = amp.build_train_network(net, opt, nn.CrossEntropyLoss(), level=level,
                                        loss_scale_manager=None)
        trainer = Model(_loss_scale_cell(plain.network, opt))
    batches = _Batches(*_in_memory(run), run.cfg.seed)

    def prepare(epoch: int):
        batches.epoch = epoch
        return lambda: trainer.train(1, batches, dataset_sink_mode=False)
    return prepare, batches.get_dataset_size()


FIXED_SCALE = 1024.0
"""The fixed loss scale both sides use in the seed's comparison (on CPU ``Model`` takes only
``FixedLossScaleManager(..., drop_overflow_update=False)``)."""


def model_train_pipeline(model: str, level: str, out: Path, stack):
    """Each call: the seed's way, ``Model(net, loss, opt, amp_level=level,
    loss_scale_manager=FixedLossScaleManager(FIXED_SCALE, False)).train(1, dataset,
    dataset_sink_mode=False)``, the dataset being the loop's own ``mindspore.dataset``
    pipeline of that epoch's batches (at O0 no scale)."""
    import mindspore as ms
    from mindspore import nn
    from mindspore.train import FixedLossScaleManager, Model

    from amptool.train.engine import make_optimizer

    run = _loop(model, level, out)
    ms.set_seed(run.cfg.seed)
    net = run.parts.spec.build()
    opt = make_optimizer(OPTIMIZER, net.trainable_params(), LR)
    scale = None if level == "O0" else FixedLossScaleManager(FIXED_SCALE,
                                                             drop_overflow_update=False)
    trainer = Model(net, nn.CrossEntropyLoss(), opt, amp_level=level, loss_scale_manager=scale)

    def prepare(epoch: int):
        data = run.parts.data.train_pipeline(run.epoch_order(epoch))
        return lambda: trainer.train(1, data, dataset_sink_mode=False)
    return prepare, len(run.epoch_order(0))


def amptool_train_fixed(model: str, level: str, out: Path, stack):
    """``amptool_train`` with the same fixed loss scale (``--loss-scale static:1024``)."""
    return amptool_train(model, level, out, stack, loss_scale=None if level == "O0"
                         else f"static:{FIXED_SCALE:g}")


def _no_check_cell(step):
    """amptool's step cell without overflow check: forward, backward, update, always."""
    from mindspore import ops

    class NoCheckStep(type(step)):
        def construct(self, *args):
            x, y = args[:-1], args[-1]
            (_, loss), grads = self.grad_fn(x, y)
            return ops.depend(loss, self.optimizer(grads))

    return NoCheckStep(step.net, step.loss_fn, step.optimizer, None, 1)


def bare_step(model: str, level: str, out: Path, stack, loss_scale=None, check: bool = True):
    """Each call: the compiled step over ready tensors, one read-back at the end."""
    import mindspore as ms

    from amptool.data.dataset import epoch_batches

    run = _loop(model, level, out, loss_scale)
    step = run.parts.trainer.step if check else _no_check_cell(run.parts.trainer.step)
    arrays, y = _in_memory(run)

    def prepare(epoch: int):
        feed = [[ms.Tensor(a[idx]) for a in arrays] + [ms.Tensor(y[idx])]
                for idx in epoch_batches(len(y), BATCH, run.cfg.seed, epoch)]

        def go():
            out = None
            for tensors in feed:
                out = step(*tensors)
            (out[0] if isinstance(out, tuple) else out).asnumpy()
        return go
    return prepare, len(y) // BATCH


def variants(model: str, level: str) -> dict:
    found = {"amptool_train": amptool_train, "model_train": model_train, "bare_step": bare_step,
             "amptool_in_memory": lambda *a: amptool_train(*a, streaming=False),
             "amptool_fixed_scale": amptool_train_fixed,
             "model_train_pipeline": model_train_pipeline}
    if level == "O2" and model == PRICED:
        found["bare_step_no_scaling"] = lambda *a: bare_step(*a, loss_scale="none")
        found["bare_step_no_check"] = lambda *a: bare_step(*a, loss_scale="none", check=False)
    return found


def measure(model: str, level: str, rounds: int, root: Path) -> dict:
    """Steps/s of every variant, set up and compiled first, then measured in alternation."""
    with contextlib.ExitStack() as stack:
        built = {name: make(model, level, root / f"{model}_{level}_{name}", stack)
                 for name, make in variants(model, level).items()}
        steps = {count for _, count in built.values()}
        if len(steps) != 1:
            raise RuntimeError(f"variants differ in steps per epoch: {sorted(steps)}")
        steps = steps.pop()
        for prepare, _ in built.values():  # compile and warm up
            prepare(0)()
        times = {name: [] for name in built}
        for r in range(1, rounds + 1):
            for name, (prepare, _) in built.items():
                go = prepare(r)
                t0 = time.perf_counter()
                go()
                times[name].append(time.perf_counter() - t0)
    rate = {name: steps / statistics.median(t) for name, t in times.items()}
    print(f"train_overhead: {model} {level}: " + ", ".join(f"{n} {v:.2f}" for n, v in rate.items())
          + " steps/s", file=sys.stderr, flush=True)
    figures = {"steps_per_round": steps, "rounds": rounds,
               "steps_per_s": {name: round(value, 2) for name, value in rate.items()},
               "amptool_vs_model_train_ratio": round(rate["amptool_train"]
                                                     / rate["model_train"], 3),
               "amptool_vs_bare_step_ratio": round(rate["amptool_train"] / rate["bare_step"], 3),
               "model_train_vs_bare_step_ratio": round(rate["model_train"] / rate["bare_step"], 3),
               "streaming_vs_in_memory_ratio": round(rate["amptool_train"]
                                                     / rate["amptool_in_memory"], 3),
               "amptool_vs_model_pipeline_ratio": round(rate["amptool_fixed_scale"]
                                                        / rate["model_train_pipeline"], 3)}
    if "bare_step_no_check" in rate:
        plain = rate["bare_step_no_check"]
        figures["loss_scaling_overhead"] = round(plain / rate["bare_step"] - 1, 4)
        figures["overflow_check_overhead"] = round(plain / rate["bare_step_no_scaling"] - 1, 4)
    return figures


def run(quick: bool = False) -> dict:
    import os

    os.environ.setdefault("GLOG_v", "3")
    models = ("simplecnn",) if quick else tuple(MODELS)
    figures = {"batch": BATCH, "optimizer": f"{OPTIMIZER} lr {LR}",
               "loss_scale": {"init": SCALE[0], "factor": SCALE[1], "window": SCALE[2]},
               "runs": {}, "targets": {}}
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        for model in models:
            for level in MODELS[model][1]:
                key = f"{model}_{level}"
                run = figures["runs"][key] = measure(model, level, 2 if quick else ROUNDS,
                                                     Path(tmp))
                figures["targets"][f"runs.{key}.amptool_vs_model_train_ratio"] = ">= 1.0"
                figures["targets"][f"runs.{key}.amptool_vs_bare_step_ratio"] = ">= 0.95"
                figures["targets"][f"runs.{key}.streaming_vs_in_memory_ratio"] = ">= 0.95"
                figures["targets"][f"runs.{key}.amptool_vs_model_pipeline_ratio"] = ">= 1.1"
                if "loss_scaling_overhead" in run:
                    figures["targets"][f"runs.{key}.loss_scaling_overhead"] = "<= 0.03"
    return figures


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=2))
