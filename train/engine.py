"""The AMP training step: cast policy, fp32 loss, loss scaling, overflow skipping.

Built on ``mindspore.amp.DynamicLossScaler``/``StaticLossScaler`` and ``all_finite``
inside one ``@jit`` step, so it runs on every backend (CPU included). An overflowing
step leaves weights and optimizer state untouched; the scaler backs off.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from amptool.errors import UsageError
from amptool.network.models import flat_outputs

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
            raise UsageError(f"bad dynamic loss scale (init {init}, factor {factor}, "
                             f"window {window})",
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
            raise UsageError(f"bad static loss scale '{text}'",
                             "write static:VALUE with VALUE >= 1")
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
    """One compiled training step over an AMP network; call ``step(*inputs, *targets)``:
    one tensor per network input (``inputs`` of them; None: all but the last argument),
    then the targets. ``loss_fn`` is a ``losses.build_loss`` cell, taking the outputs and the
    targets as two tuples (its outputs cast to fp32), or a plain ``loss(logits, labels)``.

    Returns (loss, finite) tensors: ``finite`` is False when the step was skipped. The
    step also counts on the device, without a read back: skipped steps in all, skipped
    steps in a row, and steps in a row whose loss is not finite (``counters``).
    With ``reducer`` (data parallel: the number of workers) gradients are averaged
    across workers and the finite flag is agreed on by all of them before anyone updates.
    """

    def __init__(self, amp_net, loss_fn, optimizer, loss_scale: LossScale, reducer=None,
                 inputs: Optional[int] = None):
        from mindspore import amp

        self.optimizer = optimizer
        self.loss_scale = loss_scale
        if loss_scale.kind == "dynamic":
            self.scaler = amp.DynamicLossScaler(loss_scale.init, loss_scale.factor,
                                                loss_scale.window)
        elif loss_scale.kind == "static":
            self.scaler = amp.StaticLossScaler(loss_scale.init)
        else:
            self.scaler = None
        self.step = _step_cell_class()(amp_net, loss_fn, optimizer, self.scaler, reducer or 1,
                                       inputs)

    def scale_value(self) -> float:
        if self.scaler is None:
            return 1.0
        return float(self.scaler.scale_value.asnumpy())

    def counters(self) -> tuple:
        """(skipped steps since this object was made, skipped in a row, non-finite losses
        in a row), read from the device."""
        step = self.step
        return tuple(int(p.asnumpy()) for p in (step.skipped, step.streak, step.bad_loss))

    def set_skip_counters(self, skipped: int, streak: int) -> None:
        """Set the device's skip counters: ``skipped`` steps in all, ``streak`` in a row."""
        import mindspore as ms

        self.step.skipped.set_data(ms.Tensor(skipped, ms.int32))
        self.step.streak.set_data(ms.Tensor(streak, ms.int32))

    def scaler_state(self) -> list:
        """Parameters holding the loss-scale state (saved in checkpoints)."""
        from mindspore import amp

        if isinstance(self.scaler, amp.DynamicLossScaler):
            return [self.scaler.scale_value, self.scaler.counter]
        return []


def _step_cell_class():
    import mindspore as ms
    from mindspore import amp, nn, ops

    class StepCell(nn.Cell):
        """Scaled forward and backward, unscale, overflow check, conditional update.

        A Cell rather than a jitted function: it dispatches faster. Non-finite gradients
        never reach the optimizer in any mode (with scaling off the loop then stops the
        run); the conditional update is also ~8x faster on MindSpore's CPU backend than an
        unconditional one.
        """

        def __init__(self, amp_net, loss_fn, optimizer, scaler, world, inputs=None):
            super().__init__(auto_prefix=False)  # keep parameter names as they are
            self.net = amp_net
            self.loss_fn = loss_fn
            self.tuples = bool(getattr(loss_fn, "takes_tuples", False))
            self.inputs = inputs
            self.optimizer = optimizer
            self.scaler = scaler
            self.world = float(world)
            self.reduce = world > 1
            self.all_reduce = ops.AllReduce() if world > 1 else None
            self.grad_fn = ms.value_and_grad(self.forward, None, optimizer.parameters,
                                             has_aux=True)
            # counted on the device, read by the loop every --log-every steps
            self.skipped, self.streak, self.bad_loss = (
                ms.Parameter(ms.Tensor(0, ms.int32), name=f"amptool_{name}", requires_grad=False)
                for name in ("skipped", "streak", "bad_loss"))

        def forward(self, x, y):
            out = self.net(*x)  # x: one tensor per network input, y: the targets
            outs = flat_outputs(out)  # nested outputs unrolled, as export gives them
            if self.tuples:  # every output, every target; the loss casts outputs to fp32
                loss = self.loss_fn(outs, y)
            else:  # several outputs: the first is the logits
                loss = self.loss_fn(outs[0], y[0])
            if self.scaler is None:
                return loss, loss
            return self.scaler.scale(loss), loss

        def construct(self, *args):
            split = len(args) - 1 if self.inputs is None else self.inputs
            x, y = args[:split], args[split:]  # one tensor per network input, then targets
            (_, loss), grads = self.grad_fn(x, y)
            if self.reduce:  # average gradients, and report the global batch's loss
                grads = tuple(self.all_reduce(g) / self.world for g in grads)
                loss = self.all_reduce(loss) / self.world
            if self.scaler is not None:
                grads = self.scaler.unscale(grads)
            finite = amp.all_finite(grads)
            if self.reduce:  # skip on every rank when any rank overflowed
                finite = self.all_reduce(finite.astype(ms.float32)) >= self.world
            if finite:
                loss = ops.depend(loss, self.optimizer(grads))
            if self.scaler is not None:
                loss = ops.depend(loss, self.scaler.adjust(finite))
            bad = 1 - finite.astype(ms.int32)
            bad_loss = 1 - ops.isfinite(loss).astype(ms.int32)
            loss = ops.depend(loss, ops.assign_add(self.skipped, bad))
            loss = ops.depend(loss, ops.assign(self.streak, (self.streak + 1) * bad))
            loss = ops.depend(loss, ops.assign(self.bad_loss, (self.bad_loss + 1) * bad_loss))
            return loss, finite

    return StepCell
