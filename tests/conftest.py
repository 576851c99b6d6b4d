"""Shared fixtures: real MindSpore on CPU, small real data."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("GLOG_v", "3")

# Model code the tests name is trusted in a store of this process's own (inherited by the
# amptool processes the tests start), never in the user's.
_STORE_DIR = tempfile.mkdtemp(prefix="amptool-test-trust-")
os.environ["AMPTOOL_TRUST_STORE"] = str(Path(_STORE_DIR) / "trusted.json")
atexit.register(shutil.rmtree, _STORE_DIR, True)


def _device_present(name: str) -> bool:
    from amptool.device import available_devices

    return name in available_devices()


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker, device in (("ascend", "Ascend"), ("gpu", "GPU")):
            if marker in item.keywords and not _device_present(device):
                item.add_marker(pytest.mark.skip(reason=f"needs a {device} device"))


# The planted fp16-unsafe cell of trapmlp stays fp32 in its training (and so export) policy.
POLICIES = {"trapmlp": {"level": "O2", "fp32_cells": ["norm"]}}


class Runs:
    """Trains each sample model once (1 epoch) on demand."""

    def __init__(self, root: Path):
        self.root = root
        self.cache: dict = {}
        self.summaries: dict = {}

    def get(self, name: str) -> Path:
        if name not in self.cache:
            from amptool.train.config import TrainConfig
            from amptool.train.run import run_training

            out = self.root / name
            policy = ""
            if name in POLICIES:
                policy = str(self.root / f"{name}_policy.json")
                Path(policy).write_text(json.dumps(POLICIES[name]))
            self.summaries[name] = run_training(TrainConfig(
                model=name, epochs=1, out=str(out), policy=policy, batch_size=64, lr=0.003))
            self.cache[name] = out
        return self.cache[name]


@pytest.fixture(scope="session")
def sample_runs(tmp_path_factory) -> Runs:
    """One short training run per sample model, shared by every test that needs one."""
    return Runs(tmp_path_factory.mktemp("runs"))
