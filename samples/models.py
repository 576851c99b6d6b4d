"""Sample networks. ``SAMPLES`` lists each with its input shape and class count (None for
the samples whose first output is not class logits, in ``samples/tasks.py``).

A user's own network is given as ``path/to/file.py:factory``; the factory returns an
``nn.Cell`` and declares ``input_shape`` (C, H, W) and ``num_classes`` either as
attributes of the returned cell or of the factory function itself.
"""
from __future__ import annotations


import mindspore as ms
from mindspore import nn, ops

from amptool.samples.layers import Attention
from amptool.samples.tasks import TinyCausalLM, TinyDetector


class SimpleCNN(nn.Cell):
    """Conv2d 1->32 (3x3), ReLU, Flatten, Dense to 10 classes; input 1x28x28."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv = nn.Conv2d(1, 32, 3, pad_mode="valid", has_bias=True)
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(32 * 26 * 26, num_classes)

    def construct(self, x):
        return self.fc(self.flatten(self.relu(self.conv(x))))


class LeNet5(nn.Cell):
    """LeNet-5 on 1x32x32 inputs."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid", has_bias=True)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid", has_bias=True)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(16 * 5 * 5, 120)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Dense(120, 84)
        self.relu4 = nn.ReLU()
        self.fc3 = nn.Dense(84, num_classes)

    def construct(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = self.relu3(self.fc1(self.flatten(x)))
        x = self.relu4(self.fc2(x))
        return self.fc3(x)


class ResidualBlock(nn.Cell):
    """Two 3x3 convolutions with BatchNorm and an identity or 1x1 shortcut."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, pad_mode="same")
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, pad_mode="same")
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu2 = nn.ReLU()
        self.project = stride != 1 or cin != cout
        if self.project:
            self.shortcut = nn.SequentialCell(
                nn.Conv2d(cin, cout, 1, stride=stride, pad_mode="same"), nn.BatchNorm2d(cout))

    def construct(self, x):
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = self.shortcut(x) if self.project else x
        return self.relu2(out + identity)


class SmallResNet(nn.Cell):
    """A small ResNet with BatchNorm; input 1x28x28."""

    def __init__(self, num_classes: int = 10, width: int = 16):
        super().__init__()
        self.stem = nn.SequentialCell(
            nn.Conv2d(1, width, 3, pad_mode="same"), nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = ResidualBlock(width, width, 1)
        self.layer2 = ResidualBlock(width, 2 * width, 2)
        self.layer3 = ResidualBlock(2 * width, 4 * width, 2)
        self.fc = nn.Dense(4 * width, num_classes)

    def construct(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(x.mean(axis=(2, 3)))


class Block(nn.Cell):
    """Pre-norm transformer block: LayerNorm, attention, LayerNorm, MLP."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm((dim,))
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm((dim,))
        self.fc1 = nn.Dense(dim, 2 * dim)
        self.act = nn.ReLU()
        self.fc2 = nn.Dense(2 * dim, dim)

    def construct(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class TinyTransformer(nn.Cell):
    """A tiny vision transformer: 4x4 patches of a 1x28x28 image, 2 blocks, mean pooling."""

    def __init__(self, num_classes: int = 10, dim: int = 32, depth: int = 2, heads: int = 4,
                 patch: int = 4, image: int = 28):
        super().__init__()
        self.patch = patch
        self.grid = image // patch
        self.embed = nn.Dense(patch * patch, dim)
        self.pos = ms.Parameter(ms.Tensor(
            ms.numpy.randn(1, self.grid * self.grid, dim).asnumpy() * 0.02, ms.float32), name="pos")
        self.blocks = nn.CellList([Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm((dim,))
        self.head = nn.Dense(dim, num_classes)

    def construct(self, x):
        b = x.shape[0]
        g, p = self.grid, self.patch
        x = x.reshape(b, g, p, g, p).transpose(0, 1, 3, 2, 4).reshape(b, g * g, p * p)
        x = self.embed(x) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(axis=1))


class TextClassifier(nn.Cell):
    """Token ids -> Embedding -> a small transformer encoder -> mean pooling -> Dense."""

    def __init__(self, num_classes: int = 4, vocab: int = 64, length: int = 32, dim: int = 32,
                 depth: int = 2, heads: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = ms.Parameter(ms.Tensor(
            ms.numpy.randn(1, length, dim).asnumpy() * 0.02, ms.float32), name="pos")
        self.blocks = nn.CellList([Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm((dim,))
        self.head = nn.Dense(dim, num_classes)

    def construct(self, tokens):
        x = self.embed(tokens) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(axis=1))


class L2Normalize(nn.Cell):
    """Scales features up, then divides by their L2 norm.

    The sum of squares exceeds float16's range (65504) for ordinary activations, so
    in fp16 the norm is inf and the output collapses to zero; in fp32 it is exact.
    """

    def __init__(self, gain: float = 256.0):
        super().__init__()
        self.gain = gain

    def construct(self, x):
        y = x * self.gain
        return y / ops.sqrt((y * y).sum(axis=-1, keepdims=True) + 1e-6)


class TrapMLP(nn.Cell):
    """An MLP with one fp16-unsafe layer (``norm``): healthy in fp32, broken in fp16."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(28 * 28, 128)
        self.relu1 = nn.ReLU()
        self.norm = L2Normalize()
        self.fc2 = nn.Dense(128, 64)
        self.relu2 = nn.ReLU()
        self.fc3 = nn.Dense(64, num_classes)

    def construct(self, x):
        x = self.relu1(self.fc1(self.flatten(x)))
        x = self.relu2(self.fc2(self.norm(x) * 8.0))
        return self.fc3(x)


SAMPLES = {
    # name: (network class, input shape (C, H, W), classes, what it is)
    "simplecnn": (SimpleCNN, (1, 28, 28), 10, "Conv2d 1->32, ReLU, Flatten, Dense"),
    "lenet5": (LeNet5, (1, 32, 32), 10, "LeNet-5"),
    "resnet": (SmallResNet, (1, 28, 28), 10, "small ResNet with BatchNorm"),
    "transformer": (TinyTransformer, (1, 28, 28), 10,
                    "tiny transformer classifier with LayerNorm and softmax attention"),
    "trapmlp": (TrapMLP, (1, 28, 28), 10,
                "MLP with a planted fp16-unsafe L2 normalization (for parity demos)"),
    "textcls": (TextClassifier, "tokens:-1x32:int32:0..64", 4,
                "text classifier on int32 token ids: Embedding, transformer encoder, pooling"),
    # not classifiers (no class count: their first output is not class logits)
    "causallm": (TinyCausalLM, "tokens:-1x32:int32:0..32", None,
                 "decoder-only causal language model: next-token logits (N, T, V) of int32 ids"),
    "detector": (TinyDetector, (1, 32, 32), None,
                 "detector-like network: box (N, 4), then class logits (N, 3) of one object"),
}
