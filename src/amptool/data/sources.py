"""The data sources: what a ``--data`` spec names, and each source's rows and labels,
opened without loading images as floats (an uncompressed npz is memory-mapped, image files
are only listed and checked) and checked against the model (shapes, labels, classes)."""
from __future__ import annotations

import zipfile
from importlib import resources
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from amptool.data.bundled import boxes_dataset, sequences_dataset, tokens_dataset
from amptool.data.feed import ImageFiles
from amptool.data.rows import ArrayRows
from amptool.errors import UsageError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
"""What MindSpore's C++ ``Decode`` reads (case-insensitive)."""
KINDS = ("digits", "mnist", "imagefolder", "npz", "synthetic", "tokens", "sequences", "boxes")
SEQUENCE_KINDS = ("tokens", "sequences")
"""Bundled sources of token ids (not images)."""
BUNDLED_KINDS = ("digits", "synthetic", "tokens", "sequences", "boxes")
"""Sources amptool carries or generates; ``KIND:N`` takes their first N samples."""


def parse_data_spec(spec: str) -> tuple[str, str]:
    kind, _, arg = spec.partition(":")
    kind = kind.lower()
    if kind not in KINDS:
        raise UsageError(f"unknown data source '{spec}'",
                         "use digits, synthetic, tokens, sequences, boxes, mnist:DIR, "
                         "imagefolder:DIR or npz:FILE")
    if kind in BUNDLED_KINDS:
        if arg and not (arg.isdigit() and int(arg) >= 2):
            raise UsageError(f"data source '{spec}': '{arg}' is not a number of samples",
                             f"write {kind} (all of it) or {kind}:N (its first N samples, "
                             "N >= 2)")
        return kind, arg
    if kind in ("mnist", "imagefolder", "npz") and not arg:
        raise UsageError(f"data source '{kind}' needs a path", f"write {kind}:PATH")
    if arg and not Path(arg).exists():
        raise UsageError(f"data path {arg} does not exist", "check the path after ':'")
    return kind, arg


def readable_here(spec: str) -> bool:
    """Whether a recorded data spec names data this machine has: a bundled source always, a
    path when it exists here."""
    kind, _, arg = spec.partition(":")
    return kind.lower() in BUNDLED_KINDS or not arg or Path(arg).exists()


def _first(spec: str, count: str, arrays: list) -> list:
    """The first ``count`` rows (all when ``count`` is empty) of each of ``arrays``, which
    hold a bundled source's samples."""
    if not count:
        return arrays
    total = len(arrays[0])
    if int(count) > total:
        raise UsageError(f"data source '{spec}' asks for {count} samples; it holds {total}",
                         f"give at most {total}")
    return [a[:int(count)] for a in arrays]


def _named_first(spec: str, count: str, arrays: dict) -> tuple:
    """(names, arrays) of ``arrays`` cut to their first ``count`` rows (``_first``)."""
    return list(arrays), _first(spec, count, list(arrays.values()))


def _digits() -> tuple[np.ndarray, np.ndarray]:
    with resources.as_file(resources.files("amptool.samples") / "data" / "digits.npz") as p:
        with np.load(p) as z:
            return z["x"].astype(np.float32)[:, None] / 16.0, z["y"].astype(np.int32)


def _npz(path: str, declared: Optional[tuple] = None) -> tuple[np.ndarray, list, list]:
    """(images x, target names, target arrays) of an image npz."""
    arrays = npz_arrays(path)
    if "x" not in arrays or not (declared or _has_targets(arrays, declared)):
        raise UsageError(f"{path} lacks array 'x' or 'y' (has {', '.join(sorted(arrays))})",
                         "save images as x (N,H,W) or (N,C,H,W) and labels as y (N,)")
    x = arrays.pop("x")
    if x.dtype != np.uint8 and not np.issubdtype(x.dtype, np.floating):
        raise UsageError(f"{path}: images are {x.dtype}",
                         "store x as uint8 (0-255) or floats in [0, 1]")
    names, ys = pick_targets(arrays, declared, f"npz:{path}")
    return x, names, ys


def _has_targets(arrays: dict, declared: Optional[tuple]) -> bool:
    if declared:
        return all(n in arrays for n in declared)
    return "y" in arrays or "y0" in arrays


def pick_targets(arrays: dict, declared: Optional[tuple], source: str) -> tuple:
    """(names, arrays) of the targets, taken out of ``arrays``: the names a loss declares,
    else ``y``, else ``y0, y1, ...`` (numbered from 0, without gaps)."""
    if declared:
        missing = [n for n in declared if n not in arrays]
        if missing:
            raise UsageError(f"{source} has arrays {', '.join(sorted(arrays))}, the loss takes "
                             f"the targets {', '.join(declared)}",
                             f"save the arrays {', '.join(missing)} in the npz")
        names = tuple(declared)
    elif "y" in arrays:
        names = ("y",)
    else:
        count = 0
        while f"y{count}" in arrays:
            count += 1
        if not count:
            raise UsageError(f"{source} has no target array y (has {', '.join(sorted(arrays))})",
                             "save the targets as y (N, ...), or y0, y1, ... for several")
        names = tuple(f"y{i}" for i in range(count))
    return names, [np.asarray(arrays.pop(n)) if not isinstance(arrays[n], np.memmap)
                   else arrays.pop(n) for n in names]


def found_targets(arrays: dict, declared: Optional[tuple], source: str) -> tuple:
    """``pick_targets`` for data whose targets are optional (parity's ready inputs): ((), [])
    when ``arrays`` holds none of them; a loss's declared targets found in part is one line."""
    if not (any(n in arrays for n in declared) if declared else _has_targets(arrays, None)):
        return (), []
    return pick_targets(arrays, declared, source)


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


def open_images(spec: str, input_shape: tuple, num_classes, declared: Optional[tuple] = None,
                labels: bool = True) -> tuple:
    """(rows, targets, skipped files) of an image source, nothing decoded: arrays in their
    stored dtype (memory-mapped for an uncompressed npz), image files only listed. ``labels``:
    the one target is int32 class labels (checked against ``num_classes``); else ``targets``
    is (names, arrays as stored) of an npz's targets (``declared``: the names a loss takes)."""
    kind, arg = parse_data_spec(spec)
    _, h, w = input_shape
    skipped: list = []
    if kind in SEQUENCE_KINDS:
        raise UsageError(f"data source '{kind}' holds token ids, not images",
                         "train a token model on it (e.g. --model "
                         f"{'textcls' if kind == 'tokens' else 'causallm'})")
    names: Sequence[str] = ("y",)
    ys: Optional[list] = None
    if kind == "boxes":  # its targets by their own names; as class labels, the shapes
        arrays = dict(zip(*_named_first(spec, arg, boxes_dataset())))
        x = arrays.pop("x")
        names, ys = pick_targets(arrays, declared or ("y_box", "y_cls"), spec)
        y = ys[-1] if labels and not declared else ys[0]
    elif kind == "imagefolder":
        paths, y, _, skipped = image_files(arg)
        rows: Union[ImageFiles, ArrayRows] = ImageFiles(paths, (h, w))
    elif kind == "npz":
        x, names, ys = _npz(arg, declared)
        y = ys[0]
    else:
        x, y = {"digits": _digits, "mnist": lambda: _mnist(arg),
                "synthetic": lambda: _synthetic(input_shape, num_classes)}[kind]()
        if kind != "mnist":
            x, y = _first(spec, arg, [x, y])
    if kind != "imagefolder":
        if x.ndim not in (3, 4):
            raise UsageError(f"{spec}: images have shape {x.shape[1:]}, expected (H, W) or "
                             "(C, H, W)", "store images as (N, H, W) or (N, C, H, W)")
        rows = ArrayRows([x], images=True)
    if not labels:
        return rows, (names, ys if ys is not None else [np.asarray(y)]), skipped
    return rows, class_labels(spec, [len(rows)], y, num_classes, images=True), skipped


def class_labels(spec: str, counts: list, y, num_classes, images: bool) -> np.ndarray:
    """The int32 class labels of a source whose inputs hold ``counts`` rows, checked: one
    integer label per sample, each below ``num_classes``."""
    y = np.asarray(y).reshape(-1)
    if images and (counts[0] != len(y) or len(y) < 2):
        raise UsageError(f"{spec}: {counts[0]} images but {len(y)} labels",
                         "give one integer label per image")
    if not images and (any(n != len(y) for n in counts) or len(y) < 2):
        raise UsageError(f"{spec}: arrays hold {counts} samples, labels {len(y)}",
                         "store one row per sample in every array and in y")
    _check_labels(y, num_classes, spec)
    return y.astype(np.int32)


def check_rows(spec: str, counts: list, names: tuple, ys: list) -> None:
    """Every input and target array holds the same number of rows, at least 2 (``counts``:
    the inputs' rows)."""
    n = counts[0]
    bad = [f"{name} {len(y)}" for name, y in zip(names, ys) if len(y) != n]
    if bad or len(set(counts)) > 1 or n < 2:
        raise UsageError(f"{spec}: inputs hold {counts} samples, targets "
                         f"{', '.join(f'{k} {len(y)}' for k, y in zip(names, ys))}",
                         "store one row per sample in every array")


# --- networks whose inputs are not images (token ids, several inputs) -----------------

def _named_arrays(spec: str, names: list, declared: Optional[tuple] = None) -> tuple:
    """(input arrays, target names, target arrays): inputs named after the model's inputs
    (or ``x`` / the one array left for a single input, or ``input0, input1, ...``),
    targets as ``pick_targets`` finds them."""
    kind, arg = parse_data_spec(spec)
    if kind in SEQUENCE_KINDS:
        arrays, y = tokens_dataset() if kind == "tokens" else sequences_dataset()
        keys, values = _named_first(spec, arg, {**arrays, "y": y})
        arrays = dict(zip(keys[:-1], values[:-1]))
        targets = (("y",), values[-1:])
    elif kind == "npz":
        arrays = npz_arrays(arg)
        if not declared and not _has_targets(arrays, declared):
            raise UsageError(f"{arg} has no labels array 'y' (has {', '.join(sorted(arrays))})",
                             "save the class labels as y (N,), or the targets as y or "
                             "y0, y1, ...")
        targets = pick_targets(arrays, declared, spec)
    else:
        raise UsageError(f"data source '{spec}' holds images, the model takes {', '.join(names)}",
                         "give npz:FILE with one array per input (named after it) and y, "
                         "tokens or sequences")
    return match_inputs(arrays, names, spec, targets=targets[0]), targets[0], targets[1]


INPUTS_RULE = ("arrays are matched to a model's inputs by the model's own input names; else, "
               "for a single input, 'x' or the one array left; else input0, input1, ... in "
               "order. Targets are the names the loss declares, else y, else y0, y1, ...")
"""The one rule ``npz`` data (training) and ``parity --inputs`` (ready inputs) follow."""


def match_inputs(arrays: dict, names: list, source: str, also: tuple = (),
                 targets: tuple = ()) -> list:
    """One array per model input out of ``arrays`` (targets already taken out), by
    ``INPUTS_RULE``; ``also``: another naming of the same inputs that is accepted too (an
    artefact graph's own names). One line naming the arrays found (``targets``: those
    taken out as targets) and the inputs when they do not match."""
    for naming in (list(names), list(also)):
        if naming and all(n in arrays for n in naming):
            return [arrays[n] for n in naming]
    if len(names) == 1 and "x" in arrays:
        return [arrays["x"]]
    if len(names) == 1 and len(arrays) == 1:
        return [next(iter(arrays.values()))]
    numbered = [f"input{i}" for i in range(len(names))]
    if all(n in arrays for n in numbered):
        return [arrays[n] for n in numbered]
    takes = ", ".join(names) + (f" (or {', '.join(also)})" if also and list(also) != list(names)
                                else "")
    found = ", ".join(sorted(arrays)) or "none"
    found += f" (targets {', '.join(targets)})" if targets else ""
    raise UsageError(f"{source} has arrays {found}, the model "
                     f"takes {takes}",
                     "name the arrays after the model's inputs (or input0, input1, ...; x for "
                     "a single input), plus the targets (y, or y0, y1, ...)")


def open_arrays(spec: str, inputs: tuple, num_classes, declared: Optional[tuple] = None,
                labels: bool = True) -> tuple:
    """(rows giving one array per input in its declared dtype, targets) of a data source
    for a network that does not take images; arrays stay as stored until read. ``labels``:
    the one target is int32 class labels; else (names, arrays as stored) of the targets
    (``declared``: the names a loss takes)."""
    arrays, names, ys = _named_arrays(spec, [i.name for i in inputs], declared)
    for array, want in zip(arrays, inputs):
        shape = list(array.shape)
        if len(shape) != len(want.shape) or any(w not in (-1, h)
                                                for w, h in zip(want.shape[1:], shape[1:])):
            raise UsageError(f"{spec}: array {want.name} has shape {shape}, the model takes "
                             f"{list(want.shape)}", "store arrays of the declared shape")
    rows = ArrayRows(list(arrays), images=False, dtypes=[np.dtype(i.dtype) for i in inputs])
    if not labels:
        return rows, (names, ys)
    return rows, class_labels(spec, [len(a) for a in arrays], ys[0], num_classes, images=False)


def _check_labels(y: np.ndarray, num_classes, source: str) -> None:
    if not np.issubdtype(y.dtype, np.integer):
        raise UsageError(f"{source}: labels are {y.dtype}, not integers", "store integer class ids")
    if num_classes and (y.min() < 0 or y.max() >= num_classes):
        raise UsageError(f"{source}: labels span {y.min()}..{y.max()}, the model has "
                         f"{num_classes} classes", "use labels 0..num_classes-1")


# --- reading files without loading them --------------------------------------------------

def image_files(path: str) -> tuple:
    """(file paths, int32 labels, class names, skipped paths) of an image folder: one
    sub-folder per class (sorted names give the class ids, as ``ImageFolderDataset`` does),
    image files by suffix in sorted order. Files PIL cannot read as an image (header and,
    for PNG, checksums) are left out and returned as skipped."""
    root = Path(path)
    if not root.is_dir():
        raise UsageError(f"imagefolder: {path} is not a folder",
                         "point imagefolder: at a folder of class sub-folders of images")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise UsageError(f"imagefolder: {path} has no class sub-folders",
                         "put the images in one sub-folder per class")
    paths, labels = [], []
    for label, name in enumerate(classes):
        for file in sorted((root / name).iterdir()):
            if file.is_file() and file.suffix.lower() in IMAGE_SUFFIXES:
                paths.append(str(file))
                labels.append(label)
    if not paths:
        raise UsageError(f"imagefolder: no images in the class sub-folders of {path} "
                         f"({', '.join(classes[:5])})",
                         f"put {', '.join(IMAGE_SUFFIXES)} files in them")
    good = _readable(paths)
    skipped = [p for p, ok in zip(paths, good) if not ok]
    paths = [p for p, ok in zip(paths, good) if ok]
    labels = [y for y, ok in zip(labels, good) if ok]
    if not paths:
        raise UsageError(f"imagefolder: none of the {len(skipped)} files in {path} is a "
                         f"readable image", f"put {', '.join(IMAGE_SUFFIXES)} files in the "
                         "class sub-folders")
    return paths, np.asarray(labels, np.int32), classes, skipped


def skipped_note(skipped: list, total: int) -> str:
    """One line naming the files ``image_files`` left out."""
    more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return (f"skipped {len(skipped)} of {total} image files that are not readable images: "
            f"{', '.join(skipped[:3])}{more}")


def _readable(paths: list) -> np.ndarray:
    """Whether PIL reads each file's header as an image of a format Decode takes."""
    from PIL import Image

    formats = {"PNG", "JPEG", "BMP", "TIFF", "MPO"}
    ok = np.zeros(len(paths), bool)
    for i, path in enumerate(paths):
        try:
            with Image.open(path) as image:
                ok[i] = image.format in formats and image.width > 0 and image.height > 0
                image.verify()
        except Exception:  # any reason PIL gives: not an image, truncated, unreadable
            ok[i] = False
    return ok


def npz_arrays(path: str) -> dict:
    """name -> array of an .npz; arrays stored uncompressed (``numpy.savez``) are
    memory-mapped, compressed ones (``savez_compressed``) are read into memory."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = {i.filename[:-4]: i for i in archive.infolist() if i.filename.endswith(".npy")}
        out = {}
        with np.load(path, allow_pickle=False) as z:
            for name in z.files:
                info = infos.get(name)
                mapped = _mapped(path, info) if info is not None else None
                out[name] = mapped if mapped is not None else z[name]
        return out
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"cannot read {path} as .npz: {exc}",
                         "give a file from numpy.savez") from None


def _mapped(path: str, info: zipfile.ZipInfo) -> Optional[np.ndarray]:
    if info.compress_type != zipfile.ZIP_STORED:
        return None
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
        if local[:4] != b"PK\x03\x04":
            return None
        name_len = int.from_bytes(local[26:28], "little")
        extra_len = int.from_bytes(local[28:30], "little")
        f.seek(info.header_offset + 30 + name_len + extra_len)
        version = np.lib.format.read_magic(f)
        shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                 else np.lib.format.read_array_header_2_0(f))
        if dtype.hasobject or not shape or 0 in shape:
            return None
        offset = f.tell()
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                     order="F" if fortran else "C")
