"""Planted networks for the range pass. ``build``: the fp16 overflow sits in a block's own
construct, three branches summed past fp16's range, each branch inside it. ``normalized``:
values pass fp16's range only through a fresh BatchNorm's running statistics. ``deep``: a
transformer whose fault sits deep in its stack of blocks. Used as model files by the
search, training and parity tests (``tests/planted_branches.py:build``)."""
from mindspore import nn


class Branches(nn.Cell):
    """Three branches summed in the block's own construct, past fp16's range; a branch
    kept for another mode is never called, so keeping every called leaf does not keep
    the block (as RepVGG's train-time blocks)."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Dense(16, 16), nn.Dense(16, 16), nn.Dense(16, 16)
        self.fused = nn.Dense(16, 16)  # used only after re-parameterisation

    def construct(self, x):
        return self.a(x) + self.b(x) + self.c(x)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(64, 16)
        self.block = Branches()
        self.norm = nn.LayerNorm((16,))
        self.head = nn.Dense(16, 10)

    def construct(self, x):
        return self.head(self.norm(self.block(self.fc(self.flatten(x)))))


def build():
    net = Net()
    for dense in (net.block.a, net.block.b, net.block.c):
        dense.weight.set_data(dense.weight * 40000.0)  # each branch stays below 65504
    return net


build.input_shape = (1, 8, 8)
build.num_classes = 10


class Normalized(nn.Cell):
    """Values that grow only through a fresh BatchNorm's running statistics (mean 0,
    variance 1, so inference mode passes them through): fc's outputs reach hundreds, x100
    after the norm passes 65504 in inference mode; a training step normalizes them with
    the batch's statistics first and stays in the hundreds."""

    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(64, 16)
        self.bn = nn.BatchNorm1d(16)
        self.grow = nn.Dense(16, 16, has_bias=False)
        self.head = nn.Dense(16, 10)

    def construct(self, x):
        return self.head(self.grow(self.bn(self.fc(self.flatten(x)))))


def normalized():
    import numpy as np
    from mindspore import Tensor

    net = Normalized()
    net.fc.weight.set_data(net.fc.weight * 1000.0)
    net.grow.weight.set_data(Tensor(np.eye(16, dtype=np.float32) * 100.0))
    return net


normalized.input_shape = (1, 8, 8)
normalized.num_classes = 10


def deep(depth: int = 8, fault: int = 6):
    """mindcv's VisionTransformer with ``depth`` blocks of tiny width whose block ``fault``
    has an MLP activation that is an L2 normalization with a large gain: its sum of squares
    passes 65504 in fp16 (the output collapses to zero) while fp32 computes it exactly."""
    from mindcv.models.vit import VisionTransformer

    from amptool.samples.models import L2Normalize

    net = VisionTransformer(image_size=16, patch_size=8, embed_dim=16, depth=depth,
                            num_heads=2, num_classes=10)
    net.blocks[fault].mlp.act = L2Normalize(gain=4096.0)
    net.input_shape, net.num_classes = (3, 16, 16), 10
    return net
