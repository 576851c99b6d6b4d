"""What a training run reports: its summary (``TrainSummary``, a core type the HTML report
reads too), its weights' digest, the versions it ran on, and the held-out accuracy it is
judged by."""
from __future__ import annotations

import hashlib
import platform
from typing import Optional

import numpy as np

import amptool
from amptool.data.rows import target_columns
from amptool.documents.training import TrainSummary
from amptool.network.models import flat_outputs
from amptool.network.taskmetric import evaluate

__all__ = ["Evaluator", "TrainSummary", "versions", "weights_digest"]


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
    """The held-out score of a run after each epoch, higher is better: ``score`` names it.

    ``accuracy`` for a classifier without ``--metric`` (top-1 over the split, as before);
    ``metric`` with one (the user's function on the split's outputs and targets); else
    ``neg_val_loss`` (minus the loss over the split, in fp32). The loss is computed beside a
    metric too (``val_loss``), never beside accuracy alone (the classifier's cost stays)."""

    def __init__(self, amp_net, loss_cell=None, classifier: bool = True, metric=None,
                 metric_spec: Optional[str] = None):
        self.net, self.loss_cell = amp_net, loss_cell
        self.metric, self.metric_spec = metric, metric_spec
        self.score = "metric" if metric else "accuracy" if classifier else "neg_val_loss"

    def evaluate(self, data) -> dict:
        """{"value": the score, "val_loss": the held-out loss where computed}."""
        if self.score == "accuracy":
            return {"value": self.accuracy(data)}
        import mindspore as ms

        self.net.set_train(False)
        total = count = 0.0
        outputs, targets = [], []
        try:
            for inputs, y in data.val_batches():
                out = self.net(*[ms.Tensor(a) for a in inputs])
                outs = flat_outputs(out)
                ys = target_columns(y)
                loss = self.loss_cell(outs, tuple(ms.Tensor(t) for t in ys))
                total += float(loss.asnumpy()) * len(inputs[0])
                count += len(inputs[0])
                if self.metric:
                    outputs.append([o.asnumpy() for o in outs])
                    targets.append(ys)
        finally:
            self.net.set_train(True)
        val_loss = total / count
        if not self.metric:
            return {"value": -val_loss, "val_loss": val_loss}
        joined = [np.concatenate([o[i] for o in outputs]) for i in range(len(outputs[0]))]
        ys = [np.concatenate([t[i] for t in targets]) for i in range(len(targets[0]))]
        value = evaluate(self.metric, self.metric_spec, joined, ys[0] if len(ys) == 1 else ys,
                         "held-out split")
        return {"value": value, "val_loss": val_loss}

    def accuracy(self, data) -> float:
        """Top-1 accuracy over the held-out split, streamed a batch at a time."""
        import mindspore as ms

        self.net.set_train(False)
        correct = total = 0
        for inputs, y in data.val_batches():
            out = self.net(*[ms.Tensor(a) for a in inputs])
            logits = flat_outputs(out)[0].asnumpy()
            correct += int((logits.argmax(axis=1) == y).sum())
            total += len(y)
        self.net.set_train(True)
        return correct / total
