"""Rows of a data set in their stored form, read when a batch needs them: ``ArrayRows`` (one
array per model input, in memory or memory-mapped) and ``Targets`` (several target arrays
read together); ``target_columns`` gives a batch's targets as a list either way."""
from __future__ import annotations

from typing import Optional

import numpy as np


class ArrayRows:
    """Rows of arrays held in memory or memory-mapped, one array per model input.
    ``take`` gives the rows of ``idx`` as float32 images in [0, 1] (``images``: uint8
    stored arrays are divided by 255) or cast to each input's dtype."""

    def __init__(self, arrays: list, images: bool, dtypes: Optional[list] = None):
        self.arrays, self.images = arrays, images
        self.dtypes = dtypes or [None] * len(arrays)

    def __len__(self) -> int:
        return len(self.arrays[0])

    def take(self, idx: np.ndarray) -> list:
        order = np.argsort(idx, kind="stable")  # sorted reads: a memmap seeks forward
        out = []
        for array, dtype in zip(self.arrays, self.dtypes):
            rows = np.empty((len(idx), *array.shape[1:]), array.dtype)
            rows[order] = array[np.asarray(idx)[order]]
            if self.images:
                rows = (rows.astype(np.float32) / 255.0 if rows.dtype == np.uint8
                        else rows.astype(np.float32))
            elif dtype is not None:
                rows = rows.astype(dtype)
            out.append(rows)
        return out


class Targets:
    """Several target arrays read together, each row cast to its dtype when taken (held in
    memory or memory-mapped, like ``ArrayRows``). ``labels`` anywhere below is a 1-D array
    of class labels or a ``Targets``: batches then hold a list of arrays, one a target."""

    def __init__(self, arrays: list, dtypes: Optional[list] = None):
        self.arrays = arrays
        self.dtypes = dtypes or [None] * len(arrays)

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, idx) -> list:
        idx = np.asarray(idx)
        order = np.argsort(idx, kind="stable")  # sorted reads: a memmap seeks forward
        out = []
        for array, dtype in zip(self.arrays, self.dtypes):
            rows = np.empty((len(idx), *array.shape[1:]), array.dtype)
            rows[order] = array[idx[order]]
            out.append(rows if dtype is None else rows.astype(dtype))
        return out


def target_columns(labels) -> list:
    """The target arrays of one batch: a ``Targets`` batch as it is, labels as one."""
    return labels if isinstance(labels, list) else [labels]
