"""Data sinking: many training steps per host call through ``mindspore.data_sink``.

MindSpore sinks data on Ascend and GPU only (``data_sink`` raises "Data sinking supports
ascend or gpu device target" on CPU, and ``Model.train(dataset_sink_mode=True)`` quietly
trains without sinking there), so on CPU an explicit ``--sink-size`` is refused before
anything runs. The sunk step is the same compiled step: the loss scaler, the conditional
update and the skip counters all live on the device, and each host call is one read-back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Optional

from amptool.errors import UsageError

if TYPE_CHECKING:
    import numpy as np

SINK_DEVICES = ("Ascend", "GPU")


def check_sink_size(requested: Optional[int]) -> None:
    if requested is not None and requested < 1:
        raise UsageError(f"--sink-size must be >= 1 (got {requested})",
                         "give the steps to run per host call, or leave it out")


def resolve_sink_size(requested: Optional[int], device: str, log_every: int) -> int:
    """Steps per host call: ``requested`` (None: ``log_every`` on Ascend and GPU, off on
    CPU); 0 means no sinking."""
    check_sink_size(requested)
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


@dataclass(frozen=True)
class SinkCall:
    """What one host call of a sunk epoch advanced, and its results to read back."""

    index: int
    """The call's place in the epoch (0: the first, which compiles)."""
    steps: int
    """Steps the call ran on the device."""
    samples: int
    """Samples those steps trained on, over every worker."""
    loss: object
    """The last step's loss (a device tensor)."""
    finite: object
    """Whether the last step's gradients were finite (a device tensor)."""
    first: np.ndarray
    """Positions of the call's first batch in the training split (for forensics)."""


def sink_calls(step, data, order: list, size: int, batch_samples: int) -> Iterator[SinkCall]:
    """Run the epoch whose batches are ``order`` through ``mindspore.data_sink`` (``step``:
    the compiled training step; ``data``: its pipeline over ``order``), ``size`` steps or
    fewer a host call; yield what each call advanced (``batch_samples``: samples a step
    trains on over every worker)."""
    import mindspore as ms

    size = epoch_sink_size(size, len(order))
    sunk = ms.data_sink(step, data, sink_size=size)
    for call in range(len(order) // size):
        loss, finite = sunk()
        yield SinkCall(call, size, size * batch_samples, loss, finite, order[call * size])
