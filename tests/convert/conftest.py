"""Runs trained once per session for the convert tests (real MindSpore on CPU, digits data)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def trap_run(trained):
    """trapmlp trained in fp32: healthy in fp32, its cell `norm` overflows fp16."""
    out, summary = trained("trapmlp-O0", model="trapmlp", amp_level="O0", epochs=2)
    assert summary.val_acc > 0.8
    return out


@pytest.fixture(scope="session")
def cnn_run(trained):
    """simplecnn trained with O2 and dynamic loss scaling for one epoch."""
    out, _ = trained("simplecnn-O2", model="simplecnn", epochs=1)
    return out
