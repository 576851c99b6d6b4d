"""Data sinking: many training steps per host call through ``mindspore.data_sink``.

MindSpore sinks data on Ascend and GPU only (``data_sink`` raises "Data sinking supports
ascend or gpu device target" on CPU, and ``Model.train(dataset_sink_mode=True)`` quietly
trains without sinking there), so on CPU an explicit ``--sink-size`` is refused before
anything runs. The sunk step is the same compiled step: the loss scaler, the conditional
update and the skip counters all live on the device, and each host call is one read-back.
"""
from __future__ import annotations

import time
from typing import Optional

from amptool.errors import UsageError

SINK_DEVICES = ("Ascend", "GPU")


def resolve_sink_size(requested: Optional[int], device: str, log_every: int) -> int:
    """Steps per host call: ``requested`` (None: ``log_every`` on Ascend and GPU, off on
    CPU); 0 means no sinking."""
    if requested is not None and requested < 1:
        raise UsageError(f"--sink-size must be >= 1 (got {requested})",
                         "give the steps to run per host call, or leave it out")
    if device not in SINK_DEVICES:
        if requested is not None:
            raise UsageError(f"--sink-size: data sinking runs on Ascend and GPU only, this run "
                             f"is on {device} (MindSpore's data_sink refuses it)",
                             "leave --sink-size out; on CPU every step is a host call")
        return 0
    return requested if requested is not None else log_every


def epoch_sink_size(size: int, steps: int) -> int:
    """The largest sink size up to ``size`` that divides the epoch's ``steps``: every call
    runs whole, and the epoch ends on a call's last step."""
    size = max(1, min(size, steps))
    while steps % size:
        size -= 1
    return size


def sink_epoch(run, epoch: int, metrics, order: list) -> None:
    """One epoch of ``run`` (train/loop.py's ``_TrainingRun``) through ``mindspore.data_sink``."""
    import mindspore as ms

    size = epoch_sink_size(run.sink, len(order))
    data = run.data.train_pipeline(order, run.augment, epoch)
    sunk = ms.data_sink(run.trainer.step, data, sink_size=size)
    run.window = (time.perf_counter(), 0)
    for call in range(len(order) // size):
        loss, finite = sunk()
        run.step += size
        run.window = (run.window[0], run.window[1] + size * run.cfg.batch_size * run.world)
        first = order[call * size]
        run.log_step(epoch, loss, finite, metrics, call > 0,
                     lambda first=first: run.data.train_inputs(first, run.augment, epoch))
