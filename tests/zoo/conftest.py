"""The zoo's networks, each run once per session through the whole flow a user runs:
``amptool.train`` on a slice of the bundled digits, ``amptool.export`` to MINDIR and ONNX in
fp32 and fp16, ``amptool.parity`` fp16 MindIR vs fp32 MindIR (saving the reference's
outputs; with the emulation of a runtime ignoring the deployment settings) and ONNX vs those
stored fp32 MindIR outputs."""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

SAMPLES = 160
"""Digits in the training file: 128 train, 32 held out (the parity inputs)."""
BATCH = 32
"""Training (and fixed export) batch."""


@dataclass(frozen=True)
class ZooModel:
    """A third-party network as a user names it to amptool."""

    model: str
    args: dict
    size: int
    """Height and width of the input image (3 channels)."""
    dynamic_batch: bool = True
    """False where the ONNX exporter needs a fixed batch (ViT's class token: BroadcastTo)."""

    @property
    def input_spec(self) -> str:
        return f"x:-1x3x{self.size}x{self.size}:float32"


ZOO = {
    # resnet18 at 16x16: its 3x3 convolutions are the slowest layers on MindSpore's CPU backend
    "resnet18": ZooModel("mindcv.models.resnet:resnet18", {"num_classes": 10}, 16),
    "mobilenet_v3_small_100": ZooModel(
        "mindcv:create_model",
        {"model_name": "mobilenet_v3_small_100", "num_classes": 10, "pretrained": False}, 32),
    "vit": ZooModel("mindcv.models.vit:VisionTransformer",
                    {"image_size": 32, "patch_size": 8, "embed_dim": 64, "depth": 2,
                     "num_heads": 4, "num_classes": 10}, 32, dynamic_batch=False),
}


def digits_file(path: Path, n: int = SAMPLES) -> Path:
    """The first ``n`` bundled digits (8x8, values in [0, 1]) as an npz data source."""
    bundled = resources.files("amptool.samples") / "data" / "digits.npz"
    with resources.as_file(bundled) as src, np.load(src) as z:
        x, y = z["x"][:n].astype(np.float32) / 16.0, z["y"][:n].astype(np.int32)
    np.savez(path, x=x, y=y)
    return path


@dataclass
class Flow:
    """What one network's run left: the training summary, the artefacts, two parity reports."""

    root: Path
    summary: object = None
    artefacts: dict = field(default_factory=dict)
    """(format, precision) -> ExportResult."""
    fp16: object = None
    """ParityReport: fp16 MindIR against the fp32 MindIR reference."""
    onnx: object = None
    """ParityReport: fp32 and fp16 ONNX against the stored fp32 MindIR outputs."""

    @property
    def golden(self) -> Path:
        return self.root / "fp32_mindir_outputs.npz"


def run_flow(zoo: ZooModel, root: Path, data: Path) -> Flow:
    import amptool
    from amptool import ExportConfig, ParityConfig, TrainConfig

    flow = Flow(root)
    flow.summary = amptool.train(TrainConfig(
        model=zoo.model, model_args=zoo.args, input_spec=zoo.input_spec, data=f"npz:{data}",
        epochs=1, batch_size=BATCH, out=str(root / "train")))
    report = amptool.export(ExportConfig(
        run=str(root / "train"), formats=("MINDIR", "ONNX"), dynamic_batch=zoo.dynamic_batch,
        batch_size=BATCH, out=str(root / "export")))
    flow.artefacts = {(r.format, r.precision): r for r in report}
    mindir = flow.artefacts[("MINDIR", "fp32")].path
    flow.fp16 = amptool.parity(ParityConfig(
        reference=mindir, candidates=(flow.artefacts[("MINDIR", "fp16")].path,),
        save_outputs=str(flow.golden)))
    flow.onnx = amptool.parity(ParityConfig(  # the fp16 weights' emulation ran just above
        load_outputs=str(flow.golden), emulate_settings=False,
        candidates=tuple(flow.artefacts[("ONNX", p)].path for p in ("fp32", "fp16"))))
    return flow


def pytest_generate_tests(metafunc):
    """Each test module names the networks it checks (``NAMES``): one module per network,
    so the networks' flows run side by side on the test workers."""
    if "name" in metafunc.fixturenames:
        metafunc.parametrize("name", metafunc.module.NAMES)


@pytest.fixture(scope="session")
def zoo_flows(shared):
    """name -> Flow, each network trained, exported and checked once per session."""
    def make(name: str, root: Path) -> Flow:
        return run_flow(ZOO[name], root, digits_file(root / "digits.npz"))

    return lambda name: shared.get(f"zoo-{name}", lambda root: make(name, root))
