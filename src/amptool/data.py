"""Data sources, the held-out split and preprocessing to a model's declared input.

Every source is loaded into memory as float arrays scaled to [0, 1], converted to the
model's channels and size, then standardized with the training split's mean and std.
The split is fixed by the data alone (seed 0), so every run and every precision sees
the same validation/test images.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from amptool.errors import UsageError

KINDS = ("digits", "mnist", "imagefolder", "npz", "synthetic", "tokens")
SPLIT_SEED = 0


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


@dataclass
class Dataset:
    """Preprocessed splits ready for the model."""

    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    preprocess: Preprocess
    source: str


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
    try:
        with np.load(path, allow_pickle=False) as z:
            if "x" not in z or "y" not in z:
                raise UsageError(f"{path} lacks array 'x' or 'y' (has {', '.join(z.files)})",
                                 "save images as x (N,H,W) or (N,C,H,W) and labels as y (N,)")
            x, y = z["x"], z["y"]
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"cannot read {path} as .npz: {exc}", "give a file from numpy.savez") from None
    if x.dtype == np.uint8:
        x = x.astype(np.float32) / 255.0
    return x.astype(np.float32), y


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
    x = np.stack(xs).astype(np.float32).transpose(0, 3, 1, 2) / 255.0
    return x, np.asarray(ys)


def _imagefolder(path: str, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    import mindspore.dataset as ds
    from mindspore.dataset import vision

    try:
        data = ds.ImageFolderDataset(path, decode=True, shuffle=False)
        data = data.map(operations=[vision.Resize(size)], input_columns="image")
        xs, ys = [], []
        for image, label in data.create_tuple_iterator(output_numpy=True):
            xs.append(image if image.ndim == 3 else image[..., None])
            ys.append(label)
    except Exception as exc:
        raise UsageError(f"cannot read images in {path}: {str(exc).splitlines()[0]}",
                         "point imagefolder: at a folder of class sub-folders of images") from None
    if not xs:
        raise UsageError(f"no images found in {path}", "put images in one sub-folder per class")
    x = np.stack(xs).astype(np.float32).transpose(0, 3, 1, 2) / 255.0
    return x, np.asarray(ys)


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


def _resize(x: np.ndarray, height: int, width: int) -> np.ndarray:
    if x.shape[2:] == (height, width):
        return x
    import mindspore as ms
    from mindspore import ops

    out = ops.interpolate(ms.Tensor(x), size=(height, width), mode="bilinear",
                          align_corners=False)
    return out.asnumpy().astype(np.float32)


def load_raw(spec: str, input_shape: tuple, num_classes: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Images in [0, 1] fitted to ``input_shape`` (C, H, W) and int32 labels."""
    kind, arg = parse_data_spec(spec)
    c, h, w = input_shape
    if kind == "tokens":
        raise UsageError("data source 'tokens' holds token ids, not images",
                         "train a token model on it (e.g. --model textcls)")
    if kind == "digits":
        x, y = _digits()
    elif kind == "npz":
        x, y = _npz(arg)
    elif kind == "mnist":
        x, y = _mnist(arg)
    elif kind == "imagefolder":
        x, y = _imagefolder(arg, (h, w))
    else:
        x, y = _synthetic(input_shape, num_classes)
    source = spec
    y = np.asarray(y).reshape(-1)
    if len(x) != len(y) or len(x) < 2:
        raise UsageError(f"{source}: {len(x)} images but {len(y)} labels",
                         "give one integer label per image")
    _check_labels(y, num_classes, source)
    if not np.all(np.isfinite(x)):
        bad = int(np.size(x) - np.isfinite(x).sum())
        raise UsageError(f"{source}: {bad} NaN/Inf values in the images",
                         "clean the data before training")
    x = _resize(_fit_channels(x, c, source), h, w)
    return x, y.astype(np.int32), source


def split_indices(n: int, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    if not 0.0 < val_fraction < 1.0:
        raise UsageError(f"validation fraction {val_fraction} is outside (0, 1)",
                         "use e.g. 0.2")
    order = np.random.RandomState(SPLIT_SEED).permutation(n)
    n_val = max(1, int(round(n * val_fraction)))
    return order[n_val:], order[:n_val]


def load_dataset(spec: str, input_shape: tuple, num_classes: int,
                 val_fraction: float = 0.2) -> Dataset:
    x, y, source = load_raw(spec, input_shape, num_classes)
    train_idx, val_idx = split_indices(len(x), val_fraction)
    mean = float(x[train_idx].mean())
    std = float(x[train_idx].std()) or 1.0
    prep = Preprocess(input_shape[1], input_shape[2], input_shape[0], mean, std)
    norm = ((x - mean) / std).astype(np.float32)
    return Dataset(norm[train_idx], y[train_idx], norm[val_idx], y[val_idx], prep, source)


def load_eval_split(spec: str, preprocess: dict, num_classes: int,
                    val_fraction: float = 0.2, samples: int | None = None):
    """The held-out split of ``spec`` preprocessed exactly as a manifest says."""
    prep = Preprocess(**preprocess)
    x, y, _ = load_raw(spec, (prep.channels, prep.height, prep.width), num_classes)
    _, val_idx = split_indices(len(x), val_fraction)
    if samples is not None:
        val_idx = val_idx[:samples]
    return ((x[val_idx] - prep.mean) / prep.std).astype(np.float32), y[val_idx]


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
        arrays, y = _npz_arrays(arg)
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


def _npz_arrays(path: str) -> tuple:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:
        raise UsageError(f"cannot read {path} as .npz: {exc}", "give a file from numpy.savez") from None
    if "y" not in arrays:
        raise UsageError(f"{path} has no labels array 'y' (has {', '.join(sorted(arrays))})",
                         "save the class labels as y (N,)")
    return arrays, arrays.pop("y")


def load_arrays(spec: str, inputs: tuple, num_classes) -> tuple:
    """(one array per input, fitted to its declared dtype; int32 labels) of a data source."""
    arrays, y = _named_arrays(spec, [i.name for i in inputs])
    fitted = []
    for array, want in zip(arrays, inputs):
        shape = list(array.shape)
        if len(shape) != len(want.shape) or any(w not in (-1, h)
                                                for w, h in zip(want.shape[1:], shape[1:])):
            raise UsageError(f"{spec}: array {want.name} has shape {shape}, the model takes "
                             f"{list(want.shape)}", "store arrays of the declared shape")
        fitted.append(array.astype(np.dtype(want.dtype)))
    if any(len(a) != len(y) for a in fitted) or len(y) < 2:
        raise UsageError(f"{spec}: arrays hold {[len(a) for a in fitted]} samples, labels {len(y)}",
                         "store one row per sample in every array and in y")
    _check_labels(y, num_classes, spec)
    return fitted, y.astype(np.int32)


def _check_labels(y: np.ndarray, num_classes, source: str) -> None:
    if not np.issubdtype(y.dtype, np.integer):
        raise UsageError(f"{source}: labels are {y.dtype}, not integers", "store integer class ids")
    if num_classes and (y.min() < 0 or y.max() >= num_classes):
        raise UsageError(f"{source}: labels span {y.min()}..{y.max()}, the model has "
                         f"{num_classes} classes", "use labels 0..num_classes-1")


@dataclass
class ModelData:
    """Training and held-out inputs for any signature: one array per model input."""

    train: list
    train_y: np.ndarray
    val: list
    val_y: np.ndarray
    preprocess: "Preprocess | None"
    """Image standardization (None for inputs fed as they are)."""
    source: str


def load_model_data(spec: str, model, val_fraction: float = 0.2) -> ModelData:
    """The data of ``spec`` for ``model`` (a ModelSpec): images are preprocessed as
    ``load_dataset`` does; other inputs are fed as they are, split the same way."""
    if model.input_shape is not None and parse_data_spec(spec)[0] not in ("tokens",):
        ds = load_dataset(spec, model.input_shape, model.num_classes, val_fraction)
        return ModelData([ds.train_x], ds.train_y, [ds.val_x], ds.val_y, ds.preprocess, ds.source)
    arrays, y = load_arrays(spec, model.inputs, model.num_classes)
    train_idx, val_idx = split_indices(len(y), val_fraction)
    return ModelData([a[train_idx] for a in arrays], y[train_idx], [a[val_idx] for a in arrays],
                     y[val_idx], None, spec)


def load_eval_inputs(spec: str, model, preprocess, val_fraction: float = 0.2,
                     samples=None) -> tuple:
    """(inputs, labels) of the held-out split, preprocessed as a run or manifest says."""
    if preprocess is not None:
        x, y = load_eval_split(spec, preprocess, model.num_classes, val_fraction, samples)
        return [x], y
    data = load_model_data(spec, model, val_fraction)
    return [v[:samples] for v in data.val], data.val_y[:samples]
