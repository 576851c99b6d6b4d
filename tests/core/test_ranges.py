"""The range pass on a planted network: a block whose own construct sums three branches
past fp16's range while every leaf stays inside it."""
import numpy as np
import pytest

from amptool.precision.forensics import first_overflow
from amptool.precision.policy import make_policy
from amptool.precision.ranges import FP16_MAX, measure_ranges, outside_policy, range_candidates


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
    assert ranges["block.a"].local_error < 1e-2  # each branch computes fine in fp16
    assert ranges["block"].local_error == float("inf")  # the sum does not
    assert ranges["norm"].local_error == float("inf")  # 85800 cast to fp16 on its way in
    assert ranges["head"].local_error < 1e-2
    found = [r.path for r in range_candidates(list(ranges.values()))]
    assert found == ["block", "norm", "tiny"]
    assert [r.path for r in range_candidates(list(ranges.values()), safety=2.0,
                                             subnormal_share=1.0, local_error=None)] == []
    # at O2 LayerNorm is kept in fp32 already: the range pass adds the block and tiny only
    assert [r.path for r in outside_policy(_branchy(), [ranges[p] for p in found],
                                           make_policy("O2"))] == ["block", "tiny"]


def test_first_overflow_names_the_block_and_keeping_it_fixes_the_network():
    import mindspore as ms

    from amptool.precision.apply import apply_policy

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


def _digits(n: int = 64) -> np.ndarray:
    from smalldata import load_raw

    return load_raw("digits", (1, 28, 28), 10)[0][:n].astype(np.float32)


def test_trapmlp_norm_is_flagged_by_its_fp16_error_alone():
    """TrapMLP's norm takes and gives ordinary values; its sum of squares, inside its own
    construct, is what fp16 cannot hold."""
    import mindspore as ms

    from samples.models import TrapMLP

    ms.set_seed(0)
    ranges = {r.path: r for r in measure_ranges(TrapMLP(), [[_digits()]])}
    assert ranges["norm"].out_max < 100 and ranges["norm"].in_max < 100
    assert ranges["norm"].local_error >= 0.5
    assert [r.path for r in range_candidates(list(ranges.values()))] == ["norm"]


def _scaled_norm_net():
    """x 1e5, then LayerNorm: the scale's output and the norm's input leave fp16's range."""
    import mindspore as ms
    from mindspore import nn, ops

    class Scale(nn.Cell):
        def construct(self, x):
            return x * 1e5

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.fc = nn.Dense(784, 32)
            self.scale = Scale()
            self.norm = nn.LayerNorm((32,))
            self.head = nn.Dense(32, 10)

        def construct(self, x):
            return self.head(ops.relu(self.norm(self.scale(self.fc(self.flatten(x))))))

    ms.set_seed(0)
    return Net()


def test_scaled_then_layernorm_flags_exactly_the_scale_and_the_norm():
    import mindspore as ms

    net = _scaled_norm_net()
    net.head.to_float(ms.float16)  # a setting of the user's own, which the probe must keep
    found = [r.path for r in range_candidates(measure_ranges(net, [[_digits()]]))]
    assert found == ["scale", "norm"]
    assert net.head.get_flags().get("fp16") is True
    assert not net.fc.get_flags().get("fp16") and not net.norm.get_flags().get("fp16")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    assert net.fc(ms.Tensor(_digits(2).reshape(2, -1))).dtype == ms.float32
    assert net.head(ms.Tensor(np.ones((2, 32), np.float32))).dtype == ms.float16


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["simplecnn", "resnet", "transformer"])
def test_healthy_samples_have_no_candidates(sample):
    import mindspore as ms

    from amptool.network.models import resolve_model

    ms.set_seed(0)
    spec = resolve_model(sample)
    x = _digits(16)
    ranges = measure_ranges(spec.build(), [[x]])
    assert all(r.local_error is None or r.local_error < 0.05 for r in ranges), \
        [(r.path, r.local_error) for r in ranges if r.local_error and r.local_error >= 0.05]
    assert range_candidates(ranges) == []


def _growing_chain():
    """A ``SequentialCell`` of four blocks, each multiplying by 40, then a head: the value
    crosses half of fp16's range in the third block."""
    import mindspore as ms
    from mindspore import nn

    class Grow(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(4, 4, weight_init="ones", bias_init="zeros")

        def construct(self, x):
            return self.fc(x) * 10.0  # 4 x 10 = 40 times larger, made in this construct

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.stage = nn.SequentialCell([Grow(), Grow(), Grow(), Grow()])
            self.head = nn.Dense(4, 2)

        def construct(self, x):
            return self.head(self.stage(x))

    ms.set_seed(0)
    return Net()


def test_a_chain_is_not_kept_whole_only_the_block_that_crosses_and_what_follows():
    ranges = {r.path: r for r in measure_ranges(_growing_chain(), [[np.ones((2, 4), np.float32)]])}
    assert ranges["stage"].chain and not ranges["stage.2"].chain
    assert ranges["stage.1"].out_max == pytest.approx(1600)
    assert ranges["stage.2"].out_max == pytest.approx(64000)  # >= 0.5 x 65504, input 1600
    found = [r.path for r in range_candidates(list(ranges.values()))]
    assert found == ["stage.2", "stage.3", "head"]
    # at the full range only the last block makes a value fp16 cannot hold
    assert [r.path for r in range_candidates(list(ranges.values()), safety=1.0)] == \
        ["stage.3", "head"]


def _normalized():
    """x (mean 3) -> x100 -> BatchNorm -> x1000 -> head. A fresh BatchNorm's running
    statistics (mean 0, variance 1) pass 300 through and the x1000 makes 3e5; a training
    step normalizes with the batch's statistics, and nothing passes 1e4."""
    import mindspore as ms
    from mindspore import nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(4, 4, weight_init=ms.Tensor(np.eye(4, dtype=np.float32) * 100),
                               bias_init="zeros")
            self.bn = nn.BatchNorm1d(4)
            self.grow = nn.Dense(4, 4, bias_init="zeros",
                                 weight_init=ms.Tensor(np.eye(4, dtype=np.float32) * 1000))
            self.head = nn.Dense(4, 2)

        def construct(self, x):
            return self.head(self.grow(self.bn(self.fc(x))))

    ms.set_seed(0)
    return Net()


def test_batch_statistics_measure_what_a_training_step_computes():
    net = _normalized()
    x = (np.random.default_rng(0).standard_normal((16, 4)) + 3).astype(np.float32)
    before = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
    inference = {r.path: r for r in measure_ranges(net, [[x]])}
    assert inference["grow"].out_max > FP16_MAX
    assert [r.path for r in range_candidates(list(inference.values()))] == ["grow", "head"]
    net.set_train(True)
    training = {r.path: r for r in measure_ranges(net, [[x]], batch_stats=True)}
    assert training["bn"].out_max < 4 and training["grow"].out_max < 4000
    assert range_candidates(list(training.values())) == []
    # the pass leaves the running statistics and the mode as it found them
    assert net.training and net.bn.training
    for p in net.get_parameters():
        np.testing.assert_array_equal(p.asnumpy(), before[p.name], err_msg=p.name)


def test_the_pass_puts_statistics_mode_and_context_back_when_the_network_raises():
    import mindspore as ms
    from mindspore import nn

    class Breaks(nn.Cell):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(4)

        def construct(self, x):
            self.bn(x)
            raise ValueError("planted")

    net = Breaks()
    previous = ms.get_context("mode")
    x = (np.random.default_rng(0).standard_normal((8, 4)) + 3).astype(np.float32)
    with pytest.raises(ValueError, match="planted"):
        measure_ranges(net, [[x]], batch_stats=True)
    assert not net.training and not net.bn.training and ms.get_context("mode") == previous
    np.testing.assert_array_equal(net.bn.moving_mean.asnumpy(), np.zeros(4, np.float32))
    np.testing.assert_array_equal(net.bn.moving_variance.asnumpy(), np.ones(4, np.float32))


def test_a_chain_is_not_kept_for_the_compounded_error_of_its_blocks():
    """A deep stack of blocks run alone in fp16 drifts further than any one block: that is
    no failure inside the stack (a chain computes nothing of its own). A block whose own
    construct breaks is kept."""
    from amptool.precision.ranges import CellRange

    def row(path, error, chain=False):
        return CellRange(path, "SequentialCell" if chain else "Block", 5.0, 5.0, 0.0, error, chain)

    rows = [row("features", 0.14, chain=True), row("features.0", 0.04), row("features.1", 0.08),
            row("head", 0.01)]
    assert range_candidates(rows) == []
    rows[0] = row("features", 0.14)
    assert [r.path for r in range_candidates(rows)] == ["features"]


def test_cells_a_policy_keeps_stay_fp32_inside_a_probed_cell():
    """A block holding a norm whose fp16 sum of squares overflows (inputs near 300): probed
    alone in fp16 the block breaks; with the norm kept in fp32, as a policy keeps it, it
    does not."""
    import mindspore as ms
    from mindspore import nn, ops

    class Norm(nn.Cell):
        def construct(self, x):
            return x / ops.sqrt((x * x).sum(-1, keepdims=True))

    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(4, 4, weight_init=ms.Tensor(np.eye(4, dtype=np.float32) * 100),
                               bias_init="zeros")
            self.norm = Norm()

        def construct(self, x):
            return self.norm(self.fc(x))

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.block = Block()
            self.head = nn.Dense(4, 2)

        def construct(self, x):
            return self.head(self.block(x))

    ms.set_seed(0)
    net = Net()
    x = np.array([[3.0, 1.0, 2.5, 0.5], [2.0, 3.0, 1.0, 2.8]], np.float32)
    alone = {r.path: r for r in measure_ranges(net, [[x]])}
    kept = {r.path: r for r in measure_ranges(net, [[x]], fp32_kept=(net.block.norm,))}
    assert alone["block"].local_error >= 0.1 and alone["block.norm"].local_error >= 0.1
    assert kept["block"].local_error < 0.01


def test_a_norm_whose_fp16_gradient_overflows_is_kept_and_its_forward_is_not_blamed():
    """x * rsqrt(mean(x^2)): fine forward in fp16, but on small inputs (an embedding's) the
    derivative of rsqrt, -0.5 * rsqrt^3, passes 65504; written x / sqrt(...) it does not
    at these magnitudes."""
    from mindspore import nn, ops

    class Norm(nn.Cell):
        def __init__(self, rsqrt: bool):
            super().__init__()
            self.rsqrt = rsqrt

        def construct(self, x):
            ms_ = (x * x).mean(axis=-1, keep_dims=True) + 1e-6
            return x * ops.rsqrt(ms_) if self.rsqrt else x / ops.sqrt(ms_)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.head = Norm(True), Norm(False), nn.Dense(8, 2)

        def construct(self, x):
            return self.head(self.a(x) + self.b(x))

    x = (np.random.RandomState(0).randn(6, 8) * 0.02).astype(np.float32)
    rows = {r.path: r for r in measure_ranges(Net(), [[x]])}
    assert rows["a"].grad_overflow and not rows["b"].grad_overflow
    assert rows["a"].local_error < 0.01 and rows["a"].out_max < 10  # its forward is fine
    assert [r.path for r in range_candidates(list(rows.values()))] == ["a"]


def test_first_overflow_names_the_cell_whose_construct_makes_the_nan_not_its_softmax():
    """scores + (1 - causal) * -1e9 in fp16: -1e9 is -inf there and 0 * -inf is NaN, made
    in the attention cell's own construct; the softmax after it only takes the NaN in."""
    import mindspore as ms
    from mindspore import nn

    from amptool.precision.apply import apply_policy

    class Masked(nn.Cell):
        def __init__(self):
            super().__init__()
            self.proj = nn.Dense(4, 4)
            self.softmax = nn.Softmax(axis=-1)
            self.causal = ms.Tensor(np.tril(np.ones((4, 4), np.float32)))

        def construct(self, x):
            return self.softmax(self.proj(x) + (1.0 - self.causal) * -1e9)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.attn, self.head = Masked(), nn.Dense(4, 2)

        def construct(self, x):
            return self.head(self.attn(x))

    def build():
        ms.set_seed(0)
        return Net()

    low = build()
    x = np.random.RandomState(0).randn(3, 4, 4).astype(np.float32)
    culprit = first_overflow(build(), low, apply_policy(low, make_policy("O2")), [x])
    assert culprit["path"] == "attn" and culprit["type"] == "Masked" and culprit["input_finite"]
