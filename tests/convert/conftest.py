"""Runs trained once per session for the convert tests (real MindSpore on CPU, digits data)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def trap_run(tmp_path_factory):
    """trapmlp trained in fp32: healthy in fp32, its cell `norm` overflows fp16."""
    from amptool.train.config import TrainConfig
    from amptool.train.run import run_training

    out = tmp_path_factory.mktemp("trap")
    summary = run_training(TrainConfig(model="trapmlp", amp_level="O0", epochs=2, out=str(out)))
    assert summary.val_acc > 0.8
    return out


@pytest.fixture(scope="session")
def cnn_run(tmp_path_factory):
    """simplecnn trained with O2 and dynamic loss scaling for one epoch."""
    from amptool.train.config import TrainConfig
    from amptool.train.run import run_training

    out = tmp_path_factory.mktemp("cnn")
    run_training(TrainConfig(model="simplecnn", epochs=1, out=str(out)))
    return out
