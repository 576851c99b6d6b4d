"""``RunParts``: what one training run is made of (device, policy, network, data, loss, the
loss-scaled step), built and checked by ``build_parts`` before anything is written."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

import numpy as np

from amptool.data.dataset import Augment, ModelData, augmenting, load_model_data
from amptool.data.feed import check_workers
from amptool.data.rows import target_columns
from amptool.network import checkpoint as ckpt
from amptool.network.losses import LossSpec, build_loss, probe_loss, resolve_loss
from amptool.network.models import ModelSpec, eager_outputs, resolve_model
from amptool.network.taskmetric import evaluate, load_metric
from amptool.precision.policy import Policy, check_dtype_on_device, policy_for
from amptool.runtime.device import import_mindspore, resolve_device, set_device

from .ampstep import AmpStep
from .config import AUTO, TrainConfig
from .engine import LossScale, TrainStep, make_optimizer, parse_loss_scale
from .overflow import auto_policy
from .sink import resolve_sink_size
from .summary import Evaluator

if TYPE_CHECKING:
    from mindspore import nn


def _resolve_policy(cfg: TrainConfig):
    return policy_for(None if cfg.policy == AUTO else cfg.policy, cfg.amp_level)


@dataclass
class RunParts:
    """One training run's set-up objects; none of them changes as the run trains (their
    weights and scale do, inside MindSpore)."""

    device: str
    """The device the run trains on."""
    sink: int
    """Steps per host call with data sinking (0: no sinking)."""
    policy: Policy
    """The precision policy the network trains under."""
    auto: Optional[dict]
    """The range pass's report with ``--policy auto`` (else None)."""
    loss_scale: LossScale
    """The loss scaling."""
    spec: ModelSpec
    """The model reference."""
    data: ModelData
    """The training and held-out data, its loss with it."""
    augment: Optional[Augment]
    """The training-only augmentation (None: none)."""
    net: nn.Cell
    """The network, cast by the policy."""
    metric: Optional[Callable]
    """The loaded ``--metric`` (None: none)."""
    loss_cell: nn.Cell
    """The loss cell the step computes."""
    optimizer: nn.Optimizer
    """The optimizer over the network's trainable parameters."""
    amp: AmpStep
    """The loss-scaled step."""
    items: list
    """The state a checkpoint holds: weights, optimizer, scaler."""
    evaluator: Evaluator
    """The held-out evaluation after each epoch."""

    @property
    def loss(self) -> LossSpec:
        """The run's loss."""
        return self.data.loss

    @property
    def trainer(self) -> TrainStep:
        """The step's trainer (``assemble`` built it)."""
        assert self.amp.trainer is not None, "a run's step is assembled built"
        return self.amp.trainer


def build_parts(cfg: TrainConfig, world: int) -> RunParts:
    """The run's parts for one of ``world`` processes: the network built under the policy
    (after the range pass with ``--policy auto``), the loss and metric tried on it, the
    step assembled. A mistake in any of them is raised before anything is written."""
    ms = import_mindspore()
    device = resolve_device(cfg.device)
    sink = resolve_sink_size(cfg.sink_size, device, cfg.log_every)
    policy = _resolve_policy(cfg)
    check_dtype_on_device(policy, device)
    loss_scale = parse_loss_scale(cfg.loss_scale or None, policy.level, cfg.scale_init,
                                  cfg.scale_factor, cfg.scale_window)
    set_device(device)
    spec, data = _model_and_data(cfg)
    augment = augmenting(cfg.augment, cfg.seed, data)
    ms.set_seed(cfg.seed)
    net = spec.build()
    metric = _metric(cfg)
    loss_cell = check_task(cfg, spec, data, net, metric)
    auto = None
    if cfg.policy == AUTO:
        policy, auto = auto_policy(cfg, data, net, policy)
    optimizer, amp, items, evaluator = build_step(cfg, net, policy, loss_cell, data.loss,
                                                  metric, loss_scale, len(spec.inputs), world)
    return RunParts(device, sink, policy, auto, loss_scale, spec, data, augment, net, metric,
                    loss_cell, optimizer, amp, items, evaluator)


def _model_and_data(cfg: TrainConfig) -> tuple:
    """(model reference, data): a model whose loss is no classifier's has no class count."""
    spec = resolve_model(cfg.model, cfg.model_args, cfg.input_spec)
    data = load_model_data(cfg.data, spec, cfg.val_fraction,
                           workers=check_workers(cfg.data_workers),
                           loss=resolve_loss(cfg.loss), strict=True)
    if not data.loss.classifier:  # its first output is no class logits, whatever its width
        spec = dataclasses.replace(spec, num_classes=None)
    return spec, data


def _metric(cfg: TrainConfig):
    return load_metric(cfg.metric) if cfg.metric else None


def check_task(cfg: TrainConfig, spec, data, net, metric):
    """The loss cell, once the loss took the fresh network's outputs on a few training
    rows and the metric (if any) took its outputs on a few held-out rows: a mistake in
    either is one line before anything is written."""
    inputs, targets = next(iter(data.train_batches([np.arange(min(4, len(data.train_idx)))])))
    outputs = eager_outputs(net, inputs, spec.name, spec.inputs)
    cell = build_loss(data.loss, len(outputs))
    probe_loss(data.loss, cell, outputs, target_columns(targets), data.target_names)
    if metric is not None:
        val_in, val_y = data.val_inputs(4)
        evaluate(metric, cfg.metric, eager_outputs(net, val_in, spec.name, spec.inputs), val_y,
                 "held-out split")
    return cell


def build_step(cfg: TrainConfig, net, policy, loss_cell, loss, metric, loss_scale,
               inputs: int, world: int) -> tuple:
    """(optimizer, the loss-scaled step, the state a checkpoint holds, the evaluator) of the
    network under the policy."""
    optimizer = make_optimizer(cfg.optimizer, net.trainable_params(), cfg.lr)
    # the step a user's own loop gets from amptool.AmpStep, assembled from this run's parts
    amp = AmpStep.assemble(net, policy, loss_cell, optimizer, loss_scale,
                           reducer=world if world > 1 else None, inputs=inputs)
    assert amp.trainer is not None  # assemble builds the step
    items = ckpt.state_items(net, optimizer, amp.trainer.scaler_state())
    evaluator = Evaluator(amp.amp_net, loss_cell, loss.classifier, metric, cfg.metric)
    return optimizer, amp, items, evaluator
