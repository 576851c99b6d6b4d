"""Sample networks that are not classifiers: a small decoder-only causal language model
and a small two-output detector-like network, written the way a user would write them."""
from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from amptool.samples.layers import Attention


class RMSNorm(nn.Cell):
    """Root-mean-square normalization with a learned gain, as in Llama-style decoders."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = ms.Parameter(Tensor(np.ones(dim, np.float32)), name="weight")
        self.sqrt = ops.Sqrt()  # a primitive: MindSpore's O1 rewrite cannot take ops.sqrt

    def construct(self, x):
        return x / self.sqrt((x * x).mean(axis=-1, keep_dims=True) + self.eps) * self.weight


class CausalSelfAttention(Attention):
    """Multi-head self-attention in which a position sees itself and earlier ones only:
    -1e9 is added to the scores of later positions before the softmax."""

    def __init__(self, dim: int, heads: int, length: int):
        super().__init__(dim, heads)
        self.causal = Tensor(np.tril(np.ones((length, length), np.float32)))

    def masked(self, scores, n):
        return scores + (1.0 - self.causal[:n, :n]) * -1e9


class DecoderBlock(nn.Cell):
    """Pre-norm decoder block: RMSNorm, causal attention, RMSNorm, MLP."""

    def __init__(self, dim: int, heads: int, length: int):
        super().__init__()
        self.norm1 = RMSNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, length)
        self.norm2 = RMSNorm(dim)
        self.fc1 = nn.Dense(dim, 4 * dim)
        self.act = nn.GELU(approximate=True)
        self.fc2 = nn.Dense(4 * dim, dim)

    def construct(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class TinyCausalLM(nn.Cell):
    """Token ids (N, T) -> next-token logits (N, T, V): embedding, learned positions,
    decoder blocks with a causal mask, RMSNorm, a linear head."""

    def __init__(self, vocab: int = 32, length: int = 32, dim: int = 32, depth: int = 2,
                 heads: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = ms.Parameter(Tensor(
            np.random.RandomState(0).randn(1, length, dim).astype(np.float32) * 0.02),
            name="pos")
        self.blocks = nn.CellList([DecoderBlock(dim, heads, length) for _ in range(depth)])
        self.norm = RMSNorm(dim)
        self.head = nn.Dense(dim, vocab)

    def construct(self, tokens):
        x = self.embed(tokens) + self.pos[:, :tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class TinyDetector(nn.Cell):
    """One object per image: a convolutional trunk, then two heads: its box (x0, y0, x1, y1
    as fractions of the image, (N, 4)) and its class logits (N, classes)."""

    class_logits = (1,)
    """The outputs that are class logits: the second (the first is the box)."""

    def __init__(self, num_classes: int = 3, width: int = 16):
        super().__init__()

        def stage(cin, cout):
            return [nn.Conv2d(cin, cout, 3, pad_mode="same"), nn.BatchNorm2d(cout), nn.ReLU(),
                    nn.MaxPool2d(2, 2)]

        self.features = nn.SequentialCell(
            *stage(1, width), *stage(width, 2 * width), *stage(2 * width, 2 * width))
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(2 * width * 4 * 4, 64)
        self.relu = nn.ReLU()
        self.box = nn.Dense(64, 4)
        self.sigmoid = nn.Sigmoid()
        self.cls = nn.Dense(64, num_classes)

    def construct(self, x):
        h = self.relu(self.fc(self.flatten(self.features(x))))
        return self.sigmoid(self.box(h)), self.cls(h)
