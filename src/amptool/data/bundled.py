"""The bundled synthetic tasks, made from fixed seeds: ``tokens`` (which keyword a token
sequence holds), ``sequences`` (next-token prediction) and ``boxes`` (one rectangle to box
and classify). Data sources ``tokens``, ``sequences`` and ``boxes`` read them
(``amptool.data.sources``)."""
from __future__ import annotations

import numpy as np

TOKENS_SEED = 20261201


def tokens_dataset(n: int = 2048, length: int = 32, vocab: int = 64, classes: int = 4):
    """The bundled text task: sequences of filler tokens in which exactly one of ``classes``
    keyword tokens (ids 1..classes) appears one to three times; the label is which keyword.
    A model has to find the keyword anywhere in the sequence: learnable, not trivial."""
    rng = np.random.RandomState(TOKENS_SEED)
    ids = rng.randint(classes + 1, vocab, size=(n, length)).astype(np.int32)
    y = rng.randint(0, classes, size=n).astype(np.int32)
    for row in range(n):
        where = rng.choice(length, size=rng.randint(1, 4), replace=False)
        ids[row, where] = y[row] + 1
    return {"tokens": ids}, y


SEQUENCES_SEED = 20261202


def sequences_dataset(n: int = 2048, length: int = 32, vocab: int = 32):
    """The bundled next-token task: each row counts through the tokens 1..vocab-1 (wrapping
    around) from a random start with a step of 1, 2, 3 or 5 of its own; ``y`` is ``tokens``
    shifted by one (the next token at every position). Past the first position the step
    shows in the earlier tokens: a model has to look back, through its causal attention,
    to predict the next one (the first target is one of four guesses)."""
    rng = np.random.RandomState(SEQUENCES_SEED)
    start = rng.randint(0, vocab - 1, size=(n, 1))
    step = np.array([1, 2, 3, 5])[rng.randint(0, 4, size=(n, 1))]
    seq = (1 + (start + step * np.arange(length + 1)) % (vocab - 1)).astype(np.int32)
    return {"tokens": seq[:, :-1]}, seq[:, 1:]


BOXES_SEED = 20261203
BOX_CLASSES = ("wide", "tall", "square")
"""The classes of the ``boxes`` task, by the rectangle's shape."""


def boxes_dataset(n: int = 2048, size: int = 32) -> dict:
    """The bundled detection task: ``x`` (N, 1, size, size) float32 images in [0, 1], each
    noise with one bright rectangle; ``y_box`` (N, 4) float32 its box (x0, y0, x1, y1 as
    fractions of the image side, x1 and y1 exclusive); ``y_cls`` (N,) int32 its shape:
    0 wide (width >= 1.5 height), 1 tall (height >= 1.5 width), 2 square-ish."""
    rng = np.random.RandomState(BOXES_SEED)
    x = rng.uniform(0.0, 0.35, size=(n, 1, size, size)).astype(np.float32)
    cls = rng.randint(0, 3, size=n).astype(np.int32)
    box = np.zeros((n, 4), np.float32)
    for row in range(n):
        long_side = rng.randint(9, 21)
        short = rng.randint(4, max(5, int(long_side / 1.5) + 1))
        square = rng.randint(6, 17)
        w, h = ((long_side, short), (short, long_side), (square, square))[cls[row]]
        if cls[row] == 2:
            h = min(size - 1, max(4, w + rng.randint(-1, 2)))
        x0, y0 = rng.randint(0, size - w + 1), rng.randint(0, size - h + 1)
        x[row, 0, y0:y0 + h, x0:x0 + w] = rng.uniform(0.65, 1.0)
        box[row] = (x0, y0, x0 + w, y0 + h)
    return {"x": x, "y_box": box / size, "y_cls": cls}
