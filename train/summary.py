"""What a training run reports: its summary, its weights' digest, the versions it ran on,
and the held-out accuracy it is judged by."""
from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

import amptool


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

    @property
    def policy(self) -> Optional[str]:
        """The policy the run trained under, as ``Policy.describe()`` words it."""
        return self.extra.get("policy")

    @property
    def device(self) -> Optional[str]:
        """The device the run trained on."""
        return self.extra.get("device")

    @classmethod
    def from_dict(cls, data: dict) -> "TrainSummary":
        names = [f for f in cls.__dataclass_fields__ if f != "extra"]
        return cls(**{k: data[k] for k in names},
                   extra={k: v for k, v in data.items() if k not in names})


def weights_digest(net) -> str:
    """sha256 over every parameter's name and bytes: equal digests mean bit-identical weights."""
    digest = hashlib.sha256()
    for param in sorted(net.get_parameters(), key=lambda p: p.name):
        digest.update(param.name.encode())
        digest.update(param.asnumpy().tobytes())
    return digest.hexdigest()


def versions() -> dict:
    import mindspore as ms

    return {"amptool": amptool.__version__, "mindspore": ms.__version__,
            "numpy": np.__version__, "python": platform.python_version()}


class Evaluator:
    def __init__(self, amp_net):
        self.net = amp_net

    def accuracy(self, data) -> float:
        """Top-1 accuracy over the held-out split, streamed a batch at a time."""
        import mindspore as ms

        self.net.set_train(False)
        correct = total = 0
        for inputs, y in data.val_batches():
            out = self.net(*[ms.Tensor(a) for a in inputs])
            logits = (out[0] if isinstance(out, (tuple, list)) else out).asnumpy()
            correct += int((logits.argmax(axis=1) == y).sum())
            total += len(y)
        self.net.set_train(True)
        return correct / total
