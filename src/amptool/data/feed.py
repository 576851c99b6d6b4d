"""Rows read on demand and the ``mindspore.dataset`` pipeline that batches them.

Nothing here holds a whole data set as float arrays. A source is a table of rows in their
stored form: arrays in memory or memory-mapped from disk (``rows.ArrayRows``), or image
files decoded when a batch needs them (``ImageFiles``). ``pipeline`` is the one
``mindspore.dataset`` pipeline that streams the batches of a given index order: its
parallel workers read, decode, resize and fit each batch to the model (channels, size,
standardization) ahead of the training step, with the same function for training,
evaluation and sinking; ``batches`` iterates it.

The order is the caller's (fixed by seed and epoch, sharded by rank), so a run reads the
same rows in the same order whether it resumes or runs on several processes.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Iterator, Optional

import numpy as np

from amptool.data.rows import Targets, target_columns
from amptool.errors import UsageError
from amptool.runtime.interrupts import keep_handlers


def default_workers() -> int:
    """Pipeline workers by default: the cores this process may use, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def check_workers(workers: Optional[int]) -> int:
    """``--data-workers`` checked (None: ``default_workers``), at most the cores."""
    if workers is None:
        return default_workers()
    cores = max(1, os.cpu_count() or 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"--data-workers must be >= 1 (got {workers})",
                         f"give 1 to {cores}, or leave it out for {default_workers()}")
    return min(workers, cores)  # MindSpore refuses more workers than cores


class ImageFiles:
    """Image files with labels, decoded and resized to (height, width) by MindSpore's
    vision transforms in the pipeline's workers; ``take`` gives float32 (N, 3, H, W) in
    [0, 1]."""

    def __init__(self, paths: list, size: tuple):
        self.paths, self.size = paths, size

    def __len__(self) -> int:
        return len(self.paths)

    def take(self, idx: np.ndarray) -> list:
        idx = np.asarray(idx)
        dummy = np.zeros(len(self.paths), np.int32)
        return [next(batches(self, dummy, [idx]))[0][0]]


class _Raw:
    """GeneratorDataset source: the encoded bytes of file i and its label."""

    def __init__(self, paths: list, labels: np.ndarray):
        self.paths, self.labels = paths, labels

    def __getitem__(self, i):
        return np.fromfile(self.paths[i], dtype=np.uint8), self.labels[i]

    def __len__(self) -> int:
        return len(self.paths)


class _Batches:
    """GeneratorDataset source: batch i of an index order, read and fitted (augmented in
    between when asked), then labels."""

    def __init__(self, rows, labels: np.ndarray, index_batches: list, fit: Optional[Callable],
                 augment: Optional[Callable] = None):
        self.rows, self.labels, self.index_batches, self.fit = rows, labels, index_batches, fit
        self.augment = augment

    def __getitem__(self, i):
        idx = self.index_batches[i]
        parts = self.rows.take(idx)
        if self.fit:
            parts = _kept(self.fit, parts, _changing(self.augment, idx, i))
        return (*parts, *target_columns(self.labels[idx]))

    def __len__(self) -> int:
        return len(self.index_batches)


class _Epochs:
    """The batches of epochs ``first`` .. ``last`` - 1 as one sequence: item k is batch
    k % steps of epoch first + k // steps, whose order ``order_of(epoch)`` gives (a list
    of index batches, computed once per epoch)."""

    def __init__(self, order_of: Callable, first: int, last: int):
        self.order_of, self.first, self.last = order_of, first, last
        self.steps = len(order_of(first)) if last > first else 0
        self.cache: dict = {}
        self.lock = threading.Lock()

    def __getitem__(self, k: int) -> np.ndarray:
        epoch = self.epoch_of(k)
        with self.lock:
            if epoch not in self.cache:
                for old in [e for e in self.cache if e < epoch - 1]:
                    del self.cache[old]
                self.cache[epoch] = self.order_of(epoch)
            return self.cache[epoch][k % self.steps]

    def __len__(self) -> int:
        return (self.last - self.first) * self.steps

    def epoch_of(self, k: int) -> int:
        return self.first + k // self.steps


class _Rows:
    """A sampler: the row indices of every batch of ``epochs`` (``_Epochs`` or a list of
    index batches), in order."""

    def __init__(self, epochs, size: int):
        self.epochs, self.size = epochs, size

    def __len__(self) -> int:  # every batch holds ``size`` rows but the last
        n = len(self.epochs)
        return (n - 1) * self.size + len(self.epochs[n - 1]) if n else 0

    def __iter__(self):
        for k in range(len(self.epochs)):
            yield from (int(i) for i in self.epochs[k])


class Stream:
    """One pipeline over every remaining epoch of a run: it reads on across epoch ends
    (while the held-out split is evaluated) instead of starting again each epoch."""

    def __init__(self, rows, labels: np.ndarray, order_of: Callable, first: int, last: int,
                 fit: Optional[Callable], workers: int, augment: Optional[Callable] = None):
        """``augment(x, idx, epoch)``: changes the fitted-size images ``x`` of rows ``idx``
        before standardization."""
        self.epochs = epochs = _Epochs(order_of, first, last)
        self.next_epoch = first
        self.it = (_read(pipeline(rows, labels, epochs, fit, workers,
                                  at_epochs(augment, epochs.epoch_of)), rows, epochs, workers)
                   if len(epochs) else iter(()))

    def close(self) -> None:
        """Stop the pipeline (its workers end) wherever it is."""
        close = getattr(self.it, "close", None)
        if close is not None:
            close()

    def epoch(self, epoch: int) -> Iterator:
        """(inputs, labels) of every batch of ``epoch``, the stream's next epoch."""
        if epoch != self.next_epoch:
            raise ValueError(f"the stream is at epoch {self.next_epoch}, not {epoch}")
        for _ in range(self.epochs.steps):
            yield next(self.it)
        self.next_epoch += 1


def _dataset():
    import mindspore.dataset as ds

    return ds


class _FitImages:
    """Map operation on a batch of decoded images: the host-side fit."""

    def __init__(self, fit: Callable):
        self.fit = fit

    def __call__(self, x):
        return _kept(self.fit, [x])[0]


class _FitAugmented:
    """``per_batch_map`` of the batch operation: the decoded images of batch k stacked,
    fitted and augmented (``augment(x, idx, k)``, idx the batch's rows)."""

    def __init__(self, fit: Callable, index_batches, augment: Callable):
        self.fit, self.index_batches, self.augment = fit, index_batches, augment

    def __call__(self, images: list, info):
        k = info.get_batch_num()
        change = _changing(self.augment, self.index_batches[k], k)
        return (_kept(self.fit, [np.stack(images)], change)[0],)


def at_epochs(augment: Optional[Callable], epoch_of: Callable) -> Optional[Callable]:
    """``augment(x, idx, epoch)`` as the pipeline calls it, ``(x, idx, k)`` for batch k of
    epoch ``epoch_of(k)``."""
    return None if augment is None else (lambda x, idx, k: augment(x, idx, epoch_of(k)))


def _changing(augment: Optional[Callable], idx: np.ndarray, k: int) -> Optional[Callable]:
    """What the fit applies to batch k's images (rows ``idx``) before standardization."""
    return None if augment is None else (lambda x: augment(x, idx, k))


_RAISED: list = []
"""The amptool errors a pipeline worker raised (MindSpore re-raises them as RuntimeError)."""


def _kept(fit: Callable, parts: list, change: Optional[Callable] = None) -> list:
    try:
        return fit(parts, change) if change else fit(parts)
    except UsageError as exc:
        _RAISED.append(exc)
        raise


def _image_pipeline(rows, labels, index_batches, size: int, drop: bool, fit, workers: int,
                    augment: Optional[Callable]):
    from mindspore.dataset import vision

    ds = _dataset()
    data = ds.GeneratorDataset(_Raw(rows.paths, labels), ["image", "label"],
                               sampler=_Rows(index_batches, size), num_parallel_workers=1,
                               python_multiprocessing=False)
    data = data.map(operations=[vision.Decode(), vision.Resize(rows.size),
                                vision.Rescale(1.0 / 255.0, 0.0), vision.HWC2CHW()],
                    input_columns="image", num_parallel_workers=workers)
    if fit is not None and augment is not None:
        return data.batch(size, drop_remainder=drop, input_columns=["image"],
                          per_batch_map=_FitAugmented(fit, index_batches, augment),
                          num_parallel_workers=workers)
    data = data.batch(size, drop_remainder=drop)
    if fit is not None:
        data = data.map(operations=_FitImages(fit), input_columns="image",
                        num_parallel_workers=workers, python_multiprocessing=False)
    return data


def pipeline(rows, labels: np.ndarray, index_batches, fit: Optional[Callable] = None,
             workers: int = 1, augment: Optional[Callable] = None):
    """The ``mindspore.dataset`` pipeline of ``index_batches`` (batches of row indices, in
    order: a list, or ``_Epochs``; all of one size but the last): its columns are the
    model's inputs, fitted, then the labels. Image files are read by a sampler in that
    order, decoded, resized and rescaled by vision transforms in ``workers`` parallel
    workers, batched and fitted; array rows are read and fitted a batch at a time by
    ``workers`` workers. ``augment(x, idx, k)`` changes batch k's fitted-size images
    (rows ``idx``) before the fit standardizes them."""
    if isinstance(rows, ImageFiles):
        if isinstance(labels, Targets):
            raise ValueError("image files take one array of class labels")
        size, last = len(index_batches[0]), len(index_batches[len(index_batches) - 1])
        if last > size:
            raise ValueError("image files are batched in equal batches (the last may be short)")
        return _image_pipeline(rows, labels, index_batches, size, last == size, fit, workers,
                               augment)
    labels_names = (["label"] if not isinstance(labels, Targets)
                    else [f"target{i}" for i in range(len(labels.arrays))])
    names = [f"input{i}" for i in range(len(rows.arrays))] + labels_names
    return _dataset().GeneratorDataset(_Batches(rows, labels, index_batches, fit, augment),
                                       names, shuffle=False, num_parallel_workers=workers,
                                       python_multiprocessing=False)


def batches(rows, labels: np.ndarray, index_batches: list, fit: Optional[Callable] = None,
            workers: int = 1, augment: Optional[Callable] = None) -> Iterator:
    """(fitted input arrays, labels) of every batch of ``index_batches``, in order, read
    ahead by the pipeline's workers (``augment``: as ``pipeline`` takes it)."""
    if not index_batches:
        return
    yield from _read(pipeline(rows, labels, index_batches, fit, workers, augment), rows,
                     index_batches, workers)


def _read(data, rows, index_batches, workers: int) -> Iterator:
    """(inputs, labels) of every batch of the pipeline ``data`` (of ``rows`` in
    ``index_batches``); an amptool error raised in a worker comes out as itself, a file
    that cannot be decoded as one usage error naming it."""
    done = 0
    _RAISED.clear()
    n_inputs = 1 if isinstance(rows, ImageFiles) else len(rows.arrays)
    iterator = data.create_tuple_iterator(output_numpy=True, num_epochs=1)
    try:
        for parts in iterator:
            keep_handlers()  # the data engine's SIGTERM handler replaced Python's
            targets = list(parts[n_inputs:])
            yield list(parts[:n_inputs]), targets[0] if len(targets) == 1 else targets
            done += 1
    except RuntimeError as exc:
        if _RAISED:  # a mistake in the data, found by a worker: as the worker said it
            raise _RAISED[-1] from None
        if not isinstance(rows, ImageFiles):
            raise
        found = _undecodable(rows, index_batches, done, _read_ahead(index_batches, workers))
        what = (f"image {found[0]} cannot be decoded ({found[1]})" if found else
                f"an image could not be decoded in batch {done + 1} ({_pipeline_error(exc)})")
        raise UsageError(what, "replace or remove the damaged file (image files are checked "
                         "by PIL's header and checksum test before training; it passed that "
                         "test)") from None
    finally:  # also when the reader stops early: the pipeline's workers end with it
        _release_workers(iterator)
        iterator.stop()


def _release_workers(iterator) -> None:
    """Let a pipeline stopped early end at once. MindSpore's generator worker threads wait
    up to 5 s in a put to a full result queue before they look at the end flag, and
    ``stop()`` joins them one by one (mindspore.dataset's ``_generator_worker_loop``): an
    interrupted or failed run sat idle for ~5 s. The flag is raised first and the queues
    emptied, so each blocked put returns and its worker ends. Nothing here is needed for
    correctness: where MindSpore keeps these differently, ``stop()`` waits as before."""
    nodes = [getattr(iterator, "dataset", None)]
    while nodes:
        node = nodes.pop()
        if node is None:
            continue
        nodes.extend(getattr(node, "children", None) or [])
        sampler = getattr(node, "sample_fn", None)
        eof = getattr(sampler, "eof", None)
        if eof is None or getattr(sampler, "multi_process", True):
            continue
        eof.set()
        for worker in getattr(sampler, "workers", None) or []:
            results = getattr(worker, "res_queue", None)
            while results is not None and not results.empty():
                try:
                    results.get_nowait()
                except Exception:  # emptied meanwhile
                    break


def _read_ahead(index_batches, workers: int) -> int:
    """How many batches past the last one delivered the image pipeline may have read: a
    queue of ``prefetch_size`` batches after batching and after fitting, and queues of as
    many rows before batching (the reader's and each decoding worker's), plus one batch
    being built."""
    prefetch = _dataset().config.get_prefetch_size()
    size = max(1, len(index_batches[0])) if len(index_batches) else 1
    return 2 * prefetch + -(-prefetch * (1 + workers) // size) + 2


def _undecodable(rows, index_batches, start: int, ahead: int) -> Optional[tuple]:
    """(path, reason) of the first file PIL cannot decode in full among the batches
    ``start`` .. ``start + ahead`` (the pipeline reads ahead: the failure may lie past
    the last batch delivered), or None."""
    from PIL import Image

    for k in range(start, min(start + ahead, len(index_batches))):
        for i in index_batches[k]:
            try:
                with Image.open(rows.paths[int(i)]) as image:
                    image.load()
            except Exception as exc:  # any reason PIL gives
                return rows.paths[int(i)], (str(exc).splitlines() or [type(exc).__name__])[0]
    return None


def _pipeline_error(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for line in lines:
        if "failed" in line or "Invalid" in line:
            return line.replace("[ERROR]", "").strip()[:200]
    return lines[0][:200] if lines else type(exc).__name__
