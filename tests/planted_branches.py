"""A planted network whose fp16 overflow sits in a block's own construct: three branches
summed past fp16's range, each branch inside it. Used as a model file by the search and
training tests (``tests/planted_branches.py:build``)."""
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
