"""The AMP training step: cast policy, fp32 loss, loss scaling, overflow skipping.

Built on ``mindspore.amp.DynamicLossScaler``/``StaticLossScaler`` and ``all_finite``
inside one ``@jit`` step, so it runs on every backend (CPU included). An overflowing
step leaves weights and optimizer state untouched; the scaler backs off.
"""
from __future__ import annotations

from dataclasses import dataclass

from amptool.errors import UsageError

OPTIMIZERS = ("adam", "sgd", "momentum")


@dataclass(frozen=True)
class LossScale:
    """Parsed ``--loss-scale``: kind is dynamic, static or none."""

    kind: str
    init: float = 2.0 ** 16
    factor: int = 2
    window: int = 2000

    def to_dict(self) -> dict:
        return {"kind": self.kind, "init": self.init, "factor": self.factor, "window": self.window}


def parse_loss_scale(text: str | None, level: str, init: float = 2.0 ** 16, factor: int = 2,
                     window: int = 2000) -> LossScale:
    """``dynamic``, ``static:VALUE`` or ``none``; None picks dynamic for O1/O2, none for O0/O3."""
    if text is None:
        text = "dynamic" if level in ("O1", "O2") else "none"
    low = text.lower()
    if low == "dynamic":
        if init < 1 or factor < 2 or window < 1 or int(factor) != factor:
            raise UsageError(f"bad dynamic loss scale (init {init}, factor {factor}, window {window})",
                             "use init >= 1, an integer factor >= 2 and window >= 1")
        return LossScale("dynamic", float(init), int(factor), int(window))
    if low == "none":
        return LossScale("none", 1.0, 1, 1)
    if low.startswith("static:"):
        try:
            value = float(low.split(":", 1)[1])
        except ValueError:
            value = -1.0
        if not value >= 1.0:
            raise UsageError(f"bad static loss scale '{text}'", "write static:VALUE with VALUE >= 1")
        return LossScale("static", value, 1, 1)
    raise UsageError(f"unknown loss scale '{text}'", "use dynamic, static:VALUE or none")


def make_optimizer(name: str, params, lr: float):
    from mindspore import nn

    if name == "adam":
        return nn.Adam(params, learning_rate=lr)
    if name == "sgd":
        return nn.SGD(params, learning_rate=lr)
    if name == "momentum":
        return nn.Momentum(params, learning_rate=lr, momentum=0.9)
    raise UsageError(f"unknown optimizer '{name}'", f"use one of {', '.join(OPTIMIZERS)}")


class TrainStep:
    """One jitted training step over an AMP network; call ``step(x, y)``.

    Returns (loss, finite) tensors: ``finite`` is False when the step was skipped.
    With ``reducer`` (data parallel) gradients are averaged across workers and the
    finite flag is agreed on by all of them before anyone updates.
    """

    def __init__(self, amp_net, loss_fn, optimizer, loss_scale: LossScale, reducer=None):
        import mindspore as ms
        from mindspore import amp, ops

        self.optimizer = optimizer
        self.loss_scale = loss_scale
        if loss_scale.kind == "dynamic":
            self.scaler = amp.DynamicLossScaler(loss_scale.init, loss_scale.factor,
                                                loss_scale.window)
        elif loss_scale.kind == "static":
            self.scaler = amp.StaticLossScaler(loss_scale.init)
        else:
            self.scaler = None
        scaler = self.scaler

        def forward(x, y):
            loss = loss_fn(amp_net(x), y)
            return (scaler.scale(loss) if scaler is not None else loss), loss

        grad_fn = ms.value_and_grad(forward, None, optimizer.parameters, has_aux=True)
        all_reduce = ops.AllReduce() if reducer is not None else None
        world = float(reducer) if reducer is not None else 1.0

        def _grads(x, y):
            (_, loss), grads = grad_fn(x, y)
            if reducer is not None:  # average gradients, and report the global batch's loss
                grads = tuple(all_reduce(g) / world for g in grads)
                loss = all_reduce(loss) / world
            if scaler is not None:
                grads = scaler.unscale(grads)
            return loss, grads

        if scaler is None:
            def step(x, y):
                loss, grads = _grads(x, y)
                finite = amp.all_finite(grads)
                loss = ops.depend(loss, optimizer(grads))
                return loss, finite
        else:
            def step(x, y):
                loss, grads = _grads(x, y)
                finite = amp.all_finite(grads)
                if reducer is not None:  # skip on every rank when any rank overflowed
                    finite = all_reduce(finite.astype(ms.float32)) >= world
                if finite:
                    loss = ops.depend(loss, optimizer(grads))
                loss = ops.depend(loss, scaler.adjust(finite))
                return loss, finite

        self.step = ms.jit(step)

    def scale_value(self) -> float:
        if self.scaler is None:
            return 1.0
        return float(self.scaler.scale_value.asnumpy())

    def scaler_state(self) -> list:
        """Parameters holding the loss-scale state (saved in checkpoints)."""
        if isinstance(self.scaler, self._dynamic_type()):
            return [self.scaler.scale_value, self.scaler.counter]
        return []

    @staticmethod
    def _dynamic_type():
        from mindspore import amp

        return amp.DynamicLossScaler
