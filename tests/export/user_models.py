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


class TriuNet(nn.Cell):
    """Uses Triu, which MindSpore cannot convert to ONNX and amptool does not rewrite."""

    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(784, 10)

    def construct(self, x):
        return ops.triu(self.fc(self.flatten(x)))


def wide_mlp():
    net = WideMLP()
    net.input_shape, net.num_classes = (1, 28, 28), 10
    return net


def triu_net():
    net = TriuNet()
    net.input_shape, net.num_classes = (1, 28, 28), 10
    return net


def save_init_checkpoint(factory, path):
    ms.set_seed(0)
    ms.save_checkpoint(factory(), str(path))
    return path


class BakedBatchNet(nn.Cell):
    """Reshapes to a batch of 2 written into the code: runs at batch 2 only."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(784, 10)

    def construct(self, x):
        return self.fc(ops.reshape(x, (2, 784)))


def baked_batch_net():
    net = BakedBatchNet()
    net.input_shape, net.num_classes = (1, 28, 28), 10
    return net
