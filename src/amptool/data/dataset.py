"""A data source split for a model and made into its inputs, a batch at a time.

Rows of a source (``amptool.data.sources``) stream through ``amptool.data.feed``'s pipeline: images
scaled to [0, 1] are converted to the model's channels and size, then standardized with
statistics of the training split's first STATS_SAMPLES images; other inputs are fed as
stored. The split is fixed by the data alone (seed 0), so every run and every precision
sees the same validation/test rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from amptool.data.feed import ImageFiles, Stream, at_epochs, batches, pipeline
from amptool.data.rows import Targets
from amptool.data.sources import (SEQUENCE_KINDS, check_rows, class_labels, open_arrays,
                                  open_images, parse_data_spec)
from amptool.documents.manifest import Preprocess
from amptool.errors import UsageError
from amptool.network.losses import default_loss

SPLIT_SEED = 0
STATS_SAMPLES = 10_000
"""Training images the standardization statistics are taken from (the first of the split)."""
STATS_BATCH = 256


def _fit_channels(x: np.ndarray, channels: int, source: str) -> np.ndarray:
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4:
        raise UsageError(f"{source}: images have shape {x.shape[1:]}, expected (H, W) or (C, H, W)",
                         "store images as (N, H, W) or (N, C, H, W)")
    have = x.shape[1]
    if have == channels:
        return x
    if have == 3 and channels == 1:
        return x.mean(axis=1, keepdims=True)
    if have == 1 and channels == 3:
        return np.repeat(x, 3, axis=1)
    raise UsageError(f"{source}: images have {have} channels, the model takes {channels}",
                     "give 1- or 3-channel images, or a model for this data")


RESIZE_PLANES = 256
"""Image planes resized in one ``vision.Resize`` call (OpenCV takes up to 512 channels)."""


def _resize(x: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of (N, C, H, W) float images by MindSpore's ``vision.Resize``
    (half-pixel centres, as ``ops.interpolate(align_corners=False)``): the batch's planes
    go through as the channels of one image, RESIZE_PLANES at a time. It runs in the
    pipeline's worker threads, where MindSpore ops cannot."""
    if x.shape[2:] == (height, width):
        return x
    from mindspore.dataset import vision

    resize = vision.Resize((height, width))
    planes = np.ascontiguousarray(x, np.float32).reshape(-1, *x.shape[2:])
    out = np.empty((len(planes), height, width), np.float32)
    for start in range(0, len(planes), RESIZE_PLANES):
        part = planes[start:start + RESIZE_PLANES]
        done = resize(np.ascontiguousarray(part.transpose(1, 2, 0)))
        out[start:start + len(part)] = done.reshape(height, width, -1).transpose(2, 0, 1)
    return out.reshape(*x.shape[:2], height, width)


class _Fit:
    """Raw rows (float images in [0, 1]) to the model's input: channels, size and, once
    the statistics are known, standardization. Picklable, used by pipeline workers."""

    def __init__(self, shape: tuple, source: str, prep: Optional[Preprocess] = None):
        self.shape, self.source, self.prep = shape, source, prep

    def __call__(self, parts: list, change=None) -> list:
        """``change``: applied to the fitted-size images before standardization."""
        c, h, w = self.shape
        x = _resize(_fit_channels(parts[0], c, self.source), h, w)
        if not np.all(np.isfinite(x)):
            bad = int(np.size(x) - np.isfinite(x).sum())
            raise UsageError(f"{self.source}: {bad} NaN/Inf values in the images",
                             "clean the data before training")
        if change is not None:
            x = change(x)
        if self.prep is not None:
            x = ((x - self.prep.mean) / self.prep.std).astype(np.float32)
        return [x]


AUGMENTS = ("crop", "flip")


def parse_augment(value) -> tuple:
    """``--augment``: a comma-separated choice of AUGMENTS, or a list of them (a config
    file's); None, '' or []: none."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    if value is not None and not isinstance(value, str):
        raise UsageError(f"augment must be a comma-separated text or a list of "
                         f"{' and/or '.join(AUGMENTS)} (got {value!r})", "fix --augment")
    kinds = tuple(dict.fromkeys(k.strip().lower() for k in (value or "").split(",") if k.strip()))
    unknown = [k for k in kinds if k not in AUGMENTS]
    if unknown:
        raise UsageError(f"unknown augmentation {', '.join(unknown)} (use "
                         f"{' and/or '.join(AUGMENTS)}, e.g. crop,flip)", "fix --augment")
    return kinds


class Augment:
    """Training-only augmentation of images at the model's size, in [0, 1], before
    standardization: ``crop`` takes an H x W window at a random offset of the image
    zero-padded by an eighth of each side (at least 1 pixel), ``flip`` mirrors half the
    images left to right. Each image's draws are fixed by (seed, epoch, row): a resumed
    run, several workers and any batching make the same images."""

    def __init__(self, kinds: tuple, seed: int):
        self.kinds, self.seed = kinds, seed

    def __call__(self, x: np.ndarray, idx: np.ndarray, epoch: int) -> np.ndarray:
        n, _, h, w = x.shape
        ph, pw = max(1, h // 8), max(1, w // 8)
        src = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if "crop" in self.kinds else x
        out = np.empty_like(x)
        for r, row in enumerate(np.asarray(idx).tolist()):
            draw = np.random.default_rng([self.seed, epoch, row])
            dy, dx = (int(v) for v in draw.integers(0, (2 * ph + 1, 2 * pw + 1)))
            image = src[r, :, dy:dy + h, dx:dx + w] if "crop" in self.kinds else src[r]
            out[r] = image[..., ::-1] if "flip" in self.kinds and draw.random() < 0.5 else image
        return out


def split_indices(n: int, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    if not 0.0 < val_fraction < 1.0:
        raise UsageError(f"validation fraction {val_fraction} is outside (0, 1)",
                         "use e.g. 0.2")
    order = np.random.RandomState(SPLIT_SEED).permutation(n)
    n_val = max(1, int(round(n * val_fraction)))
    return order[n_val:], order[:n_val]


def _statistics(rows, idx: np.ndarray, fit: _Fit, workers: int) -> tuple:
    """Mean and std of the fitted images of ``idx`` (at most STATS_SAMPLES of them), read
    a batch at a time and combined in float64."""
    idx = np.asarray(idx[:STATS_SAMPLES])
    count, mean, m2 = 0, 0.0, 0.0
    chunks = [idx[i:i + STATS_BATCH] for i in range(0, len(idx), STATS_BATCH)]
    for (x,), _ in batches(rows, np.zeros(len(rows), np.int32), chunks, fit, workers):
        x = x.astype(np.float64).ravel()
        n, m = x.size, float(x.mean())
        delta = m - mean
        total = count + n
        mean += delta * n / total
        m2 += float(((x - m) ** 2).sum()) + delta * delta * count * n / total
        count = total
    std = float(np.sqrt(m2 / count)) if count else 0.0
    return float(mean), std or 1.0


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int, shard: tuple[int, int] = (0, 1)):
    """Index batches of one epoch: a permutation fixed by (seed, epoch), last partial batch
    dropped so every step compiles once; ``shard`` = (rank, world) takes every world-th batch."""
    order = np.random.RandomState((seed * 100003 + epoch) % (2**31)).permutation(n)
    rank, world = shard
    steps = n // (batch_size * world)
    if steps == 0:
        raise UsageError(f"batch size {batch_size} x {world} worker(s) exceeds the "
                         f"{n} training samples", "lower --batch-size")
    for s in range(steps):
        start = (s * world + rank) * batch_size
        yield order[start:start + batch_size]


EVAL_BATCH = 256
"""Rows a held-out batch holds."""


@dataclass
class ModelData:
    """A data source split for a model, read on demand: ``rows`` holds every sample in its
    stored form, ``fit`` makes model inputs of them (None: fed as read)."""

    rows: Any
    labels: Any
    """int32 class labels (N,), or a ``feed.Targets`` of the loss's targets."""
    train_idx: np.ndarray
    val_idx: np.ndarray
    preprocess: Optional[Preprocess]
    """Image standardization (None for inputs fed as they are)."""
    source: str
    fit: Optional[Callable] = None
    skipped: list = field(default_factory=list)
    """Image files left out as unreadable."""
    workers: int = 1
    """Pipeline workers reading ahead."""
    loss: Any = None
    """The ``losses.LossSpec`` the targets fit (None: not decided, targets as stored)."""
    target_names: tuple = ("y",)
    """The data arrays the targets come from, in order."""

    @property
    def train_y(self) -> np.ndarray:
        return self.labels[self.train_idx]

    @property
    def val_y(self) -> np.ndarray:
        return self.labels[self.val_idx]

    def train_batches(self, index_batches: list):
        """(inputs, labels) for each batch of positions in the training split, in order."""
        absolute = [self.train_idx[b] for b in index_batches]
        yield from batches(self.rows, self.labels, absolute, self.fit, self.workers)

    def train_stream(self, order_of, first: int, last: int, augment: Optional[Augment] = None):
        """One ``feed.Stream`` over epochs ``first`` .. ``last`` - 1 of the training split;
        ``order_of(epoch)`` gives an epoch's batches of positions in the split."""
        def absolute(epoch: int) -> list:
            return [self.train_idx[b] for b in order_of(epoch)]
        return Stream(self.rows, self.labels, absolute, first, last, self.fit, self.workers,
                      augment)

    def train_pipeline(self, index_batches: list, augment: Optional[Augment] = None,
                       epoch: int = 0):
        """The ``mindspore.dataset`` pipeline of ``train_batches`` of ``epoch`` (inputs,
        then labels)."""
        return pipeline(self.rows, self.labels, [self.train_idx[b] for b in index_batches],
                        self.fit, self.workers, at_epochs(augment, lambda k: epoch))

    def train_inputs(self, positions: np.ndarray, augment: Optional[Augment] = None,
                     epoch: int = 0) -> list:
        """The model inputs of these positions in the training split, in memory, as a
        training step of ``epoch`` reads them (``augment``: that run's augmentation)."""
        absolute = [self.train_idx[np.asarray(positions)]]
        read = batches(self.rows, self.labels, absolute, self.fit, self.workers,
                       at_epochs(augment, lambda k: epoch))
        return next(iter(read))[0]

    def val_batches(self, samples: Optional[int] = None):
        """(inputs, labels) over the held-out split (its first ``samples``), in order."""
        idx = self.val_idx if samples is None else self.val_idx[:samples]
        chunks = [idx[i:i + EVAL_BATCH] for i in range(0, len(idx), EVAL_BATCH)]
        yield from batches(self.rows, self.labels, chunks, self.fit, self.workers)

    def val_inputs(self, samples: Optional[int] = None) -> tuple:
        """(inputs, labels) of the held-out split (its first ``samples``), in memory."""
        parts = list(self.val_batches(samples))
        inputs = [np.concatenate([p[0][i] for p in parts]) for i in range(len(parts[0][0]))]
        if isinstance(parts[0][1], list):  # several targets: one array each
            return inputs, [np.concatenate([p[1][i] for p in parts])
                            for i in range(len(parts[0][1]))]
        return inputs, np.concatenate([p[1] for p in parts])


def augmenting(text: Optional[str], seed: int, data: "ModelData") -> Optional[Augment]:
    """A run's ``--augment`` for ``data`` (None when it asks for none); refused for inputs
    fed as stored (token ids, several inputs)."""
    kinds = parse_augment(text)
    if not kinds:
        return None
    if data.preprocess is None:
        raise UsageError(f"--augment changes images; {data.source} feeds the model's inputs "
                         "as stored", "drop --augment, or train on an image source")
    return Augment(kinds, seed)


def load_model_data(spec: str, model, val_fraction: float = 0.2,
                    preprocess: Optional[dict] = None, workers: int = 1, loss=None,
                    strict: bool = False) -> ModelData:
    """The data of ``spec`` for ``model`` (a ModelSpec), split and ready to stream. Images
    are fitted to the model's input and standardized with ``preprocess`` when given (a
    run's or manifest's), else with statistics of the training split's first
    STATS_SAMPLES images; other inputs are fed as stored, in their declared dtypes.

    Targets are the ones ``loss`` (a ``losses.LossSpec``) takes; without one, class labels
    when ``losses.default_loss`` picks cross-entropy, else (``strict``: a UsageError asking
    for ``--loss``) the data's targets as stored. ``ModelData.loss`` is the loss they fit."""
    declared = loss.targets if loss is not None and loss.declared else None
    image = model.input_shape is not None and parse_data_spec(spec)[0] not in SEQUENCE_KINDS
    if image:
        rows, (names, ys), skipped = open_images(spec, model.input_shape, model.num_classes,
                                                 declared, labels=False)
    else:
        (rows, (names, ys)), skipped = open_arrays(spec, model.inputs, model.num_classes,
                                                   declared, labels=False), []
    loss, labels = _fit_targets(spec, model, rows, names, ys, loss, strict, image)
    train_idx, val_idx = split_indices(len(rows), val_fraction)
    if not image:
        return ModelData(rows, labels, train_idx, val_idx, None, spec, None, [], workers,
                         loss, names)
    c, h, w = model.input_shape
    if preprocess is not None:
        prep = Preprocess(**preprocess)
        shape = (prep.channels, prep.height, prep.width)
        if isinstance(rows, ImageFiles):
            rows = ImageFiles(rows.paths, shape[1:])
    else:
        shape = model.input_shape
        mean, std = _statistics(rows, train_idx, _Fit(shape, spec), workers)
        prep = Preprocess(h, w, c, mean, std)
    return ModelData(rows, labels, train_idx, val_idx, prep, spec, _Fit(shape, spec, prep),
                     skipped, workers, loss, names)


def _fit_targets(spec: str, model, rows, names: tuple, ys: list, loss, strict: bool,
                 image: bool) -> tuple:
    """(the loss, the labels ModelData streams: int32 class labels or a ``Targets``)."""
    counts = [len(rows)] if image else [len(a) for a in rows.arrays]
    if loss is None:
        try:
            loss = default_loss(model.num_classes, ys, getattr(model, "name", "the model"), spec)
        except UsageError:
            if strict:
                raise
            check_rows(spec, counts, names, ys)
            return None, Targets(ys)
    if loss.classifier:
        if len(ys) > 1:
            raise UsageError(f"{spec} gives the targets {', '.join(names)}; loss {loss.name} "
                             "takes one array of class labels (y)", "save the labels as y (N,)")
        return loss, class_labels(spec, counts, ys[0], model.num_classes, image)
    if loss.kind != "factory" and len(ys) != 1:
        raise UsageError(f"{spec} gives the targets {', '.join(names)}; loss {loss.name} takes "
                         "one target (y)", "save one target array y, or pass a --loss "
                         "factory that takes them all")
    check_rows(spec, counts, names, ys)
    return loss, Targets(ys, [loss.target_dtype(y.dtype) for y in ys])


def load_eval_inputs(spec: str, model, preprocess, val_fraction: float = 0.2,
                     samples=None, loss=None) -> tuple:
    """(inputs, labels) of the held-out split, preprocessed as a run or manifest says
    (``loss``: the run's ``LossSpec``, whose targets the labels are)."""
    data = load_model_data(spec, model, val_fraction, preprocess, loss=loss)
    return data.val_inputs(samples)


def load_val_raw(spec: str, input_shape: tuple, num_classes, val_fraction: float,
                 samples: Optional[int] = None, loss=None) -> tuple:
    """(images in [0, 1] fitted to ``input_shape``, target names, target arrays) of the
    held-out split (its first ``samples``), not standardized: only those rows are read.
    With a ``loss`` that is not class cross-entropy the targets are its own, as stored;
    else the class labels (``y``)."""
    if loss is not None and not loss.classifier:
        declared = loss.targets if loss.declared else None
        rows, (names, ys), _ = open_images(spec, input_shape, None, declared, labels=False)
        y = Targets(ys)
    else:
        rows, y, _ = open_images(spec, input_shape, num_classes)
        names = ("y",)
    _, val_idx = split_indices(len(rows), val_fraction)
    if samples is not None:
        val_idx = val_idx[:samples]
    if isinstance(rows, ImageFiles):
        rows = ImageFiles(rows.paths, tuple(input_shape[1:]))
    targets = y[val_idx] if isinstance(y, Targets) else [y[val_idx]]
    return _Fit(input_shape, spec)(rows.take(val_idx))[0], tuple(names), targets
