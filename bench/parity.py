"""Parity benchmark.

1. Overhead: ``check_parity`` (fp32 MindIR reference vs fp16 MindIR candidate, digits
   held-out split) against bare inference of the same two artefacts on the same inputs
   (runners loaded and run, nothing else). Both are timed side by side in one process,
   alternating, median of several rounds; target ratio <= 1.3. Measured for an export with
   a dynamic batch (few large calls: the hardest case for the ratio) and with batch 1.
2. Per-layer pass on each sample model: seconds, cells, first cell below threshold, and
   the verdict of fp16 against fp32 (trapmlp is built to fail at cell ``norm``).

Usage: python bench/parity.py [--quick]
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("simplecnn", "lenet5", "resnet", "transformer", "trapmlp")


def _prepare(name: str, root: Path, epochs: int, dynamic: bool) -> dict:
    """Train (or, with epochs=0, seed) a model and export MINDIR fp32 + fp16."""
    from amptool.export.api import ExportConfig, export_model

    run = root / f"{name}_run"
    if not (run / "run.json").is_file():
        if epochs:
            from amptool.train.config import TrainConfig
            from amptool.train.loop import train_model

            level = "O0" if name == "trapmlp" else "O2"
            train_model(TrainConfig(model=name, amp_level=level, epochs=epochs, out=str(run)))
        else:
            _seed_checkpoint(name, run)
    cfg = dict(formats=("MINDIR",), out=str(root / f"{name}_{'dyn' if dynamic else 'b1'}"),
               force=True, dynamic_batch=dynamic)
    if (run / "run.json").is_file():
        results = export_model(ExportConfig(run=str(run), **cfg))
    else:
        results = export_model(ExportConfig(ckpt=str(run / "best.ckpt"), model=name, **cfg))
    return {r.precision: r.path for r in results}


def _seed_checkpoint(name: str, run: Path) -> None:
    from amptool.device import import_mindspore, resolve_device, set_device
    from amptool.models import sample_spec

    ms = import_mindspore()
    set_device(resolve_device("auto"))
    run.mkdir(parents=True, exist_ok=True)
    ms.set_seed(0)
    ms.save_checkpoint(sample_spec(name).build(), str(run / "best.ckpt"))


def _bare(paths: dict, x) -> float:
    from amptool.artefact.runners import load_runner

    t0 = time.perf_counter()
    for precision in ("fp32", "fp16"):
        load_runner(paths[precision]).run([x])
    return time.perf_counter() - t0


def _parity(paths: dict, per_layer: bool = False) -> tuple:
    from amptool.parity.compare import check_parity
    from amptool.parity.config import ParityConfig

    t0 = time.perf_counter()
    report = check_parity(ParityConfig(reference=paths["fp32"], candidates=(paths["fp16"],),
                                       per_layer=per_layer))
    return time.perf_counter() - t0, report


def overhead(paths: dict, rounds: int) -> dict:
    from amptool.artefact.manifest import read_manifest
    from amptool.data import load_eval_split
    from amptool.device import import_mindspore, resolve_device, set_device

    ms = import_mindspore()
    manifest = read_manifest(paths["fp32"])
    x, _ = load_eval_split(manifest["data"], manifest["preprocess"],
                           manifest["model"]["num_classes"], manifest["val_fraction"])
    _parity(paths)  # warm: imports, first graph compilations
    bare, parity = [], []
    for _ in range(rounds):
        set_device(resolve_device("auto"), graph=False)  # the mode parity runs in
        bare.append(_bare(paths, x))
        parity.append(_parity(paths)[0])
    ms.set_context(mode=ms.GRAPH_MODE)
    b, p = statistics.median(bare), statistics.median(parity)
    return {"samples": int(len(x)), "bare_s": round(b, 4), "parity_s": round(p, 4),
            "ratio": round(p / b, 3), "target": 1.3, "rounds": rounds}


def per_layer_pass(paths: dict) -> dict:
    seconds, report = _parity(paths, per_layer=True)
    cand = report["candidates"][0]
    layer = cand["per_layer"]
    plain, _ = _parity(paths)
    return {"passed": report["passed"], "cells": len(layer["rows"]) - 2,
            "first_flagged": layer["first_flagged"], "origin": layer["origin"],
            "min_cell_cosine": min(r["cosine"] for r in layer["rows"] if r["cosine"] is not None),
            "cosine": cand["outputs"][0]["metrics"]["cosine"],
            "seconds_with_per_layer": round(seconds, 3), "seconds_without": round(plain, 3)}


def run(quick: bool = False) -> dict:
    epochs = 0 if quick else 2
    rounds = 3 if quick else 5
    with tempfile.TemporaryDirectory(prefix="amptool-bench-parity-") as tmp:
        root = Path(tmp)
        figures = {"epochs": epochs, "overhead": {}, "per_layer": {}}
        for dynamic in (True, False):
            paths = _prepare("simplecnn", root, epochs, dynamic)
            figures["overhead"]["dynamic_batch" if dynamic else "batch_1"] = overhead(paths, rounds)
        for name in MODELS:
            paths = _prepare(name, root, epochs, dynamic=True)
            figures["per_layer"][name] = per_layer_pass(paths)
    return figures


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
