"""Runs trained once per session for the convert tests (real MindSpore on CPU, digits data)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def trap_run(trap_fp32_run):
    """trapmlp trained in fp32: healthy in fp32, its cell `norm` overflows fp16 (the
    session's run, tests/conftest.py ``trap_training``)."""
    import json

    summary = json.loads((trap_fp32_run / "run.json").read_text())["summary"]
    assert summary["val_acc"] > 0.8
    return trap_fp32_run


@pytest.fixture(scope="session")
def cnn_run(sample_runs):
    """simplecnn trained with O2 and dynamic loss scaling for one epoch (the session's
    shared run of the default configuration, tests/conftest.py)."""
    return sample_runs.get("simplecnn")
