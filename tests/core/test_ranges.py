"""The range pass on a planted network: a block whose own construct sums three branches
past fp16's range while every leaf stays inside it."""
import numpy as np
import pytest

from amptool.policy import make_policy
from amptool.ranges import FP16_MAX, first_overflow, measure_ranges, range_candidates


def _branchy():
    import mindspore as ms
    from mindspore import nn

    class Branches(nn.Cell):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Dense(4, 4), nn.Dense(4, 4), nn.Dense(4, 4)

        def construct(self, x):
            return self.a(x) + self.b(x) + self.c(x)  # each < 65504, the sum is not

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.block = Branches()
            self.norm = nn.LayerNorm((4,))
            self.head = nn.Dense(4, 3)
            self.tiny = nn.Dense(4, 4)

        def construct(self, x):
            return self.head(self.norm(self.block(x))), self.tiny(x)

    ms.set_seed(0)  # every build gets the same weights
    net = Net()
    rng = np.random.default_rng(0)
    for name, dense in (("a", net.block.a), ("b", net.block.b), ("c", net.block.c)):
        dense.weight.set_data(ms.Tensor(np.diag([25000.0, 24000.0, 23000.0, 22000.0])
                                        .astype(np.float32)))
        dense.bias.set_data(ms.Tensor(np.zeros(4, np.float32)))
    net.tiny.weight.set_data(ms.Tensor((rng.standard_normal((4, 4)) * 1e-7).astype(np.float32)))
    net.tiny.bias.set_data(ms.Tensor(np.zeros(4, np.float32)))
    return net


def _x():
    return np.ones((2, 4), np.float32) + np.array([[0, 0.1, 0.2, 0.3]], np.float32)


def test_the_block_is_the_candidate_not_its_leaves():
    ranges = {r.path: r for r in measure_ranges(_branchy(), [[_x()]])}
    assert ranges["block.a"].out_max == pytest.approx(22000 * 1.3, rel=1e-6)  # < 65504
    assert ranges["block"].out_max > FP16_MAX  # 85800: the sum in Branches.construct
    assert ranges["block"].in_max == pytest.approx(1.3, rel=1e-6)
    assert ranges["tiny"].subnormal == 1.0  # every output below fp16's smallest normal
    found = [r.path for r in range_candidates(list(ranges.values()))]
    assert found == ["block", "tiny"]
    assert [r.path for r in range_candidates(list(ranges.values()), safety=2.0,
                                             subnormal_share=1.0)] == []


def test_first_overflow_names_the_block_and_keeping_it_fixes_the_network():
    import mindspore as ms

    from amptool.precision import apply_policy

    x = _x()
    fp32 = _branchy()
    low = _branchy()
    culprit = first_overflow(fp32, low, apply_policy(low, make_policy("O2")), [x])
    assert culprit["path"] == "block" and culprit["type"] == "Branches"
    assert culprit["fp32_max"] == pytest.approx(3 * 22000 * 1.3, rel=1e-5)
    assert culprit["input_finite"] is True

    kept = _branchy()
    runnable = apply_policy(kept, make_policy("O2", fp32_cells=["block"]))
    assert first_overflow(_branchy(), kept, runnable, [x]) is None
    ms.set_context(mode=ms.PYNATIVE_MODE)
    logits = runnable(ms.Tensor(x))[0].asnumpy()
    ref = fp32(ms.Tensor(x))[0].asnumpy()
    assert np.all(np.isfinite(logits))
    assert np.abs(logits - ref).max() / max(1.0, np.abs(ref).max()) < 1e-2
