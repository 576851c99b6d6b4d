"""Overflow in a training run: the ``--policy auto`` range pass, the rules that stop a run
as diverged, and forward-overflow forensics. Each function returns what it found or raises;
the run applies it (``parts.build_parts`` the auto policy, ``loop._TrainingRun`` the rest)."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from amptool.data.dataset import epoch_batches
from amptool.documents.records import Forensics
from amptool.errors import DivergedError
from amptool.network.checkpoint import load_into_net
from amptool.precision.apply import apply_policy, cell_origins, resolve_fp32_cells
from amptool.precision.forensics import first_overflow
from amptool.precision.policy import make_policy
from amptool.precision.ranges import measure_ranges, outside_policy, range_candidates

AUTO_BATCHES = 2
"""Training batches the range pass of ``--policy auto`` runs over."""
FORWARD_STEPS = 10
"""A run whose first this-many steps all overflow in the forward pass stops there."""
MIN_UPDATED = 0.1
"""An epoch ends the run as diverged when fewer than this share of its steps so far
updated the weights (the rest overflowed and were skipped)."""


def auto_policy(cfg, data, net, base) -> tuple:
    """``--policy auto``: one range pass of the freshly built fp32 network over the first
    training batches (unaugmented, in one call), batch normalizations on those batches'
    statistics as a step normalizes with its batch's, the cells the level keeps in fp32
    kept so in the fp16 probe; its candidates (outputs fp16 cannot hold, cells that break
    when computing in fp16) join the fp32 cells of the ``base`` policy unless it keeps them
    already. Returns (the policy to train under, the range pass's report for run.json)."""
    positions = [idx for idx, _ in zip(epoch_batches(len(data.train_idx), cfg.batch_size,
                                                     cfg.seed, 0), range(AUTO_BATCHES))]
    joined = None
    if base.dtype == "float16":  # bfloat16 has fp32's range: nothing to keep
        joined = data.train_inputs(np.concatenate(positions))  # one eager call
    policy, kept = range_pass(net, joined, base, cfg.range_safety)
    return policy, {"safety": cfg.range_safety, "batches": len(positions),
                    "file": "policy.auto.toml", "kept": kept}


def range_pass(net, joined, base, safety: float) -> tuple:
    """The range pass of ``--policy auto`` (and of ``amptool.find_fp32_cells``) over
    ``joined`` (a list of numpy arrays, one per network input: the calibration batches in
    one call; None: nothing to measure): (``base`` with the cells found joined to its fp32
    cells, the found cells as dicts with ``where`` they come from)."""
    found = [] if joined is None else auto_candidates(net, joined, base, safety)
    cells = list(base.fp32_cells) + [r.path for r in found]
    policy = make_policy(base.level, base.dtype, base.fp32_types, cells, base.fp16_cells)
    where = cell_origins(net, [r.path for r in found])
    return policy, [{**r.to_dict(), "where": where.get(r.path, r.type)} for r in found]


def auto_candidates(net, inputs: list, base, safety: float) -> list:
    """The range pass of ``--policy auto`` over one batch of ``inputs`` of the fp32 network
    ``net`` (batch statistics; the cells ``base`` keeps in fp32 stay so in the fp16 probe):
    the ``CellRange`` of the cells to keep that ``base`` does not keep already."""
    kept = tuple(resolve_fp32_cells(net, base).values())
    ranges = measure_ranges(net, [inputs], batch_stats=True, fp32_kept=kept)
    return outside_policy(net, range_candidates(ranges, safety=safety), base)


def forward_overflowed(state, max_skipped: int) -> bool:
    """Whether the loss itself stopped being finite: the first ``FORWARD_STEPS`` steps, or
    ``max_skipped`` in a row, all overflowed in the forward pass (``state``: a ``RunState``)."""
    return bool(state.forward_bad) and ((state.forward_bad == state.step >= FORWARD_STEPS)
                                        or state.consecutive >= max_skipped)


def check_skipped(state, scale_kind: str, max_skipped: int, scale_value: Callable[[], float],
                  skipped: int, kept: str) -> None:
    """After a logged step: ``skipped`` steps of its window overflowed; stop the run when
    loss scaling is off and the loss or gradients are not finite, or when ``max_skipped``
    steps in a row were skipped (``scale_value()``: the loss scale now; ``kept``: "last
    good checkpoint kept in OUT; " when one was written, else "")."""
    if scale_kind == "none" and (skipped or not np.isfinite(state.loss)):
        what = (f"loss became {state.loss}" if not np.isfinite(state.loss) else
                f"{skipped} step(s) had non-finite gradients")
        raise DivergedError(f"{what} by step {state.step} with loss scaling off",
                            f"{kept}use --loss-scale dynamic or a lower --lr")
    if state.consecutive >= max_skipped:
        tries = (" (the first batch's tries, each at a halved scale)"
                 if state.step == 1 and (state.first_batch_tries or 0) > 1 else "")
        raise DivergedError(f"{state.consecutive} consecutive overflow steps skipped by step "
                            f"{state.step}{tries}, --max-skipped is {max_skipped} (loss "
                            f"scale {scale_value():g})",
                            f"{kept}lower --lr or use a policy that keeps the overflowing "
                            "layers in fp32")


def check_updates(state, loss_scale, scale_value: Callable[[], float], kept: str) -> None:
    """At an epoch's end: stop a run fewer than ``MIN_UPDATED`` of whose steps so far
    updated the weights (``kept``: where the last good checkpoint is, or "")."""
    updated = state.step - state.overflow
    # a dynamic scale backs off one factor per skipped step: judge only after it could
    # have reached 1 from its initial value
    backoff = (math.ceil(math.log(max(loss_scale.init, 1.0), max(loss_scale.factor, 2)))
               if loss_scale.kind == "dynamic" else 0)
    if state.step > backoff and updated < max(1.0, MIN_UPDATED * state.step):
        raise DivergedError(f"only {updated} of {state.step} steps updated the weights: the "
                            f"others overflowed and were skipped (loss scale "
                            f"{scale_value():g})",
                            "lower --lr, or keep the overflowing cells in fp32 (--policy auto)"
                            + ("; last good checkpoint kept in " + kept if kept else ""))


def forward_overflow(build, net, policy, inputs: list, bad: int, step: int) -> tuple:
    """The loss itself is not finite (the forward pass overflowed, which no loss scale
    can fix): name the first cell whose low-precision output is not finite while its
    fp32 output is. Returns (the forensics for run.json, the problem, the fix); ``bad``
    steps in a row up to ``step`` overflowed."""
    culprit = overflow_culprit(build, net, policy, inputs)
    steps = f"{bad} consecutive steps to step {step}"
    if culprit is None:
        problem = (f"the loss is not finite in the forward pass ({steps}), and no cell's "
                   f"{policy.dtype} output is where its fp32 output is finite")
        fix = "check the data and the loss for non-finite values"
    else:
        problem = (f"the loss is not finite in the forward pass ({steps}): cell "
                   f"{culprit['path']} ({culprit['type']}) gives non-finite "
                   f"{policy.dtype} outputs where its fp32 outputs reach "
                   f"{culprit['fp32_max']:.4g}")
        fix = (f"keep it in fp32 (--policy auto, or fp32_cells = [\"{culprit['path']}\"] "
               f"in a --policy file)")
    return Forensics("forward_overflow", step, bad, culprit), problem, fix


def overflow_culprit(build, net, policy, inputs: list):
    """The first cell of ``net`` (its weights as they are now) whose ``policy`` output is
    not finite on ``inputs`` while its fp32 output is (``forensics.first_overflow``), or None;
    ``build()`` makes a fresh fp32 network of the same structure (twice)."""
    weights = {p.name: p for p in net.get_parameters()}
    fp32, low = build(), build()
    for built in (fp32, low):
        load_into_net(built, weights, "the training weights")
    return first_overflow(fp32, low, apply_policy(low, policy), inputs, batch_stats=True)
