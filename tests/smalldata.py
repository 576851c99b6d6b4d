"""Small data sources read whole into memory, for tests: the library streams them instead.

Tests import these by name (``from smalldata import load_dataset``): tests/conftest.py puts
this folder on ``sys.path``.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

import numpy as np

from amptool.data.dataset import Preprocess, _Fit, load_eval_inputs, load_model_data
from amptool.data.sources import open_images


def load_raw(spec: str, input_shape: tuple, num_classes: int) -> tuple:
    """Every image of a (small) source in [0, 1] fitted to ``input_shape`` (C, H, W), and
    int32 labels: the whole source in memory, for tests and small tools."""
    rows, y, _ = open_images(spec, input_shape, num_classes)
    return _Fit(input_shape, spec)(rows.take(np.arange(len(y))))[0], y, spec


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
    model = SimpleNamespace(input_shape=input_shape, num_classes=num_classes, inputs=())
    data = load_model_data(spec, model, val_fraction)
    train = data.train_inputs(np.arange(len(data.train_idx)))[0]
    val_x, val_y = data.val_inputs()
    return Dataset(train, data.train_y, val_x[0], val_y, data.preprocess, spec)


def load_eval_split(spec: str, preprocess: dict, num_classes: int,
                    val_fraction: float = 0.2, samples: Optional[int] = None) -> tuple:
    """The held-out split of an image source, preprocessed exactly as ``preprocess`` says."""
    prep = Preprocess(**preprocess)
    model = SimpleNamespace(input_shape=(prep.channels, prep.height, prep.width),
                            num_classes=num_classes, inputs=())
    inputs, y = load_eval_inputs(spec, model, preprocess, val_fraction, samples)
    return inputs[0], y
