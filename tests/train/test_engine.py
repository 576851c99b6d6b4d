"""The loss-scaled step: back-off on overflow, growth after a clean window, bit-identical skips."""
import numpy as np
import pytest

from amptool.errors import UsageError
from amptool.runtime.device import set_device
from amptool.train.engine import LossScale, TrainStep, make_optimizer, parse_loss_scale


@pytest.fixture(scope="module")
def ms():
    set_device("CPU")
    import mindspore

    return mindspore


def _step_setup(ms, init, window=2000, level="O2"):
    from mindspore import nn

    from amptool.network.models import sample_spec
    from amptool.precision.apply import apply_policy
    from amptool.precision.policy import make_policy

    ms.set_seed(0)
    net = sample_spec("simplecnn").build()
    amp_net = apply_policy(net, make_policy(level))
    opt = make_optimizer("adam", net.trainable_params(), 1e-3)
    step = TrainStep(amp_net, nn.CrossEntropyLoss(), opt, LossScale("dynamic", init, 2, window))
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.standard_normal((16, 1, 28, 28)).astype(np.float32))
    y = ms.Tensor(rng.integers(0, 10, 16).astype(np.int32))
    return net, opt, step, x, y


def _snapshot(cell):
    return {p.name: p.asnumpy().copy() for p in cell.get_parameters()}


@pytest.mark.slow
def test_overflow_backs_off_and_skips_bit_identically(ms):
    net, opt, step, x, y = _step_setup(ms, init=2.0 ** 40)
    before_net, before_opt = _snapshot(net), _snapshot(opt)
    loss, finite = step.step(x, y)
    assert not bool(finite.asnumpy()), "a 2**40 scale must overflow the fp16 backward pass"
    assert step.scale_value() == 2.0 ** 39
    after_net, after_opt = _snapshot(net), _snapshot(opt)
    for name, value in before_net.items():
        assert np.array_equal(value, after_net[name]), f"{name} changed on a skipped step"
    for name, value in before_opt.items():
        assert np.array_equal(value, after_opt[name]), f"optimizer {name} changed on a skipped step"
    scales = [step.scale_value()]
    while not bool(step.step(x, y)[1].asnumpy()):
        scales.append(step.scale_value())
        assert len(scales) < 40
    assert all(b == a / 2 for a, b in zip(scales, scales[1:]))
    changed = _snapshot(net)
    assert any(not np.array_equal(before_net[k], changed[k]) for k in before_net)


@pytest.mark.slow
def test_scale_grows_after_clean_window(ms):
    net, opt, step, x, y = _step_setup(ms, init=8.0, window=3)
    for i in range(3):
        assert bool(step.step(x, y)[1].asnumpy())
        assert step.scale_value() == (16.0 if i == 2 else 8.0)


@pytest.mark.slow
def test_no_scaling_updates_every_step(ms):
    from mindspore import nn

    from amptool.network.models import sample_spec

    net = sample_spec("lenet5").build()
    opt = make_optimizer("sgd", net.trainable_params(), 0.1)
    step = TrainStep(net, nn.CrossEntropyLoss(), opt, parse_loss_scale(None, "O0"))
    before = _snapshot(net)
    x = ms.Tensor(np.ones((4, 1, 32, 32), np.float32))
    y = ms.Tensor(np.arange(4).astype(np.int32))
    loss, finite = step.step(x, y)
    assert bool(finite.asnumpy()) and step.scale_value() == 1.0
    assert any(not np.array_equal(v, _snapshot(net)[k]) for k, v in before.items())


@pytest.mark.parametrize("text,level,kind", [
    (None, "O2", "dynamic"), (None, "O1", "dynamic"), (None, "O0", "none"), (None, "O3", "none"),
    ("static:1024", "O2", "static"), ("none", "O2", "none"), ("DYNAMIC", "O3", "dynamic")])
def test_parse_loss_scale(text, level, kind):
    assert parse_loss_scale(text, level).kind == kind


@pytest.mark.parametrize("text", ["static:0.5", "static:x", "bogus"])
def test_parse_loss_scale_rejects(text):
    with pytest.raises(UsageError):
        parse_loss_scale(text, "O2")
