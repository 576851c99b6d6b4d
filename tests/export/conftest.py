"""Shared fixtures: one short training run per sample model, exported once, shared by tests."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

MODELS = ("simplecnn", "lenet5", "resnet", "transformer", "trapmlp")


@pytest.fixture(scope="session")
def runs(sample_runs):
    """The session's sample training runs (tests/conftest.py)."""
    return sample_runs


class Exports:
    """Exports each trained model once: MINDIR + ONNX, fp32 + fp16, dynamic batch."""

    def __init__(self, runs, shared):
        self.runs, self.shared = runs, shared

    def get(self, name: str) -> dict:
        def make(out: Path) -> dict:
            from schemas import assert_fits

            from amptool.export.api import ExportConfig, export

            results = export(ExportConfig(
                run=str(self.runs.get(name)), formats=("MINDIR", "ONNX"), dynamic_batch=True,
                out=str(out)))
            for r in results:  # every manifest fits the types its readers hold it to
                assert_fits(json.loads(Path(r.manifest_path).read_text()), "manifest",
                            r.manifest_path)
            return {(r.format, r.precision): r for r in results}

        return self.shared.get(f"export-{name}", make)


@pytest.fixture(scope="session")
def exports(runs, shared) -> Exports:
    return Exports(runs, shared)


def reference(run_dir: Path, samples: int | None = None):
    """(x, y, fp32 logits of the in-memory network with the run's best weights)."""
    import mindspore as ms
    from smalldata import load_eval_split

    from amptool.network.checkpoint import load_into_net, read_checkpoint
    from amptool.network.models import resolve_model

    info = json.loads((run_dir / "run.json").read_text())
    spec = resolve_model(info["config"]["model"])
    x, y = load_eval_split(info["data"]["source"], info["data"]["preprocess"], spec.num_classes,
                           info["data"]["val_fraction"], samples)
    net = spec.build()
    load_into_net(net, read_checkpoint(run_dir / "best.ckpt"))
    net.set_train(False)
    return x, y, net(ms.Tensor(x)).asnumpy()


FP32_REL = 1e-5
"""fp32 artefact vs in-memory network: max |diff| per unit of the reference's scale.
Kernels and onnxruntime versions round differently (a few fp32 ulps, ~1e-6 relative);
an fp16 graph misses this by orders of magnitude."""


def scaled_max_abs(out: np.ndarray, ref: np.ndarray) -> float:
    """max |out - ref| divided by max(1, max |ref|): an error bound that follows the data."""
    scale = max(1.0, float(np.abs(ref).max()))
    return float(np.abs(out.astype(np.float64) - ref).max()) / scale


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="session")
def references(runs):
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = reference(runs.get(name))
        return cache[name]

    return get
