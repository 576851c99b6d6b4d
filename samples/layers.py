"""Layers the sample networks share."""
from __future__ import annotations

import math

from mindspore import nn, ops


class Attention(nn.Cell):
    """Multi-head softmax self-attention."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.qkv = nn.Dense(dim, 3 * dim)
        self.softmax = nn.Softmax(axis=-1)
        self.proj = nn.Dense(dim, dim)

    def construct(self, x):
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = self.softmax(self.masked(ops.matmul(q, k.transpose(0, 1, 3, 2)) * self.scale, n))
        out = ops.matmul(attn, v).transpose(0, 2, 1, 3).reshape(b, n, d)
        return self.proj(out)

    def masked(self, scores, n):
        """The (b, heads, n, n) scores of ``n`` positions as the softmax takes them: as they
        are here; a subclass masks them."""
        return scores
