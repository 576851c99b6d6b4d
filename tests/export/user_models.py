"""User models given as file.py:factory in the export tests."""
import mindspore as ms
from mindspore import nn, ops


class WideMLP(nn.Cell):
    """784 -> 512 -> 10: about 1.6 MB of fp32 weights."""

    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(784, 512)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(512, 10)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(self.flatten(x))))


class CumSumNet(nn.Cell):
    """Uses CumSum, which MindSpore cannot convert to ONNX."""

    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(784, 10)

    def construct(self, x):
        return ops.cumsum(self.fc(self.flatten(x)), 1)


def wide_mlp():
    net = WideMLP()
    net.input_shape, net.num_classes = (1, 28, 28), 10
    return net


def cumsum_net():
    net = CumSumNet()
    net.input_shape, net.num_classes = (1, 28, 28), 10
    return net


def save_init_checkpoint(factory, path):
    ms.set_seed(0)
    ms.save_checkpoint(factory(), str(path))
    return path
