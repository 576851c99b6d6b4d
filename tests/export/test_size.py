"""FP16 artefacts are half the size: parameter bytes exactly, the whole file <= 0.51x (> 1 MB)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from amptool.export.api import ExportConfig, export

from .user_models import save_init_checkpoint, wide_mlp

pytestmark = pytest.mark.slow  # trains or exports real networks

HERE = Path(__file__).parent


@pytest.mark.parametrize("fmt", ["MINDIR", "ONNX"])
def test_large_model_halves(fmt, tmp_path):
    ckpt = save_init_checkpoint(wide_mlp, tmp_path / "wide.ckpt")
    results = export(ExportConfig(ckpt=str(ckpt), model=f"{HERE / 'user_models.py'}:wide_mlp",
                                  formats=(fmt,), out=str(tmp_path / "out"), data="none"))
    by = {r.precision: r for r in results}
    s32, s16 = (os.path.getsize(by[p].path) for p in ("fp32", "fp16"))
    assert s32 > 1_000_000
    assert s16 <= 0.51 * s32, s16 / s32
    p32, p16 = by["fp32"].manifest.params, by["fp16"].manifest.params
    assert p16.bytes * 2 == p32.bytes and p16.dtypes == {"float16": p32.count}
    assert Path(by["fp16"].path).name == "wide_mlp_fp16" + (".mindir" if fmt == "MINDIR"
                                                            else ".onnx")
    assert by["fp16"].manifest.preprocess is None


def test_sample_models_sizes(exports):
    """Every sample model's fp16 file is smaller than its fp32 one; simplecnn is about half."""
    for name in ("simplecnn", "lenet5"):
        got = exports.get(name)
        for fmt in ("MINDIR", "ONNX"):
            ratio = got[(fmt, "fp16")].manifest.file_size \
                / got[(fmt, "fp32")].manifest.file_size
            assert ratio < (0.51 if name == "simplecnn" else 0.55), (name, fmt, ratio)
