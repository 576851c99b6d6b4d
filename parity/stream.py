"""Parity's sides run batch by batch, their outputs compared as they come.

The reference runs first, one batch at a time: each batch of its outputs is written to a
``Spool`` on disk (``store``) and added to each output's ``ReferenceSpread``. Each candidate
then runs batch by batch; the reference's rows of the same batch are read back from disk
and both go to the candidate's ``CandidateStats`` (``amptool.parity.accumulate``). The next
batch's inputs are read and preprocessed by a background thread while a graph runs
(``prefetched``). What stays in memory: a few batches, and statistics whose size does not
depend on the sample count.

Every pass takes a ``span`` of samples [start, stop): a shard of the inputs. Statistics of
spans merge (``ReferenceSpread.merge``, ``CandidateStats.merge``) into those of their union.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

from amptool.parity.inputs import InputSet
from amptool.parity.store import Spool, StoredArray, release_pages
from amptool.stats.stream import ReferenceSpread

DEPTH = 2
"""Batches prepared ahead of the one running."""


def prefetched(items: Iterable, depth: int = DEPTH) -> Iterator:
    """``items``, produced by a background thread up to ``depth`` ahead; what producing
    them raises is raised here. Stopping early lets the thread go."""
    box: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                box.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((False, None))
        except BaseException as exc:  # handed to the consumer, raised there
            put((None, exc))

    thread = threading.Thread(target=produce, name="amptool-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, item = box.get()
            if kind is None:
                raise item
            if not kind:
                return
            yield item
    finally:
        stop.set()
        thread.join()


def spans(span: tuple, size: int) -> list:
    """[start, stop) of each batch of ``size`` samples in ``span`` (one batch when the span
    fits, as ``batched_outputs`` calls)."""
    start, stop = span
    return [(a, min(a + size, stop)) for a in range(start, stop, max(1, size))]


def rows_of(array, start: int, stop: int) -> np.ndarray:
    """Rows of a stored or in-memory array, read into memory."""
    if isinstance(array, StoredArray):
        return array.rows(start, stop)
    return np.array(array[start:stop])


def shape_stub(array) -> np.ndarray:
    """An empty array of ``array``'s per-sample shape (what roles are read from)."""
    shape = array.shape if isinstance(array, StoredArray) else np.shape(array)
    return np.empty((0,) + tuple(shape[1:]), dtype=np.float32)


def head_of(array, count: int):
    """The first ``count`` rows of a stored or in-memory array, not read."""
    if isinstance(array, StoredArray):
        import dataclasses

        return dataclasses.replace(array, shape=(min(count, len(array)),) + array.shape[1:])
    return array[:count]


def whole_of(array) -> np.ndarray:
    """A stored array memory-mapped (an in-memory one as it is)."""
    return array.memmap() if isinstance(array, StoredArray) else array


def fed_batches(inputs: InputSet, preprocess: Optional[dict], batches: list,
                extra: Optional[Callable] = None) -> Iterator:
    """(start, stop, the batch's fed arrays, ``extra(start, stop)``) of each batch, read and
    preprocessed ahead by a background thread."""
    def make():
        for a, b in batches:
            fed = [np.array(x) for x in inputs.select(slice(a, b)).for_preprocess(preprocess)]
            for source in [inputs.raw] + list(inputs.given or []):  # golden files' inputs
                release_pages(source)
            yield a, b, fed, (extra(a, b) if extra is not None else None)

    return prefetched(make())


def pad_size(count: int, size: int) -> Optional[int]:
    """The one batch shape of a pass over ``count`` samples in batches of ``size``: ``size``
    when there are several batches (a shorter last one is padded to it, so no second shape
    is compiled), None when one batch holds them all (run as it is)."""
    return size if count > size else None


def padded(fed: list, size: Optional[int]) -> list:
    """``fed`` with its last row repeated up to ``size`` rows (as it is when None or full)."""
    n = len(fed[0]) if fed else 0
    if size is None or n == 0 or n >= size:
        return fed
    return [np.concatenate([f, np.repeat(f[-1:], size - n, axis=0)]) for f in fed]


def _outputs(runner, fed: list, pad: Optional[int] = None) -> list:
    """``runner``'s outputs on ``fed`` (padded to ``pad`` rows, the padding's rows dropped)."""
    n = len(fed[0]) if fed else 0
    outs = [np.asarray(o) for o in runner.run(padded(fed, pad))]
    return outs if pad is None or n >= pad else [o[:n] for o in outs]


def stream_reference(runner, inputs: InputSet, preprocess: Optional[dict], size: int,
                  outputs: Spool, fed_spool: Optional[Spool] = None,
                  span: Optional[tuple] = None) -> list:
    """Run the reference on ``span`` of the inputs (all by default), its outputs written to
    ``outputs`` (and what it was fed to ``fed_spool``); its ``ReferenceSpread`` per output."""
    spreads: list = []
    pad = pad_size(inputs.count, size)
    for _, _, fed, _ in fed_batches(inputs, preprocess, spans(span or (0, inputs.count), size)):
        outs = _outputs(runner, fed, pad)
        outputs.append(outs)
        if fed_spool is not None:
            fed_spool.append(fed)
        spreads = spreads or [ReferenceSpread() for _ in outs]
        for spread, out in zip(spreads, outs):
            spread.update(out)
    return spreads


def stored_spreads(arrays: list, size: int, span: Optional[tuple] = None) -> list:
    """The ``ReferenceSpread`` of each stored output (golden outputs), read batch by batch."""
    spreads = [ReferenceSpread() for _ in arrays]
    for a, b in spans(span or (0, len(arrays[0]) if arrays else 0), size):
        for spread, array in zip(spreads, arrays):
            spread.update(rows_of(array, a, b))
    return spreads


def stream_candidate(runner, inputs: InputSet, preprocess: Optional[dict], size: int,
                  ref_arrays: list, stats, span: Optional[tuple] = None) -> None:
    """Run a candidate on ``span`` of the inputs, each batch added with the reference's rows
    to ``stats`` (``update(start, stop, refs, cands)``)."""
    def refs(a: int, b: int) -> list:
        return [rows_of(r, a, b) for r in ref_arrays]

    batches = spans(span or (0, inputs.count), size)
    pad = pad_size(inputs.count, size)
    for a, b, fed, ref_rows in fed_batches(inputs, preprocess, batches, refs):
        stats.update(a, b, ref_rows, _outputs(runner, fed, pad))


def spool_outputs(runner, inputs: InputSet, preprocess: Optional[dict], size: int,
                  folder) -> list:
    """Run ``runner`` on the inputs batch by batch, its outputs written to ``folder``
    (``StoredArray`` each)."""
    spool = Spool(folder, inputs.count)
    pad = pad_size(inputs.count, size)
    for _, _, fed, _ in fed_batches(inputs, preprocess, spans((0, inputs.count), size)):
        spool.append(_outputs(runner, fed, pad))
    return spool.close()
