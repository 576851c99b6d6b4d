"""Shared, once-per-session artefacts for the parity tests: real training, real export.

Healthy pipelines (a trained SimpleCNN, seeded LeNet-5/ResNet/Transformer exports) and
planted faults: trapmlp (a cell whose sum of squares overflows fp16), an fp16 artefact
with a corrupted stored weight, and an artefact that declares another input normalization.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from amptool.cli import app


def parity_cli(*args):
    """``amptool parity ARGS`` run in this process."""
    return CliRunner().invoke(app, ["parity", *map(str, args)])


def error_line(result) -> str:
    """The one ``amptool: error:`` line a failed command printed (and no traceback)."""
    lines = [line for line in result.output.splitlines() if line.startswith("amptool: error:")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def _export(run=None, ckpt=None, model=None, out=None, formats=("MINDIR",)):
    from amptool.export.api import ExportConfig, export

    results = export(ExportConfig(run=str(run or ""), ckpt=str(ckpt or ""),
                                  model=model or "", formats=formats, out=str(out),
                                  force=True))
    return {(r.format, r.precision): r.path for r in results}


def copy_artefact(src: str, dst_dir: Path, name: str) -> Path:
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / name
    shutil.copyfile(src, dst)
    manifest = json.loads(Path(src + ".json").read_text())
    return dst, manifest


def write_manifest(artefact: Path, manifest: dict) -> None:
    from amptool.artefact.files import file_facts
    from amptool.files.fileio import sha256

    manifest = dict(manifest, sha256=sha256(artefact), file_size=artefact.stat().st_size,
                    files=file_facts(artefact))
    Path(str(artefact) + ".json").write_text(json.dumps(manifest, indent=2))


def corrupt_mindir_weight(src: str, dst_dir: Path, param: str, rows: int = 4) -> Path:
    """Byte-swap the fp16 values of the first ``rows`` rows of one stored weight, as a
    broken fp16 writer would; the manifest is rewritten so the file looks consistent."""
    from mindspore.train import mind_ir_pb2

    dst, manifest = copy_artefact(src, dst_dir, Path(src).name)
    model = mind_ir_pb2.ModelProto()
    model.ParseFromString(dst.read_bytes())
    tensor = next(t for t in model.graph.parameter if t.name.split(":", 1)[-1] == param)
    values = np.frombuffer(tensor.raw_data, dtype=np.float16).reshape(tuple(tensor.dims)).copy()
    values[:rows] = values[:rows].byteswap()
    tensor.raw_data = values.tobytes()
    dst.write_bytes(model.SerializeToString())
    write_manifest(dst, manifest)
    return dst


def renormalize(src: str, dst_dir: Path, mean: float = 0.0, std: float = 1.0) -> Path:
    """The same artefact, declaring other input normalization in its manifest."""
    dst, manifest = copy_artefact(src, dst_dir, Path(src).name)
    manifest["preprocess"] = dict(manifest["preprocess"], mean=mean, std=std)
    write_manifest(dst, manifest)
    return dst


@pytest.fixture(scope="session")
def simplecnn(sample_runs, simplecnn_export):
    """A trained SimpleCNN (O2, 1 epoch) exported to MINDIR (and ONNX) fp32 + fp16."""
    run = sample_runs.get("simplecnn")
    return {"run": str(run), **{f"{f.lower()}_{p}": v for (f, p), v in simplecnn_export.items()}}


@pytest.fixture(scope="session")
def trap(trap_fp32_run, shared):
    """trapmlp trained in fp32: healthy in fp32, its fp16 graph collapses at cell 'norm'
    (the session's run, convert's too: tests/conftest.py ``trap_training``)."""
    run = trap_fp32_run
    paths = shared.get("parity-trap", lambda out: _export(run=run, out=out))
    return {"run": str(run), "mindir_fp32": paths[("MINDIR", "fp32")],
            "mindir_fp16": paths[("MINDIR", "fp16")]}


@pytest.fixture(scope="session")
def corrupted_fp16(simplecnn, shared):
    return shared.get("parity-corrupted", lambda out: str(corrupt_mindir_weight(
        simplecnn["mindir_fp16"], out, "conv.weight")))


@pytest.fixture(scope="session")
def renormalized_fp16(simplecnn, shared):
    return shared.get("parity-renormalized", lambda out: str(renormalize(
        simplecnn["mindir_fp16"], out)))


@pytest.fixture(scope="session")
def seeded_export(shared):
    """name -> MINDIR fp32/fp16 of a seeded, untrained sample model (exported once)."""
    def make(name, out):
        from amptool.network.models import sample_spec
        from amptool.runtime.device import import_mindspore, resolve_device, set_device

        ms = import_mindspore()
        set_device(resolve_device("auto"))
        ms.set_seed(0)
        ckpt = out / f"seeded_{name}.ckpt"
        ms.save_checkpoint(sample_spec(name).build(), str(ckpt))
        paths = _export(ckpt=ckpt, model=name, out=out / "export")
        return {"ckpt": str(ckpt), "mindir_fp32": paths[("MINDIR", "fp32")],
                "mindir_fp16": paths[("MINDIR", "fp16")]}

    return lambda name: shared.get(f"parity-seeded-{name}", lambda out: make(name, out))


def typed_report(partial: dict):
    """A ``ParityReport`` of a hand-written report dict, the keys a test leaves out filled
    with neutral values (no findings, no per-layer data, default limits)."""
    from amptool.parity.report import ParityReport
    from amptool.stats.limits import Thresholds

    limits = Thresholds().to_dict()
    cands = [{"kind": "artefact", "thresholds": limits, "task": None, "findings": [],
              "fp16_faithful": None, "caveat": None, "per_layer": None, "weights": None,
              "culprit": None, "deployment": None, **cand,
              "outputs": [{"thresholds": limits, "passed": True, **o} for o in cand["outputs"]]}
             for cand in partial["candidates"]]
    ref = {"kind": "artefact", "model": None, "preprocess": None, "policy": None,
           **partial["reference"]}
    inputs = {"samples": 4, "targets": [], "labels_from": None, **partial["inputs"]}
    return ParityReport.from_dict({"golden_saved": None, "device": "CPU", **partial,
                                   "reference": ref, "inputs": inputs, "candidates": cands})
