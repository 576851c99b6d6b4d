"""Parity benchmark.

1. Overhead: ``parity`` (fp32 MindIR reference vs fp16 MindIR candidate, digits
   held-out split) against bare inference of the same two artefacts on the same inputs.
   Both get the same runners, loaded and compiled once before the clock starts (parity
   opens its sides through ``open_side``, which here hands back the ready ones), so
   the ratio prices parity's own work: its inputs, the reference and candidate runs,
   metrics and verdicts. Bare inference runs the two runners on the ready inputs as
   parity batches them, nothing else. Same mode (PyNative, parity's), alternating
   rounds, medians; target ratio <= 1.3. Measured for an export with a dynamic batch
   (few large calls: the hardest case for the ratio) and with batch 1.
2. Per-layer pass on each sample model: seconds, cells, first cell below threshold, and
   the verdict of fp16 against fp32 (trapmlp is built to fail at cell ``norm``); both
   timings, with and without the per-layer pass, open the artefacts themselves.

Usage: python bench/parity.py [--quick]
"""
from __future__ import annotations

import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("simplecnn", "lenet5", "resnet", "transformer", "trapmlp")


def _prepare(name: str, root: Path, epochs: int, dynamic: bool) -> dict:
    """Train (or, with epochs=0, seed) a model and export MINDIR fp32 + fp16."""
    from amptool.export.api import ExportConfig, export

    run = root / f"{name}_run"
    if not (run / "run.json").is_file():
        if epochs:
            from amptool.train.config import TrainConfig
            from amptool.train.run import run_training

            level = "O0" if name == "trapmlp" else "O2"
            run_training(TrainConfig(model=name, amp_level=level, epochs=epochs, out=str(run)))
        else:
            _seed_checkpoint(name, run)
    cfg = {"formats": ("MINDIR",), "out": str(root / f"{name}_{'dyn' if dynamic else 'b1'}"),
           "force": True, "dynamic_batch": dynamic}
    if (run / "run.json").is_file():
        results = export(ExportConfig(run=str(run), **cfg))
    else:
        results = export(ExportConfig(ckpt=str(run / "best.ckpt"), model=name, **cfg))
    return {r.precision: r.path for r in results}


def _seed_checkpoint(name: str, run: Path) -> None:
    from amptool.network.models import sample_spec
    from amptool.runtime.device import import_mindspore, resolve_device, set_device

    ms = import_mindspore()
    set_device(resolve_device("auto"))
    run.mkdir(parents=True, exist_ok=True)
    ms.set_seed(0)
    ms.save_checkpoint(sample_spec(name).build(), str(run / "best.ckpt"))


def _bare(runners: list, fed: list, chunk: int) -> float:
    from amptool.parity.inputs import batched_outputs

    gc.collect()  # both timings start from the same heap state
    t0 = time.perf_counter()
    for runner, arrays in zip(runners, fed):
        batched_outputs(runner, arrays, chunk)
    return time.perf_counter() - t0


def _parity(paths: dict, per_layer: bool = False) -> tuple:
    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig

    gc.collect()
    t0 = time.perf_counter()
    report = parity(ParityConfig(reference=paths["fp32"], candidates=(paths["fp16"],),
                                 per_layer=per_layer))
    return time.perf_counter() - t0, report.to_dict()


def overhead(paths: dict, rounds: int) -> dict:
    from amptool.parity import compare
    from amptool.parity.config import ParityConfig
    from amptool.runtime.device import import_mindspore, resolve_device, set_device

    ms = import_mindspore()
    previous = ms.get_context("mode")
    set_device(resolve_device("auto"), graph=False)  # the mode parity runs in
    ready = {str(p): compare.open_side(str(p)) for p in (paths["fp32"], paths["fp16"])}
    ref, cand = ready[str(paths["fp32"])], ready[str(paths["fp16"])]
    cfg = ParityConfig(reference=paths["fp32"], candidates=(paths["fp16"],))
    inputs = compare.make_inputs(cfg, ref, [cand])
    fed = [inputs.for_preprocess(ref.preprocess), inputs.for_preprocess(cand.preprocess)]
    opener = compare.open_side
    compare.open_side = lambda path, *args, **kwargs: ready[str(path)]
    try:
        _bare([ref.runner, cand.runner], fed, cfg.batch_size)  # compile both graphs once
        _parity(paths)
        bare, parity = [], []
        for _ in range(rounds):
            bare.append(_bare([ref.runner, cand.runner], fed, cfg.batch_size))
            parity.append(_parity(paths)[0])
    finally:
        compare.open_side = opener
        ms.set_context(mode=previous)
    b, p = statistics.median(bare), statistics.median(parity)
    return {"samples": int(inputs.count), "bare_s": round(b, 4), "parity_s": round(p, 4),
            "ratio": round(p / b, 3), "target": 1.3, "rounds": rounds,
            "runners": "loaded once, outside the timed region"}


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
