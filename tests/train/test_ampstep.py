"""``amptool.AmpStep`` in a loop of one's own: the losses ``amptool train`` logs, an
overflowing batch skipped, the range pass and forward-overflow forensics on one's network,
and one line per mistake."""
import json
from pathlib import Path

import numpy as np
import pytest

import amptool
from amptool.errors import UsageError
from amptool.runtime.device import set_device

PLANTED = f"{Path(__file__).resolve().parent.parent / 'planted_branches.py'}:build"


@pytest.fixture(scope="module")
def ms():
    set_device("CPU")
    import mindspore

    return mindspore


def _digits(model: str, source: str = "digits"):
    from amptool.data.dataset import load_model_data
    from amptool.network.models import resolve_model

    spec = resolve_model(model)
    return spec, load_model_data(source, spec, 0.2)


def _snapshot(cell):
    return {p.name: p.asnumpy().copy() for p in cell.get_parameters()}


@pytest.mark.slow  # trains simplecnn for 2 epochs of 18 steps (the session's few_o2_run)
def test_own_loop_logs_the_losses_amptool_train_logs(ms, few_o2_run, few_digits):
    """The same seed, data order, batch size, epochs and lr: every step's loss is the one
    ``amptool train`` wrote to metrics.jsonl (logged at every step there)."""
    from amptool.data.dataset import epoch_batches
    from amptool.data.rows import target_columns

    out, summary = few_o2_run
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = {r["step"]: r for r in logged if "loss" in r}

    spec, data = _digits("simplecnn", few_digits)
    ms.set_seed(0)
    net = spec.build()
    step = amptool.AmpStep(net, loss="cross-entropy", optimizer="adam", lr=1e-3, level="O2")
    losses, scales, n = {}, {}, 0
    for epoch in range(2):
        order = list(epoch_batches(len(data.train_idx), 32, 0, epoch))
        for inputs, labels in data.train_batches(order):
            result = step(*inputs, *target_columns(labels))
            n += 1
            losses[n], scales[n] = result.loss, result.loss_scale
            assert result.applied
    assert n == summary.steps == max(logged)
    ref = np.array([logged[s]["loss"] for s in sorted(logged)])
    own = np.array([losses[s] for s in sorted(logged)])
    assert np.array_equal(own, ref), np.max(np.abs(own - ref) / np.abs(ref))  # bit-identical
    assert [scales[s] for s in sorted(logged)] == [logged[s]["loss_scale"] for s in sorted(logged)]
    assert step.skipped == summary.overflow_steps == 0


@pytest.mark.slow  # trains simplecnn until the scale backs off to a step that applies
def test_an_overflowing_batch_is_skipped(ms):
    """A scale of 2**40 overflows fp16 gradients: the weights and the optimizer state stay
    bit-identical, the scale halves, and the next steps back off until one applies."""
    from amptool.network.models import sample_spec

    ms.set_seed(0)
    net = sample_spec("simplecnn").build()
    step = amptool.AmpStep(net, level="O2", scale_init=2.0 ** 40)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 16).astype(np.int32)
    before, before_opt = _snapshot(net), _snapshot(step.optimizer)
    result = step(x, y)
    assert not result.applied and np.isfinite(result.loss)
    assert result.loss_scale == step.loss_scale == 2.0 ** 39
    assert step.skipped == step.skipped_in_row == 1
    after, after_opt = _snapshot(net), _snapshot(step.optimizer)
    assert all(np.array_equal(v, after[k]) for k, v in before.items())
    assert all(np.array_equal(v, after_opt[k]) for k, v in before_opt.items())
    tries = 1
    while not step(x, y).applied:
        tries += 1
        assert tries < 40
    assert step.skipped == tries and step.skipped_in_row == 0
    assert any(not np.array_equal(v, _snapshot(net)[k]) for k, v in before.items())



@pytest.mark.slow  # compiles and trains two training steps until one applies
def test_settle_scale_tries_the_first_batch_until_it_applies(ms):
    """From 2**32 the first batch overflows: ``settle_scale`` tries it again at each halved
    scale, as ``amptool train`` does, and ends where plain steps on that batch end (same
    scale, bit-identical weights) with no step counted as skipped; ``max_tries`` stops it."""
    from mindspore import nn

    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 16).astype(np.int32)
    nets, steps = [], []
    for _ in range(2):
        ms.set_seed(0)
        nets.append(nn.SequentialCell(nn.Flatten(), nn.Dense(64, 32), nn.ReLU(),
                                      nn.Dense(32, 10)))
        steps.append(amptool.AmpStep(nets[-1], level="O2", scale_init=2.0 ** 32))
    settled, plain = steps
    capped = settled.settle_scale(x, y, max_tries=3)      # three tries, all overflowing
    assert not capped.applied and settled.settle_tries == 3
    assert capped.loss_scale == 2.0 ** 29 and settled.skipped == 1
    assert settled.skipped_in_row == 3                    # as train's --max-skipped counts them
    result = settled.settle_scale(x, y)
    assert result.applied and settled.skipped == 1 and settled.skipped_in_row == 0
    calls = 1
    while not plain(x, y).applied:
        calls += 1
        assert calls < 40
    assert 3 + settled.settle_tries == calls and plain.skipped == calls - 1
    assert result.loss_scale == plain.loss_scale == 2.0 ** 32 / 2 ** (calls - 1)
    assert all(np.array_equal(v, _snapshot(nets[1])[k]) for k, v in _snapshot(nets[0]).items())


@pytest.mark.slow  # the range pass compiles trapmlp and a training step trains it
def test_range_pass_names_trapmlp_norm_and_auto_keeps_it(ms):
    spec, data = _digits("trapmlp")
    batches = [data.train_inputs(np.arange(i * 32, (i + 1) * 32)) for i in range(2)]
    ms.set_seed(0)
    found = amptool.find_fp32_cells(spec.build(), batches)
    assert found.paths == ["norm"] and found.policy.fp32_cells == ("norm",)
    assert found.kept[0]["type"] == "L2Normalize" and "models.py" in found.kept[0]["where"]
    ms.set_seed(0)
    net = spec.build()
    step = amptool.AmpStep(net, level="auto", calibration=batches)
    assert step.policy.fp32_cells == ("norm",) and step.found.paths == ["norm"]
    inputs, labels = next(iter(data.train_batches([np.arange(32)])))
    result = step(*inputs, labels)
    assert np.isfinite(result.loss)


def test_forensics_names_the_overflowing_cell(ms):
    spec, data = _digits(PLANTED)
    x = data.train_inputs(np.arange(32))
    ms.set_seed(0)
    net = spec.build()
    culprit = amptool.find_overflow(net, x, "O2")
    assert culprit["path"] == "block" and culprit["fp32_max"] > 65504
    assert amptool.find_overflow(net, x, {"level": "O2", "fp32_cells": ["block"]}) is None
    step = amptool.AmpStep(net, level="O2")
    assert step.find_overflow(x)["path"] == "block"


def _one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text and "; " in text, text
    return text


def test_mistakes_are_one_line(ms):
    from amptool.network.models import sample_spec

    net = sample_spec("simplecnn").build()
    with pytest.raises(UsageError) as exc:
        amptool.AmpStep(net, level="O5")
    assert _one_line(exc).startswith("unknown AMP level 'O5'")
    with pytest.raises(UsageError) as exc:
        amptool.AmpStep(net, level="auto")
    assert "calibration" in _one_line(exc)
    with pytest.raises(UsageError) as exc:
        amptool.AmpStep(net, loss="hinge")
    assert _one_line(exc).startswith("unknown loss 'hinge'")

    def three(logits, labels, extra):
        return (logits * 0).sum()

    step = amptool.AmpStep(net, loss=three)
    x = np.zeros((4, 1, 28, 28), np.float32)
    with pytest.raises(UsageError) as exc:
        step(x, np.zeros(4, np.int32))
    assert _one_line(exc).startswith("loss three takes 3 argument(s), but the network gives "
                                     "1 output(s) and the loss 1 target(s)")
    with pytest.raises(UsageError) as exc:  # no copy of the network kept: no forensics
        amptool.AmpStep(net, forensics=False).find_overflow(x)
    assert _one_line(exc).startswith("this step keeps no copy of its network")


@pytest.mark.slow  # trains simplecnn three times, 3 steps each
def test_a_loss_cell_or_function_trains_as_the_named_loss(ms):
    """``loss=nn.CrossEntropyLoss()`` and a plain function computing it give the losses the
    name ``cross-entropy`` gives, step for step."""
    from mindspore import nn, ops

    from amptool.network.models import sample_spec

    def ce(logits, labels):
        return ops.cross_entropy(logits, labels)

    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 16).astype(np.int32)
    runs = []
    for loss in ("cross-entropy", nn.CrossEntropyLoss(), ce):
        ms.set_seed(0)
        step = amptool.AmpStep(sample_spec("simplecnn").build(), loss=loss, level="O2")
        runs.append([step(x, y).loss for _ in range(3)])
    assert runs[0][-1] < runs[0][0]
    assert runs[1] == runs[0]
    assert np.allclose(runs[2], runs[0], rtol=1e-6, atol=0), runs
