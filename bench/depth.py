"""Per-layer localization and the range pass at depth.

A 24-block transformer (mindcv's VisionTransformer: embed 64, 4 heads, 32x32 inputs in
8x8 patches, 467 cells) with one planted fp16 fault deep in the stack: block 20's MLP
activation is an L2 normalization whose sum of squares passes 65504 in fp16 (output zero)
while fp32 computes it exactly (``planted``). Its seeded weights are saved and exported to
fp32 and fp16 MINDIR; then, side by side in alternating rounds on the same 32 samples:

- one eager (PyNative) fp32 forward of the network over the 32 samples in one call, the
  unit every other figure is divided by;
- ``amptool parity`` of the fp16 MINDIR against the fp32 one, without and with
  ``--per-layer``: the per-layer pass costs the difference;
- the range pass of ``--policy auto`` (``amptool.find_fp32_cells``, O2) on the same samples.

Target: the per-layer pass and the range pass each cost at most 3x one eager forward, and
both name the planted cell. The first round (which pays MindSpore's one-time kernel set-up)
is reported apart; the ratios are medians of the rounds after it.

Usage: python bench/depth.py [--quick]
"""
from __future__ import annotations

import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

PLANTED = f"{__file__}:planted"
ARGS = {"image_size": 32, "patch_size": 8, "embed_dim": 64, "num_heads": 4, "num_classes": 10}
DEPTH, FAULT_BLOCK, SAMPLES = 24, 20, 32
CULPRIT = f"blocks.{FAULT_BLOCK}.mlp.act"
TARGET = 3.0


def planted(depth: int = DEPTH, fault_block: int = FAULT_BLOCK, embed_dim: int = 64,
            image_size: int = 32, patch_size: int = 8, num_heads: int = 4,
            num_classes: int = 10):
    """mindcv's VisionTransformer with block ``fault_block``'s MLP activation an L2
    normalization that overflows in fp16 (``amptool.samples.models.L2Normalize``)."""
    from mindcv.models.vit import VisionTransformer

    from amptool.samples.models import L2Normalize

    net = VisionTransformer(image_size=image_size, patch_size=patch_size, embed_dim=embed_dim,
                            depth=depth, num_heads=num_heads, num_classes=num_classes)
    net.blocks[fault_block].mlp.act = L2Normalize(gain=4096.0)
    net.input_shape, net.num_classes = (3, image_size, image_size), num_classes
    return net


def _prepare(root: Path) -> dict:
    """Seeded weights of the planted network, its fp32 and fp16 MINDIR, 32 inputs."""
    import numpy as np

    from amptool.export.api import ExportConfig, export
    from amptool.network.models import resolve_model
    from amptool.runtime.device import import_mindspore, resolve_device, set_device

    ms = import_mindspore()
    set_device(resolve_device("auto"))
    ms.set_seed(0)
    net = resolve_model(PLANTED).build()
    ckpt = root / "planted.ckpt"
    ms.save_checkpoint(net, str(ckpt))
    x = np.random.default_rng(0).standard_normal((SAMPLES, 3, 32, 32)).astype(np.float32)
    np.savez(root / "inputs.npz", x=x)
    results = export(ExportConfig(ckpt=str(ckpt), model=PLANTED, formats=("MINDIR",),
                                  dynamic_batch=True, out=str(root / "export"), data="none"))
    return {"ckpt": ckpt, "x": x, "inputs": root / "inputs.npz", "cells": _cells(net),
            **{r.precision: r.path for r in results}}


def _cells(net) -> int:
    return len(list(net.cells_and_names()))


def _fresh_net(ckpt: Path):
    """The planted network in fp32 with the saved weights (as the per-layer pass builds it)."""
    from amptool.network.checkpoint import build_with_weights, read_checkpoint
    from amptool.network.models import resolve_model

    return build_with_weights(resolve_model(PLANTED), read_checkpoint(str(ckpt)), str(ckpt))


def _eager_forward(ckpt: Path, x) -> float:
    import mindspore as ms

    from amptool.precision.eager import eager

    net = _fresh_net(ckpt)
    gc.collect()
    with eager(net):
        t0 = time.perf_counter()
        net(ms.Tensor(x)).asnumpy()
        return time.perf_counter() - t0


def _parity(paths: dict, per_layer: bool) -> tuple:
    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig

    gc.collect()
    t0 = time.perf_counter()
    report = parity(ParityConfig(reference=str(paths["fp32"]), candidates=(str(paths["fp16"]),),
                                 inputs=str(paths["inputs"]), per_layer=per_layer,
                                 layer_samples=SAMPLES, emulate_settings=False))
    return time.perf_counter() - t0, report.to_dict()


def _range_pass(ckpt: Path, x) -> tuple:
    from amptool.train.ampstep import find_fp32_cells

    net = _fresh_net(ckpt)
    gc.collect()
    t0 = time.perf_counter()
    found = find_fp32_cells(net, [[x]], level="O2")
    return time.perf_counter() - t0, [k["path"] for k in found.kept]


def _round(paths: dict) -> dict:
    forward = _eager_forward(paths["ckpt"], paths["x"])
    plain, _ = _parity(paths, per_layer=False)
    with_layers, report = _parity(paths, per_layer=True)
    range_s, kept = _range_pass(paths["ckpt"], paths["x"])
    layer = report["candidates"][0]["per_layer"]
    return {"forward_s": forward, "parity_s": plain, "parity_per_layer_s": with_layers,
            "per_layer_s": max(with_layers - plain, 0.0), "range_pass_s": range_s,
            "first_flagged": layer["first_flagged"], "origin": layer["origin"],
            "rows": len(layer["rows"]), "kept": kept}


def _figures(rounds: list) -> dict:
    med = {k: statistics.median(r[k] for r in rounds)
           for k in ("forward_s", "parity_s", "parity_per_layer_s", "per_layer_s",
                     "range_pass_s")}
    return {**{k: round(v, 3) for k, v in med.items()},
            "per_layer_vs_forward_ratio": round(med["per_layer_s"] / med["forward_s"], 2),
            "range_pass_vs_forward_ratio": round(med["range_pass_s"] / med["forward_s"], 2)}


def run(quick: bool = False) -> dict:
    from amptool.runtime.device import import_mindspore

    import_mindspore()
    rounds = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="amptool-bench-depth-") as tmp:
        paths = _prepare(Path(tmp))
        first = _round(paths)  # MindSpore's one-time kernel set-up lands here
        measured = [_round(paths) for _ in range(rounds)]
    last = measured[-1]
    return {"model": "mindcv VisionTransformer", "depth": DEPTH, "cells": paths["cells"],
            "samples": SAMPLES, "planted": CULPRIT, "rounds": rounds,
            **_figures(measured),
            "first_round": {k: round(first[k], 3) for k in ("forward_s", "per_layer_s",
                                                            "range_pass_s")},
            "per_layer_first_flagged": last["first_flagged"], "per_layer_origin": last["origin"],
            "per_layer_rows": last["rows"], "range_pass_kept": last["kept"],
            "named": last["first_flagged"] == CULPRIT and last["kept"] == [CULPRIT],
            "targets": {"per_layer_vs_forward_ratio": f"<= {TARGET:g}",
                        "range_pass_vs_forward_ratio": f"<= {TARGET:g}"}}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
