"""Range pass benchmark: what ``--policy auto`` adds to a one-epoch training run.

Per sample model, one-epoch runs of the real training path with and without
``--policy auto`` alternate (median of the rounds), and the range pass alone is timed on
the same batches. Target: the range pass costs at most 5 % of a one-epoch run.
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

MODELS = ("simplecnn", "resnet")


def _epoch_seconds(model: str, policy, out: Path) -> float:
    from amptool.train.config import TrainConfig
    from amptool.train.run import run_training

    t0 = time.perf_counter()
    run_training(TrainConfig(model=model, epochs=1, policy=policy, out=str(out)))
    return time.perf_counter() - t0


def _range_pass_seconds(model: str) -> tuple:
    import mindspore as ms

    from amptool.data.dataset import epoch_batches, load_model_data
    from amptool.network.models import resolve_model
    from amptool.precision.policy import policy_for
    from amptool.precision.ranges import SAFETY
    from amptool.train.overflow import AUTO_BATCHES, auto_candidates

    spec = resolve_model(model)
    data = load_model_data("digits", spec)
    ms.set_seed(0)
    net = spec.build()
    positions = [idx for idx, _ in zip(epoch_batches(len(data.train_idx), 32, 0, 0),
                                       range(AUTO_BATCHES))]
    joined = data.train_inputs(np.concatenate(positions))  # as --policy auto runs it
    t0 = time.perf_counter()
    found = auto_candidates(net, joined, policy_for(None, "O2"), SAFETY)  # what auto runs
    return time.perf_counter() - t0, [r.path for r in found]


def run(quick: bool = False) -> dict:
    from amptool.runtime.device import set_device
    from amptool.train.overflow import AUTO_BATCHES

    set_device("CPU")
    rounds = 1 if quick else 3
    rows = []
    with tempfile.TemporaryDirectory(prefix="amptool-bench-range-") as tmp:
        for model in MODELS[:1] if quick else MODELS:
            plain, auto = [], []
            for i in range(rounds):  # alternate, so drift hits both alike
                plain.append(_epoch_seconds(model, None, Path(tmp) / f"{model}-plain-{i}"))
                auto.append(_epoch_seconds(model, "auto", Path(tmp) / f"{model}-auto-{i}"))
            alone, kept = _range_pass_seconds(model)
            plain_s, auto_s = statistics.median(plain), statistics.median(auto)
            rows.append({"model": model, "epoch_s": round(plain_s, 3),
                         "epoch_auto_s": round(auto_s, 3), "range_pass_s": round(alone, 3),
                         "range_pass_overhead": round(alone / plain_s, 4),
                         "auto_run_overhead": round(auto_s / plain_s - 1, 4), "kept": kept})
    return {"rounds": rounds, "batches": AUTO_BATCHES, "models": rows,
            "targets": {f"models[{m}].range_pass_overhead": "<= 0.05" for m in MODELS}}


if __name__ == "__main__":
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
