"""The data sources: what a ``--data`` spec names, and each source's rows and labels,
opened without loading images as floats (an uncompressed npz is memory-mapped, image files
are only listed and checked) and checked against the model (shapes, labels, classes)."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np

from amptool.errors import UsageError
from amptool.feed import ArrayRows, ImageFiles, image_files, npz_arrays

KINDS = ("digits", "mnist", "imagefolder", "npz", "synthetic", "tokens")


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
