"""Data sources, the held-out split and preprocessing to a model's declared input.

Every source is loaded into memory as float arrays scaled to [0, 1], converted to the
model's channels and size, then standardized with the training split's mean and std.
The split is fixed by the data alone (seed 0), so every run and every precision sees
the same validation/test images.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

import numpy as np

from amptool.errors import UsageError
from amptool.feed import (
    ArrayRows,
    ImageFiles,
    Stream,
    batches,
    image_files,
    npz_arrays,
    pipeline,
)

KINDS = ("digits", "mnist", "imagefolder", "npz", "synthetic", "tokens")
SPLIT_SEED = 0
STATS_SAMPLES = 10_000
"""Training images the standardization statistics are taken from (the first of the split)."""
STATS_BATCH = 256


@dataclass(frozen=True)
class Preprocess:
    """How raw images become model inputs; stored in run.json and every manifest."""

    height: int
    width: int
    channels: int
    mean: float
    std: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def parse_data_spec(spec: str) -> tuple[str, str]:
    kind, _, arg = spec.partition(":")
    kind = kind.lower()
    if kind not in KINDS:
        raise UsageError(f"unknown data source '{spec}'",
                         "use digits, synthetic, tokens, mnist:DIR, imagefolder:DIR or npz:FILE")
    if kind in ("mnist", "imagefolder", "npz") and not arg:
        raise UsageError(f"data source '{kind}' needs a path", f"write {kind}:PATH")
    if arg and not Path(arg).exists():
        raise UsageError(f"data path {arg} does not exist", "check the path after ':'")
    return kind, arg


def _digits() -> tuple[np.ndarray, np.ndarray]:
    with resources.as_file(resources.files("amptool.samples") / "data" / "digits.npz") as p:
        with np.load(p) as z:
            return z["x"].astype(np.float32)[:, None] / 16.0, z["y"].astype(np.int32)


def _npz(path: str) -> tuple[np.ndarray, np.ndarray]:
    arrays = npz_arrays(path)
    if "x" not in arrays or "y" not in arrays:
        raise UsageError(f"{path} lacks array 'x' or 'y' (has {', '.join(sorted(arrays))})",
                         "save images as x (N,H,W) or (N,C,H,W) and labels as y (N,)")
    x = arrays["x"]
    if x.dtype != np.uint8 and not np.issubdtype(x.dtype, np.floating):
        raise UsageError(f"{path}: images are {x.dtype}", "store x as uint8 (0-255) or floats in [0, 1]")
    return x, np.asarray(arrays["y"])


def _mnist(path: str) -> tuple[np.ndarray, np.ndarray]:
    import mindspore.dataset as ds

    try:
        data = ds.MnistDataset(path, usage="all", shuffle=False)
        xs, ys = [], []
        for image, label in data.create_tuple_iterator(output_numpy=True):
            xs.append(image)
            ys.append(label)
    except Exception as exc:
        raise UsageError(f"cannot read MNIST IDX files in {path}: {str(exc).splitlines()[0]}",
                         "point mnist: at a folder with the four *-ubyte files") from None
    return np.stack(xs).transpose(0, 3, 1, 2), np.asarray(ys)  # uint8: 1 byte a pixel


def _synthetic(shape: tuple, classes: int, n: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((n, *shape)).astype(np.float32)
    proj = rng.standard_normal((int(np.prod(shape)), classes)).astype(np.float32)
    y = (x.reshape(n, -1) @ proj).argmax(axis=1)
    return x, y


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

    def __call__(self, parts: list) -> list:
        c, h, w = self.shape
        x = _resize(_fit_channels(parts[0], c, self.source), h, w)
        if not np.all(np.isfinite(x)):
            bad = int(np.size(x) - np.isfinite(x).sum())
            raise UsageError(f"{self.source}: {bad} NaN/Inf values in the images",
                             "clean the data before training")
        if self.prep is not None:
            x = ((x - self.prep.mean) / self.prep.std).astype(np.float32)
        return [x]


def open_images(spec: str, input_shape: tuple, num_classes) -> tuple:
    """(rows, int32 labels, skipped files) of an image source, nothing decoded yet: arrays
    stay in their stored dtype (memory-mapped for an uncompressed npz), image files are
    only listed."""
    kind, arg = parse_data_spec(spec)
    _, h, w = input_shape
    skipped: list = []
    if kind == "tokens":
        raise UsageError("data source 'tokens' holds token ids, not images",
                         "train a token model on it (e.g. --model textcls)")
    if kind == "imagefolder":
        paths, y, _, skipped = image_files(arg)
        rows = ImageFiles(paths, (h, w))
    else:
        x, y = {"digits": _digits, "npz": lambda: _npz(arg), "mnist": lambda: _mnist(arg),
                "synthetic": lambda: _synthetic(input_shape, num_classes)}[kind]()
        if x.ndim not in (3, 4):
            raise UsageError(f"{spec}: images have shape {x.shape[1:]}, expected (H, W) or "
                             "(C, H, W)", "store images as (N, H, W) or (N, C, H, W)")
        rows = ArrayRows([x], images=True)
    y = np.asarray(y).reshape(-1)
    if len(rows) != len(y) or len(y) < 2:
        raise UsageError(f"{spec}: {len(rows)} images but {len(y)} labels",
                         "give one integer label per image")
    _check_labels(y, num_classes, spec)
    return rows, y.astype(np.int32), skipped


def load_raw(spec: str, input_shape: tuple, num_classes: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Every image of a (small) source in [0, 1] fitted to ``input_shape`` (C, H, W), and
    int32 labels: the whole source in memory, for tests and small tools."""
    rows, y, _ = open_images(spec, input_shape, num_classes)
    return _Fit(input_shape, spec)(rows.take(np.arange(len(y))))[0], y, spec


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


# --- networks whose inputs are not images (token ids, several inputs) -----------------

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


def _named_arrays(spec: str, names: list) -> tuple:
    kind, arg = parse_data_spec(spec)
    if kind == "tokens":
        arrays, y = tokens_dataset()
    elif kind == "npz":
        arrays = npz_arrays(arg)
        if "y" not in arrays:
            raise UsageError(f"{arg} has no labels array 'y' (has {', '.join(sorted(arrays))})",
                             "save the class labels as y (N,)")
        y = arrays.pop("y")
    else:
        raise UsageError(f"data source '{spec}' holds images, the model takes {', '.join(names)}",
                         "give npz:FILE with one array per input (named after it) and y, "
                         "or tokens")
    if len(names) == 1 and names[0] not in arrays and len(arrays) == 1:
        arrays = {names[0]: next(iter(arrays.values()))}
    missing = [n for n in names if n not in arrays]
    if missing:
        raise UsageError(f"{spec} has arrays {', '.join(sorted(arrays))}, the model takes "
                         f"{', '.join(names)}", "name the arrays after the model's inputs, plus y")
    return [arrays[n] for n in names], np.asarray(y).reshape(-1)


def open_arrays(spec: str, inputs: tuple, num_classes) -> tuple:
    """(rows giving one array per input in its declared dtype, int32 labels) of a data
    source for a network that does not take images; arrays stay as stored until read."""
    arrays, y = _named_arrays(spec, [i.name for i in inputs])
    for array, want in zip(arrays, inputs):
        shape = list(array.shape)
        if len(shape) != len(want.shape) or any(w not in (-1, h)
                                                for w, h in zip(want.shape[1:], shape[1:])):
            raise UsageError(f"{spec}: array {want.name} has shape {shape}, the model takes "
                             f"{list(want.shape)}", "store arrays of the declared shape")
    if any(len(a) != len(y) for a in arrays) or len(y) < 2:
        raise UsageError(f"{spec}: arrays hold {[len(a) for a in arrays]} samples, labels {len(y)}",
                         "store one row per sample in every array and in y")
    _check_labels(y, num_classes, spec)
    rows = ArrayRows(list(arrays), images=False, dtypes=[np.dtype(i.dtype) for i in inputs])
    return rows, y.astype(np.int32)


def _check_labels(y: np.ndarray, num_classes, source: str) -> None:
    if not np.issubdtype(y.dtype, np.integer):
        raise UsageError(f"{source}: labels are {y.dtype}, not integers", "store integer class ids")
    if num_classes and (y.min() < 0 or y.max() >= num_classes):
        raise UsageError(f"{source}: labels span {y.min()}..{y.max()}, the model has "
                         f"{num_classes} classes", "use labels 0..num_classes-1")


EVAL_BATCH = 256
"""Rows a held-out batch holds."""


@dataclass
class ModelData:
    """A data source split for a model, read on demand: ``rows`` holds every sample in its
    stored form, ``fit`` makes model inputs of them (None: fed as read)."""

    rows: object
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    preprocess: Optional[Preprocess]
    """Image standardization (None for inputs fed as they are)."""
    source: str
    fit: Optional[object] = None
    skipped: list = field(default_factory=list)
    """Image files left out as unreadable."""
    workers: int = 1
    """Pipeline workers reading ahead."""

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

    def train_stream(self, order_of, first: int, last: int):
        """One ``feed.Stream`` over epochs ``first`` .. ``last`` - 1 of the training split;
        ``order_of(epoch)`` gives an epoch's batches of positions in the split."""
        def absolute(epoch: int) -> list:
            return [self.train_idx[b] for b in order_of(epoch)]
        return Stream(self.rows, self.labels, absolute, first, last, self.fit, self.workers)

    def train_pipeline(self, index_batches: list):
        """The ``mindspore.dataset`` pipeline of ``train_batches`` (inputs, then labels)."""
        return pipeline(self.rows, self.labels, [self.train_idx[b] for b in index_batches],
                        self.fit, self.workers)

    def train_inputs(self, positions: np.ndarray) -> list:
        """The model inputs of these positions in the training split, in memory."""
        return next(iter(self.train_batches([np.asarray(positions)])))[0]

    def val_batches(self, samples: Optional[int] = None):
        """(inputs, labels) over the held-out split (its first ``samples``), in order."""
        idx = self.val_idx if samples is None else self.val_idx[:samples]
        chunks = [idx[i:i + EVAL_BATCH] for i in range(0, len(idx), EVAL_BATCH)]
        yield from batches(self.rows, self.labels, chunks, self.fit, self.workers)

    def val_inputs(self, samples: Optional[int] = None) -> tuple:
        """(inputs, labels) of the held-out split (its first ``samples``), in memory."""
        parts = list(self.val_batches(samples))
        return ([np.concatenate([p[0][i] for p in parts]) for i in range(len(parts[0][0]))],
                np.concatenate([p[1] for p in parts]))


def load_model_data(spec: str, model, val_fraction: float = 0.2,
                    preprocess: Optional[dict] = None, workers: int = 1) -> ModelData:
    """The data of ``spec`` for ``model`` (a ModelSpec), split and ready to stream. Images
    are fitted to the model's input and standardized with ``preprocess`` when given (a
    run's or manifest's), else with statistics of the training split's first
    STATS_SAMPLES images; other inputs are fed as stored, in their declared dtypes."""
    if model.input_shape is not None and parse_data_spec(spec)[0] not in ("tokens",):
        rows, y, skipped = open_images(spec, model.input_shape, model.num_classes)
        train_idx, val_idx = split_indices(len(y), val_fraction)
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
        return ModelData(rows, y, train_idx, val_idx, prep, spec, _Fit(shape, spec, prep),
                         skipped, workers)
    rows, y = open_arrays(spec, model.inputs, model.num_classes)
    train_idx, val_idx = split_indices(len(y), val_fraction)
    return ModelData(rows, y, train_idx, val_idx, None, spec, None, [], workers)


@dataclass
class Dataset:
    """An image source's splits preprocessed in memory (small data and tests)."""

    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    preprocess: Preprocess
    source: str


def load_dataset(spec: str, input_shape: tuple, num_classes: int,
                 val_fraction: float = 0.2) -> Dataset:
    """Both splits of an image source preprocessed as training does, in memory."""
    from types import SimpleNamespace

    model = SimpleNamespace(input_shape=input_shape, num_classes=num_classes, inputs=())
    data = load_model_data(spec, model, val_fraction)
    train = data.train_inputs(np.arange(len(data.train_idx)))[0]
    val_x, val_y = data.val_inputs()
    return Dataset(train, data.train_y, val_x[0], val_y, data.preprocess, spec)


def load_eval_inputs(spec: str, model, preprocess, val_fraction: float = 0.2,
                     samples=None) -> tuple:
    """(inputs, labels) of the held-out split, preprocessed as a run or manifest says."""
    data = load_model_data(spec, model, val_fraction, preprocess)
    return data.val_inputs(samples)


def load_eval_split(spec: str, preprocess: dict, num_classes: int,
                    val_fraction: float = 0.2, samples: Optional[int] = None) -> tuple:
    """The held-out split of an image source, preprocessed exactly as ``preprocess`` says."""
    from types import SimpleNamespace

    prep = Preprocess(**preprocess)
    model = SimpleNamespace(input_shape=(prep.channels, prep.height, prep.width),
                            num_classes=num_classes, inputs=())
    inputs, y = load_eval_inputs(spec, model, preprocess, val_fraction, samples)
    return inputs[0], y


def load_val_raw(spec: str, input_shape: tuple, num_classes, val_fraction: float,
                 samples: Optional[int] = None) -> tuple:
    """(images in [0, 1] fitted to ``input_shape``, labels) of the held-out split (its
    first ``samples``), not standardized: only those rows are read."""
    rows, y, _ = open_images(spec, input_shape, num_classes)
    _, val_idx = split_indices(len(y), val_fraction)
    if samples is not None:
        val_idx = val_idx[:samples]
    if isinstance(rows, ImageFiles):
        rows = ImageFiles(rows.paths, tuple(input_shape[1:]))
    return _Fit(input_shape, spec)(rows.take(val_idx))[0], y[val_idx]
