"""``AmpStep``: the AMP training step for a user's own loop, the one ``amptool train`` runs.

``step = AmpStep(net, loss="cross-entropy", optimizer="adam", lr=1e-3, level="O2")``, then
``out = step(x, y)`` per batch: one forward and backward under the policy, the loss scaled,
the update applied only when the gradients are finite (``out.applied``), the scale adjusted.
Every step is built one way: ``AmpStep(...)`` stores what ``StepSetup.resolve`` makes of
its arguments (the level's policy, with ``level='auto'`` the range pass; the loss scale;
the optimizer; the fp32 copy ``find_overflow`` starts from), and compiles at its first
batch. A training run (``parts.build_step``) builds its step with ``AmpStep.assemble``,
through the same constructor with the run's resolved parts: the same policy application,
``engine.TrainStep`` and compiled ``StepCell`` either way.

``find_fp32_cells`` (the ``--policy auto`` range pass) and ``find_overflow`` (the
forensics of a run whose loss stops being finite) take the user's network and batches.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np

from amptool.errors import UsageError
from amptool.network.losses import FIX, LossSpec, build_loss, probe_loss, resolve_loss
from amptool.network.models import eager_outputs
from amptool.precision.apply import apply_policy
from amptool.precision.policy import LEVELS, Policy, make_policy, policy_from_dict
from amptool.precision.safety import SAFETY, check_range_safety
from amptool.runtime.device import execution_mode

from .config import AUTO
from .engine import LossScale, TrainStep, make_optimizer, parse_loss_scale
from .overflow import overflow_culprit, range_pass

LEVEL_FIX = ("pass level='O0'..'O3', 'auto' (with calibration= batches), a Policy or a "
             "policy mapping")


@dataclass(frozen=True)
class StepResult:
    """What one call of an ``AmpStep`` did."""

    loss: float
    """The batch's loss (unscaled, fp32)."""
    applied: bool
    """Whether the weights were updated (False: the gradients overflowed; step skipped)."""
    loss_scale: float
    """The loss scale after the step (backed off on an overflow, grown after a clean window)."""


@dataclass(frozen=True)
class RangePass:
    """What ``find_fp32_cells`` found."""

    policy: Policy
    """The base policy with the found cells kept in fp32."""
    kept: list = field(default_factory=list)
    """The found cells, as run.json's ``policy_auto.kept`` records them (path, type, ranges,
    ``where`` the cell class is defined)."""

    @property
    def paths(self) -> list:
        return [row["path"] for row in self.kept]


@dataclass(frozen=True)
class StepSetup:
    """What an ``AmpStep`` is built from, resolved (``resolve``)."""

    net: Any
    """The network (an ``nn.Cell``), trained in place."""
    policy: Policy
    """The precision policy the step applies (with the range pass's cells in fp32)."""
    optimizer: Any
    """The MindSpore optimizer over the network's trainable parameters."""
    loss: Any
    """A ``LossSpec``, a loss cell or function (probed on the first batch), or the loss cell
    of a run (already probed)."""
    loss_scale: LossScale
    """The loss scaling."""
    inputs: Optional[int] = None
    """How many lead arguments of a step go to the network (None: all but the last)."""
    fresh: Any = None
    """An fp32 copy of the network as given, ``find_overflow``'s structure (None: none)."""
    found: Optional[RangePass] = None
    """What the range pass found (``level='auto'``; else None)."""

    @classmethod
    def resolve(cls, net, loss, optimizer, lr: float, level, loss_scale, calibration,
                inputs: Optional[int], scale_init: float, scale_factor: int, scale_window: int,
                safety: float, forensics: bool) -> "StepSetup":
        """The setup ``AmpStep(...)``'s arguments describe (its defaults are ``AmpStep``'s):
        the one place the range pass (``level='auto'``, on ``calibration`` batches) and the
        network's copy (``forensics``) are made. Resolved parts (a ``Policy``, a MindSpore
        optimizer, a loss cell, a ``LossScale``) are taken as they are."""
        policy, auto = resolve_level(level)
        if auto and not calibration:
            raise UsageError("level 'auto' runs the range pass on calibration batches, and none "
                             "were given", "pass calibration=[batch, ...] (a few training "
                             "batches' inputs), or a level such as 'O2'")
        if loss_scale is not None and not isinstance(loss_scale, (str, LossScale)):
            raise UsageError(f"loss_scale must be a string (got {loss_scale!r})",
                             "pass 'dynamic', 'static:VALUE' or 'none'")
        scaling = loss_scale if isinstance(loss_scale, LossScale) else parse_loss_scale(
            loss_scale, policy.level, scale_init, scale_factor, scale_window)
        found = find_fp32_cells(net, calibration, policy, safety) if auto else None
        return cls(net, found.policy if found else policy, _optimizer(optimizer, net, lr),
                   _loss_spec(loss, 1) if isinstance(loss, str) else loss,  # a name: checked now
                   scaling, inputs, copy.deepcopy(net) if forensics else None, found)


def resolve_level(level):
    """(the policy, whether the range pass picks fp32 cells) of ``level``: 'O0'..'O3',
    'auto' (O2 and the range pass), a ``Policy`` or a policy mapping."""
    if isinstance(level, Policy):
        return level, False
    if isinstance(level, dict):
        return policy_from_dict(level, "level"), False
    if isinstance(level, str) and level.strip().lower() == AUTO:
        return make_policy("O2"), True
    if not isinstance(level, str) or level.strip().upper() not in LEVELS:
        raise UsageError(f"unknown AMP level {level!r}", LEVEL_FIX)
    return make_policy(level.strip()), False


def as_arrays(batch) -> list:
    """One batch's network inputs (a tensor or array, or a tuple of them) as numpy arrays."""
    items = batch if isinstance(batch, (tuple, list)) else (batch,)
    return [np.asarray(b.asnumpy() if hasattr(b, "asnumpy") else b) for b in items]


def joined_inputs(batches, what: str) -> list:
    """``batches`` (each a tensor, an array or a tuple of them per network input) joined
    along the rows: one list of arrays, one per input."""
    rows = [as_arrays(b) for b in (batches or [])]
    if not rows or any(len(r) != len(rows[0]) for r in rows):
        raise UsageError(f"{what} needs a list of batches, each the network's inputs",
                         "pass e.g. calibration=[x0, x1] or [(x0a, x0b), ...]")
    return [np.concatenate([r[i] for r in rows]) for i in range(len(rows[0]))]


def find_fp32_cells(net, batches, level="O2", safety: float = SAFETY) -> RangePass:
    """The range pass of ``--policy auto`` on ``net`` (fp32, not yet under a policy) over
    ``batches`` (joined into one eager call, batch normalizations on its statistics): the
    cells whose fp32 outputs fp16 cannot hold or that break computing in fp16."""
    base, _ = resolve_level("O2" if level == AUTO else level)
    if base.level not in ("O2", "O3"):
        raise UsageError(f"the range pass has nothing to keep in fp32 at {base.level}",
                         "use level O2 or O3 with it")
    check_range_safety(safety, "range safety", "pass safety=0.5 (the default) or another share")
    joined = joined_inputs(batches, "the range pass")
    policy, kept = range_pass(net, joined if base.dtype == "float16" else None, base, safety)
    return RangePass(policy, kept)


def find_overflow(net, inputs, level="O2") -> Optional[dict]:
    """Forward-overflow forensics: the first cell of ``net`` (fp32, not under a policy; its
    weights as they are) whose output under ``level`` is not finite on ``inputs`` (one
    batch) while its fp32 output is: {path, type, fp32_max, input_finite}, or None."""
    policy, _ = resolve_level(level)
    return overflow_culprit(lambda: copy.deepcopy(net), net, policy, as_arrays(inputs))


class AmpStep:
    """One AMP training step over ``net``, called once per batch: ``step(*inputs, *targets)``
    (tensors or numpy arrays; ``inputs``: how many lead arguments go to the network, default
    all but the last) returns a ``StepResult``. ``net`` trains in place.

    ``loss``: a built-in name (as ``--loss``), an ``nn.Cell`` or a function of (outputs...,
    targets...) -> scalar; it computes on fp32 outputs. ``optimizer``: adam, sgd, momentum
    (with ``lr``) or a MindSpore optimizer over ``net``'s parameters. ``level``: 'O0'..'O3',
    a ``Policy`` or a policy mapping, or 'auto' (O2 plus the range pass over ``calibration``
    batches). ``loss_scale``: 'dynamic', 'static:VALUE' or 'none' (None: dynamic for O1/O2,
    none for O0/O3), starting at ``scale_init``. ``forensics``: keep an fp32 copy of ``net``
    as given, which ``find_overflow`` starts from (False saves its memory).

    The first call checks the loss on the fp32 network's outputs for the batch's first rows
    (one line if it does not take them), then applies the policy to ``net`` and compiles the
    step. ``step.settle_scale(*args)`` in place of the first batch's ``step(*args)`` settles
    a dynamic loss scale on that batch, retrying it while it overflows, as ``amptool train``
    does on a run's first batch (the same code).
    """

    def __init__(self, net, loss="cross-entropy", optimizer="adam", lr: float = 1e-3,
                 level="O2", loss_scale: Union[str, LossScale, None] = None, calibration=None,
                 inputs: Optional[int] = None, scale_init: float = 2.0 ** 16,
                 scale_factor: int = 2, scale_window: int = 2000, safety: float = SAFETY,
                 forensics: bool = True):
        self.setup = StepSetup.resolve(net, loss, optimizer, lr, level, loss_scale, calibration,
                                       inputs, scale_init, scale_factor, scale_window, safety,
                                       forensics)
        """What the step is built from (``StepSetup.resolve`` of the arguments)."""
        self.trainer: Optional[TrainStep] = None
        self.amp_net = None
        self.settle_tries = 0
        """How many tries the last ``settle_scale`` ran (0: none yet)."""

    @classmethod
    def assemble(cls, net, policy: Policy, loss_cell, optimizer, loss_scale: LossScale,
                 reducer=None, inputs: Optional[int] = None) -> "AmpStep":
        """The step from resolved parts (``amptool train``'s: its loss cell already probed on
        the network; no copy of the network is kept), built now."""
        step = cls(net, loss_cell, optimizer, level=policy, loss_scale=loss_scale,
                   inputs=inputs, forensics=False)
        step._build(loss_cell, reducer)
        return step

    @property
    def net(self):
        """The network, trained in place."""
        return self.setup.net

    @property
    def policy(self) -> Policy:
        """The precision policy the step applies."""
        return self.setup.policy

    @property
    def optimizer(self):
        """The MindSpore optimizer."""
        return self.setup.optimizer

    @property
    def found(self) -> Optional[RangePass]:
        """What the range pass found with ``level='auto'`` (else None)."""
        return self.setup.found

    @property
    def _built(self) -> TrainStep:
        """The step graph, built at the first batch (or by ``assemble``)."""
        assert self.trainer is not None, "the step is built at its first batch"
        return self.trainer

    def _build(self, loss_cell, reducer=None) -> None:
        self.amp_net = apply_policy(self.net, self.policy)
        self.trainer = TrainStep(self.amp_net, loss_cell, self.optimizer, self.setup.loss_scale,
                                 reducer=reducer, inputs=self.setup.inputs)
        # cells start in inference mode: train mode, so BatchNorm updates its statistics
        # and Dropout drops, in the step graph compiled next
        self.trainer.step.set_train(True)

    def __call__(self, *args) -> StepResult:
        loss, finite = self._step_once(self._tensors(args))
        return self._result(loss, finite)

    def settle_scale(self, *args, max_tries: int = 50) -> StepResult:
        """``step(*args)`` for a loop's first batch, with the loss scale settled on it, as
        ``amptool train`` does: while the batch's gradients overflow (its loss finite), it is
        tried again at the scale the overflow halved, until it updates the weights, the
        scale reaches 1 or ``max_tries`` tries overflowed. A run's first gradients are often
        its largest, so the scale settles on them instead of by skipping the first steps'
        updates (from 2**16, a few tries instead of a few skipped steps). The tries count as
        one step: one skipped step if the last try overflowed, its overflowing tries skipped
        in a row (``skipped``, ``skipped_in_row``); ``settle_tries`` says how many ran.
        BatchNorm's running statistics see the batch once per try. Without a dynamic scale
        it is one plain step."""
        tensors = self._tensors(args)
        tried_at = self.loss_scale
        loss, finite = self._step_once(tensors)
        return self._result(*self.retry_overflow(tensors, loss, finite, tried_at, max_tries))

    def retry_overflow(self, tensors: list, loss, finite, tried_at: float,
                       max_tries: int) -> tuple:
        """(loss, finite) of ``settle_scale`` after the batch's first try (at scale
        ``tried_at``) gave ``loss, finite``: the one settling ``amptool train`` runs too."""
        tries = 1
        if self.setup.loss_scale.kind == "dynamic":
            first_skipped, first_streak, _ = self._built.counters()
            while (not bool(finite.asnumpy()) and np.isfinite(float(loss.asnumpy()))
                   and tries < max_tries):
                scale = self._built.scale_value()
                if scale >= tried_at:  # at its floor of 1: another try would overflow again
                    break
                loss, finite = self._step_once(tensors)
                tries, tried_at = tries + 1, scale
            if tries > 1:  # the tries are one step: the first try's skip stands for them all
                overflowed = not bool(finite.asnumpy())
                self._built.set_skip_counters(first_skipped - 1 + int(overflowed),
                                               first_streak - 1 + tries if overflowed else 0)
        self.settle_tries = tries
        return loss, finite

    def _tensors(self, args) -> list:
        import mindspore as ms

        tensors = [a if isinstance(a, ms.Tensor) else ms.Tensor(np.asarray(a)) for a in args]
        if self.trainer is None:
            self._build(self._probe_loss(tensors))
        return tensors

    def _step_once(self, tensors: list) -> tuple:
        import mindspore as ms

        if ms.get_context("mode") == ms.GRAPH_MODE:
            return self._built.step(*tensors)
        with execution_mode(graph=True):  # the step compiles once, whatever the loop's mode
            return self._built.step(*tensors)

    def _result(self, loss, finite) -> StepResult:
        return StepResult(float(loss.asnumpy()), bool(finite.asnumpy()),
                          self._built.scale_value())

    def _probe_loss(self, tensors: list):
        """The loss cell, once the loss took the fp32 network's outputs on the first rows of
        the first batch (a mistake is one line before anything compiles)."""
        split = len(tensors) - 1 if self.setup.inputs is None else self.setup.inputs
        if not 0 < split < len(tensors):
            raise UsageError(f"a step takes the network's inputs, then the targets: got "
                             f"{len(tensors)} argument(s) for {split} input(s)",
                             "call step(*inputs, *targets)")
        rows = [t.asnumpy()[:4] for t in tensors]
        outputs = eager_outputs(self.net, rows[:split], type(self.net).__name__, ())
        targets = rows[split:]
        spec = _loss_spec(self.setup.loss, len(targets))
        cell = build_loss(spec, len(outputs))
        names = spec.targets if len(spec.targets) == len(targets) else _target_names(targets)
        probe_loss(spec, cell, outputs, targets, names)
        return cell

    @property
    def loss_scale(self) -> float:
        """The loss scale now (1.0 without scaling)."""
        scaling = self.setup.loss_scale
        return self.trainer.scale_value() if self.trainer else float(
            scaling.init if scaling.kind != "none" else 1.0)

    @property
    def skipped(self) -> int:
        """Steps skipped so far (their gradients overflowed)."""
        return self.trainer.counters()[0] if self.trainer else 0

    @property
    def skipped_in_row(self) -> int:
        """Steps skipped in a row up to the last one."""
        return self.trainer.counters()[1] if self.trainer else 0

    @property
    def bad_losses_in_row(self) -> int:
        """Steps in a row up to the last one whose loss itself was not finite (the forward
        pass overflowed: ``find_overflow`` names the cell)."""
        return self.trainer.counters()[2] if self.trainer else 0

    def find_overflow(self, inputs) -> Optional[dict]:
        """``find_overflow`` on this step's network, its weights as trained so far, under its
        policy, on one batch's ``inputs``."""
        fresh = self.setup.fresh
        if fresh is None:
            raise UsageError("this step keeps no copy of its network (forensics=False, or a "
                             "training run's step)",
                             "call amptool.find_overflow(net, inputs, policy) on a fresh build")
        return overflow_culprit(lambda: copy.deepcopy(fresh), self.net, self.policy,
                                as_arrays(inputs))


def _optimizer(optimizer, net, lr: float):
    if isinstance(optimizer, str):
        return make_optimizer(optimizer.lower(), net.trainable_params(), lr)
    if hasattr(optimizer, "parameters") and callable(optimizer):
        return optimizer
    raise UsageError(f"optimizer must be a name or a MindSpore optimizer (got "
                     f"{type(optimizer).__name__})",
                     "pass 'adam', 'sgd', 'momentum' or e.g. nn.Adam(net.trainable_params())")


def _target_names(targets: list) -> tuple:
    return ("y",) if len(targets) == 1 else tuple(f"y{i}" for i in range(len(targets)))


def _loss_spec(loss, n_targets: int):
    """The ``LossSpec`` of a loss name, cell or function taking ``n_targets`` targets."""
    if isinstance(loss, LossSpec):
        return loss
    if isinstance(loss, str):
        spec = resolve_loss(loss)
        if spec is None:
            raise UsageError("loss is empty", FIX)
        return spec
    if not callable(loss):
        raise UsageError(f"loss must be a name, a cell or a function (got "
                         f"{type(loss).__name__})", FIX)
    name = getattr(loss, "__name__", type(loss).__name__)
    return LossSpec(name, "factory", _target_names([None] * n_targets), factory=lambda: loss)
