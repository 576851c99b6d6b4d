"""amptool's AMP training step against raw MindSpore ``Model.train``, side by side.

Same network (SimpleCNN), same digits batches, same steps, O2 on this host's device.
Raw MindSpore gets the most it allows on CPU: ``Model(amp_level="O2")`` with
``FixedLossScaleManager(drop_overflow_update=False)``. amptool runs its engine with
dynamic loss scaling (overflow check, skip, back-off), and again with no scaling to
price the loss-scaling machinery. Variants alternate within each round; medians count.
"""
from __future__ import annotations

import statistics
import time

import numpy as np


def _setup(level: str = "O2"):
    from amptool.data import epoch_batches, load_dataset
    from amptool.device import resolve_device, set_device
    from amptool.models import sample_spec

    set_device(resolve_device("auto"))
    spec = sample_spec("simplecnn")
    data = load_dataset("digits", spec.input_shape, spec.num_classes)
    batches = list(epoch_batches(len(data.train_x), 32, 0, 0))
    xs = [data.train_x[i] for i in batches]
    ys = [data.train_y[i] for i in batches]
    return spec, xs, ys


def _amptool_runner(spec, xs, ys, loss_scale: str):
    import mindspore as ms
    from mindspore import nn

    from amptool.policy import make_policy
    from amptool.precision import apply_policy
    from amptool.train.engine import TrainStep, make_optimizer, parse_loss_scale

    ms.set_seed(0)
    net = spec.build()
    amp_net = apply_policy(net, make_policy("O2"))
    opt = make_optimizer("momentum", net.trainable_params(), 0.01)
    step = TrainStep(amp_net, nn.CrossEntropyLoss(), opt, parse_loss_scale(loss_scale, "O2"))

    def run_epoch():
        for x, y in zip(xs, ys):
            loss, _ = step.step(ms.Tensor(x), ms.Tensor(y))
            loss.asnumpy()
    return run_epoch


def _raw_runner(spec, xs, ys):
    import mindspore as ms
    import mindspore.dataset as ds
    from mindspore import nn
    from mindspore.train import FixedLossScaleManager, Model

    ms.set_seed(0)
    net = spec.build()
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = Model(net, nn.CrossEntropyLoss(), opt, amp_level="O2",
                  loss_scale_manager=FixedLossScaleManager(1024.0, drop_overflow_update=False))
    x = np.concatenate(xs)
    y = np.concatenate(ys)
    dataset = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(32, drop_remainder=True)

    def run_epoch():
        model.train(1, dataset, dataset_sink_mode=False)
    return run_epoch


def run(quick: bool = False) -> dict:
    spec, xs, ys = _setup()
    variants = {
        "raw_model_train": _raw_runner(spec, xs, ys),
        "amptool_dynamic": _amptool_runner(spec, xs, ys, "dynamic"),
        "amptool_no_scaling": _amptool_runner(spec, xs, ys, "none"),
    }
    for fn in variants.values():  # compile and warm up
        fn()
    rounds = 2 if quick else 7
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    steps = len(xs)
    rate = {name: steps / statistics.median(t) for name, t in times.items()}
    return {
        "network": "simplecnn", "batch": 32, "steps_per_round": steps, "rounds": rounds,
        "raw_steps_per_s": round(rate["raw_model_train"], 1),
        "amptool_steps_per_s": round(rate["amptool_dynamic"], 1),
        "amptool_no_scaling_steps_per_s": round(rate["amptool_no_scaling"], 1),
        "amptool_vs_raw_ratio": round(rate["amptool_dynamic"] / rate["raw_model_train"], 3),
        "loss_scaling_overhead": round(rate["amptool_no_scaling"] / rate["amptool_dynamic"] - 1, 4),
        "targets": {"amptool_vs_raw_ratio": ">= 1.0", "loss_scaling_overhead": "<= 0.03"},
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
